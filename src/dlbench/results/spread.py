"""Between-run noise: how far fresh processes of one configuration on one machine spread.

The steps of one process vary little; the same benchmark started again can land elsewhere (a
host-bound configuration on a shared machine moves by more than 1.5x between processes, a
GPU-bound one by well under 1%). So a verdict of "faster" or "slower" rests on runs, not steps:
each run is one figure, its speed (the throughput it reported, else one over its median step),
and a set of runs gives the median run, the range, the coefficient of variation, a 95% interval
of the mean, and the band a further run of the same configuration is expected to fall in.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from dlbench.figures import fixed
from dlbench.results.measurement import Run
from dlbench.results.record import Result

# Student's t at 97.5% for 1..30 degrees of freedom: a two-sided 95% interval from few runs.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
MAD_TO_SD = 1.4826  # the median absolute deviation of normal figures times this is their standard deviation
SAME = 0.03  # a run this close to the edge of the band is not told apart from it, however tight the band
AUTO_TARGET = 0.02  # `--repeat auto` stops once the mean's 95% interval is within this of it
AUTO_MIN_RUNS = 3
AUTO_MAX_RUNS = 20


def t975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def speed(r: Result) -> float | None:
    """One run's figure, higher is faster: its throughput, else its steps per second."""
    value = r.measured.throughput.value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return step_rate(r)


def step_samples(r: Result) -> list | None:
    """The per-step seconds a run is compared by, in every view (compare, the doctor, the report's
    conclusions): its `total` samples where it stores them, the figure its tables and run line print
    (a forward/backward benchmark's forward + backward: its whole step adds zeroing the gradients),
    else the whole step."""
    return r.samples.get("total") or r.samples.get("step")


def step_rate(r: Result) -> float | None:
    """Steps per second of the median step (`step_samples`): a figure that is per process on several GPUs."""
    steps = step_samples(r)
    middle = statistics.median(steps) if steps else None
    # a median of 0 s (or a few picoseconds, whose rate is infinite) was never measured: no figure
    return 1.0 / middle if middle and middle > 0 and math.isfinite(1.0 / middle) else None


Figure = Callable[[Result], "float | None"]


def t_quantile(level: float, df: int) -> float:
    """Student's t for a two-sided interval: the 95% table, else the normal quantile scaled alike."""
    if abs(level - 0.95) < 1e-9:
        return t975(df)
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    return z * t975(df) / 1.96


@dataclass(frozen=True)
class Logs:
    """One set of runs as the logarithms of their figures: how many, their mean, their variance
    (None from one run: one figure says nothing of the noise between runs)."""
    n: int
    mean: float
    var: float | None = None

    @classmethod
    def of(cls, figures: Sequence[float]) -> "Logs | None":
        """None where a figure has no logarithm (none at all, 0, a NaN)."""
        if not figures or not all(math.isfinite(f) and f > 0 for f in figures):
            return None
        logs = [math.log(f) for f in figures]
        mean = math.fsum(logs) / len(logs)
        var = math.fsum((v - mean) ** 2 for v in logs) / (len(logs) - 1) if len(logs) > 1 else None
        return cls(len(logs), mean, var)


class Interval:
    """A ratio's `low`–`high` (None where not known), and whether it holds 1: the ratio records of
    `compare` and of the doctor read it alike."""
    low: float | None
    high: float | None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def within_noise(self) -> bool:
        return self.has_interval and self.low <= 1.0 <= self.high


