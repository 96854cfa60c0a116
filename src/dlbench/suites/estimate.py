"""How long a run will take, one estimator for every caller (`estimate_run`): a `dlbench run`, its
--repeat and --batch auto, a suite as it runs and `dlbench suite NAME --list`.

It goes by what is known without measuring (`known`): the median wall time of earlier `ok` runs of
the same spec on this machine; else a step's FLOPs (counted by an earlier run of the same work on
any machine, remembered by launch/flopcount.py; a single run may also count one forward pass on
the meta device) over this host's stored matmul ceiling or the datasheet peak of its GPU, plus
what a run here costs beyond its warm-up and measured window; else a rough figure from stand-ins,
labelled so. To that it adds a first compile where the --optimize level compiles, and the bound
of a batch search where one runs. Nothing here measures the machine: the first benchmark of a
suite never waits for an estimate.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Iterable

from dlbench.errors import UserError
from dlbench.results.record import Result
from dlbench.spec import BenchmarkSpec
from dlbench.suites import spec_key
from dlbench import workloads
from dlbench.workloads import Planned

# Never-run specs are guessed from the model's FLOPs (times the passes a step of the workload
# costs, as it declares them) and this machine's measured ceiling. Conv nets reach about this
# share of a plain matmul's FLOP rate, as the built-in suites run on CPUs and GPUs.
CONV_EFFICIENCY = {"cuda": 0.35, "cpu": 0.5}
STEP_FLOOR_S = {"cuda": 2e-3, "cpu": 1e-3}  # launch and framework overhead of even the smallest step


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: not estimated (estimate_run always gives a figure, rough where nothing is known)
    measured: int  # how many earlier results it comes from; 0: from FLOPs, or rough
    rough: bool = False  # from stand-ins (no measured speed, or no FLOP count): off by 2x or more

    @property
    def source(self) -> str:
        if self.measured:
            return f"from {self.measured} earlier run{'s' if self.measured > 1 else ''}"
        if self.rough and self.seconds is not None:
            return "rough"
        return "from FLOPs" if self.seconds is not None else "not known"


def history(results: Iterable[Result], host: str | None) -> dict[str, list[float]]:
    """Wall seconds of earlier ok results on `host`, by spec."""
    times: dict[str, list[float]] = {}
    for result in results:
        seconds = wall_seconds(result)
        if result.status == "ok" and result.machine.host == host and seconds is not None:
            times.setdefault(spec_key(asked(result)), []).append(seconds)
    return times


def asked(result: Result) -> dict:
    """The spec a result's command asked for: the record keeps what ran (volume's --precision auto
    as fp32), and the next run of the same command asks the same."""
    return {**result.spec, **(result.measured.run.asked or {})}


def wall_seconds(result: Result) -> float | None:
    """The whole run, process start included when it ran isolated; else the record's own times."""
    launch = result.traces.get("launch") if isinstance(result.traces, dict) else None
    if isinstance(launch, dict) and isinstance(launch.get("wall_s"), (int, float)):
        return float(launch["wall_s"])
    try:
        return (dt.datetime.fromisoformat(result.finished) - dt.datetime.fromisoformat(result.started)).total_seconds()
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Known:
    """What the store and the GPU's name tell of this host, without measuring anything."""
    times: dict[str, list[float]]  # wall seconds of earlier ok runs here, by spec
    flops: dict[tuple, float]  # FLOPs per step by `_work(spec)`, counted by a run on any machine
    rates: dict[tuple[str, str], float]  # (device kind, precision) -> FLOP/s: stored ceilings here, else the datasheet
    overhead_s: float | None  # a run here beyond its warm-up and measured window: process start, set-up, record
    compile_s: dict[bool, float] = field(default_factory=dict)  # cache warm? -> median compile seconds here


def known(results: list[Result], host: str | None, gpu: str | None, counts: dict[str, float] | None = None) -> Known:
    """`gpu`: the name of the GPU a spec on device auto or cuda runs on (NVML's), None without one.
    `counts`: the store's remembered FLOP counts (Store.flop_counts, keyed by launch/flopcount.py)."""
    import json

    counted = ((r, r.measured.utilisation.flops_per_step) for r in results if r.status == "ok")
    flops = {_work(r.spec, _step_shape(r)): float(f) for r, f in counted if isinstance(f, (int, float)) and f > 0}
    for key, value in (counts or {}).items():
        try:
            flops.setdefault(_work(json.loads(key)), value)
        except (ValueError, TypeError, AttributeError):  # a hand-edited row: no count is a slower guess
            continue
    return Known(history(results, host), flops, _known_rates(results, host, gpu), _overhead(results, host),
                 _compile_times(results, host))


