"""The GPU's side of the step: the GPU waiting for the host apart from the data wait (host gaps),
other processes computing on it (neighbours), and busy time lost to a lower SM clock.
"""

from __future__ import annotations

from dlbench.diagnose.check import Cause, Check, Context, Found, Kind, label
from dlbench.diagnose.history import Against
from dlbench.diagnose.host import CONTENTION, contention
from dlbench.figures import ms, percent
from dlbench.report.parts import LAUNCH_BOUND_IDLE, Parts, parts
from dlbench.results.measurement import GpuFacts
from dlbench.results.record import Result
from dlbench.workloads import declared

NEIGHBOUR_SHARE = 0.05  # other processes' SM time below this is no cause
CLOCK_LOSS = 0.03  # a clock this much below the baseline's is a cause

SEVERAL = Kind("host overhead of several processes", idle=True)
LAUNCH_BOUND = Kind("launch-bound", needs_cores="gaps", launch_idle=True)
NEIGHBOUR = Kind("another process on the GPU", idle=True)
UNWATCHED = Kind("other processes on the GPU")  # their share of the GPU's time not recorded
THROTTLED = Kind("throttled")


def host_gaps(r: Result, seconds: float, p: Parts, base: Against | None) -> Cause:
    busy = r.measured.monitor.gpu_util_mean
    how = (f"the profile measured the GPU idle {percent(p.idle / p.step)} of the step" if p.idle_from == "profile"
           else f"GPU busy {percent((busy or 0) / 100)} of the window by NVML")
    text = f"the GPU waited for the host {ms(p.idle * 1e3)} ms a step apart from data ({how})"
    if base is not None:
        theirs = parts(base.other)
        if theirs.idle is not None:
            text += f", against {ms(theirs.idle * 1e3)} ms in {label(base.other)}"
    contended = contention(r)
    if contended:
        return CONTENTION(f"{text}; {contended}: the run's own processes got too little CPU to launch work; free "
                          "those cores or run where no other job shares them", seconds)
    if base is not None and base.kind == "one GPU":
        return SEVERAL(f"{text}: each rank's host work a step (DDP's gradient hooks and bucket copies, kernel "
                       "launches) keeps its GPU waiting; fewer, larger kernels (`--optimize compile`, a larger batch) "
                       "leave less of it", seconds)
    at, larger = (("one tile a step", "larger blocks (`--block`)") if declared(r.workload).batch_free else
                  (f"batch {r.setup.batch}", "a larger batch"))
    return LAUNCH_BOUND(f"{text} at {at}: kernels too small or too few to fill it; try {larger}, CUDA graphs or "
                        "torch.compile", seconds)


def neighbour_cause(r: Result, seconds: float) -> Cause:
    found = r.measured.neighbours.strangers
    named = "; ".join(f"PID {n.pid} `{n.command or '?'}` used {percent(n.sm_share)} of the SM time"
                      + (f" and held {n.memory_gb:.1f} GB" if n.memory_gb else "")
                      for n in found[:3])
    who = "another process" if len(found) == 1 else f"{len(found)} other processes"
    first = next(iter(r.measured.monitor.per_rank), None)  # rank 0's GPU, where each rank's was watched
    where = f"GPU {first.gpu} (rank 0)" if r.setup.gpus > 1 and first and first.gpu is not None else "this GPU"
    return NEIGHBOUR(f"{who} computed on {where} during the window: {named}", seconds)


