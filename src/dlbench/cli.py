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
OptimizeOpt = typer.Option("eager", "--optimize", help="eager (as built), compile (torch.compile), graphs (CUDA graphs "
                           "of the step, static inputs; GPU only) or max (compile with autotuned matmuls + CUDA graphs + "
                           "channels-last + fused optimizer; GPU only). Checked against eager before timing; "
                           "compile time is reported as compile_s, outside the measurement.")
DeviceOpt = typer.Option("auto", "--device", help="auto (GPU if present), cpu, cuda or cuda:N.")
WarmupOpt = typer.Option(5, "--warmup", help="Warm-up steps (at least).")
WarmupSecondsOpt = typer.Option(1.0, "--warmup-seconds", help="Warm-up seconds (at least).")
StepsOpt = typer.Option(20, "--steps", help="Measured steps (at least).")
MinSecondsOpt = typer.Option(1.0, "--min-seconds", help="Measured seconds (at least).")
SeedOpt = typer.Option(0, "--seed", help="Random seed for weights and inputs.")

_GENERAL = ("model", "batch", "input_shape", "precision", "channels_last", "optimize", "device", "warmup",
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
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, optimize: str = OptimizeOpt, device: str = DeviceOpt,
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
                       "through the real CPU transforms), folder:PATH (class folders of JPEGs) or, for train with "
                       "3D models, a volume PATH[:KEY] (.h5/.hdf5, .zarr, .n5 with labels; `dlbench data volume`).")
WorkersOpt = typer.Option(None, "--workers", help="DataLoader worker processes (default: min(8, CPU cores)).")
DecodeOpt = typer.Option("cpu", "--decode", help="Where JPEGs are decoded: cpu (in the workers) or gpu (nvjpeg, "
                         "crop and resize on the GPU).")
CpuShareOpt = typer.Option(None, "--cpu-share", help="With --decode gpu: the share of each batch the workers "
                           "decode on the CPU beside the GPU (default 0: all on the GPU). Raise it when nvjpeg "
                           "cannot keep up (data wait while the workers idle), e.g. 0.2 for small, fast models.")
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
    if "data" in spec.options and spec.workload in ("train", "infer", "smooth"):  # converge checks its own data
        for warning in data.check(spec, resolve_device(spec.device), _volume_shape(spec)):
            err.print(f"warning: {warning}", style="yellow", highlight=False)


def _volume_shape(spec):
    """The model input a volume dataset must hold (train only), so a patch that does not fit fails here."""
    from dlbench import data

    if spec.workload != "train" or data.parse_source(spec.options["data"])[0] != "volume":
        return None
    from dlbench.models import registry
    from dlbench.workloads.train import input_shape

    return input_shape(spec, registry.resolve(spec.model))


def _run_specs_once(spec, store, tag, extra_metrics=None):
    from dlbench.launch.inprocess import run_specs

    return run_specs([spec], store, tag=tag, console=err, extra_metrics=extra_metrics)[0]


def _finish(result, exit_on_error: bool = True) -> str:
    _print_result(result)
    if result.status == "error" and exit_on_error:
        raise typer.Exit(1)
    return result.status


