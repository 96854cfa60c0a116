"""The HTML report: one self-contained file (styles inline, plots as SVG data URIs, no
scripts, nothing fetched), every section's tables and the plots. Jinja2 autoescapes every
value, so text from results shows as text."""

from __future__ import annotations

import datetime as dt

import jinja2

from dlbench.report.plots import plots, shorten
from dlbench.report.tables import Table
from dlbench.results.record import Result
from dlbench.shorten import CELL_CHARS

MAX_RUNS = 500  # newest runs listed at the end of the page
# a table cell's longest, as in every format (dlbench/shorten.py); a mark's explanation (one sentence) stays whole
NOWRAP_CHARS = 32  # a cell this short (a device name, 'Synthetic', a figure) stays on one line


def _cell(value: object) -> object:
    """A table cell or a name as the page shows it: text from results (tags, model and GPU names
    have no length limit) cut to CELL_CHARS, so the page stays small whatever the store holds."""
    return shorten(value, CELL_CHARS) if isinstance(value, str) else value


def _fit(value: object) -> str:
    """The cell's class for how it wraps: a short cell stays on one line (a device name over four
    lines, or a column too narrow for a word, crushed the table), a long one wraps at spaces only.
    A table wider than the page scrolls sideways in its own box instead."""
    return " wrap" if isinstance(value, str) and len(value) > NOWRAP_CHARS else ""


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.PackageLoader("dlbench.report", "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    environment.filters["cell"] = _cell
    environment.filters["fit"] = _fit
    return environment


def render_html(results: list[Result], title: str = "dlbench report", with_references: bool = False,
                bound: str | None = None, drawn: list[Result] | None = None) -> str:
    """`bound`: what of the store the page leaves out (a large store shows its newest settings), said
    under the title; `drawn`: the runs the plots draw, where not all of `results`."""
    from dlbench.report import EMPTY, tables

    template = _environment().get_template("report.html.j2")
    return template.render(
        title=title, results=len(results), systems=sorted({r.system_label for r in results}),
        bound=bound[:1].upper() + bound[1:] + "." if bound else None,
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        tables=tables(results, with_references) + ([runs_table(results)] if results else []), plots=plots(results if drawn is None else drawn), empty=EMPTY,
    )


def runs_table(results: list[Result]) -> Table:
    """Every run the page was drawn from, so a figure can be traced to its record."""
    from dlbench.report.compare import benchmark_name

    rows = [[r.id[:8], r.started[:16].replace("T", " "), r.status, benchmark_name(r), r.system_label,
             r.machine.host or None, r.suite, r.tag] for r in results[-MAX_RUNS:]]
    return Table("Runs", ["Id", "Started (UTC)", "Status", "Benchmark", "System", "Host", "Suite", "Tag"],
                 "llllllll", rows, notes=[f"The newest {MAX_RUNS} runs." if len(results) > MAX_RUNS else
                                          f"All {len(results)} runs in this report."])