def clock_cause(r: Result, p: Parts, base: Against | None, facts: GpuFacts) -> Cause | None:
    """Busy time lost to a lower SM clock than the baseline's (or, without one, than the GPU's
    maximum while a slowdown reason was flagged)."""
    monitor = r.measured.monitor
    reference = parts(base.other).clock_mhz if base else None
    if reference is None and monitor.throttled:
        reference = facts.sm_clock_max_mhz
    if not p.clock_mhz or not reference or p.clock_mhz > (1 - CLOCK_LOSS) * reference:
        return None
    busy = p.step - (p.idle or 0.0) - (p.data or 0.0)
    seconds = busy * (1 - p.clock_mhz / reference)
    reasons = ", ".join(monitor.throttle_reasons or []) or "none reported"
    parts_ = [f"SM clock {p.clock_mhz:.0f} MHz against {reference:.0f} MHz"
              + (f" in {label(base.other)}" if base else " max"), f"slowdown reasons: {reasons} in "
              f"{percent(monitor.throttled_share or 0)} of the readings"]
    if monitor.temperature_max_c is not None:
        parts_.append(f"up to {monitor.temperature_max_c:.0f} °C")
    power, limit = monitor.power_mean_w, facts.power_limit_w
    if power:
        parts_.append(f"{power:.0f} W mean" + (f" against a {limit:.0f} W limit" if limit else ""))
    return THROTTLED("; ".join(parts_), seconds)


def power_note(r: Result, p: Parts, base: Against | None, facts: GpuFacts) -> str | Cause | None:
    """A slowdown flag whose clock matches the baseline's (or the maximum) is said, not blamed; one
    with no clock to compare against is a cause of unknown size, unless it is only the power cap
    that a GPU at full load sits at."""
    monitor = r.measured.monitor
    reasons = monitor.throttle_reasons or []
    if not reasons:
        return None
    flagged = f"{', '.join(reasons)} flagged in {percent(monitor.throttled_share or 0)} of the readings"
    reference = (parts(base.other).clock_mhz if base else None) or facts.sm_clock_max_mhz
    clock = f"SM clock {p.clock_mhz:.0f} MHz" if p.clock_mhz else "no clock reading"
    if reference and p.clock_mhz:
        where = f"in {label(base.other)}" if base and parts(base.other).clock_mhz else "max"
        return f"{flagged} with {clock} against {reference:.0f} MHz {where}: it costs no measurable time here"
    if set(reasons) <= {"sw_power_cap"}:
        return (f"{flagged} with {clock}; a GPU at full load sits at its power limit, and no earlier run or "
                f"maximum clock is recorded to tell whether it cost time")
    return THROTTLED(f"{flagged}; {clock}; no earlier run or maximum clock is recorded to measure what it cost")


def _gaps(ctx: Context) -> Cause | None:
    p = ctx.parts
    idle = ctx.grown("idle")
    if idle is not None and idle > 0 and (ctx.base or p.idle >= LAUNCH_BOUND_IDLE * p.step):
        return host_gaps(ctx.run, idle, p, ctx.base)
    return None


def _neighbours(ctx: Context) -> Cause | None:
    p = ctx.parts
    neighbours = ctx.grown("neighbours")
    if neighbours is not None and neighbours > 0 and p.neighbours >= NEIGHBOUR_SHARE * p.step:
        return neighbour_cause(ctx.run, neighbours)
    if p.neighbours is None and (seen := ctx.run.measured.neighbours).other_processes:
        count, memory = seen.other_processes, seen.other_processes_memory_gb or 0.0
        return UNWATCHED(f"{count} other compute process(es) held {memory:.1f} GB of GPU memory during the run; "
                         "their share of the GPU's time was not recorded (stored by an earlier dlbench)")
    return None


def _clocks(ctx: Context) -> Found:
    return clock_cause(ctx.run, ctx.parts, ctx.base, ctx.facts) or power_note(ctx.run, ctx.parts, ctx.base, ctx.facts)


HOST_GAPS = Check("host gaps", "GPU idle apart from the data wait (NVML's busy share over >= 10 readings, or the "
                  "profile's idle); other processes' CPU use", _gaps, (CONTENTION, SEVERAL, LAUNCH_BOUND))
NEIGHBOURS = Check("neighbours on the GPU", "NVML's per-process SM samples in the window", _neighbours,
                   (NEIGHBOUR, UNWATCHED))
CLOCKS = Check("clocks", "the SM clock against the comparison's (or the maximum), the slowdown reasons, "
               "temperature and power", _clocks, (THROTTLED,))
