"""A suite's benchmarks are forked from one process that imported torch once (launch/forkserver.py):
each child still runs alone in a session of its own, with its own output and exit status, and
nothing outlives the suite. Real server processes, real forks, real workers and a real store."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.launch import forkserver, isolated
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec

TINY = dict(model="resnet18", batch=2, input_shape=(3, 32, 32), device="cpu", warmup=1, warmup_seconds=0.0,
            steps=1, min_seconds=0.0)
SUITE = """name: tiny
description: two tiny benchmarks
defaults: {model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu, warmup: 1, warmup_seconds: 0.0,
           steps: 1, min_seconds: 0.0}
specs:
  - {workload: fwdbwd}
  - {workload: infer, data: synthetic}
"""


def _children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:  # the field after the state: the parent's pid
            found.append(int(stat.parent.name))
    return found


def _until(check, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_off_when_asked_so_every_run_is_a_fresh_interpreter(monkeypatch):
    monkeypatch.setenv(forkserver.ENV, "0")
    with isolated.preloaded():
        assert isolated._server is None


def test_no_server_where_no_run_is_a_single_process(monkeypatch):
    monkeypatch.delenv(forkserver.ENV, raising=False)
    with isolated.preloaded(wanted=False):  # every run of the block under torchrun
        assert isolated._server is None


@pytest.mark.slow  # a real suite: the server imports torch once
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="looks for processes through /proc")
def test_a_suite_forks_its_runs_and_leaves_no_process_or_folder(tmp_path):
    suite, db = tmp_path / "tiny.yaml", tmp_path / "r.db"
    suite.write_text(SUITE)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop(forkserver.ENV, None)
    proc = subprocess.run([sys.executable, "-m", "dlbench", "suite", str(suite), "--db", str(db)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        results = store.results(suite="tiny")
    assert [r.status for r in results] == ["ok", "ok"]
    assert all(r.traces["launch"].get("forked") for r in results)
    assert not list(tmp_path.glob("dlbench-*"))  # the runs' folders and the server's
    assert not _with_tmpdir(tmp_path)  # the server and its children ended with the suite


def _with_tmpdir(path: Path) -> list[int]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if b"TMPDIR=" + str(path).encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.slow  # the server imports torch
def test_a_child_says_its_error_and_status_in_its_own_output(tmp_path):
    with isolated.preloaded():
        spec_file = tmp_path / "spec.json"
        spec_file.write_text('{"spec": {"workload": "fwdbwd", "model": "no-such-model"}}')
        child = isolated._server.fork([str(spec_file), str(tmp_path / "result.json")], dict(os.environ), tmp_path,
                                      tmp_path / "out.log")
        assert child.wait() == 2
        assert child.pid != os.getpid() and child.pid is not None
    said = (tmp_path / "out.log").read_text()
    assert "error: " in said and "no-such-model" in said, said
    assert not (tmp_path / "result.json").exists()


@pytest.mark.slow  # the server imports torch
def test_a_child_killed_by_a_signal_reads_as_that_signal_in_the_record(tmp_path):
    spec = BenchmarkSpec(workload="fwdbwd", **TINY)
    with isolated.preloaded(), isolated.started(spec) as worker:
        pid = _until(lambda: worker.proc.pid)
        assert os.getsid(pid) == pid  # a session of its own: a terminal's Ctrl-C reaches only the suite
        os.kill(pid, signal.SIGSEGV)
        assert worker.proc.wait() == -signal.SIGSEGV
        result = isolated._outcome(spec, {}, worker.proc.returncode, None, None, worker.files, None)
    assert result.status == "error" and result.error.startswith("benchmark process died from SIGSEGV")


@pytest.mark.slow  # the server imports torch
def test_a_run_stopped_before_its_fork_never_runs(tmp_path):
    spec = BenchmarkSpec(workload="fwdbwd", **TINY)
    with isolated.preloaded():
        server = isolated._server
        with isolated.started(spec) as worker:
            pass  # stopped at once, while the server still imports torch
        assert worker.proc.returncode == -signal.SIGKILL and worker.proc.pid is None
        # the server answers later requests, so it has read the stopped one by then
        (tmp_path / "spec.json").write_text('{"spec": {"workload": "fwdbwd", "model": "no-such-model"}}')
        later = server.fork([str(tmp_path / "spec.json"), str(tmp_path / "r.json")], dict(os.environ), tmp_path,
                            tmp_path / "out.log")
        assert later.wait() == 2
        assert _children_of(server.proc.pid) == []  # the stopped run was never forked


@pytest.mark.slow  # the server imports torch
def test_a_worker_stopped_the_moment_its_pid_is_known_is_gone(tmp_path):
    # the pid once appeared before the child had its own session: a stop then signalled no group,
    # and the suite waited for ever on a child that waited for its go
    spec = BenchmarkSpec(workload="fwdbwd", **TINY)
    with isolated.preloaded():
        for _ in range(5):
            with isolated.started(spec) as worker:
                pid = _until(lambda: worker.proc.pid)
                assert os.getsid(pid) == pid
            assert worker.proc.returncode == -signal.SIGKILL
            _until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
                   10.0)


@pytest.mark.slow  # the server imports torch
def test_the_end_of_the_server_ends_its_children(tmp_path):
    spec = BenchmarkSpec(workload="fwdbwd", **TINY)
    with isolated.preloaded(), isolated.started(spec) as worker:
        pid = _until(lambda: worker.proc.pid)  # forked, and waiting for its go
        isolated._server.proc.kill()
        isolated._server.proc.wait()
        assert worker.proc.wait() == -signal.SIGKILL
        _until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
               10.0)


def test_a_child_draws_numpy_numbers_of_its_own():
    import numpy as np

    np.random.seed(0)
    server_draw = np.random.random()
    np.random.seed(0)  # the state every child would inherit from the server
    forkserver._fresh_random_state()
    assert np.random.random() != server_draw
