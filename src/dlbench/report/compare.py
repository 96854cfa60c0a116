"""Relative speed of systems or runs, with bootstrap confidence intervals over per-step samples.

"A is 2.3x as fast as B" means B's median step time is 2.3 times A's on the same benchmark
(same workload, model, batch, shape, precision, GPU count and options). The interval
resamples both sides' raw step times; when it contains 1 the difference is within noise.
With two sides on one machine this is a regression check: the second side is the candidate.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from dlbench.errors import UserError
from dlbench.report.tables import Table, model_title, odd_values
from dlbench.figures import Odd, fixed, ms, odd
from dlbench.results.record import Result
from dlbench.results.spread import Interval, Logs, RunRatio, ratio_of_runs, step_rate, step_samples
from dlbench.system.records import machine_key

RESAMPLES = 2000
# Steps a side needs for a bootstrap interval: the median of fewer takes so few values under
# resampling (3 from 2 steps) that the interval says nothing about the noise.
MIN_STEPS = 10
_CHUNK_ELEMENTS = 2_000_000  # bootstrap in chunks so a long run's samples never take much memory
_HEX = re.compile(r"^[0-9a-f]{4,32}$")
# Settings that change how long or where a run measured, not what it measured.
_NOT_BENCHMARK = {"device", "seed", "warmup", "warmup_seconds", "steps", "min_seconds", "timeout", "profile",
                  "profile_trace"}


@dataclass(frozen=True)
class ComparedRun:
    """One ok run as a comparison between runs reads it: its steps per second (`spread.step_rate` of
    `samples`), its benchmark and its machine. From a store's summary, `samples` is its median step
    alone, whose rate is the same figure: a side of 25,000 runs is never read whole."""
    id: str
    workload: str
    samples: dict[str, list]
    key: tuple  # benchmark_key
    machine: tuple[str, str]  # machine_key

    @classmethod
    def of(cls, r: Result) -> "ComparedRun":
        return cls(r.id, r.workload, {"step": step_samples(r)}, benchmark_key(r), machine_key(r))


@dataclass
class Side:
    label: str  # what the user typed: a system, a host, a tag or an id prefix
    results: dict[tuple, Result]  # latest usable result per benchmark key
    runs: dict[tuple, list[ComparedRun]] = field(default_factory=dict)  # every ok run per benchmark key


@dataclass
class Ratio(Interval):
    """How many times as fast `a` is as `b` on one benchmark (time of b over time of a)."""
    a: str
    b: str
    benchmark: str
    ratio: float | None  # None when one side ran out of memory
    low: float | None = None
    high: float | None = None
    oom: str | None = None  # label of the side that ran out of memory
    runs: tuple[int, int] = (1, 1)  # the runs behind each side's figure
    noise: str = "steps"  # 'between runs': the interval is the runs' spread; 'steps': one run each, steps only
    steps: tuple[int, int] | None = None  # the steps behind each side where the figure is one run's steps
    sets: RunRatio | None = None  # between runs: the ratio of the sets and its interval, as the doctor prints it


@dataclass
class Comparison:
    sides: list[Side]
    benchmarks: dict[tuple, str]  # key -> readable name, in display order
    ratios: dict[tuple[str, str, tuple], Ratio] = field(default_factory=dict)
    level: float = 0.95


# --- choosing results -------------------------------------------------------------------

def benchmark_key(r: Result) -> tuple:
    spec = {k: v for k, v in r.spec.items() if k not in _NOT_BENCHMARK}
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in spec.items()))


# Shown where the benchmarks named together differ in a setting this one leaves at its default.
_UNSET = {"gpus": "1 GPU", "layout": "channels-first"}


def _settings(r: Result) -> dict[str, str]:
    """A benchmark's settings as its name shows them, in order; a default GPU count or layout is left out."""
    setup = r.setup
    named = {"batch": f"batch {setup.batch}", "precision": setup.precision}
    if setup.gpus != 1:
        named["gpus"] = f"{setup.gpus} GPUs"
    if setup.channels_last:
        named["layout"] = "channels-last"
    if setup.input_shape:
        named["shape"] = "x".join(map(str, setup.input_shape))
    return named | {f"option {k}": f"{k}={v}" for k, v in sorted(setup.options.items())}


