"""Run a suite on a SLURM cluster through submitit: one job per spec.

Compute nodes never touch the SQLite store (SQLite over NFS is unsafe): each job runs its
spec isolated on its node and writes one record file (JSON lines) into `<folder>/records`
on the shared file system. The submitting process merges them into the store as they
appear; if it is gone, `dlbench import <folder>` does the same later.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dlbench.errors import UserError
from dlbench.launch.environment import prepare
from dlbench.models import registry
from dlbench.results import exchange
from dlbench.results.record import Result, now
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.records import carried_ceiling
from dlbench.units import suggest

# --slurm keys: how each is checked and which submitit parameter it sets.
KEYS = {
    "partition": (str, "slurm_partition"),
    "gpus": (int, "gpus_per_node"),
    "time": (str, "timeout_min"),
    "cpus": (int, "cpus_per_task"),
    "mem": (str, "slurm_mem"),
    "account": (str, "slurm_account"),
    "qos": (str, "slurm_qos"),
    "constraint": (str, "slurm_constraint"),
    "cluster": (str, None),
}
MARGIN_MIN = 10  # a job's time limit beyond the spec's own timeout: start-up and merging


@dataclass
class Submitted:
    index: int
    spec: BenchmarkSpec
    job: Any  # a submitit Job


def parse_options(text: str) -> dict[str, Any]:
    """'partition=gpu,gpus=4,time=60' -> {'partition': 'gpu', 'gpus': 4, 'time': 60.0} (time in minutes)."""
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise UserError(f"--slurm: {item!r} is not key=value (e.g. partition=gpu,gpus=4,time=60)")
        if key not in KEYS:
            raise UserError(f"--slurm: unknown key {key!r}{suggest(key, list(KEYS))}; known: {', '.join(KEYS)}")
        options[key] = _convert(key, value)
    if options.get("cluster", "slurm") not in ("slurm", "local"):
        raise UserError(f"--slurm: cluster must be slurm or local (local runs the jobs on this machine), got {options['cluster']!r}")
    return options


def _convert(key: str, value: str) -> Any:
    if key == "time":
        return parse_minutes(value)
    if KEYS[key][0] is int:
        if not value.isdigit() or int(value) < 1:
            raise UserError(f"--slurm: {key} must be a positive integer, got {value!r}")
        return int(value)
    return value


def parse_minutes(value: str) -> float:
    """SLURM's time formats: MIN, MIN:SEC, H:MIN:SEC, D-H[:MIN[:SEC]]."""
    try:
        days, _, clock = value.rpartition("-")
        parts = [float(p) for p in clock.split(":")]
        if len(parts) == 1:
            minutes = parts[0] * (60 if days else 1)
        elif len(parts) == 2:
            minutes = parts[0] * 60 + parts[1] if days else parts[0] + parts[1] / 60
        else:
            minutes = parts[0] * 60 + parts[1] + parts[2] / 60
        minutes += float(days or 0) * 24 * 60
    except ValueError:
        raise UserError(f"--slurm: bad time {value!r}: use minutes or [D-]HH:MM:SS") from None
    if minutes <= 0:
        raise UserError(f"--slurm: time must be positive, got {value!r}")
    return minutes


def check(options: dict[str, Any]) -> None:
    """SLURM must be here (unless cluster=local), and submitit installed."""
    if options.get("cluster", "slurm") == "slurm" and shutil.which("sbatch") is None:
        raise UserError("--slurm needs SLURM, but sbatch is not on PATH here (run on a login node, "
                        "or add cluster=local to try the jobs on this machine)")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise UserError("--slurm needs submitit, which is not installed (pip install submitit)") from None


def executor(options: dict[str, Any], folder: Path):
    """A submitit executor for the options."""
    check(options)
    import submitit

    return submitit.AutoExecutor(folder=folder / "logs", cluster=options.get("cluster", "slurm"))


def parameters(options: dict[str, Any], spec: BenchmarkSpec, timeout: float) -> dict[str, Any]:
    """submitit parameters for one spec's job."""
    gpus = options.get("gpus", spec.gpus)
    if spec.gpus > gpus:
        raise UserError(f"--slurm: {spec.label()} needs {spec.gpus} GPUs but jobs get gpus={gpus}")
    params: dict[str, Any] = {"name": f"dlbench-{spec.workload}-{spec.model}", "nodes": 1, "tasks_per_node": 1,
                              "timeout_min": options.get("time") or math.ceil(timeout / 60) + MARGIN_MIN}
    if not spec.device.startswith("cpu"):
        params["gpus_per_node"] = gpus
    for key, (_, name) in KEYS.items():
        if name and key in options and key not in ("gpus", "time"):
            params[name] = options[key]
    if options.get("cluster") == "local":  # the local executor knows only the generic parameters
        params = {k: v for k, v in params.items() if not k.startswith("slurm_")}
    params["timeout_min"] = int(math.ceil(params["timeout_min"]))
    return params


