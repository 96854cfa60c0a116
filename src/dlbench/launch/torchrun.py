"""Run a spec with one process per GPU: started by dlbench on one host (launch/ranks.py), through
torchrun (torch.distributed.run) across nodes."""

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
from typing import Iterator

from dlbench import scratch
from dlbench.errors import UserError
from dlbench.launch.worker import write_json
from dlbench.models import registry
from dlbench.results.record import Result, now
from dlbench.spec import BenchmarkSpec
from dlbench.workloads.tuning import Tuned


def command(spec_file: Path, result_file: Path, nprocs: int, rendezvous: list[str] | None = None) -> list[str]:
    """The command that runs `nprocs` ranks of the worker: on one host dlbench's own start of them
    (launch/ranks.py); with `rendezvous` (e.g. --nnodes/--rdzv-endpoint), torchrun across nodes."""
    worker = ["-m", "dlbench.launch.worker", str(spec_file), str(result_file)]
    if rendezvous is None:
        return [sys.executable, "-m", "dlbench.launch.ranks", str(nprocs), *worker]
    return [sys.executable, "-m", "torch.distributed.run", *rendezvous, f"--nproc-per-node={nprocs}", *worker]


def job_ceilings(ceilings: list[Result] | None) -> dict:
    """The part of a worker's job file that asks it for FLOP utilisation against these system records."""
    return {} if ceilings is None else {"ceilings": [r.to_dict() for r in ceilings]}


def run(spec: BenchmarkSpec, system: dict, *, suite: str | None = None, tag: str | None = None,
        timeout: float | None = None, ceilings: list[Result] | None = None, progress=None,
        tuned: Tuned | None = None, flops: int | None = None) -> Result:
    """Launch `spec.gpus` processes and return rank 0's result (an error result if none came back).
    With `ceilings` (system records of this host), rank 0 adds FLOP utilisation to its result.
    `progress(stage, done, total)` hears rank 0's progress while the processes start and run.
    `tuned` (an earlier run's tuning, launch/tuning.py) and `flops` (a step's count remembered for
    this work, launch/flopcount.py: no rank counts) go to every rank in the job file."""
    with started(spec) as ranks:
        return ranks.run(system, suite=suite, tag=tag, timeout=timeout, ceilings=ceilings, progress=progress,
                         tuned=tuned, flops=flops)


@contextlib.contextmanager
def started(spec: BenchmarkSpec) -> Iterator["Ranks"]:
    """`spec.gpus` ranks started now, to run when `run` is called: until then they import torch and
    start CUDA and the process group (workloads/early.py), and wait. The launcher's own checks,
    which import torch too and read the input, run meanwhile; leaving the block (a check that
    failed, a stop) kills every rank that is left, and nothing ran."""
    with scratch.folder("torchrun") as folder:
        ranks = Ranks(spec, folder)
        try:
            yield ranks
        finally:
            ranks.kill()


class Ranks:
    """The ranks of one run: one process (launch/ranks.py, or torchrun) in a session of its own,
    its ranks inside, their output in `stderr.log`."""

    def __init__(self, spec: BenchmarkSpec, folder: Path) -> None:
        self.spec, self.folder = spec, folder
        self.files = {name: folder / name for name in ("spec.json", "go.json", "result.json", "progress.json",
                                                        "stderr.log")}
        write_json({"spec": spec.to_dict(), "go": str(self.files["go.json"]), "host_group": spec.declared.host_group},
                   self.files["spec.json"])
        env = {**os.environ, "DLBENCH_PROGRESS": str(self.files["progress.json"]), "PYTHONUNBUFFERED": "1"}
        self.log = open(self.files["stderr.log"], "wb")  # noqa: SIM115 - closed by kill()
        self.proc = subprocess.Popen(command(self.files["spec.json"], self.files["result.json"], spec.gpus),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, env=env,
                                     start_new_session=True)

    def run(self, system: dict, *, suite: str | None = None, tag: str | None = None, timeout: float | None = None,
            ceilings: list[Result] | None = None, progress=None, tuned: Tuned | None = None,
            flops: int | None = None) -> Result:
        """Let the ranks run (the rest of their job: suite, tag, tuning, ceilings, a remembered FLOP count);
        rank 0's result."""
        spec, result_file = self.spec, self.files["result.json"]
        write_json({"suite": suite, "tag": tag, "tuned": tuned.to_dict() if tuned else None, "flops": flops,
                    **job_ceilings(ceilings)}, self.files["go.json"])
        output = _supervised(self, timeout or spec.timeout, progress)
        if result_file.exists():
            return Result.from_dict(json.loads(result_file.read_text(encoding="utf-8")), strict=False)
        refused = re.search(r"^(?:\[\w+\]:)?error: (.+)$", output, re.MULTILINE)
        if refused:  # a worker refused the spec (bad dataset, ...): the same one line as in-process
            raise UserError(refused.group(1))
        return Result(spec=spec.to_dict(), system=system, status="error", title=registry.title(spec.model),
                      suite=suite, tag=tag, error=f"{spec.gpus} processes returned no result{_why(output)}",
                      traces={"stderr": output}, finished=now())

    def kill(self) -> None:
        """Every rank gone (the whole session: no rank runs on unseen), its output closed."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if not self.log.closed:
            self.log.close()


def _supervised(ranks: Ranks, timeout: float | None, progress) -> str:
    """Wait for the ranks, passing rank 0's progress on, until they end or `timeout` passes; then
    kill what is left. The end of their output."""
    started, told = time.monotonic(), None
    while ranks.proc.poll() is None:
        if timeout is not None and time.monotonic() - started > timeout:
            ranks.log.write(f"timed out after {timeout:.0f} s".encode())
            break
        if progress is not None:
            told = _tell(progress, ranks.files["progress.json"], told)
        time.sleep(0.05)
    ranks.kill()
    return ranks.files["stderr.log"].read_bytes()[-4000:].decode("utf-8", "replace")


def _why(output: str) -> str:
    """': rank 1 died from SIGSEGV; ...' where the ranks' starter said which rank failed."""
    said = re.findall(r"^rank \d+ (?:died from|exited with).*$", output, re.MULTILINE)
    return f": {said[-1]}" if said else ""


def _tell(progress, path: Path, told: dict | None) -> dict | None:
    """Rank 0's progress passed on when it changed (a repeated call would read as news); what was told."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return told
    if state != told and state.get("stage") != "start":
        progress(str(state.get("stage")), int(state.get("done", 0)), int(state.get("total", 0)))
    return state