def _work(spec: BenchmarkSpec | dict, step: tuple[int, ...] | None = None) -> tuple:
    """What a step's FLOPs depend on; `step`: its input without the batch, where not the spec's (a tile)."""
    data = spec.to_dict() if isinstance(spec, BenchmarkSpec) else spec
    shape = step or data.get("input_shape")
    return (data.get("workload"), data.get("model"), data.get("batch"), tuple(shape) if shape else None,
            data.get("precision"))


def _step_shape(result: Result) -> tuple[int, ...] | None:
    """A volume run's step is one tile of its blocking, one input channel; a 3D training run's its patch
    (workloads/volume.py `planned`, workloads/plans.py `train`)."""
    tile = result.measured.volume.tile
    if tile:
        return (1, *tile)
    taken = result.measured.data.input_shape
    patched = isinstance(result.spec, dict) and (result.spec.get("options") or {}).get("patch")
    return tuple(taken[1:]) if patched and isinstance(taken, list) and len(taken) > 1 else None


def _known_rates(results: list[Result], host: str | None, gpu: str | None) -> dict[tuple[str, str], float]:
    from dlbench.system.datasheet import lookup
    from dlbench.system.records import ceiling_name, here

    rates: dict[tuple[str, str], float] = {}
    sheet = lookup(gpu) if gpu else None
    for precision in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        peak = sheet.peak_tflops(precision) if sheet else None
        if peak:
            rates[("cuda", precision)] = peak * 1e12
    for record in sorted(here(results, {"host": host}), key=lambda r: r.started):  # the newest wins
        m = record.measured
        kind = "cuda" if str(m.run.device or "").startswith("cuda") else "cpu"
        for precision in ("fp32", "tf32", "fp16", "bf16", "fp8"):
            value = m.system.measured(ceiling_name(precision))
            if value is not None:
                rates[(kind, precision)] = value * 1e12
    return rates


def _compile_times(results: list[Result], host: str | None) -> dict[bool, float]:
    """Median seconds of a torch.compile here, with its caches cold (a first compile) and warm."""
    found: dict[bool, list[float]] = {}
    for result in results:
        m = result.measured
        warm = (m.run.compile_cache or {}).get("warm") if isinstance(m.run.compile_cache, dict) else None
        if result.status == "ok" and result.machine.host == host and isinstance(m.window.compile_s, (int, float)):
            found.setdefault(bool(warm), []).append(float(m.window.compile_s))
    return {warm: statistics.median(times) for warm, times in found.items()}


def _overhead(results: list[Result], host: str | None) -> float | None:
    spent = []
    for result in results:
        wall, timed = wall_seconds(result), _timed_seconds(result)
        if result.status == "ok" and result.machine.host == host and wall is not None and timed is not None:
            spent.append(max(0.0, wall - timed))
    return statistics.median(spent) if spent else None


def _timed_seconds(result: Result) -> float | None:
    """Warm-up and measured window of a stored result (the window: its steps where it names none)."""
    timed = result.measured.window
    warmup, window = timed.warmup_s, timed.window_s
    steps = result.samples.get("step") if isinstance(result.samples, dict) else None
    if not isinstance(window, (int, float)) and isinstance(steps, list) and steps:
        window = sum(s for s in steps if isinstance(s, (int, float)))
    if not isinstance(warmup, (int, float)) or not isinstance(window, (int, float)):
        return None
    return warmup + window


def _stepping(spec: BenchmarkSpec, step: float) -> float:
    """The FLOP-count step (slower than the others: every op goes through Python), warm-up and measurement."""
    return 2 * step + max(spec.warmup * step, spec.warmup_seconds) + max(spec.steps * step, spec.min_seconds)


