import multiprocessing as mp
import os
import signal
import sqlite3
import time

import pytest

from dlbench.errors import UserError
from dlbench.results import exchange
from dlbench.results.record import SCHEMA_VERSION, Result
from dlbench.results.store import Store

from conftest import TINY, cli, make_result


def test_round_trip(db):
    r = make_result(samples={"step": [0.1, 0.2]}, tag="a")
    with Store(db) as store:
        assert store.add(r)
        assert not store.add(r)  # same id: not stored twice
    with Store(db) as store:
        (back,) = store.results()
    assert back == r


def test_export_import_dedupes(tmp_path, db):
    results = [make_result(tag=str(i)) for i in range(3)]
    with Store(db) as store:
        store.add_many(results)
        with open(tmp_path / "x.jsonl", "w") as f:
            exchange.write_jsonl(store.results(), f)
    other = tmp_path / "other.db"
    first = cli("import", tmp_path / "x.jsonl", "--db", other)
    assert first.returncode == 0 and "imported 3 new" in first.stderr
    again = cli("import", tmp_path / "x.jsonl", "--db", other)
    assert "imported 0 new results (3 already stored)" in again.stderr
    with Store(other) as store:
        assert sorted(r.id for r in store.results()) == sorted(r.id for r in results)


def test_csv_export_is_flat(tmp_path, db):
    with Store(db) as store:
        store.add(make_result())
    proc = cli("export", "--format", "csv", "--db", db)
    header, row = proc.stdout.strip().splitlines()
    assert "total_ms" in header.split(",") and "NVIDIA H200" in row


def _writer(path: str, worker: int, n: int) -> None:
    with Store(path) as store:
        for i in range(n):
            store.add(make_result(tag=f"{worker}-{i}"))


@pytest.mark.slow
def test_eight_processes_writing_at_once_lose_nothing(db):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(db), w, 25)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Store(db) as store:
        tags = {r.tag for r in store.results()}
    assert len(tags) == 200


@pytest.mark.slow
def test_sigkill_mid_benchmark_keeps_earlier_results(tmp_path, db):
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "defaults: {workload: fwdbwd, model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu,"
        " warmup: 1, warmup_seconds: 0, steps: 2, min_seconds: 0}\n"
        "specs:\n  - {seed: 1}\n  - {seed: 2}\n  - {steps: 100000, min_seconds: 600}\n")
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "suite", str(suite), "--db", str(db)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline:
        if db.exists() and _count(db) >= 2:
            break
        time.sleep(0.5)
    time.sleep(1.0)  # well inside the long third benchmark
    workers = _children(proc.pid)
    assert workers, "the suite runs each benchmark in a child process"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 30
    while any(_alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers), "a benchmark process outlived its killed parent"
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Store(db) as store:
        results = store.results(workload="fwdbwd")
    assert [r.spec["seed"] for r in results] == [1, 2]
    assert all(r.status == "ok" and r.samples["step"] for r in results)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _count(path) -> int:
    try:
        # the benchmarks' results, not the matmul ceiling the first one measures for its utilisation
        return sqlite3.connect(path, timeout=5).execute(
            "SELECT COUNT(*) FROM results WHERE workload != 'system'").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("my notes\n")
    with pytest.raises(UserError, match="not a SQLite database"):
        Store(path)
    assert path.read_text() == "my notes\n"


def test_result_from_dict_rejects_foreign_records():
    for bad in ({}, {"format": "other"}, {"format": "dlbench-result", "schema": 99}):
        with pytest.raises(ValueError):
            Result.from_dict(bad)


@pytest.mark.parametrize("model, title", [
    ("resnet50", "ResNet-50"), ("inception-v1", "Inception-V1"), ("unet3d:f=16,d=3", "3D U-Net (f=16,d=3)"),
    ("unet3d-aniso:d=3", "3D U-Net (aniso, d=3)"), ("timm:vit_base_patch16_224", "vit_base_patch16_224"),
    ("/models/net.pt2", "net.pt2"), ("mobilenet_v2", "mobilenet_v2")])
def test_records_of_schema_2_get_the_model_title_they_were_shown_with(db, model, title):
    old = make_result(spec={"model": model}).to_dict()
    del old["title"]
    old["schema"] = 2
    with Store(db) as store:
        store.add(Result.from_dict(old))
        (back,) = store.results()
    assert back.title == title and back.schema == SCHEMA_VERSION


def test_a_result_carries_its_model_title():
    from dlbench.spec import BenchmarkSpec
    from dlbench.launch.execute import execute

    result = execute(BenchmarkSpec(**{**TINY, "steps": 1}), {})
    assert result.status == "ok" and Result.from_dict(result.to_dict()).title == "ResNet-18"
