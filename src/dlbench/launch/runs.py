"""`dlbench run <workload>`: one spec, a list of batch sizes, a sweep or a batch search,
checked before anything runs and stored one result per batch run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dlbench import workloads
from dlbench.launch import batchsize
from dlbench.launch.inprocess import check_devices, run_specs
from dlbench.launch.view import Terminal
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec


def run_command(workload: str, values: dict[str, Any], *, db: Path | None, tag: str | None, view: Terminal,
                results_file: Path | None = None) -> int:
    """Run what a `dlbench run` command asks for; the exit status (1 when a run ended in error).
    With `results_file`, every result is also written there as one JSON object per line."""
    values = dict(values)
    plan: list[int] | str = [values.pop("batch")] if "batch" in values else [None]
    limit = values.pop("max_batch", batchsize.SWEEP_MAX)
    if workloads.get(workload).batch_plans and plan != [None]:
        plan = batchsize.parse(plan[0])
    spec = BenchmarkSpec.from_dict({"workload": workload, **values, "batch": 1 if isinstance(plan, str) else plan[0]})
    preflight(spec, view)
    with Store(db) as store, view.json_lines(results_file) as write:
        if plan == "auto":
            result = _search(spec, store, tag, limit, view)
            write(result)
            return 1 if result.status == "error" else 0
        failed = False
        for size in batchsize.sweep_sizes(limit) if plan == "sweep" else plan:
            result = _run(dataclasses.replace(spec, batch=size), store, tag, view)
            write(result)
            failed |= result.status == "error"
            if result.status == "oom" and plan == "sweep":
                break  # larger batches cannot fit either
    return 1 if failed else 0


def preflight(spec: BenchmarkSpec, view: Terminal) -> None:
    """Devices, files and data checked, warnings shown, before anything runs."""
    check_devices(spec)
    for warning in workloads.get(spec.workload).preflight(spec):
        view.warning(warning)


def _run(spec: BenchmarkSpec, store: Store, tag: str | None, view: Terminal, extra: dict | None = None) -> Result:
    result = run_specs([spec], store, tag=tag, console=view.err, extra_metrics=extra)[0]
    view.result(result, stdout=True)
    return result


def _search(spec: BenchmarkSpec, store: Store, tag: str | None, limit: int, view: Terminal) -> Result:
    """The largest batch that fits, by short unstored probes; then the stored run at that batch."""
    view.message(f"searching the largest batch for {spec.label()} (up to {limit})")
    found = batchsize.search(batchsize.probe_with(_unstored, spec), limit=limit)
    view.message(f"batch search: largest {found['largest']}, best throughput at {found['best_throughput_batch']} "
                 f"({len(found['tried'])} probes)")
    final = spec if found["largest"] is None else dataclasses.replace(spec, batch=found["largest"])
    return _run(final, store, tag, view, {"batch_search": found})


def _unstored(spec: BenchmarkSpec) -> Result:
    """Runs a spec without storing it (the probes of a batch search)."""
    from dlbench.launch import torchrun
    from dlbench.launch.execute import execute
    from dlbench.system.info import fingerprint

    if spec.gpus > 1:
        return torchrun.run(spec, fingerprint())
    return execute(spec, fingerprint())


def system_command(device: str, disk: Path | None, db: Path | None, keep: bool, view: Terminal) -> None:
    """Measure this machine's ceilings, show them beside the datasheet and (with `keep`) store them."""
    from dlbench.report.system import ceilings_table
    from dlbench.report.tables import markdown
    from dlbench.system.info import fingerprint
    from dlbench.system.survey import survey
    from dlbench.workloads.runtime import resolve_device

    target = resolve_device(device)
    store = Store(db) if keep else None  # a bad --db fails before minutes of measuring
    try:
        with view.err.status("measuring") as status:
            record = survey(fingerprint(), target, disk=disk,
                            progress=lambda stage, done, total: status.update(f"measuring {stage} ({done + 1}/{total})"))
        if store is not None:
            store.add(record)
    finally:
        if store is not None:
            store.close()
    view.text(markdown([ceilings_table(record)]))
