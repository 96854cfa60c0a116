"""Records no measurement could produce are refused at import, no reader prints NaN as a figure, and
SIGHUP stops a command like SIGTERM (issue 48, items 7 and 8): real imports, real stores, real signals."""

import signal
import socket
import subprocess
import sys
import time

import pytest

from dlbench.results.measurement import Communication, GpuNeighbour, RankGpu, nested_problem
from dlbench.results.store import Store

from conftest import assert_user_error, cli, export_line, make_result
from test_interrupts import LINE, one_line, stop
from test_isolation import ENV, start, suite_file, wait_for


def rows(db) -> int:
    if not db.exists():
        return 0
    with Store(db, read_only=True) as store:
        return len(store.results())


STEPS = {"step": [0.012, 0.011, 0.013]}
FORGED = {
    "steps all 0": (dict(samples={"step": [0.0] * 8}), "samples 'step' are all 0"),
    "steps of no time": (dict(samples={"step": [1e-320] * 8}), "samples 'step' are of median"),
    "throughput over steps of 0 ms": (dict(metrics__throughput=1000.0, metrics__total_ms=0.0), "'total_ms' is 0"),
    "median step of 0": (dict(metrics__stats={"step": {"n": 8, "median": 0.0, "mean": 0.0}}), "median step of 0"),
    "cpu_other_top a text": (dict(metrics__cpu_other_top="busy"), "'cpu_other_top' must be a list of mappings"),
    "cpu_other_top cores a text": (dict(metrics__cpu_other_top=[{"pid": 1, "cores": "2", "command": "x"}]),
                                   "'cpu_other_top' must be a list of mappings (pid, cores, command)"),
    "gpu_neighbours of texts": (dict(metrics__gpu_neighbours=["pid 7"]), "'gpu_neighbours' must be a list"),
    "gpu_neighbours pid a text": (dict(metrics__gpu_neighbours=[{"pid": "7", "sm_share": 0.5}]), "'gpu_neighbours'"),
    "rank_gpus a mapping": (dict(metrics__rank_gpus={"rank": 0}), "'rank_gpus' must be a list of mappings"),
    "rank_gpus neighbours a text": (dict(metrics__rank_gpus=[{"rank": 0, "neighbours": "none"}]), "'rank_gpus'"),
    "ranks rank a text": (dict(metrics__ranks=[{"rank": "first", "step_ms": 3.0}]), "'ranks' must be a list"),
    "communication a list": (dict(metrics__communication=["nccl"]), "'communication' must be a mapping"),
    "profile a text": (dict(metrics__profile="fast"), "'profile' must be a mapping"),
    "profile class share a text": (dict(metrics__profile={"classes": {"idle": {"share": "half"}}}), "'profile'"),
    "stats of numbers": (dict(metrics__stats={"step": 0.01}), "'stats' must be a mapping of mappings"),
}


@pytest.mark.parametrize("changes, needle", FORGED.values(), ids=FORGED.keys())
def test_import_refuses_what_no_measurement_gives(tmp_path, db, changes, needle):
    """One line, exit 2, and nothing imported, not even the good record before it in the file."""
    export = tmp_path / "forged.jsonl"
    export.write_text(export_line(samples=STEPS) + "\n" + export_line(**changes) + "\n")
    assert_user_error(cli("import", export, "--db", db), "line 2", needle)
    assert rows(db) == 0