def submit(specs: list[BenchmarkSpec], options: dict[str, Any], folder: Path, *, suite: str, run: str,
           tag: str | None, timeout: Callable[[BenchmarkSpec], float]) -> list[Submitted]:
    """One job per spec; every job writes its record into `folder/records`."""
    records = records_dir(folder)
    records.mkdir(parents=True, exist_ok=True)
    ex = executor(options, folder)
    submitted = []
    for index, spec in enumerate(specs):
        ex.update_parameters(**parameters(options, spec, timeout(spec)))
        job = {"index": index, "spec": spec.to_dict(), "suite": suite, "run": run, "tag": tag,
               "timeout": timeout(spec), "plugins": os.environ.get("DLBENCH_PLUGINS", "")}
        submitted.append(Submitted(index, spec, ex.submit(run_job, job, str(records))))
    (folder / "jobs.json").write_text(json.dumps(
        [{"index": s.index, "job_id": s.job.job_id, "spec": s.spec.to_dict()} for s in submitted], indent=1),
        encoding="utf-8")
    return submitted


def records_dir(folder: Path) -> Path:
    return folder / "records"


def run_job(job: dict[str, Any], records: str) -> str:
    """On the compute node: run one spec isolated, write its record file, return the file's path."""
    from dlbench import plugins
    from dlbench.launch import isolated
    from dlbench.system.info import launcher_fingerprint

    prepare()
    plugins.load(job.get("plugins") or None)
    spec = BenchmarkSpec.from_dict(job["spec"])
    # Which node a job lands on is not known when it is submitted: its worker measures the matmul
    # ceiling it needs for FLOP utilisation (a second or two) and the record file carries it.
    result = isolated.run(spec, launcher_fingerprint(), isolated.Job(job["suite"], job["run"], job["tag"]),
                          timeout=job["timeout"], ceilings=[])
    return str(write_record(result, Path(records), job["index"]))


def write_record(result: Result, records: Path, index: int) -> Path:
    path = records / f"{index:04d}-{result.id}.jsonl"
    tmp = records / f".{path.name}.tmp"  # not *.jsonl: `dlbench import DIR` never reads half a file
    with open(tmp, "w", encoding="utf-8") as f:
        exchange.write_jsonl([r for r in (carried_ceiling(result), result) if r is not None], f)
    os.replace(tmp, path)
    return path


def merge(folder: Path, store: Store) -> int:
    """Import every record file in `folder/records` not yet in the store; returns how many were new."""
    files = sorted(records_dir(folder).glob("*.jsonl"))
    return store.add_many([r for path in files for r in exchange.read_jsonl(path, strict=False)]) if files else 0


def wait(submitted: list[Submitted], folder: Path, store: Store, *, suite: str, run: str, tag: str | None,
         on_result: Callable[[Result], None], poll_s: float = 5.0) -> list[Result]:
    """Merge records as jobs end; a job that ended without one is stored as an error (or timeout)."""
    pending = {s.index: s for s in submitted}
    seen: set[str] = set()
    results: list[Result] = []
    while pending:
        time.sleep(poll_s)
        merge(folder, store)
        for index, item in list(pending.items()):
            if not item.job.done():
                continue
            result = _job_result(item, folder)
            if result.run is None:
                result.suite, result.run, result.tag = suite, run, tag
            if result.id not in seen:
                store.add(result)
                seen.add(result.id)
                results.append(result)
                on_result(result)
            del pending[index]
    return results


def _job_result(item: Submitted, folder: Path) -> Result:
    for path in sorted(records_dir(folder).glob(f"{item.index:04d}-*.jsonl")):
        return exchange.read_jsonl(path, strict=False)[-1]  # a ceiling the job measured comes first
    state = str(getattr(item.job, "state", "UNKNOWN"))
    try:
        item.job.result()
        reason = "the job ended without a record file"
    except Exception as error:  # noqa: BLE001 - whatever ended the job is what the user needs to read
        reason = f"{type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}"
    status = "timeout" if state.startswith("TIMEOUT") else "interrupted" if state.startswith(("PREEMPTED", "CANCELLED")) else "error"
    return Result(spec=item.spec.to_dict(), system={}, status=status, title=registry.title(item.spec.model),
                  finished=now(), error=f"SLURM job {item.job.job_id} ({state}): {reason}"[:2000],
                  traces={"slurm": {"job_id": item.job.job_id, "state": state, "folder": str(folder)}})
