"""Compilation as a phase: its elapsed time shown while it runs, the compiler's output (Python,
native, child processes) in a log the result names and not on the terminal, and Inductor's
caches kept in dlbench's cache folder so that the same compile in a new process is faster."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
import torch
import torch.nn as nn
from rich.console import Console

from conftest import cli
from dlbench.launch import inprocess
from dlbench.launch.execute import execute
from dlbench.launch.isolated import _where
from dlbench.launch.view import Heartbeat, SuiteView
from dlbench.models import registry
from dlbench.descriptors import redirected
from dlbench.paths import cache_folder
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import Estimate
from dlbench.workloads import compiling, optimize

TINY = "test-compiling-tiny"
PLUGINS = str(Path(__file__).parent / "plugins")

registry.register(registry.ModelEntry(TINY, "Tiny test net", lambda: nn.Sequential(
    nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5)),
    (3, 8, 8), "classify"))


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("DLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(compiling.INDUCTOR_ENV, raising=False)
    monkeypatch.setenv(optimize.BACKEND_ENV, "aot_eager")
    torch._dynamo.reset()
    yield tmp_path / "cache"
    torch._dynamo.reset()


def spec(**kw) -> BenchmarkSpec:
    base = dict(workload="fwdbwd", model=TINY, batch=2, device="cpu", warmup=1, warmup_seconds=0.0, steps=2,
                min_seconds=0.0, optimize="compile")
    return BenchmarkSpec(**{**base, **kw})


def noise(tag: str) -> None:
    """What a compiler says while it works: logging, Python prints, native writes, a child process."""
    logging.getLogger("torch._inductor.test").warning("%s from logging", tag)
    print(f"{tag} from print")
    sys.stderr.write(f"{tag} from sys.stderr\n")
    os.write(2, f"{tag} from fd 2\n".encode())
    ctypes.CDLL(None).printf(f"{tag} from C printf\n".encode())
    subprocess.run([sys.executable, "-c", f"import sys; sys.stderr.write('{tag} from a child\\n')"], check=True)


SOURCES = ("from logging", "from print", "from sys.stderr", "from fd 2", "from C printf", "from a child")


class SlowNoisyFirstCall:
    """Stands in for torch.compile: the first call takes a while and talks."""

    def __init__(self, model, seconds: float = 1.3) -> None:
        self.model, self.seconds, self.first = model, seconds, True

    def __call__(self, x):
        if self.first:
            self.first = False
            noise("compiler")
            time.sleep(self.seconds)
        return self.model(x)


def test_redirected_catches_every_kind_of_output_and_restores_the_terminal(tmp_path, capfd):
    log = tmp_path / "compile.log"
    with redirected(log):
        noise("inside")
    noise("after")
    text = log.read_text()
    seen = capfd.readouterr()
    for source in SOURCES:
        assert f"inside {source}" in text
        assert f"inside {source}" not in seen.out + seen.err
    assert "after from fd 2" in seen.err and "after from print" in seen.out and "after" not in text


def test_ticker_reports_elapsed_seconds_of_a_blocking_call():
    calls = []
    with compiling.ticking(lambda *a: calls.append(a), "compile (torch.compile)", every_s=0.1):
        time.sleep(1.25)  # one blocking call that reports nothing itself
    stages = [stage for stage, done, total in calls]
    assert all(total == 0 and done == 0 for _, done, total in calls)
    assert stages[0] == "compile (torch.compile): 0 s" and stages[-1] == "compile (torch.compile): 1 s"
    count = len(calls)
    time.sleep(0.3)
    assert len(calls) == count  # the ticker stopped with the block


@contextlib.contextmanager
def terminal(path: Path, tty: bool) -> Iterator[tuple[Console, Callable[[], str]]]:
    """A console on a pseudo-terminal (a live bar) or on a file (progress lines); and what it showed."""
    if not tty:
        with open(path, "w") as f:
            yield Console(file=f, width=200), lambda: path.read_text()
        return
    master, slave = os.openpty()
    shown: list[bytes] = []

    def read() -> None:
        with contextlib.suppress(OSError):  # the terminal closed
            while chunk := os.read(master, 65536):
                shown.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with open(slave, "w") as tty_file:
            yield Console(file=tty_file, width=200), lambda: b"".join(shown).decode(errors="replace")
    finally:
        reader.join(timeout=5)
        os.close(master)


@pytest.mark.parametrize("tty", [False, True], ids=["progress lines", "live bar"])
def test_compile_phase_in_the_view_with_output_in_the_log(tmp_path, monkeypatch, capfd, tty):
    """`dlbench run` in this process: the view names the phase with its elapsed time while the
    compiler's output goes to the log the result names, not to the terminal."""
    monkeypatch.setattr(optimize, "apply_level", lambda level, model, example, training: SlowNoisyFirstCall(model))
    monkeypatch.setattr(inprocess, "Heartbeat", functools.partial(Heartbeat, every_s=0.2))
    monkeypatch.setattr(compiling, "TICK_S", 0.2)
    with terminal(tmp_path / "terminal.txt", tty) as (console, shown), Store(tmp_path / "r.db") as store:
        result, = inprocess.run_specs([spec()], store, console=console)
    assert result.status == "ok", result.error
    phase = "compile (torch.compile, aot_eager): 1 s"
    # off a terminal each line ends with the run's clock: "(N s so far)", or a countdown against its estimate
    assert (f"[{phase}]" if tty else f": {phase} (") in shown(), shown()
    log = Path(result.metrics["compile_log"])
    assert log.parent == cache_folder("compile-logs") and log.is_file()
    text = log.read_text()
    seen = capfd.readouterr()
    for source in SOURCES:
        assert f"compiler {source}" in text
        assert f"compiler {source}" not in seen.out + seen.err + shown()
    assert result.metrics["compile_s"] >= 1.3


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes")
def test_a_failed_compile_names_its_log(monkeypatch):
    def broken(level, model, example, training):
        def call(x):
            noise("broken")
            raise RuntimeError("inductor gave up")
        return call

    monkeypatch.setattr(optimize, "apply_level", broken)
    result = execute(spec(), {})
    assert result.status == "error" and "inductor gave up" in result.error
    log = result.error.split("compiler output: ")[1].strip()
    assert "broken from fd 2" in Path(log).read_text()