def test_the_shapes_dlbench_itself_stores_pass():
    """What the workloads write (workloads/distributed.py, measure/host.py, measure/profile.py) is never refused."""
    neighbour = GpuNeighbour(pid=7, sm_share=0.2, memory_gb=1.5, command="python train.py")
    rank = RankGpu(0, 0, 123, "node1", 40, 95.0, 1980.0, 650.0, 0.2, 1, (neighbour,))
    stored = {
        "rank_gpus": [rank.stored(), RankGpu(1, reason="a CPU run").stored()],
        "communication": Communication(1 << 20, {"NCCL_DEBUG": "WARN"}, "nccl", "2.21.5", True, [12, None]).stored(),
        "cpu_other_top": [{"pid": 9, "cores": 1.25, "command": "stress -c 2"}],
        "gpu_neighbours": [{"pid": 7, "sm_share": 0.2, "memory_gb": None, "command": "x", "launcher": "sshd"}],
        "profile": {"steps": 5, "step_s": 0.01, "classes": {"idle": {"seconds": 0.001, "share": 0.1}},
                    "top_kernels": [{"name": "gemm", "seconds": 0.004}], "adds_up": True, "note": "", "trace": None},
        "ranks": [{"rank": 0, "steps": 8, "step_ms": 12.5, "throughput": 640.0, "data_ms": 1.0, "data_p10_ms": 0.9}],
        "stats": {"step": {"n": 8, "median": 0.0125, "cv": 0.01}},
    }
    assert {key: nested_problem(key, value) for key, value in stored.items()} == dict.fromkeys(stored)


@pytest.mark.slow
def test_a_real_run_exported_imports_again(tmp_path, db):
    """A measured record, every nested figure as the run wrote it, passes the import check."""
    run = cli("run", "fwdbwd", "--model", "tiny-model", "--device", "cpu", "--batch", "2", "--warmup", "1",
              "--steps", "3", "--db", db, env=ENV)
    assert run.returncode == 0, run.stderr
    export = tmp_path / "export.jsonl"
    assert cli("export", "-o", export, "--db", db).returncode == 0
    again = cli("import", export, "--db", tmp_path / "other.db")
    assert again.returncode == 0, again.stderr
    assert rows(tmp_path / "other.db") == rows(db) >= 1  # the run, and the matmul ceiling it measured


def _stored_before_the_check(db) -> None:
    """Records an earlier dlbench let in: steps of 0 s and a text where a list of processes belongs, on a
    CPU run whose machine other processes kept busy (the doctor then names them)."""
    records = []
    for i, (tag, steps) in enumerate([("base", [0.012, 0.0125, 0.0118] * 4), ("base", [0.0121, 0.0119] * 6),
                                      ("zero", [0.0] * 12), ("zero", [0.0] * 12)]):
        records.append(make_result(tag=tag, started=f"2024-01-0{i + 1}T00:00:00+00:00", samples={"step": steps},
                                   spec={"device": "cpu"}, system={"gpus": []},
                                   metrics={"cpu_other_top": "busy", "cpu_cores": 8, "cpu_other_cores": 6.0}))
    with Store(db) as store:
        store.add_many(records)


