"""Where one run's mean step went, from its own record: the wait for data, the GPU's idle apart from
it, other processes' SM time, the SM clock. The report marks a host-bound row with it; the doctor
(diagnose/) measures its causes as these parts, and against a comparison as the parts that grew.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.report import profile
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result

DATA_PHASES = ("data", "data_wait", "load", "loading", "input", "h2d")
LAUNCH_BOUND_IDLE = 0.3  # a GPU idle apart from the data wait above this share of the step is the host's
MIN_UTIL_READINGS = 10  # a second of the monitor's readings before its utilisation is read as the window's


@dataclass(frozen=True)
class Parts:
    """Where one run's mean step went, in seconds (None where the record has no such figure)."""
    step: float
    data: float | None
    idle: float | None  # GPU idle apart from the data wait
    neighbours: float | None
    clock_mhz: float | None
    idle_from: str = ""  # 'NVML' or 'profile'


def on_gpu(r: Result) -> bool:
    return r.device.startswith("cuda")


def mean_step(r: Result) -> float:
    """The mean step, stalls included: the measured time over the steps, as the run line reads it."""
    steps = r.samples["step"]
    return sum(steps) / len(steps)


def data_share(r: Result, m: Measurement | None = None) -> float | None:
    """The data wait's share of the measured time, stalls included (the run line's figure); `m`:
    the result's measurement, where the caller has it."""
    share = (m or r.measured).phase_share("data")
    if isinstance(share, (int, float)):
        return float(share)
    steps = r.samples.get("step")
    waits = [sum(r.samples[p]) for p in DATA_PHASES if r.samples.get(p)]
    if not steps or not waits:
        return None
    return min(1.0, sum(waits) / sum(steps))


def parts(r: Result) -> Parts:
    m = r.measured
    step = mean_step(r) if r.samples.get("step") else float(m.window.step_ms or 0) / 1e3
    share = data_share(r, m)
    data = None if share is None else share * step
    idle, source = None, ""
    profiled = profile.profile_in(m)
    idle_share = profiled.share("idle") if profiled else None
    monitor = m.monitor
    if idle_share is not None:
        idle, source = idle_share * step, "profile"
    elif monitor.gpu_util_mean is not None and (monitor.readings or 0) >= MIN_UTIL_READINGS:
        idle, source = (1 - float(monitor.gpu_util_mean) / 100) * step, "NVML"
    nb = m.neighbours.gpu_neighbours_sm_share
    neighbours = None if nb is None else float(nb) * step
    if idle is not None:
        # NVML's busy share counts other processes' kernels; the profile sees only this run's, so
        # the time a neighbour held the GPU is no gap of this run's host
        other = (neighbours or 0.0) if source == "profile" else 0.0
        idle = max(0.0, idle - (data or 0.0) - other)
    return Parts(step, data, idle, neighbours, monitor.sm_clock_mean_mhz, source)


def host_bound(r: Result) -> Parts | None:
    """The run's parts where its GPU waited for the host, apart from data, for LAUNCH_BOUND_IDLE of
    the step or more: its step times are then the host's launching, not the GPU's work."""
    if not on_gpu(r):
        return None
    p = parts(r)
    return p if p.idle is not None and p.step and p.idle >= LAUNCH_BOUND_IDLE * p.step else None
