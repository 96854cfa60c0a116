"""Command line: parses arguments and calls into the package; nothing else lives here."""

from __future__ import annotations

import json
import os
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

DEFAULT_TIMEOUT_S = 3600.0  # per benchmark, when neither the spec nor its suite sets one
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
        _suite("quick", db=db)


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
    name: str = typer.Argument("quick", help="Built-in suite name (quick, cnn-benchmarks, ...) or a suite YAML file."),
    device: str = typer.Option("auto", help="Run every spec on this device: auto, cpu, cuda or cuda:N."),
    db: Optional[Path] = DbOption,
    tag: Optional[str] = TagOption,
    list_only: bool = typer.Option(False, "--list", help="Show the expanded specs with an estimate of the time, and exit."),
    resume: bool = typer.Option(False, "--resume", help="Continue the newest run of this suite on this machine "
                                "(or --run ID): skip specs that already have an ok result in it."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Suite-run id (default: a new one; with --resume: the newest)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds before a benchmark is stopped and stored "
                                            "as timeout, when neither it nor its suite sets one (default 3600)."),
    slurm: Optional[str] = typer.Option(None, "--slurm", help="Submit one SLURM job per spec with submitit: "
                                        "partition=P,gpus=N,time=MIN[,cpus=N,mem=64G,account=A,qos=Q,constraint=C]; "
                                        "cluster=local runs the jobs on this machine."),
    slurm_dir: Path = typer.Option(Path("dlbench-slurm"), "--slurm-dir", help="Folder on the shared file system for "
                                   "job logs and record files (one subfolder per suite run)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="With --slurm: wait for the jobs and merge their records "
                              "into the store (else merge later with `dlbench import DIR`)."),
) -> None:
    """Run a suite of benchmarks, each in its own process; store every result and print the report.

    A crash, out-of-memory error or hang of one benchmark is stored (error, oom, timeout) and the suite goes on. Ctrl-C stores the running benchmark as interrupted and stops (press it again to stop at once); `--resume` then runs only what is missing.
    """  # noqa: E501 - one paragraph, or --help breaks it where the source does
    _suite(name, device=device, db=db, tag=tag, list_only=list_only, resume=resume, run_id=run_id,
           timeout=timeout, slurm=slurm, slurm_dir=slurm_dir, wait=wait)


def _suite(name: str, *, device: str = "auto", db: Optional[Path] = None, tag: Optional[str] = None,
           list_only: bool = False, resume: bool = False, run_id: Optional[str] = None,
           timeout: Optional[float] = None, slurm: Optional[str] = None,
           slurm_dir: Path = Path("dlbench-slurm"), wait: bool = True) -> None:
    from dlbench.launch import slurm as slurm_launch

    if timeout is not None and timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    options = slurm_launch.parse_options(slurm) if slurm is not None else None
    if options is not None:
        slurm_launch.check(options)  # before anything slow or anything written

    from dlbench import suites
    from dlbench.system.info import fingerprint

    loaded = suites.load(name, {"device": device} if device != "auto" else None)
    host = fingerprint()["host"]
    if list_only:
        _list_suite(loaded, db, host, resume=resume, run_id=run_id, default_timeout=timeout or DEFAULT_TIMEOUT_S)
        return
    if options is None:
        loaded.specs = _runnable(loaded.specs)  # compute nodes, not this machine, decide under --slurm
    default_timeout = timeout or DEFAULT_TIMEOUT_S
    with _store(db) as store:
        from dlbench.launch import suiterun

        plan = suiterun.make_plan(loaded, store, host, resume=resume, run=run_id)
        _announce(plan)
        if options is not None:
            _submit(plan, store, options, slurm_dir, tag=tag, default_timeout=default_timeout, wait=wait)
        else:
            _run_here(plan, store, name, tag=tag, default_timeout=default_timeout)


def _list_suite(loaded, db: Optional[Path], host: str, *, resume: bool, run_id: Optional[str],
                default_timeout: float) -> None:
    from dlbench.launch import suiterun
    from dlbench.results.store import Store, default_path

    path = Path(db) if db else default_path()
    store = Store(path) if path.exists() else None  # listing never creates a store
    try:
        plan = suiterun.make_plan(loaded, store, host, resume=resume, run=run_id)
    finally:
        if store is not None:
            store.close()
    _print_plan(plan, default_timeout)


def _run_here(plan, store, name: str, *, tag: Optional[str], default_timeout: float) -> None:
    from dlbench.launch import suiterun
    from dlbench.system.info import fingerprint

    hint = f"`dlbench suite {name} --resume` runs what is missing"
    try:
        outcome = suiterun.run_suite(plan, store, fingerprint(), tag=tag, default_timeout=default_timeout,
                                     console=err, describe=_describe)
    except KeyboardInterrupt:
        err.print(f"stopped at once; {hint}", highlight=False, markup=False)
        store.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)  # "at once": the interpreter's teardown (torch's) can take seconds
    if outcome.interrupted:
        err.print(f"{outcome.interrupted}: stopped; the running benchmark is stored as interrupted. {hint}",
                  highlight=False, markup=False)
        raise typer.Exit(130)
    _finish(store, plan)


