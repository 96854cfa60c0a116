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


GpusOpt = typer.Option(1, "--gpus", help="Processes, one per GPU, launched through torchrun.")


@run_app.command("volume")
def run_volume(
    input: Optional[str] = typer.Option(None, "--input", help="Volume to predict, PATH[:KEY] (.h5/.hdf5, .zarr, .n5; "
                                        "key default volumes/raw). Default: generate --volume-shape on local disk."),
    output: Optional[str] = typer.Option(None, "--output", help="Prediction, PATH[:KEY] (.zarr or .n5; key default "
                                         "'prediction'). Default: a temporary output, deleted after the run."),
    model: str = typer.Option("unet3d", "--model", help="Registry model (`dlbench models`; e.g. unet3d, unet3d-aniso, "
                              "unet3d:f=16,d=3) or a TorchScript (.pt/.ts) or torch.export (.pt2) file."),
    block: str = typer.Option("32x384x384", "--block", help="Output block ZxYxX (one output chunk each), or 'auto': "
                              "the largest that fits the GPU."),
    halo: str = typer.Option("16x64x64", "--halo", help="Context added on each side of a block (reflected at the border)."),
    resume: bool = typer.Option(False, "--resume", help="Complete an interrupted output: skip blocks already written."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output."),
    dtype: str = typer.Option("uint8", "--dtype", help="Output type: uint8 (probability x 255) or float16."),
    extrapolate: str = typer.Option("8.1T", "--extrapolate", help="Report hours for a volume of this many voxels "
                                    "(8.1T: the seed's Platynereis volume)."),
    volume_shape: str = typer.Option("200x3072x3072", "--volume-shape", help="Size of the generated volume when "
                                     "no --input is given (the seed's padded CREMI volume, 1.9 gigavoxel)."),
    readers: int = typer.Option(8, "--readers", help="Reader threads."),
    writers: int = typer.Option(4, "--writers", help="Writer threads."),
    queue: int = typer.Option(8, "--queue", help="Tiles in flight on each side of the GPU."),
    compile: bool = typer.Option(False, "--compile", help="torch.compile the model."),
    precision: str = PrecisionOpt, channels_last: bool = typer.Option(False, "--channels-last", help="Channels-last-3d."),
    device: str = DeviceOpt, gpus: int = GpusOpt,
    warmup: int = typer.Option(2, "--warmup", help="Forward passes on the first tile before the measurement."),
    seed: int = SeedOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Blockwise prediction of a whole volume (seed 000/001): Mvox/s, time per phase, hours for --extrapolate."""
    params = dict(locals())
    from dlbench.workloads.volume import preflight

    preflight({k: params[k] for k in ("input", "output", "block", "halo", "resume", "overwrite", "dtype", "extrapolate")})
    params.update(batch=1, warmup_seconds=0.0, steps=1, min_seconds=0.0)
    _run_one("volume", params)


data_app = typer.Typer(help="Generate synthetic data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("volume")
def data_volume(
    path: Path = typer.Argument(..., help="File (.h5/.hdf5) or directory (.zarr, .n5) to write."),
    shape: str = typer.Option("200x3072x3072", "--shape", help="Volume size ZxYxX (the seed's padded CREMI volume)."),
    format: Optional[str] = typer.Option(None, "--format", help="hdf5, zarr or n5 (default: from the path's suffix)."),
    chunks: Optional[str] = typer.Option(None, "--chunks", help="Chunk size ZxYxX (default 8x256x256)."),
    labels: bool = typer.Option(True, "--labels/--no-labels", help="Also write volumes/labels/neuron_ids."),
    seed: int = SeedOpt,
    workers: int = typer.Option(4, "--workers", help="Threads computing slabs."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing volume."),
) -> None:
    """Write an EM-like volume (cells, membranes, texture, noise) with labels in the CREMI layout, slab by slab."""
    from rich.progress import BarColumn, Progress, TimeRemainingColumn

    from dlbench.data.generate_volume import check, generate
    from dlbench.spec import parse_shape

    size = parse_shape(shape)
    check(path, size, format, parse_shape(chunks) if chunks else None, overwrite)
    with Progress("{task.description}", BarColumn(), "{task.completed}/{task.total} planes", TimeRemainingColumn(),
                  console=err) as bar:
        task = bar.add_task(f"writing {path}", total=size[0])
        generate(path, size, format, chunks=parse_shape(chunks) if chunks else None, seed=seed, labels=labels,
                 workers=workers, overwrite=overwrite, progress=lambda done, total: bar.update(task, completed=done))
    err.print(f"wrote {'x'.join(map(str, size))} volume to {path}", highlight=False)


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
