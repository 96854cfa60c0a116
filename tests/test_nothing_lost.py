"""Inputs and outputs of runs: an output never overwrites its input, unusable input is found
before the run (or stops it with a stored error), a failed benchmark exits 1, and a file that
cannot be written is named with the store left intact. Real subprocesses, files and stores."""

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import assert_user_error, cli, scripted
from dlbench.data.generate_volume import generate
from dlbench.errors import UserError
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.workloads.volume import preflight

PLUGINS = str(Path(__file__).parent / "plugins")
PLUGIN_ENV = {"DLBENCH_PLUGINS": "dlbench_testmodels",
              "PYTHONPATH": os.pathsep.join(filter(None, [PLUGINS, os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """One 3x3x3 convolution and a sigmoid: a volume run of a few blocks in about a second."""
    path = tmp_path_factory.mktemp("model") / "conv.pt"
    torch.manual_seed(0)
    scripted(nn.Sequential(nn.Conv3d(1, 1, 3, padding=1), nn.Sigmoid())).save(str(path))
    return str(path)


def volume_run(model, *args):
    return ("run", "volume", "--model", model, "--device", "cpu", "--block", "8x16x16", "--halo", "2x2x2",
            "--warmup", "1", "--readers", "1", "--writers", "1", "--queue", "1", *args)


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(db: Path) -> list[tuple[str, str]]:
    if not db.exists():
        return []
    with Store(db, read_only=True) as store:
        return [(r.id, r.status) for r in store.results() if r.workload != "system"]


# ---------------------------------------------------------------- 1. an output never is, holds or lies in its input


@pytest.fixture
def inputs(tmp_path):
    zarr = generate(tmp_path / "v.zarr", (8, 16, 16), "zarr", seed=1, labels=False)
    h5 = generate(tmp_path / "v.h5", (8, 16, 16), "hdf5", seed=1, labels=False)
    os.symlink(zarr, tmp_path / "link.zarr")
    os.symlink(h5, tmp_path / "h5link.zarr")  # an HDF5 file reached through a name that passes as zarr
    (tmp_path / "sub").mkdir()
    return tmp_path


OVERLAPS = [
    ("v.zarr:volumes/raw", "v.zarr:volumes/raw", "v.zarr holds the input"),
    ("v.zarr:volumes/raw", "sub/../v.zarr:volumes/raw", "holds the input v.zarr:volumes/raw"),
    ("v.zarr:volumes/raw", "link.zarr:volumes/raw", "(that is {root}/v.zarr) holds the input"),
    ("v.zarr:volumes/raw", "v.zarr:prediction", "v.zarr holds the input"),  # --overwrite would remove it all
    ("v.zarr:volumes/raw", "v.zarr/volumes/raw/p.zarr", "lies inside the input v.zarr:volumes/raw"),
    ("link.zarr:volumes/raw", "{root}/v.zarr:volumes/raw", "holds the input link.zarr:volumes/raw"),
    ("v.h5:volumes/raw", "h5link.zarr:prediction", "(that is {root}/v.h5) is the input v.h5:volumes/raw"),
]


@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "plain"])
@pytest.mark.parametrize("source, output, needle", OVERLAPS, ids=[f"{s}->{o}" for s, o, _ in OVERLAPS])
def test_an_output_that_is_holds_or_lies_in_its_input_is_refused(inputs, model, source, output, needle, overwrite,
                                                                 monkeypatch):
    """The check every run makes before anything runs (in the launcher, and again in the benchmark's process)."""
    monkeypatch.chdir(inputs)
    before = files(inputs)
    spec = BenchmarkSpec.from_dict({"workload": "volume", "model": model, "device": "cpu", "input": source,
                                    "output": output.format(root=inputs), "overwrite": overwrite})
    with pytest.raises(UserError) as refused:
        preflight(spec)
    assert needle.format(root=inputs) in str(refused.value) and "a prediction never writes where it reads" in str(
        refused.value)
    assert files(inputs) == before


def test_the_input_as_its_own_output_is_refused_with_its_bytes_unchanged(inputs, model):
    """The case that replaced an input with its prediction, through the command line."""
    before = files(inputs)
    args = volume_run(model, "--input", "v.zarr:volumes/raw", "--output", "v.zarr:volumes/raw", "--overwrite",
                      "--db", "r.db")
    proc = subprocess.run([sys.executable, "-m", "dlbench", *args], capture_output=True, text=True, cwd=inputs,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)
    assert_user_error(proc, "--output v.zarr:volumes/raw: v.zarr holds the input v.zarr:volumes/raw")
    assert files(inputs) == before
    assert not (inputs / "r.db").exists()


def test_an_output_beside_its_input_in_the_same_folder_runs(inputs, model, db):
    before = files(inputs / "v.zarr")
    proc = cli(*volume_run(model, "--input", inputs / "v.zarr", "--output", inputs / "sub" / "p.zarr", "--db", db))
    assert proc.returncode == 0, proc.stderr
    assert files(inputs / "v.zarr") == before


# ---------------------------------------------------------------- 2. NaN and Inf


@pytest.fixture(scope="module")
def floats(tmp_path_factory):
    """A float volume taller than the corner looked at before the run (16 planes): NaN in the
    corner, NaN and Inf only in the planes after it, and none."""
    root = tmp_path_factory.mktemp("floats")
    clean = np.random.default_rng(0).random((24, 16, 16), dtype=np.float32)
    corner, late = clean.copy(), clean.copy()
    corner[0, 3, 3] = np.nan
    late[20, 5, 5], late[22, 1, 1] = np.nan, -np.inf
    path = root / "f.h5"
    with h5py.File(path, "w") as f:
        f["clean"], f["corner"], f["late"] = clean, corner, late
    return path


def test_nan_found_before_the_run_is_a_user_error(floats, model, tmp_path, db):
    before = floats.read_bytes()
    proc = cli(*volume_run(model, "--input", f"{floats}:corner", "--output", tmp_path / "p.zarr", "--db", db))
    assert_user_error(proc, "holds 1 non-finite voxel (NaN or Inf) in the part checked before the run",
                      "--allow-nonfinite")
    assert not (tmp_path / "p.zarr").exists() and rows(db) == []
    assert floats.read_bytes() == before


def test_nan_found_partway_stops_the_run_with_a_stored_error(floats, model, tmp_path, db):
    output = tmp_path / "p.zarr"
    proc = cli(*volume_run(model, "--input", f"{floats}:late", "--output", output, "--db", db))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert "holds 2 non-finite voxels (NaN or Inf) in block 2 (z 16-24, y 0-16, x 0-16)" in line
    assert "2 of 3 blocks are written" in line and "--resume completes it" in line
    ((_, status),) = rows(db)
    assert status == "error"
    # The output says it is incomplete: block 2 (the one with NaN) is not marked done.
    assert sorted(os.listdir(output / ".dlbench" / "done")) == ["0", "1"]


def test_allow_nonfinite_predicts_and_counts_each_voxel_once(floats, model, tmp_path, db):
    proc = cli(*volume_run(model, "--input", f"{floats}:late", "--output", tmp_path / "p.zarr", "--db", db,
                           "--allow-nonfinite"))
    assert proc.returncode == 0, proc.stderr
    assert "the input held 2 non-finite voxels (NaN or Inf), predicted as they are (--allow-nonfinite)" in proc.stdout
    with Store(db, read_only=True) as store:
        (result,) = store.results(workload="volume")
    assert result.metrics["nonfinite_voxels"] == 2


def test_a_clean_float_volume_says_nothing_of_nan(floats, model, db):
    proc = cli(*volume_run(model, "--input", f"{floats}:clean", "--db", db, "--allow-nonfinite"))
    assert proc.returncode == 0, proc.stderr
    assert "non-finite" not in proc.stdout


# ---------------------------------------------------------------- 3. values that are not numbers


@pytest.mark.parametrize("data, needle", [
    (np.array([["a"] * 16] * 8 * 16, dtype=object).reshape(8, 16, 16).astype(h5py.string_dtype()), "holds strings"),
    (np.full((8, 16, 16), b"ab", dtype="S2"), "holds strings (dtype |S2)"),
    (np.zeros((8, 16, 16), bool), "holds booleans (dtype bool)"),
    (np.zeros((8, 16, 16), dtype=[("a", "f4"), ("b", "i4")]), "holds compound records"),
    (np.zeros((8, 16, 16), np.complex64), "holds complex numbers"),
], ids=["str", "bytes", "bool", "compound", "complex"])
def test_a_volume_that_is_not_numbers_is_a_user_error(tmp_path, model, db, data, needle):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        f["volumes/raw"] = data
    proc = cli(*volume_run(model, "--input", path, "--db", db))
    assert_user_error(proc, f"{path}:volumes/raw {needle}", "a volume must hold integers or floats")
    assert not db.exists()


# ---------------------------------------------------------------- 4. BatchNorm at batch 1


FWDBWD = ["run", "fwdbwd", "--model", "resnet18", "--device", "cpu", "--warmup", "1", "--warmup-seconds", "0",
          "--steps", "1", "--min-seconds", "0"]


@pytest.mark.parametrize("workload, batch", [("fwdbwd", "1"), ("train", "4,1")])
def test_batch_one_that_batchnorm_cannot_train_is_refused(db, workload, batch):
    proc = cli("run", workload, *FWDBWD[2:], "--batch", batch, "--input-shape", "3x32x32", "--db", db)
    assert_user_error(proc, "resnet18 cannot train on a batch of 1 at 3x32x32",
                      "Expected more than 1 value per channel when training, got input size [1, 512, 1, 1]",
                      "--batch 2 or more")
    assert not db.exists()


def test_a_suite_with_such_a_spec_is_refused_before_it_starts(tmp_path, db):
    suite = tmp_path / "s.yaml"
    suite.write_text("defaults: {workload: fwdbwd, model: resnet18, device: cpu, input_shape: 3x32x32}\n"
                     "specs: [{batch: 2}, {batch: 1}]\n")
    assert_user_error(cli("suite", suite, "--db", db), "cannot train on a batch of 1")
    assert not db.exists()


def test_what_batchnorm_can_train_at_batch_one_is_not_refused():
    """Batch 1 is fine where BatchNorm still sees several values per channel (resnet18's 2x2 at
    64x64), and in inference; a batch of 2 is fine at any size."""
    from dlbench.models import registry

    registry.check_fits("resnet18", (3, 64, 64), 1, training=True)
    registry.check_fits("resnet18", (3, 32, 32), 1, training=False)
    registry.check_fits("resnet18", (3, 32, 32), 2, training=True)
    registry.check_fits("resnet18", None, 1, training=True)


# ---------------------------------------------------------------- 5. a failed benchmark exits 1


def test_out_of_memory_exits_1_and_is_stored(db):
    proc = cli("run", "fwdbwd", "--model", "oom-model", "--batch", "2", "--device", "cpu", "--db", db, env=PLUGIN_ENV)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("oom fwdbwd oom-model")
    assert [status for _, status in rows(db)] == ["oom"]


@pytest.mark.slow
def test_out_of_memory_in_a_suite_exits_1(tmp_path, db):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndefaults: {workload: fwdbwd, batch: 2, device: cpu, warmup: 1, warmup_seconds: 0, "
                     "steps: 1, min_seconds: 0}\nspecs: [{model: oom-model}]\n")
    proc = cli("suite", suite, "--db", db, env=PLUGIN_ENV)
    assert proc.returncode == 1, proc.stderr
    assert "1 oom" in proc.stderr and [status for _, status in rows(db)] == ["oom"]


def test_the_oom_that_ends_a_sweep_is_its_end_not_a_failure():
    from dlbench.commands.run import _failed

    assert not _failed(["ok", "ok", "oom"], sweep=True)
    assert _failed(["oom"], sweep=True)  # nothing measured
    assert _failed(["ok", "oom"], sweep=False) and _failed(["ok", "error", "oom"], sweep=True)


# ---------------------------------------------------------------- 6. the file-size limit


def limited(kib: int, *args, cwd: Path) -> subprocess.CompletedProcess:
    """`dlbench args` under `ulimit -f` (Python ignores SIGXFSZ, so a write past it raises EFBIG)."""
    limit = kib * 1024
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"}, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))


@pytest.fixture
def store_of_two(tmp_path, db):
    from conftest import make_result

    with Store(db) as store:
        store.add(make_result(tag="x" * 50000))  # an export larger than the limit below
        store.add(make_result())
    return db


# The export keeps the 50 kB tag whole; the report shows it shortened, so a smaller limit stops it.
@pytest.mark.parametrize("args, name, kib", [(["export", "-o", "out.jsonl"], "out.jsonl", 36),
                                             (["report", "-o", "out.md"], "out.md", 1)])
def test_an_export_past_the_file_size_limit_names_its_file(store_of_two, tmp_path, args, name, kib):
    (tmp_path / name).write_text("earlier")
    before, ids = store_of_two.read_bytes(), rows(store_of_two)
    proc = limited(kib, *args, "--db", store_of_two, cwd=tmp_path)
    assert_user_error(proc, f"cannot write {name}: it would pass this process's file-size limit of {kib} KiB (ulimit -f)")
    assert (tmp_path / name).read_text() == "earlier"  # not half-written
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    assert store_of_two.read_bytes() == before and rows(store_of_two) == ids


def test_a_store_sqlite_cannot_open_under_the_limit_is_said_so_and_read_as_it_is(store_of_two, tmp_path):
    before, ids = store_of_two.read_bytes(), rows(store_of_two)
    proc = limited(8, *FWDBWD, "--batch", "2", "--input-shape", "3x32x32", "--db", store_of_two, cwd=tmp_path)
    assert_user_error(proc, f"cannot write store {store_of_two}", "file-size limit of 8 KiB (ulimit -f)",
                      "the store is unchanged")
    proc = limited(8, "results", "--db", store_of_two, cwd=tmp_path)  # a reading command still reads it
    assert proc.returncode == 0 and proc.stdout.count("resnet50") == 2, proc.stderr
    assert store_of_two.read_bytes() == before and rows(store_of_two) == ids


def test_a_prediction_past_the_file_size_limit_names_its_chunk(model, tmp_path, db):
    source = generate(tmp_path / "v.zarr", (16, 128, 128), "zarr", seed=1, labels=False)
    from conftest import make_result

    with Store(db) as store:
        store.add(make_result())
    before, ids = db.read_bytes(), rows(db)
    # A float16 chunk of 16x128x128 is hundreds of KiB: the first cannot be written under 40 KiB.
    proc = limited(40, "run", "volume", "--model", model, "--device", "cpu", "--block", "16x128x128", "--halo", "2x2x2",
                   "--dtype", "float16", "--warmup", "1", "--input", source, "--output", "p.zarr", "--db", db,
                   cwd=tmp_path)
    assert_user_error(proc, f"{tmp_path}/p.zarr/prediction/0.0.0.0: it would pass this process's file-size limit "
                            f"of 40 KiB (ulimit -f)", "rerun with --resume", started=True)
    assert db.read_bytes() == before and rows(db) == ids


def test_overwrite_never_removes_the_result_store_inside_the_output(inputs, model):
    """An earlier prediction that holds the store: --overwrite would remove both."""
    first = volume_run(model, "--input", "v.zarr:volumes/raw", "--output", "p.zarr", "--db", "r.db")
    proc = subprocess.run([sys.executable, "-m", "dlbench", *first], capture_output=True, text=True, cwd=inputs,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shutil.move(inputs / "r.db", inputs / "p.zarr" / "r.db")
    before, stored = files(inputs / "p.zarr"), rows(inputs / "p.zarr" / "r.db")
    again = volume_run(model, "--input", "v.zarr:volumes/raw", "--output", "p.zarr", "--overwrite",
                       "--db", "p.zarr/r.db")
    proc = subprocess.run([sys.executable, "-m", "dlbench", *again], capture_output=True, text=True, cwd=inputs,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)
    assert_user_error(proc, "--overwrite would remove", "which holds the result store p.zarr/r.db")
    assert files(inputs / "p.zarr") == before and rows(inputs / "p.zarr" / "r.db") == stored and len(stored) == 1
