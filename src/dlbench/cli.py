"""Command line: parses arguments and calls into the package; nothing else lives here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlbench.errors import UserError

app = typer.Typer(
    help="Deep learning benchmarks for GPU machines. With no command, runs the `quick` suite "
         "on the GPU if there is one (else the CPU), stores the results and prints the report.",
    no_args_is_help=False, add_completion=False, pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

DbOption = typer.Option(None, "--db", help="Result store (SQLite). Default: $DLBENCH_DB or ./dlbench.db.")
TagOption = typer.Option(None, "--tag", help="Free text stored with every result, to find runs later.")


def _store(db: Optional[Path]):
    from dlbench.results.store import Store

    return Store(db)


def _print_result(result) -> None:
    from dlbench.workloads import describe

    style = {"ok": "green", "oom": "yellow"}.get(result.status, "red")
    err.print(Text(describe(result), style=style))


@app.callback(invoke_without_command=True)
def _default(ctx: typer.Context, db: Optional[Path] = DbOption) -> None:
    if ctx.invoked_subcommand is None:
        suite(name="quick", device="auto", db=db, tag=None, list_only=False)


run_app = typer.Typer(help="Run one benchmark and store its result.", no_args_is_help=True)
app.add_typer(run_app, name="run")

# Options every workload shares; each `run` sub-command lists them in its signature.
ModelOpt = typer.Option("resnet50", "--model", help="Model name (`dlbench models`), any torchvision classifier, or timm:<name>.")
BatchOpt = typer.Option(16, "--batch", help="Batch size.")
ShapeOpt = typer.Option(None, "--input-shape", help="Input shape without the batch, e.g. 3x224x224 (default: the model's).")
PrecisionOpt = typer.Option("fp32", "--precision", help="fp32, tf32 (TF32 matmuls/convolutions), fp16 or bf16 (autocast).")
ChannelsLastOpt = typer.Option(False, "--channels-last", help="Use the channels-last memory format.")
DeviceOpt = typer.Option("auto", "--device", help="auto (GPU if present), cpu, cuda or cuda:N.")
WarmupOpt = typer.Option(5, "--warmup", help="Warm-up steps (at least).")
WarmupSecondsOpt = typer.Option(1.0, "--warmup-seconds", help="Warm-up seconds (at least).")
StepsOpt = typer.Option(20, "--steps", help="Measured steps (at least).")
MinSecondsOpt = typer.Option(1.0, "--min-seconds", help="Measured seconds (at least).")
SeedOpt = typer.Option(0, "--seed", help="Random seed for weights and inputs.")

_GENERAL = ("model", "batch", "input_shape", "precision", "channels_last", "device", "warmup",
            "warmup_seconds", "steps", "min_seconds", "seed", "gpus", "timeout")


def _run_one(workload: str, params: dict) -> None:
    """Build the spec from a sub-command's parameters (the rest become options), run and store it."""
    from dlbench.launch.inprocess import run_specs
    from dlbench.spec import BenchmarkSpec

    db, tag = params.pop("db"), params.pop("tag")
    general = {k: params.pop(k) for k in _GENERAL if k in params}
    options = {k: v for k, v in params.items() if v is not None}
    spec = BenchmarkSpec(workload=workload, options=options, **general)
    with _store(db) as store:
        results = run_specs([spec], store, tag=tag, console=err)
    _print_result(results[0])
    if results[0].status == "error":
        raise typer.Exit(1)


@run_app.command("fwdbwd")
def run_fwdbwd(
    model: str = ModelOpt, batch: int = BatchOpt, input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, db: Optional[Path] = DbOption,
    tag: Optional[str] = TagOption,
) -> None:
    """Forward and backward of a model in training mode, timed separately (seed 004's method)."""
    _run_one("fwdbwd", locals())


@app.command()
def suite(
    name: str = typer.Argument("quick", help="Built-in suite name (quick, cnn-benchmarks) or a suite YAML file."),
    device: str = typer.Option("auto", help="Run every spec on this device: auto, cpu, cuda or cuda:N."),
    db: Optional[Path] = DbOption,
    tag: Optional[str] = TagOption,
    list_only: bool = typer.Option(False, "--list", help="Show the expanded specs and exit."),
) -> None:
    """Run a suite of benchmarks, store every result and print the report."""
    from dlbench import suites
    from dlbench.launch.inprocess import run_specs

    loaded = suites.load(name, {"device": device} if device != "auto" else None)
    if list_only:
        for spec in loaded.specs:
            out.print(spec.label(), highlight=False)
        return
    with _store(db) as store:
        run_specs(loaded.specs, store, suite=loaded.name, tag=tag, console=err, on_result=_print_result)
        out.print(_report_text(store, loaded.name), highlight=False, markup=False)


