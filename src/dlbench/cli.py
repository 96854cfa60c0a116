"""Command line: parses arguments and calls into the package; nothing else lives here.

The `dlbench run <workload>` commands are made from each workload's typed options (and the
general spec fields it takes), so a new option or workload needs no change here.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from dlbench import workloads
from dlbench.errors import UserError
from dlbench.launch.view import Terminal

app = typer.Typer(
    help="Deep learning benchmarks for GPU machines. With no command, runs the default suite (`quick` on a "
         "GPU; without one `smoke`, a short CPU check), stores the results and prints the report.",
    no_args_is_help=False, add_completion=False, pretty_exceptions_enable=False,
)
view = Terminal()

DbOption = typer.Option(None, "--db", help="Result store (SQLite). Default: $DLBENCH_DB or ./dlbench.db.")
TagOption = typer.Option(None, "--tag", help="Free text stored with every result, to find runs later.")
SeedOpt = typer.Option(0, "--seed", help="Random seed.")


def _store(db: Optional[Path]):
    from dlbench.results.store import Store

    return Store(db)


def _version(show: bool) -> None:
    if show:
        from dlbench import __version__

        view.text(f"dlbench {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _default(ctx: typer.Context,
             db: Optional[Path] = typer.Option(None, "--db", help="Result store (SQLite) for this command and every "
                                               "command after it in this call. Default: $DLBENCH_DB or ./dlbench.db."),
             version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")) -> None:
    if db is not None:  # `dlbench --db X results`: every command and every process it starts uses X
        os.environ["DLBENCH_DB"] = str(db)
    if ctx.invoked_subcommand is None:
        _suite_exit()


class _RunCommands(TyperGroup):
    """`dlbench run`'s sub-commands, one per workload, made when asked for: building one imports
    its workload (and torch), which other commands need not wait for."""

    def list_commands(self, ctx) -> list[str]:
        return workloads.names()

    def get_command(self, ctx, name: str):
        if name not in workloads.names():
            return None
        return typer.main.get_command(_run_app(workloads.get(name)))


run_app = typer.Typer(cls=_RunCommands, help="Run one benchmark and store its result.", no_args_is_help=True)
app.add_typer(run_app, name="run")

BATCH_PLANS = (" --batch also takes a list 1,2,4 (one result each), 'sweep' (powers of two until memory runs "
               "out) or 'auto' (the largest batch that fits).")


def _run_app(workload: workloads.Workload) -> typer.Typer:
    """A one-command app whose options are the workload's general fields and typed options."""
    from dlbench.options import fields_of
    from dlbench.spec import BenchmarkSpec

    general = [f for f in fields_of(BenchmarkSpec) if f.name in workload.general]
    params = [_parameter(f, workload) for f in general + workload.options.fields()]
    if workload.batch_plans:
        params.append(_param("max_batch", int, 1024, "--max-batch", "Largest batch a sweep or auto search tries."))
    # --output names the prediction of `run volume`; --results-file (timm's name) works everywhere.
    flags = ("--results-file",) + (() if "output" in workload.options.names() else ("--output",))
    params += [_param("db", Optional[Path], None, "--db", DbOption.help),
               _param("tag", Optional[str], None, "--tag", TagOption.help),
               _param("results_file", Optional[Path], None, flags, "Also write the result as JSON: one object per "
                      "run (throughput, step time percentiles, batch, shape, precision, parameters, FLOPs, peak "
                      "memory, system).")]

    def command(**values) -> None:
        from dlbench.launch.runs import run_command

        db, tag, file = values.pop("db"), values.pop("tag"), values.pop("results_file")
        given = {k: v for k, v in values.items() if v is not None}
        raise typer.Exit(run_command(workload.name, given, db=db, tag=tag, view=view, results_file=file))

    command.__signature__ = inspect.Signature(params)
    command.__doc__ = workload.help
    sub = typer.Typer(add_completion=False)
    sub.command(workload.name)(command)
    return sub