def no_nan(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    for text in (proc.stdout, proc.stderr):
        assert "nan" not in text.lower().replace("nanosecond", ""), text
        assert "0.00x" not in text, text


def test_compare_and_doctor_never_print_nan(db):
    _stored_before_the_check(db)
    for args in (("compare", "base", "zero"), ("compare", "zero", "base"),
                 ("compare", "base", "zero", "--format", "json"),
                 ("doctor",), ("doctor", "zero"), ("doctor", "base"), ("doctor", "--format", "json")):
        no_nan(cli(*args, "--db", db))
    assert "median of 0 s" in cli("doctor", "zero", "--db", db).stdout


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_selector_is_a_user_error(db, blank):
    _stored_before_the_check(db)
    assert_user_error(cli("compare", blank, "base", "--db", db), "empty selector")
    assert_user_error(cli("doctor", blank, "--db", db), "empty selector")


@pytest.mark.slow
def test_sighup_to_a_run_stores_it_as_interrupted(tmp_path, db):
    """A closed terminal stops `dlbench run` as SIGTERM does: the running benchmark stored, one line, 130."""
    marker = tmp_path / "reached"
    proc = start("run", "fwdbwd", "--model", "sleep-model", "--device", "cpu", "--batch", "2", "--warmup", "1",
                 "--steps", "1", "--db", db,
                 env={**ENV, "DLBENCH_TEST_SLEEP": "300", "DLBENCH_TEST_MARKER": str(marker)})
    wait_for(marker.exists, 240, "the sleeping benchmark")
    _, stderr, _ = stop(proc, signal.SIGHUP)
    assert proc.returncode == 130, stderr
    one_line(stderr, f"0 of 1 results kept in {db}", "the running benchmark is stored as interrupted")
    with Store(db) as store:
        assert [(r.model, r.status) for r in store.results()] == [("sleep-model", "interrupted")]


@pytest.mark.slow
def test_sighup_to_a_suite_stores_the_running_benchmark_as_interrupted(tmp_path, db):
    path = suite_file(tmp_path, "hangup", "specs:\n  - {model: sleep-model}\n  - {model: tiny-model}\n")
    marker = tmp_path / "reached"
    proc = start("suite", path, "--db", db,
                 env={**ENV, "DLBENCH_TEST_SLEEP": "300", "DLBENCH_TEST_MARKER": str(marker)})
    wait_for(marker.exists, 240, "the sleeping benchmark")
    _, stderr, _ = stop(proc, signal.SIGHUP)
    assert proc.returncode == 130, stderr
    one_line(stderr, "0 of 2 results", "the running benchmark is stored as interrupted", "--resume` runs the rest")
    with Store(db) as store:
        assert [(r.model, r.status) for r in store.results() if r.workload != "system"] == [
            ("sleep-model", "interrupted")]


def test_nohup_keeps_a_command_going():
    """Under `nohup` SIGHUP is ignored on purpose: dlbench leaves it so."""
    code = ("import os, signal, sys, time\n"
            "from dlbench.launch import interrupts\n"
            "interrupts.install()\n"
            "with interrupts.answered(lambda line: print(line, file=sys.stderr)):\n"
            "    os.kill(os.getpid(), signal.SIGHUP)\n"
            "    time.sleep(0.5)\n"
            "print('finished')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert proc.returncode == 0 and proc.stdout.strip() == "finished", proc.stderr
    assert LINE not in proc.stderr


def test_the_watchdog_waits_at_its_deadline_without_raising():
    """At the deadline the wait left is 0 s; a socket timeout of 0 makes recv non-blocking, and it raised
    BlockingIOError from the watchdog's thread (Ctrl-C right at a suite's start: a traceback)."""
    from dlbench.launch import interrupts

    reader, writer = socket.socketpair()
    with reader, writer:
        assert interrupts._heard(reader, time.monotonic()) is None
        assert interrupts._heard(reader, time.monotonic() - 1.0) is None
        writer.send(bytes([signal.SIGINT, signal.SIGCHLD, signal.SIGHUP]))
        assert interrupts._heard(reader, None) == 2  # SIGCHLD (torch's DataLoader) is none of its business


FAILING_SOCKET = """
import socket, threading, time
from dlbench.launch import interrupts
failed = []
threading.excepthook = lambda args: failed.append(args.exc_type.__name__)
reader, writer = socket.socketpair()
reader.close()  # every recv now fails
thread = threading.Thread(target=interrupts._watch, args=(reader, writer), daemon=True)
thread.start()
time.sleep(0.5)
print(thread.is_alive(), failed)
"""


def test_the_watchdog_never_raises():
    """Whatever its socket does, the watchdog's thread goes on (and prints nothing)."""
    proc = subprocess.run([sys.executable, "-c", FAILING_SOCKET], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "True []" and not proc.stderr, (proc.stdout, proc.stderr)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_at_a_suites_start_ends_in_one_line(tmp_path, db, sig):
    """Right at the start, repeated: never a traceback from the watchdog's thread."""
    from test_interrupts import owns_signals, stopped_before_any_result

    path = suite_file(tmp_path, "early", "specs:\n  - {model: tiny-model}\n")
    for _ in range(3):
        proc = start("suite", path, "--db", db, env=ENV)
        wait_for(lambda: owns_signals(proc), 30, "the process to start")
        _, stderr, _ = stop(proc, sig)
        assert proc.returncode == 130, stderr
        stopped_before_any_result(stderr)
    assert rows(db) == 0
