"""Volumetric training (seed 000/001): `dlbench run train --model unet3d... --data VOLUME`, its
metrics and report table, augmentation on the device, and every bad input through the CLI."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from dlbench.data import patches
from dlbench.data.generate_volume import generate
from dlbench.data.targets import affinities
from dlbench.models import registry
from dlbench.report import render_markdown
from dlbench.figures import fixed
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.launch.execute import execute
from dlbench.workloads.train import iteration_metrics

from conftest import assert_user_error, cli

TINY = "unet3d-aniso:f=2,d=2"  # the seed's design, 2 levels of 2/10 features: fast on a CPU
QUICK = ("--device", "cpu", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0")


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    """A tiny CREMI-layout volume as HDF5 and as zarr, written by the real generator."""
    folder = tmp_path_factory.mktemp("volumes")
    h5 = generate(folder / "cremi.h5", (8, 40, 40), chunks=(4, 20, 20), seed=1)
    zarr = generate(folder / "cremi.zarr", (8, 40, 40), chunks=(4, 20, 20), seed=2)
    return {"h5": h5, "zarr": zarr}


def _stored(db):
    """The runs' results, without the matmul ceiling the first measured for its FLOP utilisation."""
    with Store(db) as store:
        return [r for r in store.results() if r.workload != "system"]


# ---------------------------------------------------------------- training runs through the CLI


@pytest.mark.parametrize("kind, extra", [("h5", ("--workers", "1", "--augment", "cpu")),
                                        ("zarr", ("--workers", "0", "--model", "unet3d:f=2,d=2"))])
def test_tiny_volume_training_is_stored_with_iteration_metrics(volumes, tmp_path, kind, extra):
    db = tmp_path / "r.db"
    proc = cli("run", "train", "--model", TINY, "--data", volumes[kind], "--patch", "4x24x24", *QUICK,
               "--extrapolate-iters", "5000", "--db", db, *extra)
    assert proc.returncode == 0, proc.stderr
    assert "iters/min" in proc.stdout and "days to 5,000 iterations" in proc.stdout
    (result,) = _stored(db)
    m = result.metrics
    assert result.status == "ok" and len(result.samples["step"]) == 2
    model = dict(zip(extra[::2], extra[1::2])).get("--model", TINY)
    assert result.model == model and m["task"] == ("affinities" if model == TINY else "mask")
    assert m["input_shape"] == [1, 1, 4, 24, 24] and m["patch"] == [4, 24, 24]
    assert m["optimizer"] == "adam" and m["augment"] == "cpu" and m["throughput_unit"] == "patch/s"
    assert m["iteration_mean_s"] == pytest.approx(np.mean(result.samples["step"]))
    assert m["iteration_min_s"] <= m["iteration_mean_s"] <= m["iteration_max_s"]
    assert m["iters_per_min"] == pytest.approx(60 / m["iteration_mean_s"])
    assert m["days_to_extrapolate"] == pytest.approx(5000 * m["iteration_mean_s"] / 86400)
    assert 0 <= m["data_share"] <= 1 and m["flops_per_step"] > 0 and m["achieved_tflops"] > 0
    assert m["data_path"].startswith(str(volumes[kind]).split(":")[0])  # what was read, for the report's Data column
    report = render_markdown([result])
    assert f"## {registry.title(model)}: training" in report and "(patch 4x24x24, one per GPU)" in report
    assert f"## {registry.title(model)}: prediction" not in report  # no prediction of this model was run
    # no row on several GPUs: the empty "Iteration vs 1 GPU" column is left out
    assert f"|{fixed(1001 * m['iteration_mean_s'], 1)} (extrapolated from 2)|{fixed(m['iters_per_min'], 1)}|" \
           f"{fixed(100_000 * m['iteration_mean_s'] / 86400, 1)}|" in report


def test_iteration_metrics_reproduce_the_seed():
    # Seed 000: 1001 iterations in 1754.2 s on a 1080 Ti -> 34.2 iterations/min -> 2.0 days to 100k.
    step = 1754.2 / 1001
    m = iteration_metrics([{"samples": {"step": [step] * 1001}}], 100_000).to_metrics()
    assert round(m["iters_per_min"], 1) == 34.2 and round(m["days_to_extrapolate"], 1) == 2.0
    assert m["iteration_std_s"] == pytest.approx(0, abs=1e-12)


