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


def _run_one(workload: str, params: dict, exit_on_error: bool = True) -> str:
    """Build the spec from a sub-command's parameters (the rest become options), run and store it."""
    spec, db, tag = _spec(workload, params)
    _preflight(spec)
    with _store(db) as store:
        result = _run_specs_once(spec, store, tag)
    return _finish(result, exit_on_error)


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


# Options of the image workloads (train, infer, smooth).
ImageBatchOpt = typer.Option("16", "--batch", help="Batch size per process: N, a list 1,2,4 (one result each), "
                             "'sweep' (powers of two until memory runs out) or 'auto' (largest batch that fits).")
DataOpt = typer.Option("synthetic", "--data", help="synthetic (random tensors on the device), dummy (random images "
                       "through the real CPU transforms) or folder:PATH (class folders of JPEGs).")
WorkersOpt = typer.Option(None, "--workers", help="DataLoader worker processes (default: min(8, CPU cores)).")
DecodeOpt = typer.Option("cpu", "--decode", help="Where JPEGs are decoded: cpu (in the workers) or gpu (nvjpeg, "
                         "crop and resize on the GPU).")
PrefetchOpt = typer.Option(2, "--prefetch", help="Batches each worker prepares ahead.")
MaxCorruptOpt = typer.Option(0.05, "--max-corrupt", help="Fraction of undecodable files skipped before the run fails.")
EpochsOpt = typer.Option(0, "--epochs", help="Measure this many whole epochs of the dataset instead of --steps.")
GpusOpt = typer.Option(1, "--gpus", help="Processes (one per GPU) under torchrun with DistributedDataParallel; "
                       "with --device cpu they run on the CPU (gloo).")
MaxBatchOpt = typer.Option(1024, "--max-batch", help="Largest batch a sweep or auto search tries.")


def _run_images(workload: str, params: dict) -> None:
    """`--batch` may name several batches, a sweep or a search: one stored result per batch run."""
    from dlbench.launch import batchsize

    plan = batchsize.parse(params.pop("batch"))
    limit = params.pop("max_batch")
    if plan == "auto":
        _run_auto(workload, params, limit)
        return
    sizes = batchsize.sweep_sizes(limit) if plan == "sweep" else plan
    failed = False
    for size in sizes:
        status = _run_one(workload, {**params, "batch": size}, exit_on_error=False)
        failed |= status == "error"
        if status == "oom" and plan == "sweep":
            break  # larger batches cannot fit either
    if failed:
        raise typer.Exit(1)


def _run_auto(workload: str, params: dict, limit: int) -> None:
    import dataclasses

    from dlbench.launch import batchsize

    spec, db, tag = _spec(workload, {**params, "batch": 1})
    _preflight(spec)
    with _store(db) as store:
        run = _unstored_runner()
        err.print(f"searching the largest batch for {spec.label()} (up to {limit})", highlight=False)
        found = batchsize.search(batchsize.probe_with(run, spec), limit=limit)
        err.print(f"batch search: largest {found['largest']}, best throughput at {found['best_throughput_batch']} "
                  f"({len(found['tried'])} probes)", highlight=False)
        final = spec if found["largest"] is None else dataclasses.replace(spec, batch=found["largest"])
        _finish(_run_specs_once(final, store, tag, {"batch_search": found}))


def _unstored_runner():
    """Runs a spec without storing it (the probes of a batch search)."""
    from dlbench.launch import torchrun
    from dlbench.system.info import fingerprint
    from dlbench.workloads import execute

    def run(probe_spec):
        if probe_spec.gpus > 1:
            return torchrun.run(probe_spec, fingerprint())
        return execute(probe_spec, fingerprint())

    return run


def _spec(workload: str, params: dict):
    from dlbench.spec import BenchmarkSpec

    params = dict(params)
    db, tag = params.pop("db"), params.pop("tag")
    general = {k: params.pop(k) for k in _GENERAL if k in params}
    options = {k: v for k, v in params.items() if v is not None}
    return BenchmarkSpec(workload=workload, options=options, **general), db, tag