def benchmark_name(r: Result, among: Sequence[Result] | None = None) -> str:
    """'ResNet-50 fwdbwd (batch 16, fp32, 3x224x224)'; with `among` (the benchmarks named
    together) only the settings in which they differ: a setting all share says nothing."""
    mine = _settings(r)
    if among is None:
        parts = list(mine.values())
    else:
        everyone = [_settings(o) for o in among]
        keys = dict.fromkeys(k for s in everyone for k in s)
        parts = [mine.get(k) or _UNSET.get(k, "") for k in keys if len({s.get(k) for s in everyone}) > 1]
    parts = [p for p in parts if p]
    return f"{model_title(r)} {r.workload}" + (f" ({', '.join(parts)})" if parts else "")


def benchmark_names(chosen: dict[tuple, Result]) -> dict[tuple, str]:
    """Each benchmark's name showing only what differs among them; every setting where that
    would name two alike (the name is a table's title and a conclusion's subject)."""
    names = {k: benchmark_name(r, list(chosen.values())) for k, r in chosen.items()}
    if len(set(names.values())) < len(names):
        names = {k: benchmark_name(r) for k, r in chosen.items()}
    return names


def select(results: Sequence[Result], selector: str) -> list[Result]:
    """Results matching an id prefix, else a tag, else a system label or host name."""
    s = selector.strip()
    if not s:  # '' is in every system's name: it would choose every run
        raise UserError(f"an empty selector ({selector!r}) names no run: give a system, host, tag or run id")
    if _HEX.match(s.lower()):
        hits = [r for r in results if r.id.startswith(s.lower())]
        if hits:
            return hits
    hits = [r for r in results if r.tag == s]
    if hits:
        return hits
    hits = [r for r in results if r.system_label.lower() == s.lower() or r.machine.host == s]
    if hits:
        return hits
    labels = sorted({r.system_label for r in results if s.lower() in r.system_label.lower()})
    if len(labels) > 1:
        raise UserError(f"{selector!r} matches several systems ({'; '.join(labels)}): name one exactly")
    if labels:
        return [r for r in results if r.system_label == labels[0]]
    raise UserError(f"no results match {selector!r}; systems: {_known(results)}")


def _known(results: Sequence[Result]) -> str:
    systems = sorted({r.system_label for r in results})
    hosts = sorted({r.machine.host for r in results if r.machine.host})
    tags = sorted({r.tag for r in results if r.tag})
    text = ", ".join(systems) or "none stored"
    if hosts:
        text += f"; hosts: {', '.join(hosts)}"
    if tags:
        text += f"; tags: {', '.join(tags)}"
    return text


def _runs(results: Sequence[Result]) -> dict[tuple, list[ComparedRun]]:
    """Every ok run of each benchmark that has a median step, oldest first."""
    found: dict[tuple, list[ComparedRun]] = {}
    for r in sorted(results, key=lambda r: r.started):
        if r.status == "ok" and r.workload != "system" and step_rate(r) is not None:
            run = ComparedRun.of(r)
            found.setdefault(run.key, []).append(run)
    return found


def _latest(results: Sequence[Result]) -> dict[tuple, Result]:
    chosen: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        if r.status in ("ok", "oom") and r.workload != "system":  # machine records are not benchmarks
            chosen[benchmark_key(r)] = r
    return chosen


# --- statistics --------------------------------------------------------------------------

def timed(samples: Sequence[float] | None) -> list[float]:
    """The step times a ratio can stand on: the finite ones, where their median is positive; else none
    (steps of 0 s were never measured, and a ratio of them is NaN or infinite)."""
    found = [float(v) for v in (samples if samples is not None else ())
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return found if found and float(np.median(found)) > 0 else []


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) and v > 0 for v in values)


