"""Commands on stored results: results, report, compare, export, import, doctor.

Each declares its parameters as typed options (the command line is made from them, and a
bad value ends in one line before the store is opened) and every output path is checked
before anything is read or rendered. Only `import` writes the store; the others open it
read-only, so an archived store can be read.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import MISSING, dataclass
from pathlib import Path

from dlbench.errors import UserError
from dlbench.launch.view import Terminal
from dlbench.options import Options, option
from dlbench.paths import check_new_file, replacing
from dlbench.report import FORMATS
from dlbench.results.store import DB_HELP, Store, check_writable, default_path, one_store

OUTPUT_HELP = "Write to this file instead of stdout."


def output_file(path: str | None, db: str | None, what: str) -> Path | None:
    """The output file, checked: its folder exists and is writable, and it is not the store."""
    if path is None:
        return None
    output = Path(path)
    check_new_file(output, what)
    store = Path(db) if db else default_path()
    if output.exists() and store.exists() and output.resolve() == store.resolve():
        raise UserError(f"{output} is the result store itself; writing the {what} there would destroy the results")
    return output


@dataclass(frozen=True, kw_only=True)
class ResultsRequest(Options):
    """List stored results, newest last."""
    db: str | None = option(None, DB_HELP, parse=one_store)
    limit: int = option(50, "Show the newest N results.", low=1, high=10**9)
    format: str = option("table", "table, or json: one object per result and line (throughput, step time "
                                  "percentiles, batch, shape, precision, parameters, FLOPs, peak memory, system).",
                         choices=("table", "json"))


def results(request: ResultsRequest, view: Terminal) -> None:
    with Store(request.db, read_only=True) as store:
        rows = store.results()[-request.limit:]
    view.results(rows) if request.format == "table" else view.summaries(rows)


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
        chosen = filter_systems(store.results(suite=request.suite_name), request.systems or [])
    title = f"dlbench report: {request.suite_name}" if request.suite_name else "dlbench report"
    view.write(render(chosen, fmt, title=title, with_references=request.with_references), output)


@dataclass(frozen=True, kw_only=True)
class CompareRequest(Options):
    """Relative speed of systems or runs on the benchmarks they share, with bootstrap confidence
    intervals over the per-step samples. Exit status: 0, 1 when --fail-above finds a regression,
    2 for a usage error."""
    sides: list[str] = option(MISSING, "Two or more systems (GPU name or host), tags, or run id prefixes; with "
                                       "--fail-above: the baseline, then the candidate.", argument=True)
    fail_above: float | None = option(None, "Regression check: exit 1 when the candidate is slower than the "
                                            "baseline by more than this and by more than the noise.",
                                      unit="%", low=0, high=1000)
    confidence: float = option(0.95, "Level of the bootstrap intervals.", low=0, low_open=True, high=0.999)
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
        comparison = cmp.compare(store.results(suite=request.suite_name), request.sides, level=request.confidence)
    failed = cmp.regressions(comparison, request.fail_above) if request.fail_above is not None else []
    view.write(cmp.render(comparison, request.format, failed), output)
    for line in failed:
        view.message(f"regression: {line}")
    if request.fail_above is not None and not failed:
        view.message(f"no regression above {request.fail_above:g}% beyond noise")
    return 1 if failed else 0


@dataclass(frozen=True, kw_only=True)
class ExportRequest(Options):
    """Export all stored results."""
    format: str = option("jsonl", "jsonl (complete, importable) or csv (flat; text that a spreadsheet would "
                                  "read as a formula starts with ').", choices=("jsonl", "csv"))
    output: str | None = option(None, "File to write (default: stdout).", short="-o")
    db: str | None = option(None, DB_HELP, parse=one_store)


def export(request: ExportRequest, view: Terminal) -> None:
    from dlbench.results import exchange

    output = output_file(request.output, request.db, "export")
    with Store(request.db, read_only=True) as store:
        records = store.results(exact=True)
    if output is None and sys.stdout.isatty():  # on a terminal, through its control-character filter
        text = io.StringIO()
        exchange.WRITERS[request.format](records, text)
        view.text(text.getvalue().rstrip("\n"))
        return
    if output is None:  # to a pipe or file: the data exactly
        exchange.WRITERS[request.format](records, sys.stdout)
        return
    with replacing(output) as f:  # a full disk, a device that refuses, the file-size limit: one line
        count = exchange.WRITERS[request.format](records, f)
    view.message(f"wrote {count} results to {output}")


@dataclass(frozen=True, kw_only=True)
class ImportRequest(Options):
    """Merge results exported on other machines; results already stored are skipped. All or nothing: a
    bad record, or one whose id is stored with other contents, refuses the whole import."""
    files: list[str] = option(MISSING, "JSON-lines files written by `dlbench export`, or folders of record files "
                                       "(e.g. a `--slurm` run's folder).", argument=True)
    db: str | None = option(None, DB_HELP, parse=one_store)


def import_(request: ImportRequest, view: Terminal) -> None:
    from dlbench.results import exchange

    check_writable(request.db)
    records = exchange.read_all([Path(f) for f in request.files])  # every file checked before the store opens
    with Store(request.db) as store:
        added = store.merge(records)
    view.message(f"imported {added} new results ({len(records) - added} already stored)")


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
