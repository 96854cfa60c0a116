"""Run specs one after another, in this process (or through torchrun for several GPUs);
store each result as soon as it ends."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dlbench.errors import UserError
from dlbench.launch import torchrun
from dlbench.launch.view import Heartbeat
from dlbench.models import registry
from dlbench.results.record import Result, now
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.system.records import SYSTEM_WORKLOAD, annotate
from dlbench.launch.execute import execute
from dlbench.workloads.runtime import resolve_device

Callback = Callable[[Result], None]


def check_devices(spec: BenchmarkSpec) -> None:
    """The device must exist; `gpus` processes need that many GPUs (any number on the CPU)."""
    import torch

    device = resolve_device(spec.device)
    if spec.gpus > 1 and spec.device != "cpu":
        present = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if spec.gpus > present:
            raise UserError(f"--gpus {spec.gpus} asked for, but this machine has {present} GPU(s)"
                            f"{'' if present else ' (use --device cpu to run the processes on the CPU)'}")
    if spec.gpus > 1 and device.type == "cuda" and device.index not in (None, 0):
        raise UserError("--gpus uses GPUs 0..N-1; pick visible GPUs with CUDA_VISIBLE_DEVICES instead of --device cuda:N")


def run_specs(specs: Iterable[BenchmarkSpec], store: Store, *, suite: str | None = None,
              tag: str | None = None, on_result: Callback | None = None,
              console: Console | None = None, extra_metrics: dict | None = None) -> list[Result]:
    """`extra_metrics`: metrics added to every result before it is stored (e.g. a batch search)."""
    specs = list(specs)
    for spec in specs:  # a device this machine lacks is a user error before anything runs
        check_devices(spec)
    console = console or Console(stderr=True)
    system = fingerprint()
    system_records = store.results(workload=SYSTEM_WORKLOAD)  # ceilings for FLOP utilisation
    results: list[Result] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    # Transient: the bar goes when the work ends, leaving the result lines (and a user error) alone.
    # Off a terminal rich would draw it once, at the end: the heartbeat's lines say the progress there.
    heartbeat = Heartbeat(console)
    bar = Progress(*columns, console=console, transient=True)
    with bar if console.is_terminal else contextlib.nullcontext():
        overall = bar.add_task(f"suite {suite}" if suite else "benchmarks", total=len(specs))
        current = bar.add_task("", total=1)
        for spec in specs:
            def progress(stage: str, done: int, total: int, _label=spec.label()) -> None:
                bar.update(current, description=f"{_label} [{stage}]", completed=min(done, total), total=total)
                heartbeat(f"{_label}: {stage} {min(done, total)}/{total}")

            try:
                if spec.gpus > 1:
                    result = torchrun.run(spec, system, suite=suite, tag=tag)
                else:
                    result = execute(spec, system, progress=progress, suite=suite, tag=tag)
            except UserError:
                bar.live.transient = True  # the error line alone, not a half-drawn bar above it
                raise
            except KeyboardInterrupt:
                store.add(Result(spec=spec.to_dict(), system=system, status="interrupted",
                                 title=registry.title(spec.model), suite=suite, tag=tag, finished=now()))
                raise
            annotate(result, system_records)
            result.metrics.update(extra_metrics or {})
            store.add(result)
            results.append(result)
            bar.advance(overall)
            if on_result:
                on_result(result)
    return results