@dataclass(frozen=True)
class RunRatio(Interval):
    """How many times as fast one set of runs is as another (the ratio of their figures' geometric
    means), with its interval between runs and the runs behind each side; no interval where neither
    side measured the noise between runs (one run each, and none recorded)."""
    value: float
    runs: tuple[int, int]
    low: float | None = None
    high: float | None = None
    level: float = 0.95

    def place(self) -> int:
        """-1 slower beyond the noise between runs (the whole interval below 1, by more than SAME),
        1 faster beyond it, 0 within it or where the noise is unknown."""
        if not self.has_interval:
            return 0
        if self.high < 1.0 - SAME:
            return -1
        return 1 if self.low > 1.0 + SAME else 0

    def flipped(self) -> "RunRatio":
        """The other side over this one: the same interval, turned over."""
        turn = (lambda v: None if v is None else 1.0 / v)
        return RunRatio(1.0 / self.value, self.runs[::-1], turn(self.high), turn(self.low), self.level)

    def interval_text(self) -> str:
        """'95% interval 0.51–1.94, 3 and 4 runs', or what it lacks: every view prints this one."""
        counts = f"{self.runs[0]} and {self.runs[1]} runs"
        if not self.has_interval:
            return f"no interval from {counts}: the noise between runs is unknown (--repeat N measures it)"
        return f"{round(self.level * 100)}% interval {fixed(self.low, 2)}–{fixed(self.high, 2)}, {counts}"

    def text(self) -> str:
        return f"{fixed(self.value, 2)}x ({self.interval_text()})"


def ratio_of_logs(a: Logs, b: Logs, recorded: tuple["Logs | None", "Logs | None"] = (None, None),
                  level: float = 0.95) -> RunRatio | None:
    """Set a's runs over set b's, the interval by Welch's t over the runs' logarithms. A side of one
    run takes the variance `recorded` for it (its configuration's other runs on its machine), else the
    other side's: then both terms stand on that one estimate and its degrees of freedom. None where
    the ratio is no finite figure."""
    value = math.exp(a.mean - b.mean)
    if not (math.isfinite(value) and value > 0):
        return None
    own = [(s.var, s.n - 1) if s.var is not None else (r.var, r.n - 1) if r is not None and r.var is not None
           else None for s, r in zip((a, b), recorded)]
    if own[0] is None and own[1] is None:
        return RunRatio(value, (a.n, b.n), level=level)
    if own[0] is None or own[1] is None:  # one estimate for both sides
        var, df = own[0] or own[1]
        se, dof = math.sqrt(var * (1 / a.n + 1 / b.n)), df
    else:
        terms = own[0][0] / a.n, own[1][0] / b.n
        se = math.sqrt(sum(terms))
        dof = (sum(terms) ** 2 / sum(t * t / d for t, (_, d) in zip(terms, own)) if se > 0
               else min(d for _, d in own))
    reach = t_quantile(level, max(1, int(dof))) * se
    low, high = math.exp(a.mean - b.mean - reach), math.exp(a.mean - b.mean + reach)
    if not all(math.isfinite(v) and v > 0 for v in (low, high)):
        return RunRatio(value, (a.n, b.n), level=level)
    return RunRatio(value, (a.n, b.n), low, high, level)


def ratio_of_runs(a: Sequence[Result], b: Sequence[Result], recorded: tuple["Logs | None", "Logs | None"] = (None, None),
                  level: float = 0.95) -> RunRatio | None:
    """How many times as fast runs `a` are as runs `b` by each run's steps per second (`step_rate`,
    the figure every view compares by), and its interval between runs: `compare` and the doctor both
    print this, so the same two sets read the same everywhere. None where a run has no figure."""
    sides = [Logs.of([f for r in runs if (f := step_rate(r)) is not None]) for runs in (a, b)]
    if sides[0] is None or sides[1] is None or (sides[0].n, sides[1].n) != (len(a), len(b)):
        return None
    return ratio_of_logs(sides[0], sides[1], recorded, level)