def test_an_iteration_lasts_as_long_as_its_slowest_process():
    ranks = [{"samples": {"step": [1.0, 3.0, 2.0]}}, {"samples": {"step": [2.0, 1.0, 2.0]}}]
    m = iteration_metrics(ranks, 60).to_metrics()
    assert (m["iteration_mean_s"], m["iteration_min_s"], m["iteration_max_s"]) == (7 / 3, 2.0, 3.0)
    assert m["iters_per_min"] == pytest.approx(60 * 3 / 7) and m["days_to_extrapolate"] == pytest.approx(7 / 3 / 1440)
    assert m["iteration_std_s"] == pytest.approx(np.std([2.0, 3.0, 2.0], ddof=1))


# ---------------------------------------------------------------- augmentation on the device


def _blocks(shape=(6, 32, 32)) -> torch.Tensor:
    """Labels of 8x8 columns, ids 1.., with a background (0) line between some of them."""
    z, y, x = np.indices(shape)
    labels = (y // 8) * 4 + (x // 8) + 1
    labels[:, :, 15] = 0
    return torch.from_numpy(labels.astype(np.int64))


def test_without_displacement_elastic_is_the_identity():
    labels = _blocks()
    raw = labels.float()[None] / 20
    g = torch.Generator().manual_seed(0)
    out_raw, out_labels = patches.device_elastic(raw, labels, g, sigma=(0.0, 0.0, 0.0))
    assert torch.allclose(out_raw, raw, atol=1e-5) and torch.equal(out_labels, labels)


def test_device_elastic_and_flips_keep_raw_and_labels_aligned():
    labels = _blocks()
    raw = labels.float()[None]  # intensity = label id: aligned voxels agree
    g = torch.Generator().manual_seed(3)
    out_raw, out_labels = patches.device_flips(*patches.device_elastic(raw, labels, g), torch.Generator())
    assert out_raw.shape == raw.shape and out_labels.shape == labels.shape
    assert not torch.equal(out_labels, labels)  # it did deform
    inside = (out_raw[0] - out_labels.float()).abs() < 1e-3
    assert inside.float().mean() > 0.6  # off the label borders, trilinear raw equals the nearest label
    assert set(out_labels.unique().tolist()) <= set(labels.unique().tolist())  # ids survive exactly


def test_device_targets_match_the_numpy_targets():
    labels = np.random.default_rng(0).integers(0, 3, (5, 6, 7)).astype(np.uint32)
    tensor = patches._label_tensor(labels)
    assert np.array_equal(patches.device_affinities(tensor).numpy(), affinities(labels))
    assert np.array_equal(patches.device_target(tensor, "mask").numpy(), (labels != 0)[None].astype(np.float32))


def test_large_label_ids_survive_exactly():
    labels = np.array([[[2**32 - 1, 2**32 - 1, 5]]], dtype=np.uint32)
    tensor = patches._label_tensor(labels)
    assert patches.device_affinities(tensor)[2, 0, 0].tolist() == [0.0, 1.0, 0.0]


def test_the_gpu_augmentation_loader_batches_deformed_patches(volumes):
    loader = patches.make_volume_loader(str(volumes["h5"]), (4, 16, 16), 2, "affinities", 0, "gpu", 0,
                                        torch.device("cpu"))
    raw, target = next(iter(loader))
    loader.close()
    assert raw.shape == (2, 1, 4, 16, 16) and target.shape == (2, 3, 4, 16, 16)
    assert raw.dtype == torch.float32 and 0 <= raw.min() and raw.max() <= 1 and raw.std() > 0.01
    assert set(target.unique().tolist()) <= {0.0, 1.0}


# ---------------------------------------------------------------- monitor and FLOP metrics


def _tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(4, 10))


