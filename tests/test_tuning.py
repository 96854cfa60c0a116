"""The tuning record (launch/tuning.py): what --block auto / --precision auto (volume) and --batch auto
found is stored with the machine, the versions and the work, reused by the next run that matches,
measured again when any of them differs or with --retune; and the wall time from start to result."""

import io
import json
import re
import sqlite3

import pytest
import torch
from rich.console import Console
from torch import nn

from dlbench.data.generate_volume import generate
from dlbench.launch import inprocess
from dlbench.launch.tuning import Tuning
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system import info
from dlbench.system.info import fingerprint

from conftest import assert_user_error, cli, scripted
from test_store_safety import _Locked


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuning")
    torch.manual_seed(0)
    scripted(nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.Sigmoid())).save(str(root / "m.pt"))
    generate(root / "v.h5", (10, 30, 34), "hdf5", chunks=(4, 16, 16), seed=1, labels=False)
    return {"model": str(root / "m.pt"), "input": str(root / "v.h5")}


def _spec(volume) -> BenchmarkSpec:
    return BenchmarkSpec(workload="volume", model=volume["model"], batch=1, device="cpu", warmup=1, steps=1,
                         precision="auto", options={"input": volume["input"], "halo": "2x2x2", "block": "auto"})


def _run(volume, store, retune=False):
    out = io.StringIO()
    result, = inprocess.run_specs([_spec(volume)], store, console=Console(file=out), retune=retune)
    assert result.status == "ok", result.error
    return result, out.getvalue()


def _records(db) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT key, choice, result FROM tuning ORDER BY rowid").fetchall()


@pytest.mark.slow
def test_a_volume_tuning_is_stored_reused_and_says_from_which_run(tmp_path, volume):
    db = tmp_path / "r.db"
    args = ["run", "volume", "--input", volume["input"], "--model", volume["model"], "--halo", "2x2x2",
            "--device", "cpu", "--warmup", "1", "--db", db]
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    (key, choice, tuned_by), = _records(db)
    kept = json.loads(choice)
    flops = kept.pop("tile_flops")  # counted once: the next run reuses the count with the choice
    assert kept == {"block": [10, 30, 34], "precision": "fp32", "channels_last": False}
    facts = json.loads(key)
    assert facts["facts"]["input_shape"] == [10, 30, 34] and facts["facts"]["input_dtype"] == "uint8"
    assert set(facts["machine"]) >= {"host", "gpus", "gpu_count", "driver", "torch", "cuda", "cudnn"}
    assert "as tuned by" not in first.stdout and re.search(r"; [\d.]+ s from start to result$", first.stdout.strip())

    second = cli(*args)
    assert second.returncode == 0, second.stderr
    stamp = next(r for r in Store(db, read_only=True).results() if r.id == tuned_by).finished[:10]
    assert f"ran block 10x30x34, fp32, default layout (as tuned by run {tuned_by[:8]} on {stamp}; --retune " \
           f"measures again)" in second.stdout
    results = Store(db, read_only=True).results(workload="volume")
    assert [r.metrics.get("tuned_from", {}).get("result") for r in results] == [None, tuned_by]
    assert "tuned" in results[0].metrics and "tuned" not in results[1].metrics
    assert flops > 0 and [r.measured.utilisation.flops_per_step for r in results] == [flops, flops]
    assert all(0 < r.metrics["wall_to_result_s"] < 600 for r in results)
    assert _records(db) == [(key, choice, tuned_by)]  # reused, not written again


def test_retune_measures_again_and_replaces_the_record(tmp_path, volume):
    with Store(tmp_path / "r.db") as store:
        first, _ = _run(volume, store)
        again, _ = _run(volume, store, retune=True)
        assert "tuned_from" not in again.metrics and "tuned" in again.metrics
        assert "no GPU: the fewest computed voxels" in again.metrics["block_choice"]
        (_, _, by), = _records(store.path)
        assert by == again.id != first.id
        reused, _ = _run(volume, store)
    assert reused.metrics["tuned_from"]["result"] == again.id


