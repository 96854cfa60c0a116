"""How long specs will take: the median wall time of earlier `ok` runs of the same spec on
this machine when the store has them, else a rough guess from warm-up and steps."""

from __future__ import annotations

import datetime as dt
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from dlbench.results.record import Result
from dlbench.results.titles import TITLES
from dlbench.spec import BenchmarkSpec
from dlbench.suites import spec_key

# Never-run specs are guessed from the model's FLOPs and this machine's measured speed. Conv
# nets reach about this share of a plain matmul's FLOP rate (and a step of training about
# three forward passes); measured on 2-core CPUs and on an H200 with the built-in suites.
CONV_EFFICIENCY = {"cuda": 0.35, "cpu": 0.5}
PASSES = {"fwdbwd": 3.0, "train": 3.0, "infer": 1.0, "smooth": 1.0}
STEP_FLOOR_S = {"cuda": 2e-3, "cpu": 1e-3}  # launch and framework overhead of even the smallest step


@dataclass(frozen=True)
class Estimate:
    seconds: float
    measured: int  # how many earlier results it comes from; 0: a guess

    @property
    def source(self) -> str:
        return f"from {self.measured} earlier run{'s' if self.measured > 1 else ''}" if self.measured else "guess"


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


def estimate(spec: BenchmarkSpec, times: dict[str, list[float]]) -> Estimate:
    earlier = times.get(spec_key(spec))
    if earlier:
        return Estimate(statistics.median(earlier), len(earlier))
    return Estimate(guess(spec), 0)


def guess(spec: BenchmarkSpec) -> float:
    """Process start, the FLOP-count step, warm-up and measurement of a spec never run here."""
    step = _step_guess(spec)
    return machine().startup_s + step + max(spec.warmup * step, spec.warmup_seconds) + \
        max(spec.steps * step, spec.min_seconds)


def _step_guess(spec: BenchmarkSpec) -> float:
    import torch

    from dlbench.models import registry

    on_gpu = spec.device.startswith("cuda") or (spec.device == "auto" and torch.cuda.is_available())
    kind = "cuda" if on_gpu else "cpu"
    entry = registry.resolve(spec.model)
    shape = spec.input_shape or entry.input_shape
    flops = _forward_flops(spec.model, (spec.batch, *shape)) * PASSES.get(spec.workload, 3.0)
    rate = machine().matmul_flops(kind) * CONV_EFFICIENCY[kind]
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
    rates: dict  # device kind -> measured fp32 matmul FLOP/s

    def matmul_flops(self, kind: str) -> float:
        if kind not in self.rates:
            self.rates[kind] = _matmul_rate(kind)
        return self.rates[kind]


@lru_cache(maxsize=1)
def machine() -> Machine:
    """This machine's start-up time and speed, measured once (a few seconds) for the guesses."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, torchvision"], capture_output=True, check=False)
    return Machine(time.perf_counter() - start, {})


def _matmul_rate(kind: str) -> float:
    import torch

    n = 2048 if kind == "cuda" else 512
    a = torch.randn(n, n, device=kind)
    torch.mm(a, a)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.2:
        torch.mm(a, a)
        count += 1
        if kind == "cuda":
            torch.cuda.synchronize()
    return 2 * n**3 * count / (time.perf_counter() - start)


def format_seconds(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
