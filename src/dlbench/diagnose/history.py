"""A machine's own history: the results of one configuration on one machine, and how one of them
compares with the machine's other runs of it, or, on several GPUs, with the same run on one GPU.

The doctor judges a run here first, before any published figure: the same machine with the same
settings is the fairest expectation there is. A run is set beside the median of the other runs,
and judged by their run-to-run spread (results/spread.py): fresh processes of one configuration
move far more than the steps of one, so the steps' own interval never makes a verdict. With one
other run the between-run noise is unknown, and said so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dlbench.figures import fixed, percent, sig
from dlbench.report.compare import MIN_STEPS, benchmark_key, bootstrap_ratio, timed
from dlbench.results.measurement import Measurement, Run
from dlbench.results.record import Result
from dlbench.results.spread import RunRatio, Spread, median_run, ratio_of_runs, speed, step_rate, step_samples
from dlbench.system.records import is_system_record, machine_key


SAME = 0.03  # runs within this of each other are alike, however tight the interval
# The options of where a run's images come from (data.DataOptions' fields, which a test holds equal):
# two runs that differ only in these do the same work on other data.
INPUT_OPTIONS = frozenset({"data", "workers", "decode", "cpu_share", "prefetch", "max_corrupt", "dummy_images",
                           "epochs"})


@dataclass(frozen=True)
class Against:
    """`result` runs at `ratio` times the speed of `other` (below 1: slower). `spread`: the runs that
    `other` stands for (history: every other run of the configuration here; `other` is their median
    run); from two of them on, `sets` (this run against all of them, the interval `dlbench compare`
    prints for the same two sets) decides "beyond noise". Without them (one run to go by), `low`–`high`
    is the bootstrap interval over both runs' steps, which sees no between-run noise."""
    other: Result
    ratio: float
    low: float | None = None
    high: float | None = None
    kind: str = "history"  # 'history': the same configuration; 'one GPU': the same per-GPU work on one
    spread: Spread | None = None
    figure: float | None = None  # the judged run's own figure, in the spread's terms
    steps: tuple[int, int] | None = None  # the steps behind `low`–`high`: the judged run's, the other's
    sets: RunRatio | None = None  # this run over the runs of `spread`, with its interval between runs

    @property
    def between_runs(self) -> bool:
        """Whether the between-run noise is known: two runs or more stand behind the comparison."""
        return self.spread is not None and self.spread.n >= 2 and self.sets is not None and self.sets.has_interval

    @property
    def place(self) -> int:
        """-1 slower beyond the noise between runs (the interval of `sets`), 1 faster, 0 within it (or unknown)."""
        return self.sets.place() if self.between_runs else 0

    @property
    def beyond_noise(self) -> bool:
        if self.between_runs:
            return self.place != 0
        if self.kind == "history":  # one earlier run: how far a fresh process moves is not known
            return False
        return self.low is not None and self.high is not None and not self.low <= 1.0 <= self.high

    @property
    def differs(self) -> bool:
        """Beyond noise and by more than a few percent: a difference worth a reason."""
        return self.beyond_noise and abs(1.0 - self.ratio) > SAME

    @property
    def slower(self) -> bool:
        return self.differs and self.ratio < 1.0

    @property
    def behind(self) -> bool:
        """Slower, or, where the between-run noise is unknown, behind by more than a few percent
        beyond the steps' interval: enough to measure causes against, not for a verdict."""
        if self.between_runs:
            return self.slower
        stepwise = self.high is not None and self.high < 1.0
        return stepwise and self.ratio < 1.0 - SAME


def configuration(r: Result) -> tuple:
    """The machine and the benchmark settings (run length, seed and device index left out)."""
    return (*machine_key(r), benchmark_key(r))


def groups(results: Sequence[Result]) -> dict[tuple, list[Result]]:
    """The ok benchmark results of each configuration, oldest first."""
    found: dict[tuple, list[Result]] = {}
    for r in sorted(results, key=lambda r: r.started):
        if r.status == "ok" and not is_system_record(r):
            found.setdefault(configuration(r), []).append(r)
    return found


def against(r: Result, other: Result, kind: str = "history", runs: Sequence[Result] = ()) -> Against | None:
    """`r`'s speed as a share of `other`'s: other's median step over r's, with the between-run spread of
    `runs` (those `other` stands for) where there are several. On one GPU against several the per-GPU
    work is equal (the batch is per process), so this is the weak-scaling efficiency, and every figure
    is the step's. None where the step times give no finite ratio (never a NaN verdict)."""
    mine_steps, other_steps = timed(step_samples(r)), timed(step_samples(other))
    if not mine_steps or not other_steps:
        return None
    steps = len(mine_steps), len(other_steps)
    if min(steps) < MIN_STEPS:  # the ratio of the medians, and no interval from so few steps
        ratio, low, high = float(np.median(other_steps) / np.median(mine_steps)), None, None
        if not (math.isfinite(ratio) and ratio > 0):
            return None
    else:
        ratio, low, high = bootstrap_ratio(mine_steps, other_steps)
        if not all(math.isfinite(v) and v > 0 for v in (ratio, low, high)):
            return None
    figure = _figure(kind)
    spread = Spread.of(runs, figure) if len(runs) >= 2 else None
    mine, theirs = figure(r), figure(other)
    sets = ratio_of_runs([r], runs) if spread is not None else None
    if spread is None or sets is None or mine is None or not theirs or not math.isfinite(mine / theirs):
        return Against(other, ratio, low, high, kind, steps=steps)
    return Against(other, mine / theirs, low, high, kind, spread, mine, steps=steps, sets=sets)


