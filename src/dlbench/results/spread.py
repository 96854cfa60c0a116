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
    conclusions): of a forward/backward benchmark its forward + backward, the Total its tables and run
    line print (its whole step adds zeroing the gradients), else the whole step."""
    total = r.samples.get("total") if r.workload == "fwdbwd" else None
    return total if total else r.samples.get("step")


def step_rate(r: Result) -> float | None:
    """Steps per second of the median step (`step_samples`): a figure that is per process on several GPUs."""
    steps = step_samples(r)
    middle = statistics.median(steps) if steps else None
    # a median of 0 s (or a few picoseconds, whose rate is infinite) was never measured: no figure
    return 1.0 / middle if middle and middle > 0 and math.isfinite(1.0 / middle) else None


Figure = Callable[[Result], "float | None"]


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
