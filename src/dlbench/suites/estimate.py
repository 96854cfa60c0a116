"""How long specs will take: the median wall time of earlier `ok` runs of the same spec on
this machine when the store has them, else a rough guess from warm-up and steps."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from dlbench.results.record import Result
from dlbench.spec import BenchmarkSpec
from dlbench.suites import spec_key

STARTUP_S = 8.0  # a fresh process: imports, model build, first transfer to the device
# Rough input elements per second of one training step; only for specs never run here.
GUESS_RATE = {"cuda": 1e8, "cpu": 1e6}


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
    step = _step_guess(spec)
    return STARTUP_S + max(spec.warmup * step, spec.warmup_seconds) + max(spec.steps * step, spec.min_seconds)


def _step_guess(spec: BenchmarkSpec) -> float:
    import torch

    from dlbench.models import registry

    shape = spec.input_shape or registry.resolve(spec.model).input_shape
    on_gpu = spec.device.startswith("cuda") or (spec.device == "auto" and torch.cuda.is_available())
    return spec.batch * math.prod(shape) / GUESS_RATE["cuda" if on_gpu else "cpu"]


def format_seconds(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
