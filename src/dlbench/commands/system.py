"""`dlbench system`: this machine's ceilings measured (system/survey.py), shown beside the
datasheet and stored; or only its fingerprint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlbench.errors import UserError
from dlbench.launch.view import Terminal
from dlbench.options import Options, option
from dlbench.results.store import DB_HELP, Store, one_store
from dlbench.spec import check_device


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


def system_command(request: SystemRequest, view: Terminal) -> None:
    """Measure this machine's ceilings, show them beside the datasheet and (with --store) store them."""
    from dlbench.report.system import ceilings_table
    from dlbench.report.tables import markdown
    from dlbench.system.info import fingerprint
    from dlbench.system.survey import survey
    from dlbench.workloads.runtime import resolve_device

    if request.fingerprint_only:
        view.json(fingerprint())
        return
    target = resolve_device(request.device)
    disk = Path(request.disk) if request.disk else None
    store = Store(request.db) if request.store else None  # a bad --db fails before minutes of measuring
    try:
        with view.status("measuring") as status:
            def progress(stage: str, done: int, total: int) -> None:
                if done < total:  # the last call only says all is measured; the table says that
                    status(f"measuring {stage} ({done + 1}/{total})")

            record = survey(fingerprint(), target, disk=disk, progress=progress)
        not_stored = store.add_kept([record]) if store is not None else None
        if not_stored:  # measured: kept beside the store or printed, and the command ends as it would
            view.warning(not_stored)
    finally:
        if store is not None:
            store.close()
    view.text(markdown([ceilings_table(record)]))
