"""The HTML report: one self-contained file (styles inline, plots as SVG data URIs, no
scripts, nothing fetched), every section's tables and the plots. Jinja2 autoescapes every
value, so text from results shows as text."""

from __future__ import annotations

import datetime as dt

import jinja2

from dlbench.report.plots import plots
from dlbench.results.record import Result


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("dlbench.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined)


def render_html(results: list[Result], title: str = "dlbench report") -> str:
    from dlbench.report import EMPTY, tables

    template = _environment().get_template("report.html.j2")
    return template.render(
        title=title, results=len(results), systems=sorted({r.system_label for r in results}),
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        tables=tables(results), plots=plots(results), empty=EMPTY,
    )
