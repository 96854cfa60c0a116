"""Ctrl-C at every stage of a real `python -m dlbench` process: it stops within seconds, says in one
line what the store kept, exits 130, stores `interrupted` where a benchmark had begun, and
`--resume` runs the rest. Models that sleep or hold a native call come from tests/plugins."""

import os
import signal
import subprocess
import sys
import time

import pytest

from dlbench.results.store import Store

from conftest import cli
from test_isolation import ENV, by_model, start, suite_file, wait_for

LINE = "interrupted: "


def stop(proc: subprocess.Popen, sig=signal.SIGINT, within: float = 8.0) -> tuple[str, str, float]:
    """Send `sig`; the output and how long the process took to end after it."""
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    took = time.monotonic() - sent
    assert took < within, (took, err)
    return out, err, took


def one_line(stderr: str, *needles: str) -> str:
    """The stop's line: the last on stderr, no traceback, with every needle."""
    assert "Traceback" not in stderr, stderr
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    assert last.startswith(LINE), stderr
    for needle in needles:
        assert needle in last, last
    assert sum(line.startswith(LINE) for line in stderr.splitlines()) == 1, stderr
    return last


def stopped_before_any_result(stderr: str) -> None:
    """The stop's line where it came before the first result: while still loading, or once the
    suite had begun and before its benchmark started."""
    line = one_line(stderr)
    assert "nothing was stored" in line or "0 of 1 results of run" in line, line


def rows(db) -> int:
    if not db.exists():
        return 0
    with Store(db) as store:
        return len(store.results())


def owns_signals(proc: subprocess.Popen) -> bool:
    """Whether dlbench has taken over the signals, its first act: then its watchdog thread runs.
    (Before, Python itself is starting, and a signal then is Python's to answer.)"""
    try:
        status = open(f"/proc/{proc.pid}/status").read()
    except OSError:
        return False
    return int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1]) >= 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("delay", [0.0, 0.6])
def test_sigint_while_starting_stops_with_one_line(tmp_path, db, delay):
    """At once after start (the command line still loading) and a moment later."""
    path = suite_file(tmp_path, "early", "specs:\n  - {model: tiny-model}\n")
    proc = start("suite", path, "--db", db, env=ENV)
    wait_for(lambda: owns_signals(proc), 30, "the process to start")
    time.sleep(delay)
    _, stderr, _ = stop(proc)
    assert proc.returncode == 130, stderr
    stopped_before_any_result(stderr)
    assert rows(db) == 0


def test_sigint_is_honoured_where_the_shell_ignored_it(tmp_path, db):
    """A script's background job starts with SIGINT ignored; `kill -INT` must still stop dlbench."""
    path = suite_file(tmp_path, "ignored", "specs:\n  - {model: tiny-model}\n")
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "suite", str(path), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", **ENV},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    time.sleep(1.5)
    _, stderr, _ = stop(proc)
    assert proc.returncode == 130, stderr
    stopped_before_any_result(stderr)
    assert rows(db) == 0