def bootstrap_ratio(a: Sequence[float], b: Sequence[float], *, level: float = 0.95,
                    resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """median(b) / median(a) and its percentile bootstrap interval, resampling both sides (their finite
    step times, of a positive median: see `timed`)."""
    xa, xb = np.asarray(timed(a), dtype=np.float64), np.asarray(timed(b), dtype=np.float64)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("both sides need positive step times")
    if (xb.size, float(xb.sum())) < (xa.size, float(xa.sum())):
        # one order of the sides for the resampling, so that b against a is exactly the reciprocal of a
        # against b: `compare` and the doctor ask in either order and must print one interval
        value, low, high = bootstrap_ratio(xb, xa, level=level, resamples=resamples, seed=seed)
        return 1.0 / value, 1.0 / high, 1.0 / low
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // max(xa.size, xb.size))
    ratios = []
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        med_a = np.median(xa[rng.integers(0, xa.size, (n, xa.size))], axis=1)
        med_b = np.median(xb[rng.integers(0, xb.size, (n, xb.size))], axis=1)
        ratios.append(med_b / med_a)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(np.concatenate(ratios), (tail, 100.0 - tail))
    return float(np.median(xb) / np.median(xa)), float(low), float(high)


def _step_seconds(r: Result) -> float | None:
    """One step's time when a result has no samples (imported from an older export); an Odd
    where the stored figure it comes from is no valid figure."""
    m = r.measured
    total, throughput = m.window.total_ms, m.throughput.value
    if total:
        return Odd() if odd(total) else total / 1e3
    if throughput and r.setup.batch:
        return Odd() if odd(throughput) else r.setup.batch / throughput
    return None


def _log_variance(runs: Sequence[ComparedRun]) -> Logs | None:
    """A configuration's runs on one machine as logarithms, whose variance is its between-run noise
    (two runs or more)."""
    found = Logs.of([f for r in runs if (f := step_rate(r))])
    return found if found is not None and found.var is not None else None


def _recorded(r: ComparedRun, everything: dict[tuple, list[ComparedRun]], compared: set[str]) -> Logs | None:
    """The between-run variance this machine recorded for `r`'s configuration, from runs neither side
    holds (the difference between the sides is no noise)."""
    same = [o for o in everything.get(r.key, []) if o.machine == r.machine and o.id not in compared]
    return _log_variance(same)


def ratio_of(a: Result, b: Result, labels: tuple[str, str], name: str, level: float,
             runs: tuple[Sequence[ComparedRun], Sequence[ComparedRun]] = ((), ()),
             everything: dict[tuple, list[ComparedRun]] | None = None) -> Ratio | None:
    """`runs`: every run of each side of this benchmark; with several on a side, or the machine's
    recorded spread (`everything`: all stored runs by benchmark) where a side has one, the interval is
    between runs; else over both runs' steps, which see no between-run noise."""
    if a.status == "oom" or b.status == "oom":
        return Ratio(labels[0], labels[1], name, None, oom=labels[0] if a.status == "oom" else labels[1])
    ra, rb = list(runs[0]) or [ComparedRun.of(a)], list(runs[1]) or [ComparedRun.of(b)]
    if all(step_rate(r) for r in (*ra, *rb)):
        compared = {r.id for r in (*ra, *rb)}
        recorded = [_recorded(side[0], everything or {}, compared) if len(side) == 1 else None for side in (ra, rb)]
        sets = ratio_of_runs(ra, rb, (recorded[0], recorded[1]), level=level)
        if sets is not None and sets.has_interval:
            return Ratio(labels[0], labels[1], name, sets.value, sets.low, sets.high, runs=sets.runs,
                         noise="between runs", sets=sets)
    sa, sb = timed(step_samples(a)), timed(step_samples(b))
    if sa and sb:
        counts = len(sa), len(sb)
        if min(counts) < MIN_STEPS:  # the median ratio stands; an interval from so few would not
            value = float(np.median(sb) / np.median(sa))
            if _finite(value):
                return Ratio(labels[0], labels[1], name, value, steps=counts)
        else:
            value, low, high = bootstrap_ratio(sa, sb, level=level)
            if _finite(value, low, high):  # steps of a few picoseconds: a ratio beyond any float
                return Ratio(labels[0], labels[1], name, value, low, high, steps=counts)
    ta, tb = _step_seconds(a), _step_seconds(b)
    if ta and tb and not (odd(ta) or odd(tb)) and _finite(ta, tb, tb / ta):  # no ratio of a value that is no figure
        return Ratio(labels[0], labels[1], name, tb / ta)
    return None


def check_compare_args(selectors: Sequence[str], level: float) -> None:
    if len(selectors) < 2:
        raise UserError("compare needs at least two systems, tags or run ids")
    if not 0.5 <= level < 1.0:
        raise UserError(f"confidence level must be between 0.5 and 1, got {level}")


def compare(results: Sequence[Result], selectors: Sequence[str], level: float = 0.95) -> Comparison:
    check_compare_args(selectors, level)
    chosen = [select(results, s) for s in selectors]
    sides = [Side(s, _latest(found), _runs(found)) for s, found in zip(selectors, chosen)]
    return compare_sides(sides, _runs(results), level)


def compare_sides(sides: list[Side], everything: dict[tuple, list[ComparedRun]], level: float = 0.95) -> Comparison:
    """The comparison of sides already chosen; `everything`: the stored ok runs by benchmark, of which
    `_recorded` takes the spread of a side's one run's configuration on its machine (report/choose.py
    gives only those from a large store's summaries)."""
    selectors = [side.label for side in sides]
    for side in sides:
        if not side.results:
            raise UserError(f"{side.label!r} has no finished results (only errors or interrupted runs)")
    keys = [k for k in sides[0].results if any(k in s.results for s in sides[1:])]
    for side in sides[1:]:
        keys += [k for k in side.results if k not in keys and any(k in o.results for o in sides if o is not side)]
    if not keys:
        raise UserError(f"{', '.join(repr(s) for s in selectors)} ran no benchmark in common; "
                        "compare runs of the same workload, model, batch and precision")
    names = benchmark_names({k: next(s.results[k] for s in sides if k in s.results) for k in keys})
    comparison = Comparison(sides, dict(sorted(names.items(), key=lambda kv: kv[1])), level=level)
    for i, a in enumerate(sides):
        for b in sides[i + 1:]:
            for key, name in comparison.benchmarks.items():
                if key in a.results and key in b.results:
                    found = ratio_of(a.results[key], b.results[key], (a.label, b.label), name, level,
                                     (a.runs.get(key, []), b.runs.get(key, [])), everything)
                    if found:
                        comparison.ratios[(a.label, b.label, key)] = found
    return comparison


def get(comparison: Comparison, a: str, b: str, key: tuple) -> Ratio | None:
    """Ratio of a over b in either stored direction."""
    if (a, b, key) in comparison.ratios:
        return comparison.ratios[(a, b, key)]
    r = comparison.ratios.get((b, a, key))
    if r is None:
        return None
    if r.ratio is None:
        return Ratio(a, b, r.benchmark, None, oom=r.oom)
    flip = (lambda v: None if v is None else 1.0 / v)
    return Ratio(a, b, r.benchmark, 1.0 / r.ratio, flip(r.high), flip(r.low), runs=r.runs[::-1], noise=r.noise,
                 steps=r.steps[::-1] if r.steps else None, sets=r.sets.flipped() if r.sets else None)


# --- rendering ---------------------------------------------------------------------------

def _x(value: float) -> str:
    return f"{fixed(value, 2)}x"


def cell(r: Ratio | None) -> str | None:
    if r is None:
        return None
    if r.ratio is None:
        return "OOM"
    if not r.has_interval:
        return f"{_x(r.ratio)} ({few(r.steps)})" if r.steps else f"{_x(r.ratio)} (no samples)"
    noise = " ~" if r.within_noise else ""
    if r.sets is not None:  # the doctor's text for the same two sets
        return f"{r.sets.text()}{noise}"
    # what the interval stands on, counted: one run's steps each
    behind = f", {r.steps[0]:,} and {r.steps[1]:,} steps" if r.steps else " steps"
    return f"{_x(r.ratio)} ({fixed(r.low, 2)}–{fixed(r.high, 2)}{behind}){noise}"


def tables(comparison: Comparison) -> list[Table]:
    labels = [s.label for s in comparison.sides]
    pct = round(comparison.level * 100)
    out = [_step_table(comparison)]
    for key, name in comparison.benchmarks.items():
        rows = [[a, *(("1.00x" if a == b else cell(get(comparison, a, b, key))) for b in labels)] for a in labels]
        out.append(Table(f"{name}: relative speed", ["", *labels], "l" + "r" * len(labels), rows,
                         notes=[f"Each row is N x as fast as each column (median steps); {pct}% interval in "
                                "brackets with the runs or steps of each side it stands on, between runs where a "
                                "side has several or this machine recorded its spread, else over one run's steps "
                                "each (marked 'steps': the noise "
                                f"between fresh processes unknown; none from fewer than {MIN_STEPS} steps a side); ~ "
                                "marks a difference within noise."]))
    return out + odd_values([r for side in comparison.sides for r in side.results.values()])


def _step_table(comparison: Comparison) -> Table:
    rows = []
    for key, name in comparison.benchmarks.items():
        row: list[object] = [name]
        for side in comparison.sides:
            r = side.results.get(key)
            runs = side.runs.get(key, [])
            row.append(None if r is None else "OOM" if r.status == "oom" and not runs else _median_ms(r, runs))
        rows.append(row)
    labels = [s.label for s in comparison.sides]
    return Table("Median step time (ms)", ["Benchmark", *labels], "l" + "r" * len(labels), rows)


def _median_ms(r: Result, runs: Sequence[ComparedRun] = ()) -> str | None:
    """The median step; of several runs, the median of their median steps, with their count."""
    if len(runs) > 1:
        middle = float(np.median([1.0 / step_rate(o) for o in runs]))
        return f"{ms(middle * 1e3)} (median of {len(runs)} runs)"
    steps = step_samples(r)
    seconds = float(np.median(steps)) if steps else _step_seconds(r)
    return None if seconds is None else ms(seconds if odd(seconds) else seconds * 1e3)


def conclusions(comparison: Comparison) -> list[str]:
    """Seed 004's sentences: one per pair and benchmark, then a range across benchmarks."""
    pct = round(comparison.level * 100)
    lines = []
    for (a, b, _key), r in comparison.ratios.items():
        if r.ratio is None:
            lines.append(f"{r.oom} ran out of memory on {r.benchmark}")
        elif r.sets is not None:
            lines.append(_sets_line(a, b, r.benchmark, r.sets))
        elif r.within_noise:
            lines.append(f"{a} and {b} are within noise on {r.benchmark} "
                         f"({_x(r.ratio)}, {pct}% CI {fixed(r.low, 2)}–{fixed(r.high, 2)}{_basis(r)})")
        else:
            fast, slow, v, lo, hi = (a, b, r.ratio, r.low, r.high) if r.ratio >= 1 else \
                (b, a, 1 / r.ratio, None if r.high is None else 1 / r.high, None if r.low is None else 1 / r.low)
            d = _digits(lo, hi)
            ci = (f", {pct}% CI {lo:.{d}f}–{hi:.{d}f}{_basis(r)}" if lo is not None else
                  f" (one run each, {few(r.steps)})" if r.steps else " (no samples: no interval)")
            lines.append(f"{fast} is {v:.{d}f}x as fast as {slow} on {r.benchmark}{ci}")
    return lines + _ranges(comparison)


def _sets_line(a: str, b: str, benchmark: str, sets: RunRatio) -> str:
    """A conclusion between runs, its figures the doctor's for the same two sets (`RunRatio.text`)."""
    if sets.within_noise:
        return f"{a} and {b} are within noise on {benchmark} ({sets.text()})"
    fast, slow, shown = (a, b, sets) if sets.value >= 1 else (b, a, sets.flipped())
    return f"{fast} is {fixed(shown.value, 2)}x as fast as {slow} on {benchmark} ({shown.interval_text()})"


def _basis(r: Ratio) -> str:
    """What the interval stands on: the runs, or one run's steps on each side."""
    if r.noise == "between runs":
        return f", between runs ({r.runs[0]} and {r.runs[1]})"
    steps = f" of {r.steps[0]:,} and {r.steps[1]:,} steps" if r.steps else ""
    return f"; one run each{steps}: between-run noise unknown"


def few(steps: tuple[int, int]) -> str:
    """Why a ratio of one run each has no interval: its sides' step counts."""
    return f"{steps[0]:,} and {steps[1]:,} steps: no interval from fewer than {MIN_STEPS} a side"


def _digits(low: float | None, high: float | None) -> int:
    """One decimal like the seeds, more when one decimal would hide the interval's width."""
    digits = 1
    while low is not None and high is not None and digits < 3 and f"{low:.{digits}f}" == f"{high:.{digits}f}":
        digits += 1
    return digits


def _ranges(comparison: Comparison) -> list[str]:
    lines = []
    sides = [s.label for s in comparison.sides]
    for i, a in enumerate(sides):
        for b in sides[i + 1:]:
            values = [r.ratio for (x, y, _), r in comparison.ratios.items() if (x, y) == (a, b) and r.ratio]
            if len(values) < 2:
                continue
            if min(values) >= 1 or max(values) <= 1:
                fast, slow = (a, b) if min(values) >= 1 else (b, a)
                spread = sorted(v if fast == a else 1 / v for v in values)
                lines.append(f"Across {len(values)} benchmarks, {fast} is {spread[0]:.2f}x to {spread[-1]:.2f}x "
                             f"as fast as {slow}")
            else:
                lines.append(f"Across {len(values)} benchmarks, neither {a} nor {b} is faster on all of them "
                             f"({min(values):.2f}x to {max(values):.2f}x)")
    return lines


def check_regression_args(sides: int, fail_above_pct: float) -> None:
    if sides != 2:
        raise UserError("--fail-above needs exactly two sides: the baseline, then the candidate")
    if fail_above_pct < 0:
        raise UserError(f"--fail-above must be a percentage >= 0, got {fail_above_pct:g}")


def regressions(comparison: Comparison, fail_above_pct: float) -> list[str]:
    """Benchmarks where the second side is slower than the first by more than the threshold
    *and* by more than the noise (the interval of the slowdown lies above zero)."""
    check_regression_args(len(comparison.sides), fail_above_pct)
    base, cand = (s.label for s in comparison.sides)
    found = []
    for (a, b, _key), r in comparison.ratios.items():
        if r.ratio is None:
            if r.oom == cand:
                found.append(f"{r.benchmark}: {cand} ran out of memory, {base} did not")
            continue
        slowdown = (r.ratio - 1.0) * 100.0  # ratio = candidate time / baseline time
        beyond_noise = r.low > 1.0 if r.has_interval else True
        if slowdown > fail_above_pct and beyond_noise:
            # fixed(): a slowdown under 0.05% (threshold 0) never reads "0.0% slower"
            interval = (f" ({fixed((r.low - 1) * 100, 1)}% to {fixed((r.high - 1) * 100, 1)}%)" if r.has_interval
                        else " (no samples: noise unknown)")
            found.append(f"{r.benchmark}: {cand} is {fixed(slowdown, 1)}% slower than {base}{interval}")
    return found


def to_json(comparison: Comparison) -> dict:
    return {
        "sides": [s.label for s in comparison.sides],
        "level": comparison.level,
        "ratios": [{"a": r.a, "b": r.b, "benchmark": r.benchmark, "ratio": r.ratio, "low": r.low,
                    "high": r.high, "within_noise": r.within_noise, "oom": r.oom, "runs": list(r.runs),
                    "noise": r.noise, "steps": list(r.steps) if r.steps else None}
                   for r in comparison.ratios.values()],
        "conclusions": conclusions(comparison),
    }


def render(comparison: Comparison, format: str, regressions: list[str]) -> str:
    """The comparison as Markdown (conclusions, then tables) or JSON."""
    from dlbench.report.formats import to_dict
    from dlbench.report.markdown import cell
    from dlbench.report.tables import markdown, shown

    if format == "json":
        data = {**to_json(comparison), "tables": [to_dict(t) for t in shown(tables(comparison))], "regressions": regressions}
        return json.dumps(data, indent=1, ensure_ascii=False)
    lines = "\n".join(f"- {cell(line)}" for line in conclusions(comparison))
    return f"## Conclusions\n\n{lines}\n\n{markdown(tables(comparison))}"
