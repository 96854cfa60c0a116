"""The warm-up and measurement policy shared by every workload.

Warm-up runs at least `warmup` steps and `warmup_seconds`; measurement at least `steps`
steps and `min_seconds`. The host clock only decides when to stop; the numbers come
from the PhaseTimer after one synchronize.

The first warm-up step runs under the FLOP counter (an extra step where there is no warm-up),
unless the launcher handed over the count an earlier run of the same work made (measure/flops.py
`given`): counting dispatches every op through Python, and costs minutes on a CPU. During the
measured window the GPU monitor samples NVML; with `profile` steps, that many more run under
torch.profiler after the window (measure/profile.py), so profiling never touches the timing.
`common_metrics` (or `Measured.common_metrics`) turns them into the figures every workload reports,
as a Measurement the workload `combine`s (results/measurement.py) with its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch

from dlbench.measure.flops import achieved_tflops, count_flops, remembered
from dlbench.measure.monitor import Monitor, MonitorData
from dlbench.measure.profile import profile_steps
from dlbench.measure.timer import NullTimer, PhaseTimer
from dlbench.results.measurement import (Host, Measurement, Monitor as MonitorFigures, Neighbours, Utilisation,
                                        combine, energy_per)


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int) -> None: ...


def _no_progress(stage: str, done: int, total: int) -> None:
    pass


@dataclass
class Measured:
    samples: dict[str, list[float]]
    warmup_steps: int
    warmup_s: float
    window_s: float  # wall time of the measured window, device work included
    flops_per_step: int | None = None
    monitor: MonitorData | None = None
    profile: dict[str, Any] | None = None  # measure/profile.py's summary of the profiled steps
    rank_gpus: list[dict[str, Any]] | None = None  # every rank's GPU, as RankGpu stores it (workloads/distributed.py)

    def common_metrics(self, items_per_step: float, unit: str = "img") -> Measurement:
        found = common_metrics(self.samples.get("step", []), self.flops_per_step, self.monitor, items_per_step, unit,
                               self.profile)
        return combine(found, Measurement(monitor=MonitorFigures(ranks=self.rank_gpus))) if self.rank_gpus else found


def common_metrics(step_seconds: Sequence[float], flops_per_step: int | None, monitor: MonitorData | None,
                   items_per_step: float, unit: str = "img", profile: dict[str, Any] | None = None) -> Measurement:
    """What every workload reports: FLOPs and TFLOP/s (utilisation), the GPU monitor's figures
    (monitor, neighbours), energy per step and per item (`unit`: img, mvox, ...; one no record
    knows, a plug-in's, rides in `extra`), the host's CPU figures (neighbours, host). The monitor
    trace goes in `traces`, which the runner moves into Result.traces. A workload that measures its
    own way (volume's pipeline) calls this with its per-step seconds."""
    utilisation = Utilisation(flops_per_step=flops_per_step,
                              achieved_tflops=achieved_tflops(flops_per_step or 0, list(step_seconds)))
    data = monitor or MonitorData(available=False, reason="monitor off")
    summary = data.summary()
    figures = MonitorFigures.read(summary)
    known = {*MonitorFigures.keys().values(), *Neighbours.keys().values(), *Host.keys().values()}
    parts = [Measurement(monitor=figures, neighbours=Neighbours.read(summary), host=Host.read(summary),
                         utilisation=utilisation, profile=profile or None,
                         extra={k: v for k, v in summary.items() if k not in known}, traces={"monitor": data.trace()})]
    if figures.energy_j is not None and step_seconds:
        parts.append(Measurement(monitor=MonitorFigures(energy_j_per_step=figures.energy_j / len(step_seconds))))
        if items_per_step:
            parts.append(energy_per(unit, figures.energy_j / (len(step_seconds) * items_per_step)))
    return combine(*parts)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_steps(
    step: Callable[[PhaseTimer | NullTimer], None],
    device: torch.device,
    *,
    warmup: int,
    warmup_seconds: float,
    steps: int,
    min_seconds: float,
    progress: Progress = _no_progress,
    flops: bool = True,
    monitor: bool = True,
    monitor_interval: float | None = None,
    profile: int = 0,
    profile_trace: str | None = None,
) -> Measured:
    null = NullTimer()
    flops_per_step = remembered() if flops else None
    counting = flops and flops_per_step is None
    done = 0
    if counting and not (warmup or warmup_seconds):  # no warm-up step to count in: one more step
        progress("count FLOPs", 0, 1)
        flops_per_step = count_flops(lambda: step(null))
        counting = False
    start = time.perf_counter()
    if counting:  # the first warm-up step, counted: slower, which warm-up is there to absorb
        progress("warm-up, counting FLOPs", 0, warmup)
        flops_per_step = count_flops(lambda: step(null))
        done = 1
        progress("warm-up", done, warmup)
    while done < warmup or time.perf_counter() - start < warmup_seconds:
        step(null)
        done += 1
        progress("warm-up", done, warmup)
    synchronize(device)
    warmup_s = time.perf_counter() - start

    timer = PhaseTimer(device)
    sampler = Monitor(device, **({"interval": monitor_interval} if monitor_interval else {}))
    if monitor:
        sampler.start()
    start = time.perf_counter()
    try:
        while timer.steps < steps or time.perf_counter() - start < min_seconds:
            timer.begin()
            step(timer)
            progress("measure", timer.steps, steps)
        timer.finish()
    finally:
        data = sampler.stop() if monitor else None
    window_s = time.perf_counter() - start
    samples = timer.samples()
    summary = None
    if profile:
        progress("profile", 0, profile)
        summary = profile_steps(lambda: step(null), device, profile, measured_step_s=mean_step(samples.get("step")),
                                flops_per_step=flops_per_step, trace_path=profile_trace)
    return Measured(samples, done, warmup_s, window_s, flops_per_step, data, summary)


def mean_step(steps: Sequence[float] | None) -> float | None:
    """The measured step the profiled ones are compared with: the mean, as profiled steps are
    one window divided by their count."""
    return sum(steps) / len(steps) if steps else None