def _parameter(field, workload: workloads.Workload) -> inspect.Parameter:
    default = workload.defaults.get(field.name, field.default)
    kind = str if field.kind is tuple or (field.name == "batch" and workload.batch_plans) else field.kind
    text = field.help() + (BATCH_PLANS if field.name == "batch" and workload.batch_plans else "")
    flags = f"{field.flag}/--no-{field.flag[2:]}" if kind is bool and default else field.flag
    optional = field.optional or default is None
    return _param(field.name, Optional[kind] if optional else kind, default, flags, text)


def _param(name: str, annotation, default, flags: str | tuple[str, ...], text: str) -> inspect.Parameter:
    flags = (flags,) if isinstance(flags, str) else flags
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, *flags, help=text))


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
    from dlbench.data.generate import generate

    with view.progress("writing JPEGs", n, "images") as progress:
        summary = generate(path, n, classes=classes, seed=seed, workers=workers, progress=progress)
    view.message(f"wrote {summary['images']} images in {summary['classes']} classes to {path} "
                 f"({summary['bytes'] / 1e6:.1f} MB, {summary['mean_kb']:.0f} KB each on average)")


@data_app.command("volume")
def data_volume(
    path: Path = typer.Argument(..., help="File (.h5/.hdf5) or directory (.zarr, .n5) to write."),
    shape: str = typer.Option("200x3072x3072", "--shape", help="Volume size ZxYxX (the padded CREMI volume of the 3D U-Net benchmarks)."),
    format: Optional[str] = typer.Option(None, "--format", help="hdf5, zarr or n5 (default: from the path's suffix)."),
    chunks: Optional[str] = typer.Option(None, "--chunks", help="Chunk size ZxYxX (default 8x256x256)."),
    labels: bool = typer.Option(True, "--labels/--no-labels", help="Also write volumes/labels/neuron_ids."),
    seed: int = SeedOpt,
    workers: int = typer.Option(4, "--workers", help="Threads computing slabs."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing volume."),
) -> None:
    """Write an EM-like volume (cells, membranes, texture, noise) with labels in the CREMI layout, slab by slab."""
    from dlbench.data.generate_volume import check, generate
    from dlbench.units import parse_shape

    size, chunk = parse_shape(shape), parse_shape(chunks) if chunks else None
    check(path, size, format, chunk, overwrite)
    with view.progress(f"writing {path}", size[0], "planes") as progress:
        generate(path, size, format, chunks=chunk, seed=seed, labels=labels, workers=workers, overwrite=overwrite,
                 progress=progress)
    view.message(f"wrote {'x'.join(map(str, size))} volume to {path}")


@data_app.command("seg")
def data_seg(
    path: Path = typer.Argument(..., help="Folder to write: PATH/images and PATH/masks."),
    n: int = typer.Option(30, "--n", help="Number of image/mask pairs (the ISBI 2012 set has 30)."),
    size: int = typer.Option(512, "--size", help="Width and height in pixels."),
    format: str = typer.Option("tif", "--format", help="tif or png."),
    seed: int = SeedOpt,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing set in PATH."),
) -> None:
    """Write an EM-membrane-like 2D segmentation set: cells, membranes, organelles, texture, blur, noise.

    Masks are 255 inside cells and 0 on membranes (the ISBI 2012 convention)."""
    from dlbench.data import generate_seg
    from dlbench.workloads.runtime import resolve_device

    generate_seg.check(path, n, size, format, overwrite)
    with view.progress(f"writing {path}", n, "pairs") as progress:
        generate_seg.write(path, n, size, format, seed, overwrite=overwrite, device=resolve_device("auto"),
                           progress=progress)
    view.message(f"wrote {n} images and masks of {size}x{size} to {path}/images and {path}/masks")


@app.command()
def suite(
    name: Optional[str] = typer.Argument(None, help="Built-in suite name (quick, cnn-benchmarks, ...) or a suite YAML "
                                         "file. Default: quick on a GPU machine, smoke (a short CPU check) without "
                                         "one; with --list and no name: the built-in suites."),
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
    _suite_exit(**locals())


def _suite_exit(**values) -> None:
    from dlbench.launch.suiterun import SuiteRequest, suite_command

    raise typer.Exit(suite_command(SuiteRequest(**values), view))


@app.command()
def report(
    suite_name: Optional[str] = typer.Option(None, "--suite", help="Only results of this suite."),
    systems: Optional[list[str]] = typer.Option(None, "--system", help="Only results of this system "
                                                "(GPU name as shown in the tables, or host name); repeatable."),
    format: str = typer.Option("md", "--format", help="md (Markdown, in the published reports' layouts), csv, json, or html "
                               "(one self-contained file with plots; needs --output)."),
    db: Optional[Path] = DbOption,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    with_references: bool = typer.Option(False, "--with-references", help="Add the published reports' own rows, labelled "
                                         "with their source and their arithmetic checked, to the tables."),
) -> None:
    """Every report table (in the published reports' layouts: GPUs, per-model fwd/bwd, training, images, volumes, machine)
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
    view.write(text, output)


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

    if format not in ("md", "json"):
        raise UserError(f"unknown compare format {format!r}; choose md or json")
    if fail_above is not None:
        cmp.check_regression_args(len(sides), fail_above)
    with _store(db) as store:
        comparison = cmp.compare(store.results(suite=suite_name), sides, level=confidence)
    failed = cmp.regressions(comparison, fail_above) if fail_above is not None else []
    view.write(cmp.render(comparison, format, failed), output)
    if failed:
        for line in failed:
            view.message(f"regression: {line}")
        raise typer.Exit(1)
    if fail_above is not None:
        view.message(f"no regression above {fail_above:g}% beyond noise")


@app.command()
def results(db: Optional[Path] = DbOption, limit: int = typer.Option(50, help="Show the newest N results."),
            format: str = typer.Option("table", "--format", help="table, or json: one object per result and line "
                                       "(throughput, step time percentiles, batch, shape, precision, parameters, "
                                       "FLOPs, peak memory, system).")) -> None:
    """List stored results, newest last."""
    if format not in ("table", "json"):
        raise UserError(f"unknown results format {format!r}; choose table or json")
    with _store(db) as store:
        rows = store.results()[-limit:]
    view.results(rows) if format == "table" else view.summaries(rows)


@app.command("export")
def export_(
    format: str = typer.Option("jsonl", "--format", help="jsonl (complete, importable) or csv (flat)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
    db: Optional[Path] = DbOption,
) -> None:
    """Export all stored results."""
    from dlbench.results import exchange

    exchange.check_format(format)
    with _store(db) as store:
        records = store.results()
    if output is None:
        exchange.WRITERS[format](records, sys.stdout)
        return
    with open(output, "w", encoding="utf-8", newline="") as f:
        view.message(f"wrote {exchange.WRITERS[format](records, f)} results to {output}")


@app.command("import")
def import_(files: list[Path] = typer.Argument(..., help="JSON-lines files written by `dlbench export`, or folders "
                                              "of record files (e.g. a `--slurm` run's folder)."),
            db: Optional[Path] = DbOption) -> None:
    """Merge results exported on other machines; results already stored are skipped."""
    from dlbench.results import exchange

    records = exchange.read_all(files)
    with _store(db) as store:
        added = store.add_many(records)
    view.message(f"imported {added} new results ({len(records) - added} already stored)")


@app.command()
def models() -> None:
    """List the registered models (any torchvision classifier and timm:<name> work too)."""
    from dlbench.models import registry

    for name in registry.names():
        entry = registry.MODELS[name]
        view.out.print(f"{name:12s} {entry.title:14s} input {'x'.join(map(str, entry.input_shape))}", highlight=False)


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
    if fingerprint_only:
        from dlbench.system.info import fingerprint

        view.out.print_json(json.dumps(fingerprint()))
        return
    from dlbench.launch.runs import system_command

    system_command(device, disk, db, store, view)


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
    view.text(render(diagnoses) if diagnoses else NOTHING_TO_DIAGNOSE)


def main() -> None:
    from dlbench import plugins
    from dlbench.launch.environment import prepare

    prepare()
    try:
        plugins.load()
        app()
    except UserError as error:
        view.message(f"error: {error}")
        sys.exit(2)
