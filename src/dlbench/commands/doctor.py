"""`dlbench doctor`: how each stored result compares with what it should do, and why it falls
short (report/doctor.py judges; this reads the store, read-only, and shows the diagnoses)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dlbench.launch.view import Terminal
from dlbench.options import Options, option
from dlbench.results.store import DB_HELP, Store, one_store


@dataclass(frozen=True, kw_only=True)
class DoctorRequest(Options):
    """Say how each result compares with what it should do and why it falls short. A run is judged
    against the machine's own history first (the fastest other run of the same configuration on
    the same machine, with a bootstrap interval; on several GPUs also against one GPU), else
    against published figures. Causes are measured parts of the step, largest first: another
    process on the GPU, the input pipeline (CPU contention, too few workers, slow storage, CPU
    decoding), host gaps, lower clocks, a degraded all-reduce path; a loss they do not explain is
    said as unexplained with what differed. By default the newest result of each configuration and
    every older one that differs from it beyond noise are judged."""
    runs: list[str] | None = option(None, "Results to judge: run id prefixes or tags (default: see above).",
                                    argument=True)
    db: str | None = option(None, DB_HELP, parse=one_store)
    workload: str | None = option(None, "Only results of this workload.")
    format: str = option("text", "text, or json: each diagnosis with its comparison and causes.",
                         choices=("text", "json"))


def doctor(request: DoctorRequest, view: Terminal) -> None:
    from dlbench.report.compare import select
    from dlbench.report.doctor import NOTHING_TO_DIAGNOSE, diagnose, render, to_json

    with Store(request.db, read_only=True) as store:
        found = store.results()
    if request.workload:
        found = [r for r in found if r.workload in (request.workload, "system")]
    chosen = None
    if request.runs:
        chosen = list({r.id: r for selector in request.runs for r in select(found, selector)
                       if r.workload != "system"}.values())
    diagnoses = diagnose(found, chosen=chosen)
    if request.format == "json":
        view.text(json.dumps(to_json(diagnoses), indent=1, allow_nan=False, default=str))
    else:
        view.text(render(diagnoses) if diagnoses else NOTHING_TO_DIAGNOSE)