def _figure(kind: str):
    """Each run's figure: its speed in its unit; against one GPU its steps per second (per process)."""
    return step_rate if kind == "one GPU" else speed


def typical(r: Result, group: Sequence[Result], kind: str = "history") -> Against | None:
    """`r` against the median run of `group` (its own run left out: on its machine, its configuration's
    other runs), judged by the band their run-to-run spread gives."""
    # steps of 0 s (a record edited by hand) give no ratio: such runs are no yardstick
    others = [o for o in group if o.id != r.id and timed(o.samples.get("step"))]
    if not others or not timed(r.samples.get("step")):
        return None
    return against(r, median_run(others, _figure(kind)), kind, others)


def one_gpu(r: Result, results_by_configuration: dict[tuple, list[Result]]) -> Against | None:
    """A multi-GPU run against the median run of the same configuration on one GPU of its machine
    (weak scaling: the batch is per process, so the ideal step is the one-GPU step)."""
    gpus = r.setup.gpus
    if gpus <= 1:
        return None
    return typical(r, results_by_configuration.get(configuration(_like(r, gpus=1))) or [], "one GPU")


def synthetic(r: Result, results_by_configuration: dict[tuple, list[Result]]) -> Against | None:
    """A run on images against the median run of the same work on synthetic data on its machine:
    what reading the images costs, the data wait and what the input takes of the GPU."""
    if _on_synthetic(r) or not r.samples.get("step"):
        return None
    work = _work(r)
    # a configuration's runs share their spec's work and data: each group is looked at once
    found = [o for group in results_by_configuration.values() if _on_synthetic(group[0]) and _work(group[0]) == work
             for o in group]
    return typical(r, found, "synthetic data")


def _on_synthetic(r: Result) -> bool:
    return r.setup.options.get("data", "synthetic") == "synthetic"


def _work(r: Result) -> tuple:
    """`r`'s configuration without the options of where its images come from."""
    options = {k: v for k, v in r.setup.options.items() if k not in INPUT_OPTIONS}
    return configuration(_like(r, options=options))


def _like(r: Result, **spec: Any) -> Result:
    """A result of `r`'s machine and device with `spec`'s fields changed: its configuration is a key to look up."""
    return Result(spec={**r.spec, **spec}, system=r.system,
                  metrics=Measurement(run=Run(device=r.measured.device or "")).to_metrics())


def to_judge(group: Sequence[Result]) -> list[Result]:
    """The newest run of a configuration and every older one that differs beyond the run-to-run
    spread of the others (and by more than a few percent)."""
    newest = group[-1]
    if not newest.samples.get("step"):
        return [newest]
    return [r for r in group[:-1] if (a := typical(r, group)) is not None and a.differs] + [newest]


# ---- in words -------------------------------------------------------------------------------

def against_text(a: Against) -> str:
    """The comparison as the doctor says it: '0.61x of run 5c78e2a1 (2026-11-28 04:12), the median of 6; ...'."""
    when = a.other.started[:16].replace("T", " ")
    if a.kind == "one GPU":  # judged by its efficiency, not by the one-GPU runs' spread: that is told only
        spread = a.spread
        told = (f"; the {spread.n} one-GPU runs spread {fixed(spread.low / spread.median, 2)}–"
                f"{fixed(spread.high / spread.median, 2)}x of their median (CV {percent(spread.cv or 0.0)}); "
                f"{sets_text(a)}" if a.between_runs else interval_text(a))
        return f"weak-scaling efficiency {fixed(a.ratio, 2)} against run {a.other.id[:8]} ({when}) on one GPU{told}"
    if a.between_runs:
        return (f"{fixed(a.ratio, 2)}x of run {a.other.id[:8]} ({when}), the median of {a.spread.n}; "
                f"{sets_text(a)}; {spread_text(a)}")
    if a.kind == "history":
        return (f"{fixed(a.ratio, 2)}x of run {a.other.id[:8]} ({when}), the one other run: between-run noise "
                f"unknown (`--repeat 5` measures it)")
    noise = "" if a.differs else ", within noise" if not a.beyond_noise else ", alike"
    return f"{fixed(a.ratio, 2)}x of run {a.other.id[:8]} ({when}){interval_text(a)}{noise}"


def interval_text(a: Against) -> str:
    """The steps' bootstrap interval: a comparison of two runs with no between-run spread to go by,
    with the steps it stands on (`dlbench compare` gives the same interval for the same two runs)."""
    steps = f" ({a.steps[0]:,} and {a.steps[1]:,})" if a.steps else ""
    if a.low is None or a.high is None:
        return f", no interval from {a.steps[0]:,} and {a.steps[1]:,} steps (fewer than {MIN_STEPS} a side)" \
            if a.steps and min(a.steps) < MIN_STEPS else ""
    return f", {percent(0.95)} interval over both runs' steps{steps} {fixed(a.low, 2)}–{fixed(a.high, 2)}"


def sets_text(a: Against) -> str:
    """This run against the runs it is judged by, by their steps per second: the figures and interval
    `dlbench compare` prints for the same two sets (spread.RunRatio.text)."""
    return f"this run against those {a.spread.n}: {a.sets.text()}"


def spread_text(a: Against) -> str:
    """'within this machine's run-to-run spread (6 runs, 1,735–3,195 img/s)', or beyond it."""
    spread = a.spread
    where = {-1: "slower than", 0: "within", 1: "faster than"}[a.place]
    unit = f" {spread.unit}" if spread.unit else ""
    figures = f"{sig(spread.low, grouping=True)}–{sig(spread.high, grouping=True)}{unit}"
    return f"{where} this machine's run-to-run spread ({spread.n} runs, {figures}, CV {percent(spread.cv or 0.0)})"
