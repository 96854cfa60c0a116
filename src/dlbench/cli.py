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


@run_app.command("converge")
def run_converge(
    model: str = typer.Option("unet2d", "--model", help="Segmentation model: unet2d (padded) or unet2d-medical (original, 572 -> 388)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Folder with images/ and masks/ (`dlbench data seg`). "
                                        "Default: a generated EM-like set in memory."),
    target_dice: float = typer.Option(0.89, "--target-dice", help="Stop a fold when the validation DICE reaches this (0 < t <= 1)."),
    folds: int = typer.Option(5, "--folds", help="k of k-fold cross-validation."),
    fold_limit: Optional[int] = typer.Option(None, "--fold-limit", help="Run only the first N folds."),
    eval_every: int = typer.Option(100, "--eval-every", help="Evaluate the validation DICE every E steps."),
    max_steps: int = typer.Option(4000, "--max-steps", help="Step budget per fold."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", help="Time budget per fold (checked at each evaluation)."),
    lr: float = typer.Option(3e-4, "--lr", help="Adam learning rate."),
    features: Optional[int] = typer.Option(None, "--features", help="Filters of the U-Net's first level (default 64)."),
    augment: bool = typer.Option(True, "--augment/--no-augment", help="Random flips and rotations of the training crops."),
    synthetic_n: int = typer.Option(30, "--synthetic-n", help="Images in the generated set (without --data)."),
    synthetic_size: int = typer.Option(512, "--synthetic-size", help="Their size in pixels (without --data)."),
    batch: int = typer.Option(8, "--batch", help="Batch size per GPU."),
    input_shape: Optional[str] = typer.Option(None, "--input-shape", help="Training input, e.g. 1x572x572 (default: the "
                                              "model's for unet2d-medical, the whole image for unet2d)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, tf32, fp16 (autocast + gradient scaler) or bf16 (autocast)."),
    channels_last: bool = ChannelsLastOpt, device: str = DeviceOpt, seed: int = SeedOpt,
    gpus: int = typer.Option(1, "--gpus", help="Processes, one per GPU (torchrun; DistributedDataParallel)."),
    db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Train to a DICE target with k-fold cross-validation: time to train, DICE per fold (seed 003)."""
    data = _checked_seg_data(data)
    _run_one("converge", locals())


def _checked_seg_data(path: Optional[Path]) -> Optional[str]:
    """Read the whole set once so every problem with it stops here, before anything runs."""
    if path is None:
        return None
    from dlbench.data import segmentation

    segmentation.load(path)
    return str(path.resolve())


data_app = typer.Typer(help="Generate synthetic data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("seg")
def data_seg(
    path: Path = typer.Argument(..., help="Folder to write: PATH/images and PATH/masks."),
    n: int = typer.Option(30, "--n", help="Number of image/mask pairs (the seed's ISBI set has 30)."),
    size: int = typer.Option(512, "--size", help="Width and height in pixels."),
    format: str = typer.Option("tif", "--format", help="tif or png."),
    seed: int = SeedOpt,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing set in PATH."),
) -> None:
    """Write an EM-membrane-like 2D segmentation set: cells, membranes, organelles, texture, blur, noise.

    Masks are 255 inside cells and 0 on membranes (the ISBI 2012 convention)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from dlbench.data import generate_seg
    from dlbench.workloads.runtime import resolve_device

    generate_seg.check(path, n, size, format, overwrite)
    with Progress("{task.description}", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err) as bar:
        task = bar.add_task(f"writing {path}", total=n)
        generate_seg.write(path, n, size, format, seed, overwrite=overwrite, device=resolve_device("auto"),
                           progress=lambda done, total: bar.update(task, completed=done))
    err.print(f"wrote {n} images and masks of {size}x{size} to {path}/images and {path}/masks", highlight=False)


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
def system() -> None:
    """Print this machine's fingerprint."""
    from dlbench.system.info import fingerprint

    out.print_json(json.dumps(fingerprint()))


def main() -> None:
    try:
        app()
    except UserError as error:
        err.print(f"error: {error}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