# Stand-ins where this machine has measured nothing yet, for a figure labelled rough: a first run's
# set-up (process, imports, model, ceilings measured once), a matmul rate, and a first torch.compile
# (cache cold) and a later one (cache warm). They say the order of magnitude, no more. A suite's
# runs are forked from a process that imported torch once (launch/forkserver.py): on the 2-core
# EPYC (fresh HOME, 2026-11-28) the smoke suite's first runs took 0.8 to 1.5 s each besides their
# steps, a first run that counts FLOPs and measures the ceiling 2 to 3 s; a single `dlbench run`
# says its estimate once torch is loaded and has about as much left to set up.
ROUGH_STARTUP_S = {"cpu": 3.0, "cuda": 4.0}
ROUGH_RATE = {"cpu": 1e10, "cuda": 2e13}
ROUGH_CORE_RATE = 1.5e10  # FLOP/s of one CPU core on large convolutions (`rough_rate`)
# A first compile of resnet18 at `--optimize compile` on the 2-core EPYC (fresh HOME) took 58 to 85 s
# in three walks of the docs (2026-11-28), and 4 min under a load of 4 to 8; a first `--optimize max`
# on an H200 221-247 s.
ROUGH_COMPILE_S = {("cpu", False): 75.0, ("cpu", True): 15.0, ("cuda", False): 240.0, ("cuda", True): 20.0}
COMPILED = ("compile", "max")  # --optimize levels that run torch.compile (workloads/optimize.py)


@dataclass(frozen=True)
class RunEstimate:
    """How long one `dlbench run` will take, and from what: its run, plus what it compiles or tunes."""
    run: Estimate
    basis: str  # "a stored run here", "FLOPs over this machine's measured ceiling", or "rough"
    extras: tuple[tuple[str, float, bool], ...] = ()  # (what, seconds, rough): a compile, a batch search
    bound: str | None = None  # where the run's steps are a limit (converge's --max-steps): the figure is its bound

    @property
    def seconds(self) -> float:
        return (self.run.seconds or 0.0) + sum(seconds for _, seconds, _ in self.extras)

    def text(self) -> str:
        """'about 40 s (from a stored run here)'; what it adds named: '…; a first compile, rough: 4 min 00 s'."""
        basis = self.basis if self.basis == "rough" else f"from {self.basis}"
        added = "".join(f"; {what}{', rough' if rough else ''}: {format_seconds(seconds)}"
                        for what, seconds, rough in self.extras)
        if self.bound:
            return f"at most about {format_seconds(self.seconds)} ({basis}{added}; {self.bound})"
        return f"about {format_seconds(self.seconds)} ({basis}{added})"


def estimate_run(spec: BenchmarkSpec, facts: Known, kind: str, *, forward: Callable[[BenchmarkSpec], int] | None = None,
                 search_s: float | None = None) -> RunEstimate:
    """One run of `spec` on device `kind` (cpu, cuda): the median of its stored runs here (a compile
    included), else its FLOPs per step (remembered, else `forward`'s count of one forward pass on the
    meta device) over this machine's measured ceiling, else a rough figure; plus a first compile at an
    --optimize level that compiles and `search_s`, the batch search's bound, where one runs."""
    searched = (("a batch search, at most", search_s, False),) if search_s else ()
    earlier = facts.times.get(spec_key(spec))
    if earlier:
        runs = "a stored run" if len(earlier) == 1 else f"{len(earlier)} stored runs"
        return RunEstimate(Estimate(statistics.median(earlier), len(earlier)), f"{runs} here", searched)
    plan = _planned(spec)
    if plan is not None:
        return _from_plan(spec, plan, facts, kind, forward, searched)
    flops = facts.flops.get(_work(spec))
    if not flops and forward is not None:
        flops = forward(spec) * workloads.declared(spec.workload).passes
    rate = facts.rates.get((kind, spec.precision)) or (facts.rates.get(("cpu", "fp32")) if kind == "cpu" else None)
    rough = not flops or not rate
    work = flops or spec.batch * math.prod(spec.input_shape or _model_shape(spec.model)) * 1e3  # a stand-in: the input's size
    step = max(work / ((rate or rough_rate(kind)) * CONV_EFFICIENCY[kind]), STEP_FLOOR_S[kind])
    startup = facts.overhead_s if facts.overhead_s is not None else ROUGH_STARTUP_S[kind]
    run = Estimate(startup + _stepping(spec, step), 0, rough)
    return RunEstimate(run, "rough" if rough else "FLOPs over this machine's measured ceiling",
                       _compiling(spec, facts, kind) + searched)


