"""Suites that survive anything: real subprocesses running models that abort, raise OOM,
hang or ignore SIGTERM (the plug-in in tests/plugins), a real store, real signals."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.results.store import Store

from conftest import assert_user_error, cli

PLUGINS = str(Path(__file__).parent / "plugins")
ENV = {"DLBENCH_PLUGINS": "dlbench_testmodels",
       "PYTHONPATH": os.pathsep.join(filter(None, [PLUGINS, os.environ.get("PYTHONPATH")]))}
TINY = "workload: fwdbwd, batch: 2, device: cpu, warmup: 1, warmup_seconds: 0, steps: 2, min_seconds: 0"


def suite_file(tmp_path, name, body) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ndefaults: {{{TINY}}}\n{body}")
    return path


def by_model(db) -> dict[str, list]:
    """The benchmarks' results (a matmul ceiling a run measured for its FLOP utilisation left out)."""
    with Store(db) as store:
        found: dict[str, list] = {}
        for r in store.results():
            if r.workload != "system":
                found.setdefault(r.model, []).append(r)
    return found


def start(*args, env) -> subprocess.Popen:
    """dlbench as a terminal starts it: SIGHUP and SIGINT at their defaults, even where the tests run
    under `nohup` or in the background (which ignore them, and dlbench leaves an ignored signal so)."""
    return subprocess.Popen([sys.executable, "-m", "dlbench", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200", **env},
                            preexec_fn=_default_signals)


def _default_signals() -> None:
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def wait_for(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_suite_survives_abort_oom_and_hang(tmp_path, db):
    path = suite_file(tmp_path, "rough", "timeout: 120\nspecs:\n"
                      "  - {model: abort-model}\n  - {model: oom-model}\n"
                      "  - {model: hang-model, timeout: 12}\n  - {model: tiny-model}\n")
    proc = cli("suite", path, "--db", db, env=ENV)
    assert proc.returncode == 1, proc.stderr  # something failed, and every benchmark ran
    found = by_model(db)
    assert [r.status for r in found["tiny-model"]] == ["ok"]
    tiny = found["tiny-model"][0]  # the wait a `dlbench run` of it would have: its process's start to its result
    assert 0 < tiny.measured.window.wall_to_result_s <= tiny.traces["launch"]["wall_s"]
    (abort,), (oom,), (hang,) = found["abort-model"], found["oom-model"], found["hang-model"]
    assert hang.measured.window.wall_to_result_s is None  # no result, no time to it
    assert abort.status == "error" and "SIGABRT" in abort.error
    assert abort.traces["launch"]["returncode"] == -signal.SIGABRT
    assert oom.status == "oom" and oom.metrics["batch_tried"] == 2
    assert hang.status == "timeout" and "no result after 12 s" in hang.error and hang.metrics["timeout_s"] == 12
    runs = {r.run for rs in found.values() for r in rs}
    assert len(runs) == 1 and None not in runs
    assert all(r.suite == "rough" for rs in found.values() for r in rs)
    assert all(r.title == r.model for rs in found.values() for r in rs)  # the plug-in's titles are the names
    assert "1 error, 1 ok, 1 oom, 1 timeout" in proc.stderr
    assert "## tiny-model" in proc.stdout  # the report of the good specs


@pytest.mark.slow
def test_second_signal_stops_at_once(tmp_path, db):
    path = suite_file(tmp_path, "stubborn", "specs:\n  - {model: stubborn-model}\n  - {model: tiny-model}\n")
    marker = tmp_path / "reached"
    proc = start("suite", path, "--db", db, env={**ENV, "DLBENCH_TEST_MARKER": str(marker)})
    try:
        wait_for(marker.exists, 240, "the benchmark that ignores SIGTERM")
        proc.send_signal(signal.SIGTERM)  # asks the child to stop, which it ignores
        time.sleep(1.0)
        assert proc.poll() is None
        stopped = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert time.monotonic() - stopped < 8  # well within the 10 s grace that SIGTERM alone gets
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    found = by_model(db)
    assert [r.status for r in found["stubborn-model"]] == ["interrupted"]
    assert "tiny-model" not in found


@pytest.mark.slow
def test_slurm_jobs_through_submitit_local_executor(tmp_path, db):
    pytest.importorskip("submitit")
    path = suite_file(tmp_path, "cluster", "specs:\n  - {model: tiny-model}\n")
    jobs = tmp_path / "jobs"
    proc = cli("suite", path, "--slurm", "cluster=local,time=10", "--slurm-dir", jobs, "--db", db, env=ENV)
    assert proc.returncode == 0, proc.stderr
    (result,) = by_model(db)["tiny-model"]
    assert result.status == "ok" and result.suite == "cluster" and result.run
    records = list(jobs.glob("*/records/*.jsonl"))
    assert [p.name for p in records] == [f"0000-{result.id}.jsonl"]
    other = tmp_path / "other.db"
    imported = cli("import", jobs, "--db", other)
    # the record file holds the result and the matmul ceiling its job measured for FLOP utilisation
    assert imported.returncode == 0 and "imported 2 new results" in imported.stderr
    with Store(db) as store:
        [ceiling] = store.results(workload="system")
    assert ceiling.spec["quick"] and result.metrics["ceiling_record"] == ceiling.id


@pytest.mark.slow
def test_slurm_without_slurm_is_a_user_error(tmp_path, db):
    if __import__("shutil").which("sbatch"):
        pytest.skip("SLURM is installed here")
    assert_user_error(cli("suite", "quick", "--slurm", "partition=gpu,gpus=1,time=30", "--db", db),
                      "--slurm needs SLURM", "sbatch")
    assert_user_error(cli("suite", "quick", "--slurm", "partition=gpu,gpu=1", "--db", db),
                      "unknown key 'gpu'", "did you mean gpus")
    assert not db.exists()


def test_broken_plugin_is_a_user_error(db):
    proc = cli("suite", "quick", "--list", "--db", db, env={"DLBENCH_PLUGINS": "no_such_plugin_module"})
    assert_user_error(proc, "cannot load plug-in 'no_such_plugin_module'", "DLBENCH_PLUGINS")
