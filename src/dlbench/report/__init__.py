"""Reports read results and render tables; they never run anything.

Each module in SECTIONS has `tables(results) -> list[Table]` and returns nothing for
results it does not cover, so a report over a whole store holds every kind of table. A section
that reproduces a publication's tables names the workloads it selects in `SELECTS`; the results
of every other workload go to `general`'s tables, read through their declarations.
A `Table` renders in every format (Markdown, CSV, JSON, HTML), so a new section needs
nothing else to appear everywhere. A section that can set the seeds' published rows beside
the results (`--with-references`) takes `published: bool` too (report/published.py).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Sequence

from dlbench.errors import UserError
from dlbench.report.tables import Table, markdown, odd_values, shown
from dlbench.results.record import Result

SECTIONS = [f"dlbench.report.{name}" for name in (
    "gpus",  # seed 004's GPU table, with measured ceilings
    "cnn",  # seed 004: forward/backward per model
    "images",  # seeds 002, 003: train/infer/smooth
    "training3d",  # seeds 000, 001: 3D training and prediction in one table
    "precisions3d",  # seeds 000, 001: FP32 against the tensor cores' TF32 and bf16 on one GPU
    "medical",  # seed 003: accuracy and time to train
    "curves",  # seed 003: learning curves (loss and DICE against iteration)
    "claims",  # seeds 002, 004: "A is N x faster than B", checked and computed
    "optimize",  # eager against optimised levels
    "timesplit",  # --profile: where each profiled step's time goes
    "system",  # measured ceilings per machine
    "general",  # every workload no section above selects, as its declaration reads
)]
FORMATS = ("md", "csv", "json", "html")
EMPTY = "No results in the store yet: run `dlbench` (the quick suite) or `dlbench suite cnn-benchmarks`."


def tables(results: list[Result], with_references: bool = False) -> list[Table]:
    """Every section's tables; with `with_references`, the seeds' published rows in them; then the
    stored values that are no valid figure (`?`), and last the legend of every abbreviation and
    mark the tables use."""
    found = []
    for name in SECTIONS:
        make = importlib.import_module(name).tables
        takes = "published" in inspect.signature(make).parameters
        found += make(results, published=True) if with_references and takes else make(results)
    if not found:
        return found
    from dlbench.report.legend import legend

    found = shown(found)

    found += odd_values(results)
    return found + legend(found)


def render_markdown(results: list[Result], with_references: bool = False) -> str:
    found = tables(results, with_references)
    if not found:
        return EMPTY
    return markdown(found)


def filter_systems(results: list[Result], systems: Sequence[str]) -> list[Result]:
    """Results of the named systems (GPU/CPU label or host name, case-insensitive)."""
    if not systems:
        return results
    wanted = {s.lower() for s in systems}
    chosen = [r for r in results if r.system_label.lower() in wanted or r.machine.host.lower() in wanted]
    missing = wanted - {r.system_label.lower() for r in chosen} - {r.machine.host.lower() for r in chosen}
    if missing:
        known = sorted({r.system_label for r in results} | {r.machine.host for r in results if r.machine.host})
        raise UserError(f"no results for system {', '.join(sorted(missing))}; stored: {', '.join(known) or 'none'}")
    return chosen


def render(results: list[Result], fmt: str, title: str = "dlbench report", with_references: bool = False,
           bound: str | None = None, drawn: list[Result] | None = None) -> str:
    """The whole report in one format: md, csv, json or html; `with_references` adds the
    seeds' published rows, labelled with their source, to the tables that reproduce them; `bound`: the
    sentence an HTML page shows at its top on what of the store it leaves out; `drawn`: the runs an HTML
    page's plots draw (all of `results` where None)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown report format {fmt!r}; choose {', '.join(FORMATS)}")
    if fmt == "html":
        from dlbench.report.html import render_html

        return render_html(results, title, with_references=with_references, bound=bound, drawn=drawn)
    found = tables(results, with_references)
    if fmt == "csv":
        from dlbench.report.formats import to_csv

        return to_csv(found)
    if fmt == "json":
        from dlbench.report.formats import to_json

        return to_json(found, results=len(results))
    return markdown(found) if found else EMPTY