def _runnable(specs: list) -> list:
    """Specs this machine can run; a device it lacks is a user error, too few GPUs skips the spec."""
    import torch

    from dlbench.suites import title
    from dlbench.workloads.runtime import resolve_device

    kept = []
    for spec in specs:
        device = resolve_device(spec.device)
        visible = torch.cuda.device_count() if device.type == "cuda" else None
        if visible is not None and spec.gpus > visible:
            err.print(f"skipped {title(spec)}: needs {spec.gpus} GPUs, {visible} visible", highlight=False, markup=False)
            continue
        kept.append(spec)
    return kept


def _print_plan(plan, default_timeout: float) -> None:
    from dlbench.suites import title
    from dlbench.suites.estimate import format_seconds

    table = Table("#", "benchmark", "timeout", "estimate", "from", box=None)
    for index, (spec, guess) in enumerate(zip(plan.todo, plan.estimates), 1):
        limit = format_seconds(spec.timeout) if spec.timeout else f"{format_seconds(default_timeout)} (default)"
        table.add_row(str(index), Text(title(spec)), limit, format_seconds(guess.seconds), guess.source)
    out.print(table)
    measured = sum(1 for e in plan.estimates if e.measured)
    total = format_seconds(sum(e.seconds for e in plan.estimates))
    done = f", {len(plan.done)} already done in run {plan.run}" if plan.resumed else ""
    out.print(f"{len(plan.todo)} benchmarks{done}: about {total} "
              f"({measured} from earlier runs on this machine, {len(plan.todo) - measured} guessed)", highlight=False)


def _announce(plan) -> None:
    from dlbench.suites.estimate import format_seconds

    total = format_seconds(sum(e.seconds for e in plan.estimates))
    skipped = f", {len(plan.done)} already done" if plan.resumed else ""
    err.print(f"suite {plan.suite.name}, run {plan.run}: {len(plan.todo)} to run{skipped}, about {total}",
              highlight=False, markup=False)


def _describe(result) -> str:
    from dlbench.workloads import describe

    return describe(result)


def _finish(store, plan) -> None:
    """The report of this suite run, a count by status, and exit 1 when something failed."""
    from collections import Counter

    from dlbench.report import render_markdown
    from dlbench.suites import spec_key

    mine = [r for r in store.results(suite=plan.suite.name) if r.run == plan.run]
    out.print(render_markdown([r for r in mine if r.status == "ok"]), highlight=False, markup=False)
    latest = {spec_key(r.spec): r.status for r in mine}  # oldest first: the newest result of each spec wins
    counts = Counter(latest.values())
    err.print("results of run " + plan.run + ": " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
              highlight=False, markup=False)
    if counts.get("error") or counts.get("timeout"):
        raise typer.Exit(1)


def _submit(plan, store, options, folder: Path, *, tag, default_timeout: float, wait: bool) -> None:
    from dlbench.launch import slurm

    folder = Path(folder) / plan.run
    submitted = slurm.submit(plan.todo, options, folder, suite=plan.suite.name, run=plan.run, tag=tag,
                             timeout=lambda spec: spec.timeout or default_timeout)
    err.print(f"submitted {len(submitted)} jobs; records go to {slurm.records_dir(folder)}", highlight=False, markup=False)
    if not wait:
        err.print(f"merge them later with: dlbench import {folder}", highlight=False, markup=False)
        return
    poll = 1.0 if options.get("cluster") == "local" else 10.0
    try:
        slurm.wait(submitted, folder, store, suite=plan.suite.name, run=plan.run, tag=tag, poll_s=poll,
                   on_result=_print_result)
    except KeyboardInterrupt:
        added = slurm.merge(folder, store)
        err.print(f"stopped waiting ({added} records merged); the jobs keep running. "
                  f"Merge the rest with: dlbench import {folder}", highlight=False, markup=False)
        raise typer.Exit(130)
    _finish(store, plan)


def _report_text(store, suite_name: Optional[str]) -> str:
    from dlbench.report import render_markdown

    return render_markdown(store.results(suite=suite_name))


@app.command()
def report(
    suite_name: Optional[str] = typer.Option(None, "--suite", help="Only results of this suite."),
    db: Optional[Path] = DbOption,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Print the report tables (seed 004: one per model) from the results in the store."""
    with _store(db) as store:
        text = _report_text(store, suite_name)
    if output:
        output.write_text(text + "\n", encoding="utf-8")
    else:
        out.print(text, highlight=False, markup=False)


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
def import_(files: list[Path] = typer.Argument(..., help="JSON-lines files written by `dlbench export`, or folders "
                                              "of record files (e.g. a `--slurm` run's folder)."),
            db: Optional[Path] = DbOption) -> None:
    """Merge results exported on other machines; results already stored are skipped."""
    from dlbench.results import exchange

    paths = [p for path in files for p in (sorted(path.rglob("*.jsonl")) if path.is_dir() else [path])]
    if not paths:
        raise UserError(f"no record files (*.jsonl) in {', '.join(map(str, files))}")
    records = [r for path in paths for r in exchange.read_jsonl(path)]  # all files checked before writing
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
def system() -> None:
    """Print this machine's fingerprint."""
    from dlbench.system.info import fingerprint

    out.print_json(json.dumps(fingerprint()))


def main() -> None:
    from dlbench import plugins

    try:
        plugins.load()
        app()
    except UserError as error:
        err.print(f"error: {error}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