@pytest.mark.parametrize("field, value", [("driver", "999.99"), ("host", "elsewhere"), ("gpu_count", 8)])
def test_a_changed_machine_measures_again_by_itself(tmp_path, volume, monkeypatch, field, value):
    with Store(tmp_path / "r.db") as store:
        first, _ = _run(volume, store)
        changed = {**fingerprint(), field: value}
        monkeypatch.setattr(info, "fingerprint", lambda: changed)  # as the placement takes it
        other, _ = _run(volume, store)
        assert "tuned_from" not in other.metrics and "tuned" in other.metrics
        assert [by for _, _, by in _records(store.path)] == [first.id, other.id]  # each machine keeps its own
        monkeypatch.undo()
        back, _ = _run(volume, store)
    assert back.metrics["tuned_from"]["result"] == first.id


@pytest.mark.parametrize("version", ["torch", "cuda", "cudnn"])
def test_a_record_for_other_versions_is_not_reused(tmp_path, volume, version):
    db = tmp_path / "r.db"
    with Store(db) as store:
        _run(volume, store)
    (key, _, _), = _records(db)
    older = json.loads(key)
    older["machine"][version] = "0.0.1"
    with sqlite3.connect(db) as con:  # as an earlier release of torch, CUDA or cuDNN left it
        con.execute("UPDATE tuning SET key = ?", [json.dumps(older, sort_keys=True)])
    with Store(db) as store:
        result, _ = _run(volume, store)
    assert "tuned_from" not in result.metrics and "tuned" in result.metrics
    assert len(_records(db)) == 2


def test_other_work_is_tuned_apart(tmp_path, volume):
    """The input's shape or the halo differing: the record does not match."""
    with Store(tmp_path / "r.db") as store:
        _run(volume, store)
        spec = BenchmarkSpec(workload="volume", model=volume["model"], batch=1, device="cpu", warmup=1, steps=1,
                             precision="auto", options={"input": volume["input"], "halo": "1x1x1", "block": "auto"})
        result, = inprocess.run_specs([spec], store, console=Console(file=io.StringIO()))
    assert result.status == "ok" and "tuned_from" not in result.metrics and len(_records(store.path)) == 2


def test_a_given_block_and_precision_tune_nothing(tmp_path, volume):
    spec = BenchmarkSpec(workload="volume", model=volume["model"], batch=1, device="cpu", warmup=1, steps=1,
                         precision="fp32", options={"input": volume["input"], "halo": "2x2x2", "block": "4x16x16"})
    with Store(tmp_path / "r.db") as store:
        result, = inprocess.run_specs([spec], store, console=Console(file=io.StringIO()))
    assert result.status == "ok" and "tuned" not in result.metrics and _records(store.path) == []


def test_a_tuning_that_cannot_be_kept_is_said_in_one_line_and_loses_nothing(tmp_path, volume, monkeypatch):
    """The store locked by another process past the wait when the tuning is written: the result
    is stored already; one line says the next run measures again."""
    monkeypatch.setenv("DLBENCH_DB_WAIT", "0")
    db = tmp_path / "r.db"
    with Store(db) as store:
        result, _ = _run(volume, store)
        with sqlite3.connect(db) as con:
            con.execute("DELETE FROM tuning")
        tuning = Tuning(store, "a key", retune=False)
        with _Locked(db):
            note = tuning.keep(result)
        assert note == (f"the tuning could not be kept in {db} (the store {db} is locked by another process "
                        f"(waited 0 s)); the next run measures again")
        assert tuning.lookup() is None and result.id in [r.id for r in store.results()]