@run_app.command("train")
def run_train(
    model: str = ModelOpt,
    batch: Optional[str] = typer.Option(None, "--batch", help="Batch size per process (default 1 for 3D models: one "
                                        "patch per GPU like seed 000/001, else 16): N, a list 1,2,4 (one result "
                                        "each), 'sweep' (powers of two until memory runs out) or 'auto'."),
    input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, optimize: str = OptimizeOpt,
    device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, gpus: int = GpusOpt,
    data: str = DataOpt, workers: Optional[int] = WorkersOpt, decode: str = DecodeOpt,
    cpu_share: Optional[float] = CpuShareOpt, prefetch: int = PrefetchOpt,
    max_corrupt: float = MaxCorruptOpt, epochs: int = EpochsOpt,
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="sgd (momentum 0.9), adam or adamw (default: "
                                            "adam for 3D models, sgd for the rest)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate (default 0.01 SGD, 0.001 Adam/AdamW)."),
    patch: Optional[str] = typer.Option(None, "--patch", help="Volume training patch ZxYxX, e.g. 40x432x432 "
                                        "(default: the model's input shape)."),
    augment: str = typer.Option("auto", "--augment", help="Where volume patches are elastically deformed and "
                                "flipped: auto (gpu on a GPU, else cpu), cpu (in the workers), gpu (grid_sample on "
                                "the device; the workers only read) or none."),
    extrapolate_iters: int = typer.Option(100_000, "--extrapolate-iters", help="3D models: report the days to "
                                          "this many training iterations."),
    max_batch: int = MaxBatchOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Training steps (forward, loss, backward, optimizer) with per-phase times and img/s (seeds 002, 003); with a
    3D U-Net on a volume, seconds per iteration, iterations per minute and days to 100k iterations (seeds 000/001)."""
    if batch is None:
        batch = "1" if model.startswith("unet3d") else "16"
    _run_images("train", locals())


@run_app.command("infer")
def run_infer(
    model: str = ModelOpt, batch: str = ImageBatchOpt, input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, optimize: str = OptimizeOpt, device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, gpus: int = GpusOpt,
    data: str = DataOpt, workers: Optional[int] = WorkersOpt, decode: str = DecodeOpt,
    cpu_share: Optional[float] = CpuShareOpt, prefetch: int = PrefetchOpt,
    max_corrupt: float = MaxCorruptOpt, epochs: int = EpochsOpt,
    max_batch: int = MaxBatchOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Inference throughput and latency per batch (avg, p50/p90/p95/p99) under inference_mode."""
    _run_images("infer", locals())


@run_app.command("smooth")
def run_smooth(
    model: str = ModelOpt, batch: str = ImageBatchOpt, input_shape: Optional[str] = ShapeOpt,
    precision: str = PrecisionOpt, channels_last: bool = ChannelsLastOpt, optimize: str = OptimizeOpt, device: str = DeviceOpt,
    warmup: int = WarmupOpt, warmup_seconds: float = WarmupSecondsOpt, steps: int = StepsOpt,
    min_seconds: float = MinSecondsOpt, seed: int = SeedOpt, gpus: int = GpusOpt,
    data: str = DataOpt, workers: Optional[int] = WorkersOpt, decode: str = DecodeOpt,
    cpu_share: Optional[float] = CpuShareOpt, prefetch: int = PrefetchOpt,
    max_corrupt: float = MaxCorruptOpt, epochs: int = EpochsOpt,
    sigma: float = typer.Option(0.25, "--sigma", help="Standard deviation of the Gaussian noise."),
    max_batch: int = MaxBatchOpt, db: Optional[Path] = DbOption, tag: Optional[str] = TagOption,
) -> None:
    """Randomized-smoothing inference (seed 002): each input repeated --batch times with noise, one forward each."""
    _run_images("smooth", locals())


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
    optimize: str = OptimizeOpt,
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
    channels_last: bool = ChannelsLastOpt, optimize: str = OptimizeOpt, device: str = DeviceOpt, seed: int = SeedOpt,
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
    _finish_suite(store, plan)


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


def _finish_suite(store, plan) -> None:
    """The report of this suite run, a count by status, and exit 1 when something failed."""
    from collections import Counter

    from dlbench.report import render_markdown
    from dlbench.suites import spec_key

    mine = [r for r in store.results(suite=plan.suite.name) if r.run == plan.run]
    out.print(render_markdown([r for r in mine if r.status == "ok"]), highlight=False, markup=False, soft_wrap=True)
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
    _finish_suite(store, plan)


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
    with_references: bool = typer.Option(False, "--with-references", help="Add the seeds' published rows, labelled "
                                         "with their source and their arithmetic checked, to the tables."),
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
    text = render(chosen, format, title=f"dlbench report: {suite_name}" if suite_name else "dlbench report",
                  with_references=with_references)
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
        benchmark = ("system ceilings" if r.workload == "system"
                     else f"{r.workload} {r.model} b{r.spec.get('batch')} {r.spec.get('precision')}")
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
    from dlbench import plugins

    try:
        plugins.load()
        app()
    except UserError as error:
        err.print(f"error: {error}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