def _report_text(store, suite_name: Optional[str]) -> str:
    from dlbench.report import render_markdown

    return render_markdown(store.results(suite=suite_name))


@app.command()
def report(
    suite_name: Optional[str] = typer.Option(None, "--suite", help="Only results of this suite."),
    systems: Optional[list[str]] = typer.Option(None, "--system", help="Only results of this system "
                                                "(GPU name as shown in the tables, or host name); repeatable."),
    format: str = typer.Option("md", "--format", help="md (Markdown, the seeds' layout), csv, json, or html "
                               "(one self-contained file with plots; needs --output)."),
    db: Optional[Path] = DbOption,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Every report table (the seeds' layouts: GPUs, per-model fwd/bwd, training, images, volumes, machine)
    from the results in the store; missing cells show `-`, out-of-memory runs `OOM`."""
    from dlbench.report import FORMATS, filter_systems, render

    if format not in FORMATS:
        raise UserError(f"unknown report format {format!r}; choose {', '.join(FORMATS)}")
    if format == "html" and output is None:
        raise UserError("--format html writes a file: add --output report.html")
    with _store(db) as store:
        chosen = filter_systems(store.results(suite=suite_name), systems or [])
    text = render(chosen, format, title=f"dlbench report: {suite_name}" if suite_name else "dlbench report")
    _write(text, output)


def _write(text: str, output: Optional[Path]) -> None:
    if output:
        try:
            output.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        except OSError as error:
            raise UserError(f"cannot write {output}: {error.strerror or error}") from None
        err.print(f"wrote {output}", highlight=False, markup=False)
    else:
        out.print(text, highlight=False, markup=False, soft_wrap=True)


@app.command()
def compare(
    sides: list[str] = typer.Argument(..., metavar="SIDE...", help="Two or more systems (GPU name or host), tags, or run id prefixes; "
                                      "with --fail-above: the baseline, then the candidate."),
    fail_above: Optional[float] = typer.Option(None, "--fail-above", metavar="PCT",
                                               help="Regression check: exit 1 when the candidate is slower than "
                                               "the baseline by more than PCT percent and by more than the noise."),
    confidence: float = typer.Option(0.95, "--confidence", help="Level of the bootstrap intervals."),
    suite_name: Optional[str] = typer.Option(None, "--suite", help="Only results of this suite."),
    format: str = typer.Option("md", "--format", help="md or json."),
    db: Optional[Path] = DbOption,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Relative speed of systems or runs on the benchmarks they share, with bootstrap confidence
    intervals over the per-step samples. Exit status: 0, 1 when --fail-above finds a regression,
    2 for a usage error."""
    from dlbench.report import compare as cmp
    from dlbench.report.formats import to_dict
    from dlbench.report.tables import markdown

    if format not in ("md", "json"):
        raise UserError(f"unknown compare format {format!r}; choose md or json")
    if fail_above is not None:
        cmp.check_regression_args(len(sides), fail_above)
    with _store(db) as store:
        comparison = cmp.compare(store.results(suite=suite_name), sides, level=confidence)
    failed = cmp.regressions(comparison, fail_above) if fail_above is not None else []
    if format == "json":
        data = {**cmp.to_json(comparison), "tables": [to_dict(t) for t in cmp.tables(comparison)],
                "regressions": failed}
        text = json.dumps(data, indent=1, ensure_ascii=False)
    else:
        from dlbench.report.markdown import cell

        lines = "\n".join(f"- {cell(line)}" for line in cmp.conclusions(comparison))
        text = f"## Conclusions\n\n{lines}\n\n{markdown(cmp.tables(comparison))}"
    _write(text, output)
    if failed:
        for line in failed:
            err.print(f"regression: {line}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)
    if fail_above is not None:
        err.print(f"no regression above {fail_above:g}% beyond noise", highlight=False, markup=False)


@app.command()
def results(db: Optional[Path] = DbOption, limit: int = typer.Option(50, help="Show the newest N results.")) -> None:
    """List stored results, newest last."""
    with _store(db) as store:
        rows = store.results()[-limit:]
    table = Table("id", "started", "status", "benchmark", "system", "total ms", "tag", box=None)
    for r in rows:
        total = r.metrics.get("total_ms")
        benchmark = f"{r.workload} {r.model} b{r.spec.get('batch')} {r.spec.get('precision')}"
        cells = (r.id[:8], r.started[:16].replace("T", " "), r.status, benchmark, r.system_label,
                 f"{total:.2f}" if total else "-", r.tag or "")
        table.add_row(*(Text(c) for c in cells))  # Text: stored strings are never read as markup
    out.print(table)


@app.command("export")
def export_(
    format: str = typer.Option("jsonl", "--format", help="jsonl (complete, importable) or csv (flat)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
    db: Optional[Path] = DbOption,
) -> None:
    """Export all stored results."""
    from dlbench.results import exchange

    writers = {"jsonl": exchange.write_jsonl, "csv": exchange.write_csv}
    if format not in writers:
        raise UserError(f"unknown export format {format!r}; choose jsonl or csv")
    with _store(db) as store:
        records = store.results()
    if output:
        with open(output, "w", encoding="utf-8", newline="") as f:
            n = writers[format](records, f)
        err.print(f"wrote {n} results to {output}")
    else:
        writers[format](records, sys.stdout)


@app.command("import")
def import_(files: list[Path] = typer.Argument(..., help="JSON-lines files written by `dlbench export`."),
            db: Optional[Path] = DbOption) -> None:
    """Merge results exported on other machines; results already stored are skipped."""
    from dlbench.results import exchange

    records = [r for path in files for r in exchange.read_jsonl(path)]  # all files checked before writing
    with _store(db) as store:
        added = store.add_many(records)
    err.print(f"imported {added} new results ({len(records) - added} already stored)")


@app.command()
def models() -> None:
    """List the registered models (any torchvision classifier and timm:<name> work too)."""
    from dlbench.models import registry

    for name in registry.names():
        entry = registry.MODELS[name]
        out.print(f"{name:12s} {entry.title:14s} input {'x'.join(map(str, entry.input_shape))}", highlight=False)


@app.command()
def system(
    device: str = typer.Option("auto", "--device", help="Device whose ceilings to measure: auto, cpu, cuda or cuda:N."),
    disk: Optional[Path] = typer.Option(None, "--disk", help="Also measure the read bandwidth of this file or folder "
                                        "(e.g. your dataset)."),
    db: Optional[Path] = DbOption,
    store: bool = typer.Option(True, "--store/--no-store", help="Store the record (reports and doctor use it)."),
    fingerprint_only: bool = typer.Option(False, "--fingerprint", help="Only print the fingerprint as JSON; measure nothing."),
) -> None:
    """Measure this machine's ceilings (matmul TFLOP/s per precision, memory, host<->device,
    all-reduce, JPEG decode, disk) next to datasheet figures, and store them."""
    from dlbench.report.system import ceilings_table
    from dlbench.report.tables import markdown
    from dlbench.system.info import fingerprint
    from dlbench.system.survey import survey
    from dlbench.workloads.runtime import resolve_device

    if fingerprint_only:
        out.print_json(json.dumps(fingerprint()))
        return
    target = resolve_device(device)
    keeper = _store(db) if store else None  # a bad --db fails before minutes of measuring
    try:
        with err.status("measuring") as status:
            record = survey(fingerprint(), target, disk=disk,
                            progress=lambda stage, done, total: status.update(f"measuring {stage} ({done + 1}/{total})"))
        if keeper is not None:
            keeper.add(record)
    finally:
        if keeper is not None:
            keeper.close()
    out.print(markdown([ceilings_table(record)]), highlight=False, markup=False, soft_wrap=True)


@app.command()
def doctor(
    db: Optional[Path] = DbOption,
    workload: Optional[str] = typer.Option(None, "--workload", help="Only results of this workload."),
) -> None:
    """Compare this store's results with reference results, say how far below expectation each
    is and name the likely causes with their evidence (input-bound, launch-bound, throttled,
    degraded link, other processes, slow storage)."""
    from dlbench.report.doctor import NOTHING_TO_DIAGNOSE, diagnose, render

    with _store(db) as store:
        found = store.results()
    if workload:
        found = [r for r in found if r.workload in (workload, "system")]
    diagnoses = diagnose(found)
    out.print(render(diagnoses) if diagnoses else NOTHING_TO_DIAGNOSE, highlight=False, markup=False, soft_wrap=True)


def main() -> None:
    try:
        app()
    except UserError as error:
        err.print(f"error: {error}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