def test_a_read_only_store_is_refused_before_anything_runs(tmp_path, volume):
    folder = tmp_path / "archive"
    folder.mkdir()
    db = folder / "r.db"
    with Store(db) as store:
        _run(volume, store)
    before = sorted((p.name, p.read_bytes()) for p in folder.iterdir())
    folder.chmod(0o555)
    try:
        proc = cli("run", "volume", "--input", volume["input"], "--model", volume["model"], "--halo", "2x2x2",
                   "--device", "cpu", "--warmup", "1", "--retune", "--db", db)
        assert_user_error(proc, f"store {db} is read-only (")
        assert sorted((p.name, p.read_bytes()) for p in folder.iterdir()) == before
    finally:
        folder.chmod(0o755)


def test_a_store_made_before_tunings_were_kept_reads_as_having_none(tmp_path):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE results (id TEXT PRIMARY KEY, schema INTEGER NOT NULL, started TEXT NOT NULL, "
                    "status TEXT NOT NULL, workload TEXT NOT NULL, model TEXT NOT NULL, suite TEXT, tag TEXT, "
                    "host TEXT, record TEXT NOT NULL)")
    with Store(db, read_only=True) as store:
        assert store.tuned("any") is None
    with Store(db) as store:  # opened for writing, it gains the table
        store.keep_tuning("k", {"batch": 4}, "abc", "2026-01-01T00:00:00+00:00")
        assert store.tuned("k") == {"choice": {"batch": 4}, "result": "abc", "stored": "2026-01-01T00:00:00+00:00"}


BATCH = ["run", "infer", "--model", "resnet18", "--input-shape", "3x16x16", "--device", "cpu", "--batch", "auto",
         "--max-batch", "2", "--warmup", "0", "--warmup-seconds", "0", "--steps", "1", "--min-seconds", "0"]


@pytest.mark.slow
def test_a_batch_search_is_kept_and_the_next_run_skips_it(tmp_path):
    db = tmp_path / "r.db"
    first = cli(*BATCH, "--db", db)
    assert first.returncode == 0, first.stderr
    assert "batch search: probing" in first.stderr
    # the search's bound and a run said before it starts, then the run at the batch it found
    assert "; a batch search, at most: 1 min 00 s)" in first.stderr
    searched, found = first.stderr.split("batch search: largest ")
    assert found.splitlines()[1].startswith("infer resnet18 b2 3x16x16 fp32: about ")
    (_, choice, by), = _records(db)
    assert json.loads(choice) == {"batch": 2}
    second = cli(*BATCH, "--db", db)
    assert second.returncode == 0, second.stderr
    assert "probing" not in second.stderr
    assert f"batch 2 as tuned by run {by[:8]} on " in second.stderr and "--retune searches again" in second.stderr
    assert "(from a stored run here)" in second.stderr  # the run at batch 2 went by the first one's
    assert f"batch as tuned by run {by[:8]}" in second.stdout and " s from start to result" in second.stdout
    last = Store(db, read_only=True).results(workload="infer")[-1]
    assert last.spec["batch"] == 2 and last.metrics["tuned_from"]["result"] == by
    third = cli(*BATCH, "--retune", "--db", db)
    assert third.returncode == 0 and "batch search: probing" in third.stderr
    assert [b for _, _, b in _records(db)] == [Store(db, read_only=True).results(workload="infer")[-1].id]


@pytest.mark.slow
def test_on_several_processes_the_ranks_receive_the_tuning(tmp_path, volume):
    """torchrun's ranks (on the CPU here): the launcher looks the record up once and every rank
    predicts with it; the first run's rank 0 probed and the others received its choice."""
    db = tmp_path / "r.db"
    args = ["run", "volume", "--input", volume["input"], "--model", volume["model"], "--halo", "2x2x2",
            "--device", "cpu", "--warmup", "1", "--gpus", "2", "--db", db]
    assert cli(*args).returncode == 0
    (_, _, by), = _records(db)
    second = cli(*args)
    assert second.returncode == 0, second.stderr
    assert f"(as tuned by run {by[:8]} on " in second.stdout and "over 2 processes" in second.stdout
    assert Store(db, read_only=True).results(workload="volume")[-1].metrics["tuned_from"]["result"] == by