def _model_shape(model: str) -> tuple[int, ...]:
    """The input a model takes where the spec gives none (a plug-in's 3x32x32 CNN is not an ImageNet one)."""
    from dlbench.models import registry

    try:
        return tuple(registry.resolve(model).input_shape)
    except Exception:  # noqa: BLE001 - a model that cannot be looked up: ImageNet's size, as most take
        return (3, 224, 224)


def _planned(spec: BenchmarkSpec) -> Planned | None:
    """What the workload says a run of `spec` computes, where its steps are not the spec's; None where
    it says nothing, or cannot tell (then the spec's steps are the guess)."""
    plan = spec.declared.planned
    try:
        return plan(spec) if plan is not None else None
    except (UserError, OSError, ValueError):  # an input the run itself will report on
        return None


def _from_plan(spec: BenchmarkSpec, plan: Planned, facts: Known, kind: str,
               forward: Callable[[BenchmarkSpec], int] | None, searched: tuple) -> RunEstimate:
    """A run of `plan.steps` steps after `plan.warmup`, each of its step's FLOPs (counted by an earlier
    run of the same step, else one forward pass on the meta device) over the ceiling of the precision
    that will run; plus what it makes before them (a generated input), at a stand-in rate."""
    flops = facts.flops.get(_work({**spec.to_dict(), "precision": plan.precision}, plan.shape[1:]))
    if not flops and forward is not None:
        counted = forward(dataclasses.replace(spec, batch=plan.shape[0], input_shape=plan.shape[1:]))
        flops = counted * plan.passes
    rate = facts.rates.get((kind, plan.precision)) or (facts.rates.get(("cpu", "fp32")) if kind == "cpu" else None)
    rough = not flops or not rate
    work = flops or math.prod(plan.shape) * 1e3  # a stand-in: the input's size
    share = plan.efficiency or (plan.cpu_efficiency if kind == "cpu" else None) or CONV_EFFICIENCY[kind]
    step = max(work / ((rate or rough_rate(kind)) * share), STEP_FLOOR_S[kind])
    startup = facts.overhead_s if facts.overhead_s is not None else ROUGH_STARTUP_S[kind]
    counting = 0.0 if plan.counted_free else 2 * step  # the FLOP count runs a step through Python
    stepping = max(plan.warmup * step, plan.warmup_seconds) + max(plan.steps * step, plan.min_seconds)
    run = Estimate(startup + counting + stepping, 0, rough)
    made = tuple((what, seconds, True) for what, seconds in plan.prepare if seconds >= 1)  # a second is no news
    return RunEstimate(run, "rough" if rough else "FLOPs over this machine's measured ceiling",
                       made + _compiling(spec, facts, kind) + searched, plan.bound)


def rough_rate(kind: str) -> float:
    """A step's stand-in rate where no ceiling was measured: on a CPU a matmul's rate on every core
    torch uses (2-core EPYC, 8 processes' load: 17 GFLOP/s fp32 torch.mm, unet3d on 56x256x256 tiles
    28 GFLOP/s; ResNet-50 at batch 8 on 64x64 images 22 GFLOP/s, 2026-11-28)."""
    if kind != "cpu":
        return ROUGH_RATE[kind]
    import os

    return ROUGH_CORE_RATE * len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ROUGH_RATE[kind]


def _compiling(spec: BenchmarkSpec, facts: Known, kind: str) -> tuple[tuple[str, float, bool], ...]:
    """A first compile (its caches cold) where the level compiles: how long one took here, else rough."""
    if spec.optimize not in COMPILED:
        return ()
    here = facts.compile_s.get(False)
    return (("a first compile", here if here is not None else ROUGH_COMPILE_S[(kind, False)], here is None),)


def over_a_minute(seconds: float, kind: str) -> str | None:
    """The line a run expected to take over a minute on a CPU says before it starts."""
    if kind != "cpu" or seconds <= 60:
        return None
    return (f"expected to take over a minute on the CPU (about {format_seconds(seconds)}); fewer --steps and "
            f"--min-seconds, a smaller --batch or --input-shape, or a GPU make it shorter")


def countdown(expected: float | None, elapsed: float) -> str:
    """'about 25 s left of 40 s'; past the estimate, how far past it."""
    if not expected:
        return f"{format_seconds(elapsed)} so far"
    left = expected - elapsed
    if left >= 0:
        return f"about {format_seconds(left)} left of {format_seconds(expected)}"
    return f"{format_seconds(-left)} past the {format_seconds(expected)} expected"


def format_seconds(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"