@dataclass(frozen=True)
class Spread:
    """The figures of several runs of one configuration (each one run's speed), and what they say."""
    figures: tuple[float, ...]
    unit: str = ""

    @classmethod
    def of(cls, runs: Iterable[Result], figure: Figure = speed) -> "Spread":
        """`figure`: each run's figure (default its `speed`, in its throughput's unit)."""
        found = [(value, r) for r in runs if (value := figure(r)) is not None]
        units = {r.measured.throughput.unit or "" for _, r in found} if figure is speed else {"steps/s"}
        return cls(tuple(value for value, _ in found), units.pop() if len(units) == 1 else "")

    @property
    def n(self) -> int:
        return len(self.figures)

    @property
    def median(self) -> float:
        return statistics.median(self.figures)

    @property
    def low(self) -> float:
        return min(self.figures)

    @property
    def high(self) -> float:
        return max(self.figures)

    @property
    def cv(self) -> float | None:
        """Standard deviation over mean; None from fewer than two runs."""
        if self.n < 2:
            return None
        return statistics.stdev(self.figures) / statistics.fmean(self.figures)

    @property
    def half_width(self) -> float | None:
        """Half the mean's 95% interval as a share of the mean (Student's t); None from one run."""
        cv = self.cv
        return None if cv is None else t975(self.n - 1) * cv / math.sqrt(self.n)

    def band(self) -> tuple[float, float] | None:
        """Where a further run of this configuration is expected: from three runs or more a 95%
        prediction interval around the median whose width comes from the median absolute deviation,
        so that a run with a fault among them (a machine's history holds such runs) does not widen
        it to everything; the range from two; None from one."""
        if self.n < 2:
            return None
        if self.n == 2:
            return self.low, self.high
        middle = self.median
        sd = MAD_TO_SD * statistics.median(abs(f - middle) for f in self.figures)
        reach = t975(self.n - 1) * sd * math.sqrt(1 + 1 / self.n)
        return max(0.0, middle - reach), middle + reach

    def place(self, figure: float) -> int:
        """-1 below the band (slower beyond the run-to-run spread), 1 above it, 0 inside it or where
        the spread is unknown (one run)."""
        band = self.band()
        if band is None:
            return 0
        if figure < band[0] * (1 - SAME):
            return -1
        return 1 if figure > band[1] * (1 + SAME) else 0

    def settled(self) -> bool:
        """Whether `--repeat auto` may stop: the mean's interval within AUTO_TARGET, from AUTO_MIN_RUNS runs."""
        width = self.half_width
        return self.n >= AUTO_MIN_RUNS and width is not None and width <= AUTO_TARGET

    def text(self) -> str:
        """'median of 5 runs 2,250 img/s, spread 1,735–3,008 (CV 18%)'; one run says it is one."""
        unit = f" {self.unit}" if self.unit else ""
        if self.n == 1:
            return f"one run, {_figure(self.figures[0])}{unit}: between-run noise unknown (--repeat N measures it)"
        return (f"median of {self.n} runs {_figure(self.median)}{unit}, spread {_figure(self.low)}–"
                f"{_figure(self.high)} (CV {100 * (self.cv or 0):.1f}%, mean ±{100 * (self.half_width or 0):.1f}% "
                f"at 95%)")


def _figure(value: float) -> str:
    """Three significant figures, thousands grouped: the run line's way."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def set_of(r: Result) -> str | None:
    """The id of the repeat set `r` belongs to (`--repeat N`, a suite entry's `repeat`), or None."""
    return Run.read(r.metrics).repeat_set


def median_run(runs: Sequence[Result], figure: Figure = speed) -> Result:
    """The run whose figure is the set's median (the lower middle one of an even count)."""
    ranked = sorted(runs, key=lambda r: figure(r) or 0.0)
    return ranked[(len(ranked) - 1) // 2]


def median_runs(results: Sequence[Result]) -> list[Result]:
    """`results` with each repeat set's ok runs replaced by its median run, in the original order:
    a set's figure is its median run."""
    sets: dict[str, list[Result]] = {}
    for r in results:
        if r.status == "ok" and (key := set_of(r)) and speed(r) is not None:
            sets.setdefault(key, []).append(r)
    chosen = {median_run(runs).id for runs in sets.values()}
    return [r for r in results if r.id in chosen or not (r.status == "ok" and set_of(r) in sets)]
