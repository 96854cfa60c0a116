"""Run specs one after another, in this process (or in one process per GPU for several GPUs);
store each result as soon as it ends."""

from __future__ import annotations

import contextlib
import io
import os
import time
from functools import partial
from typing import Callable, Iterable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlbench.errors import UserError
from dlbench.launch import flopcount, interrupts, placement, torchrun
from dlbench.launch.view import Countdown, Heartbeat, one_line
from dlbench.suites.estimate import countdown
from dlbench.models import registry
from dlbench.results.measurement import Run, Window
from dlbench.results.record import Result, now
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.records import SYSTEM_WORKLOAD, carried_ceiling, here
from dlbench.launch.execute import execute, with_utilisation
from dlbench.launch.tuning import for_workload
from dlbench.launch.wall import since_start
from dlbench.workloads.tuning import Tuned
from dlbench.workloads.runtime import resolve_device

Callback = Callable[[Result], None]


def run_specs(specs: Iterable[BenchmarkSpec], store: Store, *, suite: str | None = None,
              tag: str | None = None, on_result: Callback | None = None,
              console: Console | None = None, extra_metrics: Run | None = None,
              retune: bool = False, ranks: torchrun.Ranks | None = None,
              expected: list[float | None] | None = None) -> list[Result]:
    """`extra_metrics`: metrics added to every result before it is stored (e.g. a batch search). What a
    workload tunes itself is looked up before its run and kept after it (launch/tuning.py); `retune`
    measures again. Each result holds the seconds from this process's start to it (`wall_to_result_s`).
    `ranks`: the ranks of the first spec, started already (launch/torchrun.py `started`). `expected`: each
    spec's estimate in seconds (commands/run.py), which its progress counts down against."""
    specs = list(specs)
    for spec in specs:  # a device this machine lacks is a user error before anything runs
        placement.of(spec).check()
    console = console or Console(stderr=True)
    known = store.results(workload=SYSTEM_WORKLOAD)  # ceilings for FLOP utilisation
    results: list[Result] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), Countdown())
    expected = list(expected or [])
    # Transient: the bar goes when the work ends, leaving the result lines (and a user error) alone.
    # Off a terminal rich would draw it once, at the end: the heartbeat's lines say the progress there.
    heartbeat = Heartbeat(console)
    bar = Progress(*columns, console=console, transient=True)
    with _own_stream(console), (bar if console.is_terminal else contextlib.nullcontext()), heartbeat:
        overall = bar.add_task(f"suite {suite}" if suite else "benchmarks", total=len(specs))
        current = bar.add_task("", total=1)
        for index, spec in enumerate(specs):
            begun = 0.0 if index == 0 else since_start()  # the first run's wait includes this process's start
            _count_down(bar, current, heartbeat, expected[index] if index < len(expected) else None, begun)
            progress = _progress(bar, current, heartbeat, spec.label())
            progress("starting", 0, 0)  # loading the model and data says nothing for a while
            place = placement.of(spec)
            system = place.fingerprint()
            with interrupts.pending(partial(store_interrupted, store.path, spec, system, suite, tag)) as settle:
                try:
                    tuning = for_workload(store, spec, system, retune)
                    tuned = tuning.lookup(partial(console.print, style="yellow", highlight=False, markup=False,
                                                  soft_wrap=True))
                    counted = flopcount.lookup(store, spec.to_dict())
                    result, ceiling = _run_one(spec, system, known, progress, suite, tag, tuned, ranks, counted)
                    ranks = None
                except UserError:
                    bar.live.transient = True  # the error line alone, not a half-drawn bar above it
                    raise
                result.add(extra_metrics or Run(), Window(wall_to_result_s=round(since_start(), 2)))
                # what the next run of this spec here is estimated from (suites/estimate.py wall_seconds)
                result.traces.setdefault("launch", {"mode": place.mode(isolated=False), "wall_s": round(since_start() - begun, 3)})
                # the ceiling is measured once here; later runs find it in the store
                not_stored = store.add_kept([r for r in (ceiling, result) if r is not None])
                if ceiling is not None:
                    known.append(ceiling)
                settle()
                # a result kept outside the store is no tuning to point at, and a locked store would be waited for again
                note = tuning.keep(result) if not_stored is None else None
                if not_stored is None:
                    flopcount.keep(store, spec.to_dict(), result, counted)
            if not_stored:  # the run measured: it goes on, and its exit status stays what it would have been
                console.print(f"warning: {one_line(not_stored)}", style="yellow", highlight=False, markup=False,
                              soft_wrap=True)
            if note:
                console.print(note, highlight=False, markup=False, soft_wrap=True)
            results.append(result)
            bar.advance(overall)
            if on_result:
                on_result(result)
    return results


