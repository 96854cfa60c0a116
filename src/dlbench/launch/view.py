"""One progress view for a whole suite: overall bar with ETA, the running benchmark (fed
from the child's progress file), and the last result.

On a terminal it is a live display; elsewhere (logs, SLURM output) it prints one line
when each benchmark starts, so a log still says what ran when.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
from rich.text import Text

from dlbench.figures import ODD, ODD_LEGEND, Odd, ms, odd, sig
from dlbench.paths import replacing
from dlbench.results.record import Result
from dlbench.shorten import shortened
from dlbench.spec import BenchmarkSpec
from dlbench.suites import title
from dlbench.suites.estimate import Estimate, countdown, format_seconds

STYLE = {"ok": "green", "oom": "yellow", "interrupted": "yellow"}

# What never reaches the terminal from stored or imported text: C0 and C1 control characters
# (escape sequences can move the cursor, retitle the window, hide text) and the Unicode
# direction overrides that make text read differently than it is stored. Newlines and tabs stay.
_CONTROLS = dict.fromkeys(c for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F),
                                      *range(0x2066, 0x206A)] if c not in (0x09, 0x0A))


def clean(text: str) -> str:
    """`text` without control characters (newlines and tabs stay)."""
    return str(text).translate(_CONTROLS)


def one_line(text: str) -> str:
    return " ".join(clean(text).split())


def median_step_ms(r: Result) -> float | None:
    """The median step time a record holds, in ms: the pipelines' `step_ms`; fwdbwd's median of
    per-step forward + backward (what its one-line result calls the median step); else the
    median of the raw `step` samples (volume, converge, older exports). None where none is stored."""
    window = r.measured.window
    for value in (window.step_ms, window.total_ms):
        if odd(value):
            return Odd()  # shown as `?`: the stored figure is none
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    if "samples.step" in r.odd:
        return Odd()
    steps = r.samples.get("step") if isinstance(r.samples, dict) else None
    return statistics.median(steps) * 1e3 if steps else None


def _shape(r: Result) -> str:
    """The input a step took, without the batch (the benchmark column has it): an image's CxHxW, a
    patch; for a volume's prediction the whole volume. '-' where the record holds none."""
    m = r.measured
    taken = m.data.input_shape
    for shape in (m.volume.volume_shape, taken[1:] if isinstance(taken, list) else None, r.setup.input_shape):
        if isinstance(shape, list) and shape and all(type(n) is int for n in shape):
            return "x".join(map(str, shape))
    return "-"


def _rate(r: Result) -> str:
    """Throughput in the unit the workload measures in ('1234 img/s'), '-' where none is stored."""
    rate = r.measured.throughput
    if odd(rate.value):
        return ODD
    if not isinstance(rate.value, (int, float)) or rate.value <= 0:
        return "-"
    return f"{sig(rate.value)} {rate.unit or ''}".rstrip()


# A command is never silent for over SILENT_S seconds. It ticks a second sooner: a tick comes up to a
# tenth of its interval late, and on two busy cores its thread waits for the CPU and the interpreter
# too (ticks every 5.0 s came 5.0-6.0 s apart at load 4 to 8, 5.0-5.1 s at load 1.5).
SILENT_S = 5.0
TICK_S = 4.0


