"""`dlbench report` and `dlbench compare`: tables and comparisons of the stored results.

Both open the store read-only and check their output path (and format) before anything is
read or rendered.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass
from pathlib import Path

from dlbench.commands.results import OUTPUT_HELP, output_file
from dlbench.errors import UserError
from dlbench.launch.view import Terminal
from dlbench.options import Options, option
from dlbench.report import FORMATS
from dlbench.results.spread import median_runs
from dlbench.results.store import DB_HELP, Store, one_store


@dataclass(frozen=True, kw_only=True)
class ReportRequest(Options):
    """Every report table (in the published reports' layouts: GPUs, per-model fwd/bwd, training, images, volumes,
    machine) from the results in the store; missing cells show `-`, out-of-memory runs `OOM`."""
    suite_name: str | None = option(None, "Only results of this suite.", flag="--suite")
    systems: list[str] | None = option(None, "Only results of this system (GPU name as shown in the tables, or "
                                             "host name); repeatable.", flag="--system")
    format: str | None = option(None, "md (Markdown, in the published reports' layouts; the default), csv or "
                                      "json (one record per table cell, numbers as numbers), or html (one "
                                      "self-contained file with plots; needs --output). Without it, --output's "
                                      "suffix (.md, .csv, .json, .html) chooses.", choices=FORMATS)
    db: str | None = option(None, DB_HELP, parse=one_store)
    output: str | None = option(None, OUTPUT_HELP, short="-o")
    with_references: bool = option(False, "Add the published reports' own rows, labelled with their source and "
                                          "their arithmetic checked, to the tables.")


SUFFIXES = {f".{f}": f for f in FORMATS} | {".markdown": "md", ".htm": "html"}


def report_format(given: str | None, output: str | None) -> str:
    """The format --format names, else the one --output's suffix names, else Markdown. A suffix
    that names no format, or another one than --format, is refused: `-o r.html` silently
    holding Markdown is a file no browser shows right. A name without a suffix takes any format."""
    suffix = Path(output).suffix.lower() if output is not None else ""
    if not suffix:
        return given or "md"
    implied = SUFFIXES.get(suffix)
    if implied is None:
        raise UserError(f"--output {output}: {suffix} names no report format; name it .md, .csv, .json or .html")
    if given is not None and given != implied:
        raise UserError(f"--output {output} names {implied}, but --format is {given}: drop one or make them agree")
    return implied


def report(request: ReportRequest, view: Terminal) -> None:
    from dlbench.report import filter_systems, render

    fmt = report_format(request.format, request.output)
    if fmt == "html" and request.output is None:
        raise UserError("--format html writes a file: add --output report.html")
    output = output_file(request.output, request.db, "report")
    with Store(request.db, read_only=True) as store:
        found, bound, lean = _newest_settings(store, request)
        chosen = median_runs(filter_systems(found, request.systems or []))  # a repeat set's figure: its median run
        drawn = _drawn(store, chosen) if fmt == "html" and lean else None
    if drawn is not None and len(drawn) < len(chosen):  # why, where the reader sees it: page and stderr
        plotted = (f"plots draw the newest {len(drawn):,} of its {len(chosen):,} runs, a bar or line each: a plot "
                   f"of more is too crowded to read and slow to draw")
        bound = f"{bound}; its {plotted}" if bound else f"the report's {plotted}; --suite or --system narrow it"
    if bound is not None:
        view.message(bound)
    title = f"dlbench report: {request.suite_name}" if request.suite_name else "dlbench report"
    # the page says what it leaves out where its reader sees it; the other formats on stderr
    view.write(render(chosen, fmt, title=title, with_references=request.with_references,
                      bound=bound if fmt == "html" else None, drawn=drawn), output)


WHOLE_REPORT = 5000  # results a report reads whole; from a larger store, the newest run of each setting
PLOTTED_RUNS = 100  # runs whose plots an HTML report of a larger store draws, read whole (with their traces)


def _drawn(store: Store, shown: list) -> list:
    """The newest PLOTTED_RUNS of the runs a page shows, read whole for its plots (the tables read them lean, as
    every format does): 1,000 settings drawn took 23 s, most of it drawing bars no one could tell apart."""
    newest = {r.id for r in sorted(shown, key=lambda r: r.started)[-PLOTTED_RUNS:]}
    return store.complete([r for r in shown if r.id in newest])


def _newest_settings(store: Store, request: ReportRequest) -> tuple[list, str | None, bool]:
    """The runs the report's rows show, chosen from the store's summaries (report/choose.py) so that a
    store of 100,000 results is not read whole; every result where it has none. With the sentence that
    says how many settings it leaves out, where it leaves some, and whether the runs were read lean."""
    from dlbench.report.choose import for_report

    if store.count() <= WHOLE_REPORT:  # every setting's every run, as always
        return store.results(suite=request.suite_name), None, False
    # lean: every table reads a run's figures and steps (an HTML page's plots read theirs whole: `_drawn`)
    found = for_report(store, request.suite_name, request.systems or (), lean=True)
    if found is None or (request.systems and not found[0]):  # no such system: filter_systems names those stored
        return store.results(suite=request.suite_name), None, False
    results, shown, settings = found
    if shown >= settings:
        return results, None, True
    return results, (f"the report shows the newest run of the newest {shown:,} of {settings:,} settings "
                     f"(configuration, machine, tag); --suite or --system narrow it"), True


@dataclass(frozen=True, kw_only=True)
class CompareRequest(Options):
    """Relative speed of systems or runs on the benchmarks they share, with confidence intervals:
    between runs where a side has several (`--repeat`) or this machine recorded the spread of the
    configuration, else over each run's per-step samples. Exit status: 0, 1 when --fail-above finds a regression,
    2 for a usage error."""
    sides: list[str] = option(MISSING, "Two or more systems (GPU name or host), tags, or run id prefixes; with "
                                       "--fail-above: the baseline, then the candidate.", argument=True)
    fail_above: float | None = option(None, "Regression check: exit 1 when the candidate is slower than the "
                                            "baseline by more than this and by more than the noise.",
                                      unit="%", low=0, high=1000)
    confidence: float = option(0.95, "Level of the confidence intervals.", low=0, low_open=True, high=0.999)
    suite_name: str | None = option(None, "Only results of this suite.", flag="--suite")
    format: str = option("md", "md or json.", choices=("md", "json"))
    db: str | None = option(None, DB_HELP, parse=one_store)
    output: str | None = option(None, OUTPUT_HELP, short="-o")


def compare(request: CompareRequest, view: Terminal) -> int:
    from dlbench.report import compare as cmp

    if request.fail_above is not None:
        cmp.check_regression_args(len(request.sides), request.fail_above)
    output = output_file(request.output, request.db, "comparison")
    with Store(request.db, read_only=True) as store:
        comparison = _comparison(store, request)
    failed = cmp.regressions(comparison, request.fail_above) if request.fail_above is not None else []
    view.write(cmp.render(comparison, request.format, failed), output)
    for line in failed:
        view.message(f"regression: {line}")
    if request.fail_above is not None and not failed:
        view.message(f"no regression above {request.fail_above:g}% beyond noise")
    return 1 if failed else 0


def _comparison(store: Store, request: CompareRequest):
    """The comparison of the sides, chosen from the store's summaries on a large store (report/choose.py:
    each side's runs as their median steps, only each benchmark's newest run read whole); from every
    result, lean, on a smaller one or where the store has no summaries or a side names nothing."""
    from dlbench.report import compare as cmp
    from dlbench.report.choose import for_compare

    cmp.check_compare_args(request.sides, request.confidence)
    found = for_compare(store, request.suite_name, request.sides) if store.count() > WHOLE_REPORT else None
    if found is not None:
        return cmp.compare_sides(*found, level=request.confidence)
    # lean: a comparison reads each run's figures and step times, never its traces or other samples
    return cmp.compare(store.results(suite=request.suite_name, lean=True), request.sides, level=request.confidence)
