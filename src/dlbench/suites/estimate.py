"""How long specs will take: the median wall time of earlier `ok` runs of the same spec on
this machine when the store has them, else a guess from a step's FLOPs and this machine's speed.

A suite that runs guesses only from what is known without measuring (`known`, `estimate_known`):
FLOPs per step counted by an earlier run of the same work on any machine, this host's stored
matmul ceilings or else the datasheet peak of its GPU (by the name NVML gives), and what a run
here costs beyond its warm-up and measured window (its earlier runs). Where one of these is
missing the time is not known, and the suite says so: the first benchmark must not wait for a
measurement. `dlbench suite NAME --list`, asked for estimates, measures this machine's speed in
a child process (launch/speed.py) and counts FLOPs on the meta device for specs never run here.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

from dlbench.results.record import Result
from dlbench.results.titles import TITLES
from dlbench.spec import BenchmarkSpec
from dlbench.suites import spec_key

# Never-run specs are guessed from the model's FLOPs and this machine's measured speed. Conv
# nets reach about this share of a plain matmul's FLOP rate (and a step of training about
# three forward passes), as the built-in suites run on CPUs and GPUs.
CONV_EFFICIENCY = {"cuda": 0.35, "cpu": 0.5}
PASSES = {"fwdbwd": 3.0, "train": 3.0, "infer": 1.0, "smooth": 1.0}
STEP_FLOOR_S = {"cuda": 2e-3, "cpu": 1e-3}  # launch and framework overhead of even the smallest step


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: nothing to go by (never run here, and no FLOP count, rate or start-up known)
    measured: int  # how many earlier results it comes from; 0: a guess

    @property
    def source(self) -> str:
        if self.measured:
            return f"from {self.measured} earlier run{'s' if self.measured > 1 else ''}"
        return "guess" if self.seconds is not None else "not known"


def history(results: Iterable[Result], host: str | None) -> dict[str, list[float]]:
    """Wall seconds of earlier ok results on `host`, by spec."""
    times: dict[str, list[float]] = {}
    for result in results:
        seconds = wall_seconds(result)
        if result.status == "ok" and result.system.get("host") == host and seconds is not None:
            times.setdefault(spec_key(result.spec), []).append(seconds)
    return times


def wall_seconds(result: Result) -> float | None:
    """The whole run, process start included when it ran isolated; else the record's own times."""
    launch = result.traces.get("launch") if isinstance(result.traces, dict) else None
    if isinstance(launch, dict) and isinstance(launch.get("wall_s"), (int, float)):
        return float(launch["wall_s"])
    try:
        return (dt.datetime.fromisoformat(result.finished) - dt.datetime.fromisoformat(result.started)).total_seconds()
    except (TypeError, ValueError):
        return None


def estimate(spec: BenchmarkSpec, times: dict[str, list[float]], machine: Callable[[], Machine]) -> Estimate:
    """`machine`: this machine's start-up time and speed (launch/speed.py), asked for only where a
    spec was never run here."""
    earlier = times.get(spec_key(spec))
    if earlier:
        return Estimate(statistics.median(earlier), len(earlier))
    return Estimate(guess(spec, machine()), 0)


@dataclass(frozen=True)
class Known:
    """What the store and the GPU's name tell of this host, without measuring anything."""
    times: dict[str, list[float]]  # wall seconds of earlier ok runs here, by spec
    flops: dict[tuple, float]  # FLOPs per step by `_work(spec)`, counted by a run on any machine
    rates: dict[tuple[str, str], float]  # (device kind, precision) -> FLOP/s: stored ceilings here, else the datasheet
    overhead_s: float | None  # a run here beyond its warm-up and measured window: process start, set-up, record


def known(results: list[Result], host: str | None, gpu: str | None) -> Known:
    """`gpu`: the name of the GPU a spec on device auto or cuda runs on (NVML's), None without one."""
    counted = ((r, r.measured.utilisation.flops_per_step) for r in results if r.status == "ok")
    flops = {_work(r.spec): float(f) for r, f in counted if isinstance(f, (int, float)) and f > 0}
    return Known(history(results, host), flops, _known_rates(results, host, gpu), _overhead(results, host))


