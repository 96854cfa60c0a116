"""Run one spec in its own process and always come back with a Result.

The child is `python -m dlbench.launch.worker` (or torchrun running it, for gpus > 1) in
a session of its own, so a terminal's Ctrl-C reaches only the parent, which decides.
Whatever the child does (segfault, abort, CUDA error, OOM, hang, killed by the kernel)
ends as a record: the worker's own result when it wrote one, else `error`, `timeout` or
`interrupted` with the end of the child's output.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from dlbench import scratch
from dlbench.launch import forkserver, placement, torchrun
from dlbench.launch.interrupts import Interrupts
from dlbench.launch.worker import GO_WAIT, write_json
from dlbench.models import registry
from dlbench.results.measurement import Window
from dlbench.results.record import Result, now
from dlbench.spec import BenchmarkSpec

POLL_S = 0.1
STOP_GRACE_S = 2.5  # after SIGTERM, before SIGKILL: a stop must answer within a second or two
EXIT_GRACE_S = 30.0  # a child that wrote its result but does not exit (stuck in teardown) is killed then
OUTPUT_TAIL = 8000

Tick = Callable[[dict | None], None]  # called every poll with the child's latest progress


@dataclass
class Job:
    """Where a result belongs: suite name, suite-run id and tag are stored with it."""
    suite: str | None = None
    run: str | None = None
    tag: str | None = None


_server: forkserver.Server | None = None  # while `preloaded`


@contextlib.contextmanager
def preloaded(wanted: bool = True) -> Iterator[None]:
    """Single-process runs started in this block are forked from one process that imported torch and
    the workloads once (launch/forkserver.py), not started as fresh interpreters; nested blocks share
    it. `wanted`: whether any run of the block is a single process (else none is started)."""
    global _server
    if _server is not None or not wanted or not forkserver.enabled():
        yield
        return
    with scratch.folder("forkserver") as folder, forkserver.serving(_env(), folder / "server.log") as server:
        _server = server
        try:
            yield
        finally:
            _server = None


class Worker:
    """The process of one isolated run, with its files. It starts before its run is asked for
    (`started`): it imports torch and the workload (or is forked with them imported, `preloaded`),
    then waits for its go file, which holds the rest of its job (suite, tag, a remembered FLOP
    count, ceilings)."""

    def __init__(self, spec: BenchmarkSpec, folder: Path) -> None:
        self.spec = spec
        self.files = {name: folder / name for name in ("spec.json", "go.json", "result.json", "progress.json",
                                                        "output.log")}
        write_json({"spec": spec.to_dict(), "go": str(self.files["go.json"])}, self.files["spec.json"])
        self.epoch = time.time()
        self.log = open(self.files["output.log"], "wb")  # noqa: SIM115 - closed by stop()
        env = _env(self.files["progress.json"])
        place = placement.of(spec)
        if _server is not None and _server.alive() and not place.ranks:
            self.proc: subprocess.Popen | forkserver.Forked = _server.fork(
                [str(self.files["spec.json"]), str(self.files["result.json"])], env, folder, self.files["output.log"])
        else:
            self.proc = _start(place.command(self.files["spec.json"], self.files["result.json"]), self.log, env)

    def fits(self, spec: BenchmarkSpec) -> bool:
        """Whether this worker can run `spec`: started for the same spec and still waiting."""
        return self.proc.poll() is None and self.spec.to_dict() == spec.to_dict()

    def stop(self) -> None:
        """The process gone, and what it left behind in its session too (once: its group's id is free after)."""
        if self.log.closed:
            return
        _kill(self.proc, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def started(spec: BenchmarkSpec) -> Iterator[Worker]:
    """`spec`'s worker started now, for `run(..., ahead=)` to let go; leaving the block (a check that
    failed, a stop, the run's end) kills it and removes its files, so a worker that never got its go
    ran nothing and left nothing."""
    with scratch.folder("run") as folder:
        worker = Worker(spec, folder)
        try:
            yield worker
        finally:
            worker.stop()


def run(spec: BenchmarkSpec, system: dict, job: Job, *, timeout: float | None,
        interrupts: Interrupts | None = None, tick: Tick | None = None, ceilings: list[Result] | None = None,
        flops: int | None = None, ahead: Worker | None = None) -> Result:
    """Run `spec` in a child process; a second interrupt raises KeyboardInterrupt after killing it.
    `flops`: a step's count remembered for this work (launch/flopcount.py): the child counts nothing.
    With `ceilings` (system records of this host) the child adds FLOP utilisation to its result, and
    a ceiling it had to measure rides in the result's traces (`records.carried_ceiling`). `ahead`: a
    worker `started` for `spec` before, which runs it (one started for another spec is stopped)."""
    interrupts = interrupts or Interrupts()
    with _worker(spec, ahead) as worker:
        files = worker.files
        write_json({"suite": job.suite, "tag": job.tag, "run": job.run, "flops": flops,
                    **torchrun.job_ceilings(ceilings)}, files["go.json"])
        began = now()
        try:
            reason, progress = _supervise(worker.proc, files, timeout, interrupts, tick)
        finally:
            worker.stop()
        result = _outcome(spec, system, worker.proc.returncode, reason, progress, files, timeout)
        waited = float(result.traces.pop(GO_WAIT, 0.0) or 0.0)
        if files["result.json"].exists():
            # what `dlbench run` of this spec makes a user wait: from its process's start to the result,
            # less the time a worker started ahead sat waiting for its go
            written = files["result.json"].stat().st_mtime
            result.add(Window(wall_to_result_s=round(max(0.0, written - worker.epoch - waited), 2)))
        else:
            result.started = began
    result.suite, result.run, result.tag = job.suite, job.run, job.tag
    result.traces["launch"] = {"mode": placement.of(spec).mode(isolated=True),
                               **({"forked": True} if isinstance(worker.proc, forkserver.Forked) else {}),
                               # from its process's start, as a run started when asked for takes
                               "wall_s": round(time.time() - worker.epoch - waited, 3),
                               "returncode": worker.proc.returncode,
                               **({"started_ahead_s": round(waited, 3)} if waited >= 0.1 else {})}
    return result


def _worker(spec: BenchmarkSpec, ahead: Worker | None) -> contextlib.AbstractContextManager[Worker]:
    if ahead is not None and ahead.fits(spec):
        return contextlib.nullcontext(ahead)  # its owner's `started` block removes its files
    if ahead is not None:
        ahead.stop()
    return started(spec)


def _env(progress_file: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    if progress_file is not None:
        env["DLBENCH_PROGRESS"] = str(progress_file)
    return env


def _start(cmd: list[str], log, env: dict[str, str]) -> subprocess.Popen:
    with _no_core_files():
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


@contextlib.contextmanager
def _no_core_files() -> Iterator[None]:
    # A crashing CUDA process can dump gigabytes of core into the working directory; the
    # child inherits the limit at fork, so it is lowered only around the start.
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def _supervise(proc: subprocess.Popen | forkserver.Forked, files: dict[str, Path], timeout: float | None,
               interrupts: Interrupts, tick: Tick | None) -> tuple[str | None, dict | None]:
    """Wait for the child; returns why it was stopped (None, 'timeout', 'interrupted') and its last progress."""
    start = time.monotonic()
    reason: str | None = None
    kill_at: float | None = None
    progress = None
    while proc.poll() is None:
        clock = time.monotonic()
        progress = _read_json(files["progress.json"]) or progress
        if tick:
            tick(progress)
        if reason in (None, "finished") and interrupts.count:
            reason, kill_at = "interrupted", clock + (STOP_GRACE_S if reason is None else 0.0)
            _kill(proc, signal.SIGTERM)
        elif reason is None and timeout is not None and clock - start > timeout:
            reason, kill_at = "timeout", clock + STOP_GRACE_S
            _kill(proc, signal.SIGTERM)
        elif reason is None and files["result.json"].exists():
            reason, kill_at = "finished", clock + EXIT_GRACE_S
        if kill_at is not None and clock > kill_at:
            _kill(proc, signal.SIGKILL)
        time.sleep(POLL_S)
    return (None if reason == "finished" else reason), progress


def _kill(proc: subprocess.Popen | forkserver.Forked, sig: signal.Signals) -> None:
    if isinstance(proc, forkserver.Forked):
        proc.kill(sig)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _outcome(spec: BenchmarkSpec, system: dict, returncode: int, reason: str | None, progress: dict | None,
             files: dict[str, Path], timeout: float | None) -> Result:
    stored = _read_json(files["result.json"])
    if stored is not None:
        with contextlib.suppress(ValueError, TypeError):
            return Result.from_dict(stored)
    output = _tail(files["output.log"])
    result = Result(spec=spec.to_dict(), system=system, status="error", title=registry.title(spec.model),
                    finished=now(), traces={"output": output})
    where = _where(progress)
    if reason == "timeout":
        result.status, result.error = "timeout", f"no result after {timeout:g} s{where}; stopped"
        result.add(Window(timeout_s=timeout))
    elif reason == "interrupted":
        result.status, result.error = "interrupted", f"stopped by the user{where}"
    else:
        result.error = _death(returncode, output) + where
    return result


def _where(progress: dict | None) -> str:
    if not progress or progress.get("stage") == "start":
        return " (while starting)"
    if not progress.get("total"):  # a phase of unknown length (a compile)
        return f" (in {progress.get('stage')})"
    done, total = int(progress.get("done") or 0), int(progress["total"])
    # a warm-up or measurement goes on past its count of steps until its seconds are up
    return f" (in {progress.get('stage')}, step {done}" + (f" of {total})" if done <= total else ")")


def _death(returncode: int, output: str) -> str:
    """Why a child ended without a result, in one line."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else f"signal {-returncode}"
        hint = " (the kernel's out-of-memory killer does this)" if -returncode == signal.SIGKILL else ""
        return f"benchmark process died from {name}{hint}"
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    if errors:
        return errors[-1].removeprefix("error: ")
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
    return f"benchmark process exited with status {returncode} and no result" + (f": {last[:300]}" if last else "")


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - OUTPUT_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