@pytest.mark.parametrize("workload", ["train", "infer", "smooth"])
def test_image_workloads_report_flops_and_monitor_figures(monkeypatch, workload):
    monkeypatch.setitem(registry.MODELS, "tiny3d", registry.ModelEntry("tiny3d", "Tiny", _tiny, (3, 16, 16)))
    spec = BenchmarkSpec(workload=workload, model="tiny3d", batch=2, device="cpu", warmup=1, warmup_seconds=0,
                         steps=2, min_seconds=0)
    result = execute(spec, fingerprint())
    assert result.status == "ok", result.error
    m = result.metrics
    assert m["flops_per_step"] > 0 and m["achieved_tflops"] > 0
    assert "monitor" in result.traces and "traces" not in m


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing stored


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    with h5py.File(folder / "flat.h5", "w") as f:  # 2D raw
        f["volumes/raw"] = np.zeros((40, 40), np.uint8)
        f["volumes/labels/neuron_ids"] = np.zeros((40, 40), np.uint32)
    with h5py.File(folder / "mismatch.h5", "w") as f:
        f["volumes/raw"] = np.ones((8, 40, 40), np.uint8)
        f["volumes/labels/neuron_ids"] = np.ones((8, 40, 32), np.uint32)
    (folder / "garbage.h5").write_bytes(b"not an hdf5 file at all")
    return folder


def _main(monkeypatch, capsys, *args):
    """The real entry point in this process (the subprocess runs above cover process start-up)."""
    from dlbench import cli as entry

    monkeypatch.setattr("sys.argv", ["dlbench", *map(str, args)])
    with pytest.raises(SystemExit) as stop:
        entry.main()
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize("data, extra, needles", [
    ("{h5}:volumes/nothing", (), ("no dataset 'volumes/nothing'", "volumes/raw", "volumes/labels/neuron_ids")),
    ("{bad}/garbage.h5", (), ("cannot read", "garbage.h5")),
])
def test_bad_volumes_fail_through_the_cli(volumes, bad_files, tmp_path, data, extra, needles):
    db = tmp_path / "r.db"
    path = data.format(h5=volumes["h5"], bad=bad_files)
    proc = cli("run", "train", "--model", TINY, "--data", path, "--patch", "4x24x24", *QUICK, "--db", db, *extra)
    assert_user_error(proc, *needles)
    assert not db.exists() or _stored(db) == []


@pytest.mark.parametrize("data, extra, needles", [
    ("{h5}", ("--patch", "4x64x24"), ("patch 4x64x24 is larger than the volume", "8x40x40")),
    ("{bad}/flat.h5", (), ("has 2 dimensions", "expected 3")),
    ("{bad}/mismatch.h5", (), ("must have the same shape", "8x40x32")),
    ("{bad}/missing.zarr", (), ("does not exist",)),
    ("$DLBENCH_NOT_SET_VOLUME", (), ("environment variable that is not set", "dlbench data volume")),
    ("{h5}", ("--augment", "gpu"), ("--augment gpu needs a CUDA GPU",)),
    ("{h5}", ("--augment", "fast"), ("--augment must be one of auto, cpu, gpu, none, got 'fast'",)),
    ("{h5}", ("--patch", "24x24"), ("patch must be ZxYxX",)),
    ("{h5}", ("--model", "resnet18"), ("for 3D models", "resnet18")),
])
def test_bad_volume_inputs_fail_before_anything_runs(volumes, bad_files, tmp_path, monkeypatch, capsys, data,
                                                     extra, needles):
    db = tmp_path / "r.db"
    path = data.format(h5=volumes["h5"], bad=bad_files)
    code, stderr = _main(monkeypatch, capsys, "run", "train", "--model", TINY, "--data", path, "--patch", "4x24x24",
                         *QUICK, "--db", db, *extra)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert all(needle in lines[0] for needle in needles), lines[0]
    assert not db.exists() or _stored(db) == []


def test_a_volume_feeds_train_only(volumes, tmp_path, monkeypatch, capsys):
    code, stderr = _main(monkeypatch, capsys, "run", "infer", "--model", TINY, "--data", volumes["h5"], *QUICK,
                         "--db", tmp_path / "r.db")
    assert code == 2 and "feeds `dlbench run train` only" in stderr and "dlbench run volume --input" in stderr


def test_a_bad_suite_patch_fails_when_the_spec_is_made():
    from dlbench.errors import UserError

    with pytest.raises(UserError, match="patch must be ZxYxX"):
        BenchmarkSpec(workload="train", model=TINY, options={"patch": "4x4"})
    with pytest.raises(UserError, match="--extrapolate-iters must be ≥ 1, got 0"):
        BenchmarkSpec(workload="train", model=TINY, options={"extrapolate_iters": 0})
