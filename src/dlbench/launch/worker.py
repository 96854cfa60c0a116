"""A process that runs one spec: `python -m dlbench.launch.worker SPEC.json RESULT.json`.

Used for isolated runs and once per rank (launch/ranks.py, or torchrun across nodes). A job
with `go` names a file that holds the rest of it: the rank starts (imports, CUDA, the process
group) and waits for that file before it runs anything. Only rank 0 writes the result,
atomically (a temporary file renamed into place), so a reader never sees half a record.
When $DLBENCH_PROGRESS names a file, rank 0 keeps the latest progress there (JSON:
stage, done, total), written at most a few times a second so the steps are not slowed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from dlbench.launch.environment import prepare
from dlbench.results.record import Result


def write_result(result: Result, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_dict()), encoding="utf-8")
    os.replace(tmp, path)


class ProgressFile:
    """The `progress` callback of a workload, kept in a file the parent process polls."""

    def __init__(self, path: Path, interval: float = 0.25) -> None:
        self.path, self.interval, self.last = path, interval, 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        clock = time.monotonic()
        if clock - self.last >= self.interval or done >= total:
            self.last = clock
            write_json({"stage": stage, "done": done, "total": total}, self.path)


def write_json(data: object, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _progress():
    path = os.environ.get("DLBENCH_PROGRESS")
    if not path or int(os.environ.get("RANK", "0")) != 0:
        return None
    return ProgressFile(Path(path))


GO_WAIT = "go_wait_s"  # the trace of how long a started rank waited for its go file


def _go(path: Path) -> dict:
    """The rest of the job (suite, tag, tuning, ceilings), once the launcher's checks have passed: it
    started this rank before them (launch/torchrun.py `started`), and stops it if one fails."""
    while not path.exists():
        if not path.parent.is_dir():  # its run was stopped and its files removed: no go will come
            sys.exit(1)
        time.sleep(0.005)
    return json.loads(path.read_text(encoding="utf-8"))


def _die_with_parent() -> None:
    """Stop when the process that started this one dies. A parent killed with SIGKILL cannot
    stop its worker, which would otherwise run its benchmark on, unseen, holding the GPU."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    prepare()
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    job = json.loads(spec_path.read_text(encoding="utf-8"))
    from dlbench.workloads import early

    # CUDA and the process group, beside what follows
    early.start(str(job["spec"].get("device") or "auto"), bool(job.get("host_group")))
    from dlbench import plugins
    from dlbench.errors import UserError
    from dlbench.spec import BenchmarkSpec
    from dlbench.system.info import fingerprint
    from dlbench.launch.execute import execute
    from dlbench.measure.loop import _no_progress
    from dlbench.workloads.tuning import Tuned

    progress = _progress()
    try:
        plugins.load()
        spec = BenchmarkSpec.from_dict(job["spec"])
        system = fingerprint()
        waited = 0.0
        if job.get("go"):
            ready = time.monotonic()
            job.update(_go(Path(job["go"])))
            waited = time.monotonic() - ready
        tuned = Tuned.from_dict(job.get("tuned"))
        if progress:
            progress("start", 0, 1)
        result = execute(spec, system, progress=progress or _no_progress, suite=job.get("suite"), tag=job.get("tag"),
                         tuned=tuned, flops=job.get("flops"))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result.run = job.get("run")
    if waited:  # idle, not part of the run: its launcher leaves it out of the wall time to the result
        result.traces[GO_WAIT] = round(waited, 3)
    if int(os.environ.get("RANK", "0")) == 0:
        if job.get("ceilings") is not None:
            _utilisation(result, job["ceilings"])
        write_result(result, result_path)
    return 0


def _utilisation(result, ceilings: list[dict]) -> None:
    """FLOP utilisation here, where the run was measured (a missing ceiling is measured on this GPU);
    a ceiling measured for it rides in the result for the launcher to store."""
    from dlbench.launch.execute import with_utilisation
    from dlbench.results.record import Result

    with_utilisation(result, [Result.from_dict(c, strict=False) for c in ceilings], carry=True)


if __name__ == "__main__":
    from dlbench.launch.leave import leave
    from dlbench.launch.ranks import said_done

    leave(main(sys.argv[1:]), said_done)
