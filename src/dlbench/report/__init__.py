"""Reports read results and render tables; they never run anything.

Each module in SECTIONS has `tables(results) -> list[Table]` and returns nothing for
results it does not cover, so a report over a whole store holds every kind of table.
"""

from __future__ import annotations

import importlib

from dlbench.report.tables import Table, markdown
from dlbench.results.record import Result

SECTIONS = ["dlbench.report.cnn", "dlbench.report.medical"]


def tables(results: list[Result]) -> list[Table]:
    return [t for name in SECTIONS for t in importlib.import_module(name).tables(results)]


def render_markdown(results: list[Result]) -> str:
    found = tables(results)
    if not found:
        return "No results in the store yet: run `dlbench` (the quick suite) or `dlbench suite cnn-benchmarks`."
    return markdown(found)
