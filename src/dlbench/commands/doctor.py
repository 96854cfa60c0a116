"""`dlbench doctor`: how each stored result compares with what it should do, and why it falls
short (diagnose/judge.py judges; this reads the store, read-only, and shows the diagnoses)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dlbench.launch.view import Terminal
from dlbench.options import Options, option
from dlbench.results.store import DB_HELP, Store, one_store


DEFAULT_JUDGED = 20  # diagnoses without --all: each takes a bootstrap and the causes' measurements


@dataclass(frozen=True, kw_only=True)
class DoctorRequest(Options):
    """Say how each result compares with what it should do and why it falls short. A run is judged
    against the machine's own history first (the fastest other run of the same configuration on
    the same machine, with a bootstrap interval; on several GPUs also against one GPU), else
    against published figures. Causes are measured parts of the step, largest first, each with the
    figures that point to it and its fix (docs/doctor.md lists them); a loss they do not explain is
    said as unexplained with what differed. By default the newest result of each configuration and
    every older one that differs from it beyond noise are judged."""
    runs: list[str] | None = option(None, "Results to judge: run id prefixes or tags (default: see above).",
                                    argument=True)
    db: str | None = option(None, DB_HELP, parse=one_store)
    workload: str | None = option(None, "Only results of this workload.")
    format: str = option("text", "text, or json: each diagnosis with its comparison and causes.",
                         choices=("text", "json"))
    every: bool = option(False, f"By default at most the newest {DEFAULT_JUDGED} of the runs chosen above are "
                                f"judged (a store of a cluster's year holds thousands); judge every one.",
                         flag="--all")


def doctor(request: DoctorRequest, view: Terminal) -> None:
    from dlbench.report.compare import select
    from dlbench.diagnose.judge import diagnose
    from dlbench.diagnose.render import NOTHING_TO_DIAGNOSE, render, to_json

    with Store(request.db, read_only=True) as store:
        diagnoses = _chosen(store, request, view) if not request.runs else None
        found = store.results() if diagnoses is None else []
    if diagnoses is None:
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


def _chosen(store: Store, request: DoctorRequest, view: Terminal) -> list | None:
    """The default diagnoses from the store's summaries (diagnose/choose.py): only the judged runs and
    those they are set against are read; None where the store has no summaries to choose from."""
    from dlbench.diagnose.choose import for_doctor
    from dlbench.diagnose.judge import diagnose

    found = for_doctor(store, request.workload, None if request.every else DEFAULT_JUDGED)
    if found is None:
        return None
    chosen, surveys, compared, judged = found
    if len(chosen) < judged:
        view.message(f"judged the newest {len(chosen)} of the {judged:,} runs chosen (the newest of each "
                     f"configuration, and older ones that differ beyond noise); --all judges every one, "
                     f"--workload or run ids and tags choose others")
    return diagnose(surveys, chosen=chosen, compared=compared)
