"""A suite's first benchmark starts its worker before the suite's checks (launch/isolated.py `started`),
so its import of torch overlaps the launcher's: it runs only once let go, in its own process, and a
check that fails stops it with nothing run or stored. Real workers, a real store, real subprocesses."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.launch import isolated
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec

TINY = dict(model="resnet18", batch=2, input_shape=(3, 32, 32), device="cpu", warmup=1, warmup_seconds=0.0,
            steps=1, min_seconds=0.0)
SUITE = """name: tiny
description: a tiny benchmark, then one whose dataset is missing
defaults: {{model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu, warmup: 1, warmup_seconds: 0.0,
           steps: 1, min_seconds: 0.0}}
specs:
  - {{workload: fwdbwd}}
  - {{workload: train, data: "folder:{missing}"}}
"""


def _starts(monkeypatch) -> list[list[str]]:
    """The worker processes started from here on (the real ones: only counted)."""
    started, real = [], isolated._start
    monkeypatch.setattr(isolated, "_start", lambda cmd, *a: started.append(cmd) or real(cmd, *a))
    return started


@pytest.mark.slow  # two real workers, torch imported in each
def test_a_worker_started_ahead_runs_its_spec_and_no_other_starts(monkeypatch):
    spec = BenchmarkSpec(workload="fwdbwd", **TINY)
    starts = _starts(monkeypatch)
    with isolated.started(spec) as worker:
        time.sleep(0.5)  # the checks of its launcher would go on here
        result = isolated.run(spec, {}, isolated.Job("tiny", "r1", None), timeout=300, ahead=worker)
    assert result.status == "ok", result.error
    assert len(starts) == 1 and worker.proc.returncode == result.traces["launch"]["returncode"] == 0
    assert (result.suite, result.run) == ("tiny", "r1")  # the rest of the job came with the go file
    assert "go_wait_s" not in result.traces  # moved into the launch trace, left out of the wall time
    waited = result.traces["launch"].get("started_ahead_s", 0.0)
    assert 0 < result.metrics["wall_to_result_s"] <= time.time() - worker.epoch - waited + 0.5


@pytest.mark.slow  # two real workers, torch imported in each
def test_a_worker_started_for_another_spec_is_stopped_and_a_fresh_one_runs(monkeypatch):
    first = BenchmarkSpec(workload="fwdbwd", **TINY)
    other = BenchmarkSpec(workload="fwdbwd", **{**TINY, "batch": 3})
    starts = _starts(monkeypatch)
    with isolated.started(first) as worker:
        result = isolated.run(other, {}, isolated.Job(), timeout=300, ahead=worker)
        assert worker.proc.poll() is not None  # stopped at once, not left to idle beside the run
    assert result.status == "ok" and result.spec["batch"] == 3, result.error
    assert len(starts) == 2 and "started_ahead_s" not in result.traces["launch"]


def test_a_stopped_worker_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # TMPDIR read again
    with isolated.started(BenchmarkSpec(workload="fwdbwd", **TINY)) as worker:
        folder = worker.files["spec.json"].parent
        assert worker.proc.poll() is None and folder.is_dir()
    assert worker.proc.returncode is not None and not folder.exists()
    assert not list(tmp_path.glob("dlbench-*"))


def _workers_under(path: Path) -> list[int]:
    """The worker processes whose job file lies under `path`, and the processes workers are forked
    from (launch/forkserver.py), with their children, whose temporary folder is `path`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
            env = (cmdline.parent / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        started = b"dlbench.launch.worker" in args and any(a.startswith(str(path).encode()) for a in args)
        forked = b"dlbench.launch.forkserver" in args and b"TMPDIR=" + str(path).encode() in env
        if started or forked:
            found.append(int(cmdline.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the worker through /proc")
def test_a_failed_check_stops_the_started_worker_and_stores_nothing(tmp_path):
    suite, db = tmp_path / "tiny.yaml", tmp_path / "r.db"
    suite.write_text(SUITE.format(missing=tmp_path / "no-such-images"))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "suite", str(suite), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    seen = set()
    while proc.poll() is None:  # the checks import torch: seconds in which the started worker can be seen
        seen.update(_workers_under(tmp_path))
        time.sleep(0.01)
    out, err = proc.communicate()
    assert seen, "no worker was started before the checks"
    assert proc.returncode == 2, err
    [line] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "train resnet18" in line and "no-such-images" in line
    deadline = time.monotonic() + 5  # SIGKILL is sent before the command exits; the kernel reaps
    while _workers_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _workers_under(tmp_path)
    assert not db.exists() and not list(tmp_path.glob("dlbench-*")) and out == ""


@pytest.mark.slow  # a real suite in fresh processes
def test_a_suite_runs_its_first_benchmark_in_the_worker_started_ahead(tmp_path):
    suite, db = tmp_path / "tiny.yaml", tmp_path / "r.db"
    suite.write_text(SUITE.split("  - {{workload: train")[0].replace("{{", "{").replace("}}", "}"))
    env = {**os.environ, "DLBENCH_FORKSERVER": "0"}  # a fresh interpreter: its go file is what waits
    proc = subprocess.run([sys.executable, "-m", "dlbench", "suite", str(suite), "--db", str(db)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        [result] = store.results(suite="tiny")
    assert result.status == "ok"
    # The worker lived from before the checks (torch imported here: seconds) to its result; a worker
    # started once the checks were done would have lived less than the run's time from its go.
    launch = result.traces["launch"]
    assert result.metrics["wall_to_result_s"] + launch.get("started_ahead_s", 0.0) > launch["wall_s"]