class Heartbeat:
    """Where no live bar can be drawn (a log, a pipe), a progress line every few seconds.

    As a context manager it also ticks by itself: a phase that reports nothing for a while (a
    warm-up or FLOP count of one large tile, a compile, a model build) still gets a line every
    `every_s` seconds with the time so far, so long work is never silent. That time counts from the
    start of the work it watches (the `with` block), not of the stage on the line: a clock that
    restarted at each stage would read as the run having just begun."""

    def __init__(self, console: Console, every_s: float = TICK_S, *, always: bool = False) -> None:
        """`always`: tick on a terminal too (where no bar shows the time going by)."""
        self.console, self.every_s, self.last = console, every_s, time.monotonic()
        # what a tick says of the time instead of "N s so far": a countdown against the run's estimate
        self.clock: Callable[[], str] | None = None
        self.line, self.since = "", time.monotonic()  # the latest line, and since when it says the same
        self.started = time.monotonic()  # the start of the work: what "so far" counts from
        self.always = always
        self._done = threading.Event()

    def said(self, line: str) -> None:
        """`line` was just printed elsewhere: the ticks repeat it from now on."""
        self.line = line
        self.since = self.last = time.monotonic()

    def __call__(self, line: str) -> None:
        if line != self.line:
            self.line, self.since = line, time.monotonic()
        if self.console.is_terminal or time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        self.console.print(clean(f"{line} ({self.clock()})" if self.clock else line), highlight=False, markup=False)

    def __enter__(self) -> "Heartbeat":
        self.started = time.monotonic()
        if self.always or not self.console.is_terminal:  # a terminal's bar shows its own elapsed time
            threading.Thread(target=self._tick, name="dlbench-heartbeat", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()

    def _tick(self) -> None:
        while not self._done.wait(min(0.5, self.every_s / 10)):  # a line at most a tenth of the interval late
            clock = time.monotonic()
            # nothing printed for that long, whether the line stood still or moved unprinted: steps of
            # 4 s, each too soon after the last print, would otherwise go 8 s without a line
            if self.line and clock - self.last >= self.every_s:
                self.last = clock
                said = self.clock() if self.clock else f"{format_seconds(clock - self.started)} so far"
                self.console.print(clean(f"{self.line} ({said})"), highlight=False, markup=False)


class Countdown(ProgressColumn):
    """A task's time against its estimate (fields `expected` seconds and `since`, a monotonic start):
    'about 25 s left of 40 s'; nothing for a task without one."""

    def render(self, task) -> Text:
        expected, since = task.fields.get("expected"), task.fields.get("since")
        if since is None:
            return Text("")
        return Text(countdown(expected, time.monotonic() - since))


class _Bars(Progress):
    """rich's Progress with one more line under the bars: the last result."""

    last: Text = Text("")

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.last.plain:
            yield self.last


SUITE_TICK_S = TICK_S  # off a terminal, the running benchmark's line at least this often


class SuiteView:
    def __init__(self, console: Console, name: str, estimates: list[Estimate]) -> None:
        self.console, self.name, self.estimates = console, name, estimates
        self.bars = _Bars(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                          console=console, transient=False)
        self.index, self.started, self.timeout = 0, time.monotonic(), None
        self.took: list[float] = []  # wall seconds of each finished benchmark
        self.heartbeat = Heartbeat(console, every_s=SUITE_TICK_S)
        self.overall = self.bars.add_task(f"suite {name}", total=len(estimates), info="")
        self.current = self.bars.add_task("", total=1, info="")

    def __enter__(self) -> "SuiteView":
        if self.console.is_terminal:  # elsewhere rich would draw the bars once, at the end: plain lines say it
            self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.console.is_terminal:
            self.bars.stop()

    def start(self, index: int, spec: BenchmarkSpec, timeout: float | None) -> None:
        self.index, self.started, self.timeout = index, time.monotonic(), timeout
        label = clean(title(spec))
        self.bars.update(self.current, description=label, completed=0, total=1)
        if not self.console.is_terminal:
            self.console.print(f"[{index + 1}/{len(self.estimates)}] {label} …", highlight=False, markup=False)
        self.tick(None)

    def tick(self, progress: dict | None) -> None:
        """Called about ten times a second while a benchmark runs."""
        elapsed = time.monotonic() - self.started
        limit = f" of {format_seconds(self.timeout)}" if self.timeout else ""
        stage = "starting"
        if progress and progress.get("stage") != "start":
            done, total = int(progress.get("done", 0)), int(progress.get("total", 1))
            self.bars.update(self.current, completed=min(done, total), total=max(1, total))
            # a total of 0: a phase of unknown length (a compile), whose name tells its elapsed time; a
            # warm-up or measurement goes on past its count until its seconds are up, and reads full
            stage = f"{progress.get('stage')} {min(done, total)}/{total}" if total > 0 else str(progress.get("stage"))
        expected = self.estimates[self.index].seconds if self.index < len(self.estimates) else None
        # counted down against the estimate where there is one; the time limit only where there is none
        clock = countdown(expected, elapsed) if expected else f"{format_seconds(elapsed)}{limit}"
        self.bars.update(self.current, info=f"{stage}, {clock}")
        self.bars.update(self.overall, completed=self.index, info=self._eta(elapsed))
        self.heartbeat(f"  {stage}, {clock}; {self._eta(elapsed)}")

    def finish(self, result: Result, line: str) -> None:
        self.took.append(time.monotonic() - self.started)
        line = clean(line)
        self.bars.last = Text(f"last: {line}", style=STYLE.get(result.status, "red"))
        self.bars.update(self.overall, completed=self.index + 1, info=self._eta(0.0, finished=1))
        self.console.print(Text(line, style=STYLE.get(result.status, "red")))

    def _eta(self, elapsed: float, finished: int = 0) -> str:
        count = self.index + finished
        done, rest, took = self.estimates[:count], self.estimates[count:], self.took[:count]
        # Estimates are scaled by how far off they were for the benchmarks already run; a benchmark
        # with none (never run here) is expected to take what the finished ones took on average.
        pairs = [(e.seconds, t) for e, t in zip(done, took) if e.seconds]
        scale = sum(t for _, t in pairs) / sum(s for s, _ in pairs) if pairs else 1.0
        mean = sum(took) / len(took) if took else None
        expected = [e.seconds * scale if e.seconds is not None else mean for e in rest]
        if any(x is None for x in expected):
            return f"{len(done)}/{len(self.estimates)} done, ETA once one has finished"
        remaining = max(0.0, expected[0] - elapsed) + sum(expected[1:]) if expected else 0.0
        guessed = " (none run here yet)" if any(not e.measured for e in rest) and not done else ""
        return f"{len(done)}/{len(self.estimates)} done, ETA {format_seconds(remaining)}{guessed}"


def _console(stderr: bool) -> Console:
    """Lines are never wrapped: piped into a file or a log, a line of output stays one line."""
    console = Console(stderr=stderr, soft_wrap=True)
    if not console.is_terminal:
        console.width = 400  # tables too: rich would otherwise squeeze them into 80 columns
    return console


class Terminal:
    """What the launchers tell the user: messages and results on stderr, tables and reports on
    stdout. The command line makes one; launchers only call it. Everything shown passes
    `clean`: results can come from anyone's export file."""

    def __init__(self, out: Console | None = None, err: Console | None = None) -> None:
        self.out = out or _console(stderr=False)
        self.err = err or _console(stderr=True)
        self._waiting: Heartbeat | None = None

    @contextlib.contextmanager
    def waiting(self, line: str) -> Iterator[None]:
        """`line` now, then again every 5 s with the time so far, until `done_waiting` or the block's end:
        the start of a command, whose first output comes after seconds of imports and checks."""
        self.message(line)
        with Heartbeat(self.err, always=True) as heartbeat:
            heartbeat.said(clean(line))
            self._waiting = heartbeat
            try:
                yield
            finally:
                self.done_waiting()

    def done_waiting(self) -> None:
        """What `waiting` repeats is no longer news: the command says what it does now."""
        if self._waiting is not None:
            self._waiting.__exit__(None, None, None)
            self._waiting = None

    def message(self, text: str) -> None:
        self.err.print(clean(text), highlight=False, markup=False, soft_wrap=True)

    def error(self, text: str) -> int:
        """A user error: one line on stderr; returns the exit status for it (2)."""
        self.err.print(f"error: {one_line(text)}", highlight=False, markup=False, soft_wrap=True)
        return 2

    def warning(self, text: str) -> None:
        self.err.print(f"warning: {clean(text)}", style="yellow", highlight=False, markup=False)

    def result(self, result: Result, stdout: bool = False) -> None:
        """One line about a result: on stdout when it is what the command was asked for
        (`dlbench run … > result.txt`), else on stderr beside the progress."""
        from dlbench.launch.execute import describe

        line = Text(clean(describe(result)), style=STYLE.get(result.status, "red"))
        (self.out if stdout else self.err).print(line)
        if stdout and result.status == "error" and not self.out.is_terminal:
            # stdout goes to a file or a pipe: why the run failed is said where errors are read too
            self.err.print(f"error: {one_line(result.error or 'the run failed')}", highlight=False, markup=False,
                           soft_wrap=True)

    @contextlib.contextmanager
    def progress(self, description: str, total: int, unit: str) -> Iterator[Callable[[int, int], None]]:
        """A bar for long work; yields the `progress(done, total)` callback the work calls."""
        from rich.progress import BarColumn, Progress, TimeRemainingColumn

        if not self.err.is_terminal:  # a log or a pipe: a line every few seconds, not one bar at the end
            heartbeat = Heartbeat(self.err)
            yield lambda done, _total: heartbeat(f"{description}: {done}/{total} {unit}")
            return
        columns = ("{task.description}", BarColumn(), "{task.completed}/{task.total} " + unit, TimeRemainingColumn())
        with Progress(*columns, console=self.err) as bar:
            task = bar.add_task(clean(description), total=total)
            yield lambda done, _total: bar.update(task, completed=done)

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[Callable[[str], None]]:
        """A spinner whose text the work changes; off a terminal each new text is a line of its own."""
        if not self.err.is_terminal:
            yield self.message
            return
        with self.err.status(clean(text)) as spinner:
            yield lambda new: spinner.update(clean(new))

    def text(self, text: str) -> None:
        """A report or table as text, on stdout."""
        self.out.print(clean(text), highlight=False, markup=False, soft_wrap=True)

    def json(self, data: dict) -> None:
        import json

        self.out.print_json(json.dumps(data))  # JSON escapes every control character

    def write(self, text: str, output: Path | None) -> None:
        """A report to a file (one line says so), or to stdout."""
        if output is None:
            self.text(text)
            return
        with replacing(output) as f:
            f.write(text if text.endswith("\n") else text + "\n")
        self.message(f"wrote {output}")

    def suites(self, named: list[tuple[str, str]]) -> None:
        """The built-in suites with their descriptions."""
        width = max(len(name) for name, _ in named)
        for name, description in named:
            self.out.print(Text(f"{name:{width}}  {one_line(description)}"))
        self.out.print("run one with `dlbench suite NAME`; `dlbench suite NAME --list` shows its benchmarks",
                       highlight=False)

    def plan(self, plan, default_timeout: float) -> None:
        """A suite's expanded specs with their time limits and estimates."""
        from rich.table import Table

        table = Table("#", "benchmark", "timeout", "estimate", "from", box=None)
        for index, (spec, guess) in enumerate(zip(plan.todo, plan.estimates), 1):
            limit = format_seconds(spec.timeout) if spec.timeout else f"{format_seconds(default_timeout)} (default)"
            shown = format_seconds(guess.seconds) if guess.seconds is not None else "-"
            table.add_row(str(index), Text(clean(title(spec))), limit, shown, guess.source)
        self.out.print(table)
        measured = sum(1 for e in plan.estimates if e.measured)
        total = format_seconds(sum(e.seconds or 0.0 for e in plan.estimates))
        done = f", {len(plan.done)} already done in run {plan.run}" if plan.resumed else ""
        self.out.print(f"{len(plan.todo)} benchmarks{done}: about {total} "
                       f"({measured} from earlier runs on this machine, {len(plan.todo) - measured} guessed)",
                       highlight=False)

    def summaries(self, rows: list[Result]) -> None:
        """One JSON object per result and line, on stdout."""
        import json

        from dlbench.results.summary import summary

        for r in rows:  # a listing: huge text shortened as in every format (`dlbench export` has it whole)
            shown = {k: shortened(v) for k, v in summary(r).items()}
            self.out.print(json.dumps(shown), highlight=False, markup=False, soft_wrap=True)

    def results(self, rows: list[Result]) -> None:
        """Stored results as a table, one line each."""
        from rich.table import Table

        # A median of whole steps, named so: fwdbwd's is not its forward + backward medians added.
        tagged = any(r.tag for r in rows)  # a column empty in every row would only widen the table
        table = Table("id", "started", "status", "benchmark", "shape", "throughput", "system", "median step ms",
                      *(["tag"] if tagged else []), box=None)
        for r in rows:
            batch = ODD if "spec.batch" in r.odd else r.setup.batch
            benchmark = ("system ceilings" if r.workload == "system"
                         else f"{r.workload} {r.model} b{batch} {r.setup.precision}")
            cells = (r.id[:8], r.started[:16].replace("T", " "), r.status, benchmark, _shape(r), _rate(r),
                     r.system_label, ms(median_step_ms(r)), *([r.tag or ""] if tagged else []))
            table.add_row(*(Text(clean(shortened(c))) for c in cells))  # Text: stored strings are never markup
        self.out.print(table)
        if any(r.odd for r in rows):
            self.out.print(f"{ODD_LEGEND}: `dlbench export` shows it exactly", highlight=False, markup=False)