def _work(spec: BenchmarkSpec | dict) -> tuple:
    """What a step's FLOPs depend on."""
    data = spec.to_dict() if isinstance(spec, BenchmarkSpec) else spec
    shape = data.get("input_shape")
    return (data.get("workload"), data.get("model"), data.get("batch"), tuple(shape) if shape else None,
            data.get("precision"))


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


def _overhead(results: list[Result], host: str | None) -> float | None:
    spent = []
    for result in results:
        wall, timed = wall_seconds(result), _timed_seconds(result)
        if result.status == "ok" and result.system.get("host") == host and wall is not None and timed is not None:
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


def estimate_known(spec: BenchmarkSpec, facts: Known) -> Estimate:
    """Earlier runs of the spec here, else a guess from known FLOPs, rate and start-up, else not known."""
    earlier = facts.times.get(spec_key(spec))
    if earlier:
        return Estimate(statistics.median(earlier), len(earlier))
    flops = facts.flops.get(_work(spec))
    kind = "cpu" if spec.device == "cpu" else "cuda"
    rate = facts.rates.get((kind, spec.precision))
    if not flops or not rate or facts.overhead_s is None:
        return Estimate(None, 0)
    step = max(flops / (rate * CONV_EFFICIENCY[kind]), STEP_FLOOR_S[kind])
    return Estimate(facts.overhead_s + _stepping(spec, step), 0)


def _stepping(spec: BenchmarkSpec, step: float) -> float:
    """The FLOP-count step (slower than the others: every op goes through Python), warm-up and measurement."""
    return 2 * step + max(spec.warmup * step, spec.warmup_seconds) + max(spec.steps * step, spec.min_seconds)


def guess(spec: BenchmarkSpec, machine: Machine) -> float:
    """Process start, the FLOP-count step (slower than the others: every op goes through Python),
    warm-up and measurement of a spec never run here."""
    return machine.startup_s + _stepping(spec, _step_guess(spec, machine))


def _step_guess(spec: BenchmarkSpec, machine: Machine) -> float:
    import torch

    from dlbench.models import registry

    on_gpu = spec.device.startswith("cuda") or (spec.device == "auto" and torch.cuda.is_available())
    kind = "cuda" if on_gpu else "cpu"
    entry = registry.resolve(spec.model)
    shape = spec.input_shape or entry.input_shape
    flops = _forward_flops(spec.model, (spec.batch, *shape)) * PASSES.get(spec.workload, 3.0)
    rate = machine.matmul_flops(kind) * CONV_EFFICIENCY[kind]
    if spec.precision in ("fp16", "bf16", "tf32") and on_gpu:
        rate *= 4  # tensor cores; a rough guess is all this is
    if not flops:  # a rough stand-in: the input's size
        flops = spec.batch * math.prod(shape) * 1e3
    return max(flops / rate, STEP_FLOOR_S[kind])


@lru_cache(maxsize=None)
def _forward_flops(model: str, shape: tuple[int, ...]) -> int:
    """One forward pass of `model` on a batch of `shape`, counted on the meta device (no compute).
    Only built-in models: a plug-in's or a file's may do anything when built (abort, hang), and
    planning must not."""
    import torch

    from dlbench.measure.flops import count_flops
    from dlbench.models import registry

    if model.partition(":")[0] not in TITLES:
        return 0
    try:
        with torch.device("meta"):
            net = registry.resolve(model).build()
            return count_flops(lambda: net(torch.empty(shape)))
    except Exception:  # noqa: BLE001 - a model that cannot run on meta gets the floor
        return 0


@dataclass(frozen=True)
class Machine:
    startup_s: float  # a fresh worker process: interpreter, torch, torchvision
    rates: dict  # device kind -> measured fp32 matmul FLOP/s, measured in a child process

    def matmul_flops(self, kind: str) -> float:
        # A GPU the helper could not use (a broken driver, say) still gets a guess: the CPU's speed.
        return self.rates.get(kind) or self.rates.get("cpu") or FALLBACK_FLOPS


FALLBACK_FLOPS = 1e10  # what a guess assumes when not even the CPU's matmul rate came back

def format_seconds(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"