def test_suite_view_and_timeout_message_show_a_phase_of_unknown_length_by_its_name():
    view = SuiteView(Console(file=open(os.devnull, "w")), "s", [Estimate(60.0, 0)])
    view.start(0, spec(), timeout=600)
    view.tick({"stage": "compile (torch.compile, max-autotune): 42 s", "done": 0, "total": 0})
    info = view.bars.tasks[view.current].fields["info"]
    assert info.startswith("compile (torch.compile, max-autotune): 42 s, ") and "0/" not in info
    view.tick({"stage": "measure", "done": 3, "total": 10})
    assert view.bars.tasks[view.current].fields["info"].startswith("measure 3/10, ")
    view.tick({"stage": "warm-up", "done": 5, "total": 2})  # past its count of steps until its seconds are up
    assert view.bars.tasks[view.current].fields["info"].startswith("warm-up 2/2, ")
    assert _where({"stage": "compile (torch.compile): 7 s", "done": 0, "total": 0}) == " (in compile (torch.compile): 7 s)"
    assert _where({"stage": "measure", "done": 3, "total": 10}) == " (in measure, step 3 of 10)"
    assert _where({"stage": "measure", "done": 31, "total": 10}) == " (in measure, step 31)"


def test_inductor_cache_folder_is_dlbench_s_unless_the_user_chose_one(cache, monkeypatch, tmp_path):
    monkeypatch.setenv(compiling.INDUCTOR_ENV, os.path.join(tempfile.gettempdir(), "torchinductor_someone"))
    with compiling.caches() as folder:  # inductor's default, in the temporary folder: replaced
        assert folder == cache / "inductor" and os.environ[compiling.INDUCTOR_ENV] == str(folder)
        assert torch._inductor.config.fx_graph_cache
    assert os.environ[compiling.INDUCTOR_ENV].endswith("torchinductor_someone")
    monkeypatch.setenv(compiling.INDUCTOR_ENV, str(tmp_path / "mine"))
    with compiling.caches() as folder:
        assert folder == tmp_path / "mine"


def test_cache_folder_falls_back_when_it_cannot_be_written(monkeypatch, tmp_path):
    locked = tmp_path / "cache" / "compile-logs"
    locked.mkdir(parents=True)
    locked.chmod(0o555)  # a folder nobody may write, which root too is kept out of (paths.read_only_reason)
    try:
        monkeypatch.setenv("DLBENCH_CACHE", str(locked.parent))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        folder = cache_folder("compile-logs")
        assert folder.is_dir() and folder.parent.parent == tmp_path / "tmp" and folder.name == "compile-logs"
    finally:
        locked.chmod(0o755)


@pytest.mark.slow
def test_compile_log_and_warm_cache_across_processes(tmp_path, cache):
    """The real thing: inductor compiles a tiny model in `dlbench run`, twice in new processes. Its
    generated code (TORCH_LOGS=output_code) lands in the log, never on the terminal, and the second
    compile finds the first one's cache."""
    env = {"DLBENCH_PLUGINS": "dlbench_testmodels", "TORCH_LOGS": "output_code", optimize.BACKEND_ENV: "",
           "PYTHONPATH": os.pathsep.join(filter(None, [PLUGINS, os.environ.get("PYTHONPATH")]))}
    runs = []
    for _ in range(2):
        proc = cli("run", "fwdbwd", "--model", "tiny-model", "--device", "cpu", "--batch", "2", "--steps", "2",
                   "--warmup", "1", "--optimize", "compile", "--db", tmp_path / "r.db", env=env, timeout=240)
        assert proc.returncode == 0, proc.stderr
        assert "Output code" not in proc.stdout + proc.stderr and "def call(" not in proc.stdout + proc.stderr
        runs.append(proc)
    with Store(tmp_path / "r.db") as store:
        cold, warm = sorted(store.results(workload="fwdbwd"), key=lambda r: r.started)
    for result, proc in ((cold, runs[0]), (warm, runs[1])):
        log = Path(result.metrics["compile_log"])
        assert log.parent == cache / "compile-logs" and "Output code" in log.read_text()
        assert str(log) in proc.stdout  # the result line says where the compiler's output went
        assert result.metrics["compile_cache"]["dir"] == str(cache / "inductor")
    assert cold.metrics["compile_cache"]["warm"] is False and warm.metrics["compile_cache"]["warm"] is True
    assert warm.metrics["compile_s"] < cold.metrics["compile_s"]