def _preflight(spec) -> None:
    """Check the data options and print warnings before anything runs."""
    from dlbench import data
    from dlbench.launch.inprocess import check_devices
    from dlbench.workloads.runtime import resolve_device

    check_devices(spec)
    if "data" in spec.options:
        for warning in data.check(spec, resolve_device(spec.device)):
            err.print(f"warning: {warning}", style="yellow", highlight=False)


def _run_specs_once(spec, store, tag, annotate=None):
    from dlbench.launch.inprocess import run_specs

    return run_specs([spec], store, tag=tag, console=err, annotate=annotate)[0]


def _finish(result, exit_on_error: bool = True) -> str:
    _print_result(result)
    if result.status == "error" and exit_on_error:
        raise typer.Exit(1)
    return result.status


@run_app.command("train")
def run_train(
    model: str = ModelOpt, batch: str = ImageBatchOpt, input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, gpus: int = GpusOpt,
    data: str = DataOpt, workers: Optional[int] = WorkersOpt, decode: str = DecodeOpt, prefetch: int = PrefetchOpt,
    max_corrupt: float = MaxCorruptOpt, epochs: int = EpochsOpt,
    optimizer: str = typer.Option("sgd", "--optimizer", help="sgd (momentum 0.9) or adamw."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate (default 0.01 SGD, 0.001 AdamW)."),
    max_batch: int = MaxBatchOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Training steps (forward, loss, backward, optimizer) with per-phase times and img/s (seeds 002, 003)."""
    _run_images("train", locals())


@run_app.command("infer")
def run_infer(
    model: str = ModelOpt, batch: str = ImageBatchOpt, input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, gpus: int = GpusOpt,
    data: str = DataOpt, workers: Optional[int] = WorkersOpt, decode: str = DecodeOpt, prefetch: int = PrefetchOpt,
    max_corrupt: float = MaxCorruptOpt, epochs: int = EpochsOpt,
    max_batch: int = MaxBatchOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Inference throughput and latency per batch (avg, p50/p90/p95/p99) under inference_mode."""
    _run_images("infer", locals())


@run_app.command("smooth")
def run_smooth(
    model: str = ModelOpt, batch: str = ImageBatchOpt, input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, gpus: int = GpusOpt,
    data: str = DataOpt, workers: Optional[int] = WorkersOpt, decode: str = DecodeOpt, prefetch: int = PrefetchOpt,
    max_corrupt: float = MaxCorruptOpt, epochs: int = EpochsOpt,
    sigma: float = typer.Option(0.25, "--sigma", help="Standard deviation of the Gaussian noise."),
    max_batch: int = MaxBatchOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Randomized-smoothing inference (seed 002): each input repeated --batch times with noise, one forward each."""
    _run_images("smooth", locals())


data_app = typer.Typer(help="Write synthetic datasets to benchmark real input pipelines anywhere.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("images")
def data_images(
    path: Path = typer.Argument(..., help="Folder to write (class folders of JPEGs)."),
    n: int = typer.Option(1000, "--n", help="Number of images."),
    classes: int = typer.Option(10, "--classes", help="Number of class folders."),
    seed: int = typer.Option(0, "--seed", help="Random seed (the same seed writes the same files)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Processes writing images (default: min(8, cores))."),
) -> None:
    """An ImageNet-like JPEG dataset: photo-like images around 500x375 pixels and ~100 KB each."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from dlbench.data.generate import generate

    with Progress("writing JPEGs", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err) as bar:
        task = bar.add_task("", total=n)
        summary = generate(path, n, classes=classes, seed=seed, workers=workers,
                           progress=lambda done, total: bar.update(task, completed=done))
    err.print(f"wrote {summary['images']} images in {summary['classes']} classes to {path} "
              f"({summary['bytes'] / 1e6:.1f} MB, {summary['mean_kb']:.0f} KB each on average)", highlight=False)


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
    """Print the report tables from the results in the store (seed 004 per model; seeds 002 and 003 for train, infer, smooth)."""
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