def test_sigint_inside_an_import_waits_for_the_import_then_stops(tmp_path, db):
    """torch's imports run Python inside C++, where a KeyboardInterrupt aborts the process (SIGABRT):
    a signal that lands in an import is held until the import is done, then stops the command."""
    marker = tmp_path / "imported"
    (tmp_path / "signals_itself.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.3)\n"
        f"open({str(marker)!r}, 'w').write('done')\n")
    env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "DLBENCH_PLUGINS": "signals_itself"}
    proc = subprocess.run([sys.executable, "-m", "dlbench", "results", "--db", str(db)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 130, proc.stderr
    one_line(proc.stderr, "nothing was stored")
    assert marker.read_text() == "done"
    assert rows(db) == 0


@pytest.mark.slow
def test_sigint_during_a_benchmark_keeps_earlier_results_and_resume_runs_the_rest(tmp_path, db):
    path = suite_file(tmp_path, "middle", "specs:\n  - {model: tiny-model}\n  - {model: sleep-model}\n"
                      "  - {model: tiny-model, seed: 1}\n")
    marker = tmp_path / "reached"
    proc = start("suite", path, "--db", db, env={**ENV, "DLBENCH_TEST_SLEEP": "300", "DLBENCH_TEST_MARKER": str(marker)})
    wait_for(marker.exists, 240, "the sleeping benchmark")
    _, stderr, _ = stop(proc)
    assert proc.returncode == 130, stderr
    found = by_model(db)
    run = found["tiny-model"][0].run
    one_line(stderr, f"1 of 3 results of run {run} kept in {db}", "the running benchmark is stored as interrupted",
             f"`dlbench suite {path} --resume` runs the rest")
    assert [r.status for r in found["tiny-model"]] == ["ok"]
    assert [r.status for r in found["sleep-model"]] == ["interrupted"]
    assert found["sleep-model"][0].run == run

    resumed = cli("suite", path, "--resume", "--db", db, env={**ENV, "DLBENCH_TEST_SLEEP": "0"})
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run}: 2 to run, 1 already done" in resumed.stderr
    after = by_model(db)
    assert [r.status for r in after["sleep-model"]] == ["interrupted", "ok"]
    assert sorted(r.spec["seed"] for r in after["tiny-model"] if r.status == "ok") == [0, 1]
    assert [(r.spec["seed"], r.status) for r in after["tiny-model"]] == [(0, "ok"), (1, "ok")]
    assert {r.run for rs in after.values() for r in rs} == {run}


@pytest.mark.slow
def test_sigint_after_a_benchmark_keeps_it(tmp_path, db):
    """Ctrl-C once the first result is stored (between benchmarks or as the next begins)."""
    path = suite_file(tmp_path, "between", "specs:\n  - {model: tiny-model}\n  - {model: sleep-model}\n")
    proc = start("suite", path, "--db", db, env={**ENV, "DLBENCH_TEST_SLEEP": "300"})
    wait_for(lambda: rows(db) >= 1, 240, "the first result")
    _, stderr, _ = stop(proc)
    assert proc.returncode == 130, stderr
    one_line(stderr, "1 of 2 results", "--resume` runs the rest")
    found = by_model(db)
    assert [r.status for r in found["tiny-model"]] == ["ok"]
    assert [r.status for r in found.get("sleep-model", [])] in ([], ["interrupted"])


@pytest.mark.slow
def test_sigint_while_held_in_native_code_still_stops_and_stores(tmp_path, db):
    """`dlbench run` runs in this process: a signal during one long native call (no Python handler can
    run) is answered by the watchdog within seconds, and the benchmark is stored as interrupted."""
    marker = tmp_path / "reached"
    proc = start("run", "fwdbwd", "--model", "native-model", "--device", "cpu", "--batch", "2", "--warmup", "1",
                 "--steps", "1", "--db", db, env={**ENV, "DLBENCH_TEST_MARKER": str(marker)})
    wait_for(marker.exists, 240, "the native call")
    _, stderr, _ = stop(proc, within=10.0)
    assert proc.returncode == 130, stderr
    one_line(stderr, f"0 of 1 results kept in {db}", "the running benchmark is stored as interrupted")
    with Store(db) as store:
        assert [(r.model, r.status) for r in store.results()] == [("native-model", "interrupted")]


WATCHED = """
import hashlib, pathlib, sys
from dlbench.launch import interrupts
interrupts.install()
out = pathlib.Path(sys.argv[1])
with interrupts.answered(lambda line: print(line, file=sys.stderr)), \\
        interrupts.kept(lambda: "what was kept"), interrupts.pending(lambda: out.write_text("stored")):
    out.with_suffix(".ready").write_text("")
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)  # one native call of minutes: no Python handler runs
"""


def test_a_stop_comes_even_while_the_main_thread_is_in_native_code(tmp_path):
    out = tmp_path / "stored.txt"
    proc = subprocess.Popen([sys.executable, "-c", WATCHED, str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for(out.with_suffix(".ready").exists, 60, "the native call")
    _, stderr, took = stop(proc, within=10.0)
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "interrupted: what was kept"
    assert out.read_text() == "stored"  # the pending action ran, once


OTHER_SIGNALS = """
import os, signal, subprocess, sys, time
from dlbench.launch import interrupts
interrupts.install()
signal.signal(signal.SIGCHLD, lambda *a: None)  # as torch's DataLoader does for its workers
with interrupts.answered(lambda line: print(line, file=sys.stderr)):
    subprocess.run(["true"])
    workers = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:  # a forked worker, as DataLoader's
            time.sleep(30)
            os._exit(0)
        workers.append(pid)
    time.sleep(0.5)
    for pid in workers:  # stopped at shutdown, as DataLoader stops its workers
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    time.sleep(interrupts.GRACE_S + 1.5)
print("finished")
"""


def test_other_signals_and_forked_workers_never_stop_a_command():
    """The watchdog hears every signal that has a Python handler (torch's SIGCHLD) through the wakeup
    socket, which forked workers would share: only SIGINT and SIGTERM to this process stop a command."""
    proc = subprocess.run([sys.executable, "-c", OTHER_SIGNALS], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "finished", proc.stderr
    assert LINE not in proc.stderr
