"""Run specs one after another, in this process (or through torchrun for several GPUs);
store each result as soon as it ends."""

from __future__ import annotations

from typing import Callable, Iterable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dlbench.errors import UserError
from dlbench.launch import torchrun
from dlbench.results.record import Result, now
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.workloads import execute
from dlbench.workloads.runtime import resolve_device

Callback = Callable[[Result], None]


def run_specs(specs: Iterable[BenchmarkSpec], store: Store, *, suite: str | None = None,
              tag: str | None = None, on_result: Callback | None = None,
              console: Console | None = None) -> list[Result]:
    specs = list(specs)
    for spec in specs:  # a device this machine lacks is a user error before anything runs
        resolve_device(spec.device)
    console = console or Console(stderr=True)
    system = fingerprint()
    results: list[Result] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        overall = bar.add_task(f"suite {suite}" if suite else "benchmarks", total=len(specs))
        current = bar.add_task("", total=1)
        for spec in specs:
            def progress(stage: str, done: int, total: int, _label=spec.label()) -> None:
                bar.update(current, description=f"{_label} [{stage}]", completed=min(done, total), total=total)

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
                                 suite=suite, tag=tag, finished=now()))
                raise
            store.add(result)
            results.append(result)
            bar.advance(overall)
            if on_result:
                on_result(result)
    return results