def _count_down(bar: Progress, task, heartbeat: Heartbeat, guess: float | None, begun: float) -> None:
    """The run's countdown against its estimate `guess`, from `begun` (seconds after this process's start)."""
    since = time.monotonic() - (since_start() - begun)
    bar.update(task, expected=guess, since=since)
    heartbeat.clock = partial(lambda g, t: countdown(g, time.monotonic() - t), guess, since)


def _progress(bar: Progress, task, heartbeat: Heartbeat, label: str) -> Callable[[str, int, int], None]:
    """The callback through which a run says its stage, on the bar and in the heartbeat's lines."""

    def progress(stage: str, done: int, total: int) -> None:
        # escaped: rich would take "[stage]" for a style tag and show nothing of it. A total of 0: a
        # phase of unknown length (a compile), whose name tells its elapsed time; an empty bar of 1
        # keeps rich from calling it finished.
        bar.update(task, description=escape(f"{label} [{stage}]"), completed=min(done, total), total=max(1, total))
        heartbeat(f"{label}: {stage}" + (f" {min(done, total)}/{total}" if total > 0 else ""))

    return progress


def store_interrupted(path, spec: BenchmarkSpec, system: dict, suite: str | None, tag: str | None) -> None:
    """`spec` stored as interrupted, through a connection of its own: a stop (launch/interrupts.py)
    may come from its watchdog thread while this one is held in a long native call."""
    with Store(path) as store:
        store.add(Result(spec=spec.to_dict(), system=system, status="interrupted", title=registry.title(spec.model),
                         suite=suite, tag=tag, finished=now(), error="stopped by the user"))


@contextlib.contextmanager
def _own_stream(console: Console) -> Iterator[None]:
    """The console writes to its own copy of the file descriptor it writes to now, for the block:
    while a compile runs, descriptors 1 and 2 and sys.stderr point at the compiler's log
    (workloads.compiling), and the progress must still reach the user."""
    fixed = getattr(console, "_file", None)  # None: the console follows sys.stdout or sys.stderr
    try:
        fd = os.dup(console.file.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # not a real file (a test's buffer)
        yield
        return
    encoding = getattr(console.file, "encoding", None) or "utf-8"
    with open(fd, "w", encoding=encoding, errors="replace", buffering=1) as stream:
        console.file = stream
        try:
            yield
        finally:
            console.file = fixed


def _run_one(spec: BenchmarkSpec, system: dict, known: list[Result], progress, suite: str | None,
             tag: str | None, tuned: Tuned | None, ranks: torchrun.Ranks | None = None,
             flops: int | None = None) -> tuple[Result, Result | None]:
    """The result, with its FLOP utilisation, and the ceiling measured for it where the store had none.
    `flops`: a step's count remembered for this work, for this process or every rank."""
    if placement.of(spec).ranks:
        run = ranks.run if ranks is not None else partial(torchrun.run, spec)
        result = run(system, suite=suite, tag=tag, ceilings=here(known, system), progress=progress, tuned=tuned,
                     flops=flops)
        return result, carried_ceiling(result)
    result = execute(spec, system, progress=progress, suite=suite, tag=tag, tuned=tuned, flops=flops)
    return result, with_utilisation(result, known)
