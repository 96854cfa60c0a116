"""Run a spec with one process per GPU through torchrun (torch.distributed.run)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlbench import scratch
from dlbench.errors import UserError
from dlbench.models import registry
from dlbench.results.record import Result, now
from dlbench.spec import BenchmarkSpec
from dlbench.workloads.tuning import Tuned


def command(spec_file: Path, result_file: Path, nprocs: int, rendezvous: list[str] | None = None) -> list[str]:
    """The torchrun command line; `rendezvous` (e.g. --nnodes/--rdzv-endpoint) spans several nodes."""
    where = rendezvous or ["--standalone", "--nnodes=1"]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nprocs}",
            "-m", "dlbench.launch.worker", str(spec_file), str(result_file)]


def job_ceilings(ceilings: list[Result] | None) -> dict:
    """The part of a worker's job file that asks it for FLOP utilisation against these system records."""
    return {} if ceilings is None else {"ceilings": [r.to_dict() for r in ceilings]}


def run(spec: BenchmarkSpec, system: dict, *, suite: str | None = None, tag: str | None = None,
        timeout: float | None = None, ceilings: list[Result] | None = None, progress=None,
        tuned: Tuned | None = None) -> Result:
    """Launch `spec.gpus` processes and return rank 0's result (an error result if none came back).
    With `ceilings` (system records of this host), rank 0 adds FLOP utilisation to its result.
    `progress(stage, done, total)` hears rank 0's progress while the processes start and run.
    `tuned` (an earlier run's tuning, launch/tuning.py) goes to every rank in the job file."""
    with scratch.folder("torchrun") as tmp:
        spec_file, result_file = tmp / "spec.json", tmp / "result.json"
        spec_file.write_text(json.dumps({"spec": spec.to_dict(), "suite": suite, "tag": tag,
                                         "tuned": tuned.to_dict() if tuned else None, **job_ceilings(ceilings)}),
                             encoding="utf-8")
        output = _supervised(command(spec_file, result_file, spec.gpus), tmp, timeout or spec.timeout, progress)
        if result_file.exists():
            return Result.from_dict(json.loads(result_file.read_text(encoding="utf-8")), strict=False)
    refused = re.search(r"^(?:\[\w+\]:)?error: (.+)$", output, re.MULTILINE)
    if refused:  # a worker refused the spec (bad dataset, ...): the same one line as in-process
        raise UserError(refused.group(1))
    return Result(spec=spec.to_dict(), system=system, status="error", title=registry.title(spec.model),
                  suite=suite, tag=tag, error=f"torchrun with {spec.gpus} processes returned no result",
                  traces={"stderr": output}, finished=now())


def _supervised(cmd: list[str], folder: Path, timeout: float | None, progress) -> str:
    """Run torchrun in a session of its own, passing rank 0's progress on; the end of its stderr.
    However this ends (a stop, a timeout), the whole session is killed: no rank runs on unseen."""
    progress_file, log_file = folder / "progress.json", folder / "stderr.log"
    env = {**os.environ, "DLBENCH_PROGRESS": str(progress_file), "PYTHONUNBUFFERED": "1"}
    started, told = time.monotonic(), None
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
                                start_new_session=True)
        try:
            while proc.poll() is None:
                if timeout is not None and time.monotonic() - started > timeout:
                    log.write(f"timed out after {timeout:.0f} s".encode())
                    break
                if progress is not None:
                    told = _tell(progress, progress_file, told)
                time.sleep(0.2)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return log_file.read_bytes()[-4000:].decode("utf-8", "replace")


def _tell(progress, path: Path, told: dict | None) -> dict | None:
    """Rank 0's progress passed on when it changed (a repeated call would read as news); what was told."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return told
    if state != told and state.get("stage") != "start":
        progress(str(state.get("stage")), int(state.get("done", 0)), int(state.get("total", 0)))
    return state
