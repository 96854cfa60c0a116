"""`dlbench system`: this machine's ceilings measured (system/survey.py), shown beside the
datasheet and stored; or only its fingerprint."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from dlbench.errors import UserError
from dlbench.launch.view import Heartbeat, Terminal
from dlbench.options import Options, option
from dlbench.results.store import DB_HELP, Store, one_store
from dlbench.spec import check_device
from dlbench.suites.estimate import countdown


def _existing(path: str) -> None:
    if not Path(path).exists():
        raise UserError(f"--disk {path}: no such file or folder")


@dataclass(frozen=True, kw_only=True)
class SystemRequest(Options):
    """Measure this machine's ceilings (matmul TFLOP/s per precision, memory, host<->device,
    all-reduce, JPEG decode, disk) next to datasheet figures, and store them."""
    device: str = option("auto", "Device whose ceilings to measure: auto, cpu, cuda or cuda:N.", parse=check_device)
    disk: str | None = option(None, "Also measure the read bandwidth of this file or folder (e.g. your dataset).",
                              parse=_existing)
    db: str | None = option(None, DB_HELP, parse=one_store)
    store: bool = option(True, "Store the record (reports and doctor use it).")
    fingerprint_only: bool = option(False, "Only print the fingerprint as JSON; measure nothing.",
                                    flag="--fingerprint")


STARTING = "loading torch, then how long measuring this machine's ceilings will take"


def system_command(request: SystemRequest, view: Terminal) -> None:
    """Measure this machine's ceilings, show them beside the datasheet and (with --store) store them."""
    if request.fingerprint_only:
        from dlbench.system.info import fingerprint

        view.json(fingerprint())
        return
    with view.waiting(f"system: {STARTING}"):  # said before torch loads, then every 5 s until the estimate
        from dlbench.report.system import ceilings_table
        from dlbench.report.tables import markdown
        from dlbench.system.info import fingerprint
        from dlbench.system.survey import survey
        from dlbench.workloads.runtime import resolve_device

        target = resolve_device(request.device)
        disk = Path(request.disk) if request.disk else None
        store = Store(request.db) if request.store else None  # a bad --db fails before minutes of measuring
    try:
        expected = _announce(target, disk, store, view)
        with Heartbeat(view.err, always=True) as heartbeat:  # a ceiling can take seconds and say nothing
            heartbeat.clock = lambda: countdown(expected, time.monotonic() - heartbeat.started)

            def progress(stage: str, done: int, total: int) -> None:
                if done < total:  # the last call only says all is measured; the table says that
                    line = f"measuring {stage} ({done + 1}/{total})"
                    view.message(line)
                    heartbeat.said(line)

            record = survey(fingerprint(), target, disk=disk, progress=progress)
        not_stored = store.add_kept([record]) if store is not None else None
        if not_stored:  # measured: kept beside the store or printed, and the command ends as it would
            view.warning(not_stored)
    finally:
        if store is not None:
            store.close()
    view.text(markdown([ceilings_table(record)]))


def _announce(target, disk: Path | None, store: Store | None, view: Terminal) -> float:
    """Says how long the survey will take (survey.py `expected_seconds`), its matmuls at this host's
    stored fp32 or datasheet rate where there is one, else at a stand-in; returns the seconds."""
    import socket

    from dlbench.suites.estimate import format_seconds, known, rough_rate
    from dlbench.system.info import gpu_names
    from dlbench.system.records import SYSTEM_WORKLOAD
    from dlbench.system.survey import expected_seconds

    kind = "cuda" if target.type == "cuda" else "cpu"
    gpu = next(iter(gpu_names()), None) if kind == "cuda" else None
    ceilings = store.results(workload=SYSTEM_WORKLOAD) if store is not None else []  # not a large store's runs
    rates = known(ceilings, socket.gethostname(), gpu).rates
    rate = rates.get((kind, "fp32"))
    seconds = expected_seconds(target, disk, rate or rough_rate(kind))
    basis = "this machine's fp32 matmul rate" if rate else "a stand-in matmul rate, rough"
    view.done_waiting()
    view.message(f"system: measuring the ceilings of {target}: about {format_seconds(seconds)} (from each "
                 f"measurement's time budget, its matmuls at {basis})")
    return seconds
