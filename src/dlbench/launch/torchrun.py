"""Run a spec with one process per GPU through torchrun (torch.distributed.run)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from dlbench import scratch
from dlbench.errors import UserError
from dlbench.models import registry
from dlbench.results.record import Result, now
from dlbench.spec import BenchmarkSpec


def command(spec_file: Path, result_file: Path, nprocs: int, rendezvous: list[str] | None = None) -> list[str]:
    """The torchrun command line; `rendezvous` (e.g. --nnodes/--rdzv-endpoint) spans several nodes."""
    where = rendezvous or ["--standalone", "--nnodes=1"]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nprocs}",
            "-m", "dlbench.launch.worker", str(spec_file), str(result_file)]


def job_ceilings(ceilings: list[Result] | None) -> dict:
    """The part of a worker's job file that asks it for FLOP utilisation against these system records."""
    return {} if ceilings is None else {"ceilings": [r.to_dict() for r in ceilings]}


def run(spec: BenchmarkSpec, system: dict, *, suite: str | None = None, tag: str | None = None,
        timeout: float | None = None, ceilings: list[Result] | None = None) -> Result:
    """Launch `spec.gpus` processes and return rank 0's result (an error result if none came back).
    With `ceilings` (system records of this host), rank 0 adds FLOP utilisation to its result."""
    with scratch.folder("torchrun") as tmp:
        spec_file, result_file = tmp / "spec.json", tmp / "result.json"
        spec_file.write_text(json.dumps({"spec": spec.to_dict(), "suite": suite, "tag": tag,
                                         **job_ceilings(ceilings)}), encoding="utf-8")
        try:
            proc = subprocess.run(command(spec_file, result_file, spec.gpus), capture_output=True, text=True,
                                  timeout=timeout or spec.timeout)
            output = proc.stderr[-4000:]
        except subprocess.TimeoutExpired as expired:
            output = f"timed out after {expired.timeout:.0f} s"
        if result_file.exists():
            return Result.from_dict(json.loads(result_file.read_text(encoding="utf-8")), strict=False)
    refused = re.search(r"^(?:\[\w+\]:)?error: (.+)$", output, re.MULTILINE)
    if refused:  # a worker refused the spec (bad dataset, ...): the same one line as in-process
        raise UserError(refused.group(1))
    return Result(spec=spec.to_dict(), system=system, status="error", title=registry.title(spec.model),
                  suite=suite, tag=tag, error=f"torchrun with {spec.gpus} processes returned no result",
                  traces={"stderr": output}, finished=now())
