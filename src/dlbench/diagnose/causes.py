"""Why a run is slow, measured: each cause is a part of the step's time that a recorded figure
accounts for, in seconds per step, and against a baseline (the same configuration's best run on
the machine, or the same work on one GPU) only the part that grew.

The parts of a step, all from the run's own record:
- data wait: the share of the measured time the step waited for its batch (stalls included, as
  the run line reads it);
- host gaps: the GPU idle apart from that wait (NVML's busy share, or the profile's idle), time in
  which the host did not keep the GPU fed;
- neighbours: the SM time other processes took on the same GPU (NVML's per-process samples);
- clocks: the busy time lost to a lower SM clock than the baseline's;
- communication: on several GPUs, the all-reduce (its path from the NCCL settings, NVLink and peer
  access; its cost from the gradient bytes and the all-reduce bandwidth `dlbench system` measured);
- the host's CPUs: the launching thread's wait for a CPU, a CPU set or quota the run filled, steal
  (diagnose/host.py); the loader workers advised never exceed the cores the run may use.
What the figures cannot name is said as unexplained, with the measured differences listed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from dlbench.diagnose.history import Against
from dlbench.figures import ms, percent, sig
from dlbench.report import profile
from dlbench.report.parts import LAUNCH_BOUND_IDLE, Parts, parts
from dlbench.results.measurement import Measurement, System
from dlbench.results.record import Result

INPUT_BOUND_SHARE = 0.15  # without a baseline, a data wait above this share of the step is a cause
NEIGHBOUR_SHARE = 0.05  # other processes' SM time below this is no cause
CLOCK_LOSS = 0.03  # a clock this much below the baseline's is a cause
CONTENDED_CORES = 0.25  # other processes using this share of the cores contend with the run
SLOW_DISK_GBS = 1.0
SLOW_WORKER = 0.5  # loader workers delivering below this share of one worker's measured rate are slow
LAUNCHER_SETS = frozenset({"OMP_NUM_THREADS"})  # torchrun sets it to 1 in every rank where the user did not
UNEXPLAINED = 0.5  # causes explaining less than this share of a loss leave it unexplained
# NCCL settings that take a faster transport away
TRANSPORT_OFF = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC", "NCCL_NET": "Socket",
                 "NCCL_IB_DISABLE": "1"}


@dataclass
class Cause:
    name: str
    evidence: str
    seconds: float | None = None  # of each step's time this cause accounts for
    share: float | None = None  # of the step
    explains: float | None = None  # of the time lost against the baseline


def _label(r: Result) -> str:
    return f"run {r.id[:8]} ({r.started[:16].replace('T', ' ')})"


# ---- the input pipeline -----------------------------------------------------------------------

def contention(r: Result) -> str | None:
    """Other processes' CPU use in the window, where it took a real part of the machine."""
    seen = r.measured.neighbours
    cores, others = seen.cpu_cores, seen.cpu_other_cores
    if not cores or others is None or others < CONTENDED_CORES * cores:
        return None
    load = seen.load_average_1m
    top = "; ".join(f"PID {p.get('pid')} `{p.get('command')}` {p.get('cores', 0):.1f} cores"
                    for p in (seen.cpu_other_top or [])[:2])
    text = f"other processes used {others:.1f} of {cores} CPU cores during the window"
    if seen.cpu_other_busy_processes:
        text += f" ({seen.cpu_other_busy_processes} of them busy"
        text += f", load average {load:.1f})" if load is not None else ")"
    elif load is not None:
        text += f" (load average {load:.1f})"
    return text + (f"; busiest: {top}" if top else "")


def _workers(r: Result) -> int | None:
    options = r.setup.options
    value = r.measured.data.workers
    if value is None:
        value = options.get("workers", options.get("num_workers"))
    return value if isinstance(value, int) else None


def usable_cores(r: Result) -> int | None:
    """The cores the run's loader workers can run on: the CPUs its process was allowed (affinity,
    cgroup quota) where recorded, else the machine's; more workers than these only queue."""
    allowed = r.measured.host.allowed_cores
    if allowed is not None:
        return max(1, int(allowed))
    return (r.system.get("cpu") or {}).get("cores")


def _cores_word(r: Result) -> str:
    allowed, machine = r.measured.host.allowed_cores, r.measured.neighbours.cpu_cores
    return "allowed cores" if allowed is not None and machine and allowed < machine else "cores"


def _reads_storage(r: Result) -> str | None:
    options = r.setup.options
    for key in ("data", "dataset", "path", "root", "folder", "images", "volume", "input"):
        value = options.get(key)
        if isinstance(value, str) and value and value not in ("synthetic", "dummy", "random"):
            return value
    return None


def decoding_on_the_gpu(r: Result) -> str:
    """What of `--decode gpu` runs on the model's SMs, from the decoder the run recorded."""
    from dlbench.data import decoders

    decoder = r.measured.data.decoder
    if decoder == decoders.HARDWARE:
        return "the crops and resizes run there (the decoding itself on the hardware JPEG decoders)"
    if decoder == decoders.CUDA and any(decoders.named_with_hardware(g.get("name", "")) for g in r.system.get("gpus") or []):
        return ("the JPEGs are decoded there, by nvjpeg, while this GPU's hardware JPEG decoders sit idle: "
                "`--decode hardware` moves the decoding to them (measure both: their host work can cost more)")
    return "the decoding and crops of --decode gpu run there, beside the model's kernels"


def input_cause(r: Result, seconds: float, p: Parts, record: Result | None) -> Cause:
    """Name the reason the input pipeline starved: another process's CPU use, slow storage, too few
    workers for the decode rate, decoding on the CPU; each with its fix."""
    wait = f"waiting for data {percent(p.data / p.step)} of the measured time ({ms(p.data * 1e3)} of {ms(p.step * 1e3)} ms a step)"
    contended = contention(r)
    if contended:
        return Cause("CPU contention starving the input pipeline", f"{wait}; {contended}: free those cores "
                     "or run where no other job shares them", seconds)
    system = record.measured.system if record else System()
    disk = system.disk_read_gbs
    if _reads_storage(r) and disk is not None and disk < SLOW_DISK_GBS:
        where = (c.details if (c := system.ceiling("disk_read_gbs")) else {}).get("path", "?")
        return Cause("slow storage", f"{wait}; data read from {_reads_storage(r)}; `dlbench system --disk` measured "
                                     f"{disk:.2f} GB/s on {where} (below {SLOW_DISK_GBS:g} GB/s): copy the data to "
                                     f"local or faster storage", seconds)
    workers, cores = _workers(r), usable_cores(r)
    gpus = r.setup.gpus
    decode = r.setup.options.get("decode")
    throughput = r.measured.throughput
    rate, unit = throughput.value, throughput.unit or ""
    if workers and cores and rate and p.step > p.data:
        fed = rate / (workers * gpus)
        needed = rate * p.step / (p.step - p.data)  # the rate with no wait
        want = min(int(cores // gpus) - 1, math.ceil(needed / (fed * gpus)))
        per_core = system.jpeg_decode_cpu_img_s_per_core
        text = (f"{wait}; {workers} loader workers per GPU delivered {sig(rate)} {unit} ({sig(fed)} per worker"
                + (f"; JPEG decode alone measured {per_core:,.0f} img/s per core" if per_core else "")
                + f"); without the wait the GPU would take {sig(needed)} {unit}")
        loader = system.jpeg_loader_cpu_img_s_per_core
        if decode in (None, "cpu") and loader and fed < SLOW_WORKER * loader:
            return Cause("slow loader workers", f"{text}; one worker alone reached {loader:,.0f} img/s here "
                         f"(`dlbench system`), {sig(loader / fed)}x what each delivered: the workers wait for "
                         "a core or for storage; free cores or run fewer workers", seconds)
        if want > workers:
            fix = f"`--workers {want}` ({cores} {_cores_word(r)} for {gpus} GPU(s))"
            fix += " or `--decode gpu`" if decode == "cpu" else ""
            return Cause("too few loader workers", f"{text}: {fix}", seconds)
        if decode == "cpu":
            gpu_rate = system.jpeg_decode_gpu_img_s
            measured = f" (nvjpeg measured {gpu_rate:,.0f} img/s here)" if gpu_rate else ""
            return Cause("JPEG decoding on the CPU", f"{text}; the cores cannot add workers: `--decode gpu`{measured}",
                         seconds)
    return Cause("input-bound", wait, seconds)


# ---- the GPU ------------------------------------------------------------------------------------

def host_gaps(r: Result, seconds: float, p: Parts, base: Against | None) -> Cause:
    busy = r.measured.monitor.gpu_util_mean
    how = (f"the profile measured the GPU idle {percent(p.idle / p.step)} of the step" if p.idle_from == "profile"
           else f"GPU busy {percent((busy or 0) / 100)} of the window by NVML")
    text = f"the GPU waited for the host {ms(p.idle * 1e3)} ms a step apart from data ({how})"
    if base is not None:
        theirs = parts(base.other)
        if theirs.idle is not None:
            text += f", against {ms(theirs.idle * 1e3)} ms in {_label(base.other)}"
    contended = contention(r)
    if contended:
        return Cause("CPU contention", f"{text}; {contended}: the run's own processes got too little CPU to launch "
                                       "work; free those cores or run where no other job shares them", seconds)
    if base is not None and base.kind == "one GPU":
        return Cause("host overhead of several processes", f"{text}: each rank's host work a step (DDP's gradient "
                     "hooks and bucket copies, kernel launches) keeps its GPU waiting; fewer, larger kernels "
                     "(`--optimize compile`, a larger batch) leave less of it", seconds)
    at, larger = (("one tile a step", "larger blocks (`--block`)") if r.workload == "volume" else
                  (f"batch {r.setup.batch}", "a larger batch"))
    return Cause("launch-bound", f"{text} at {at}: kernels too small or too few to fill it; try {larger}, "
                                 "CUDA graphs or torch.compile", seconds)


def neighbour_cause(r: Result, seconds: float) -> Cause:
    found = r.measured.neighbours.strangers
    named = "; ".join(f"PID {n.pid} `{n.command or '?'}` used {percent(n.sm_share)} of the SM time"
                      + (f" and held {n.memory_gb:.1f} GB" if n.memory_gb else "")
                      for n in found[:3])
    who = "another process" if len(found) == 1 else f"{len(found)} other processes"
    first = next(iter(r.measured.monitor.per_rank), None)  # rank 0's GPU, where each rank's was watched
    where = f"GPU {first.gpu} (rank 0)" if r.setup.gpus > 1 and first and first.gpu is not None else "this GPU"
    return Cause("another process on the GPU", f"{who} computed on {where} during the window: {named}", seconds)


def clock_cause(r: Result, p: Parts, base: Against | None, facts: dict[str, Any]) -> Cause | None:
    """Busy time lost to a lower SM clock than the baseline's (or, without one, than the GPU's
    maximum while a slowdown reason was flagged)."""
    monitor = r.measured.monitor
    reference = parts(base.other).clock_mhz if base else None
    if reference is None and monitor.throttled:
        reference = facts.get("sm_clock_max_mhz")
    if not p.clock_mhz or not reference or p.clock_mhz > (1 - CLOCK_LOSS) * reference:
        return None
    busy = p.step - (p.idle or 0.0) - (p.data or 0.0)
    seconds = busy * (1 - p.clock_mhz / reference)
    reasons = ", ".join(monitor.throttle_reasons or []) or "none reported"
    parts_ = [f"SM clock {p.clock_mhz:.0f} MHz against {reference:.0f} MHz"
              + (f" in {_label(base.other)}" if base else " max"), f"slowdown reasons: {reasons} in "
              f"{percent(monitor.throttled_share or 0)} of the readings"]
    if monitor.temperature_max_c is not None:
        parts_.append(f"up to {monitor.temperature_max_c:.0f} °C")
    power, limit = monitor.power_mean_w, facts.get("power_limit_w")
    if power:
        parts_.append(f"{power:.0f} W mean" + (f" against a {limit:.0f} W limit" if limit else ""))
    return Cause("throttled", "; ".join(parts_), seconds)


def power_note(r: Result, p: Parts, base: Against | None, facts: dict[str, Any]) -> str | Cause | None:
    """A slowdown flag whose clock matches the baseline's (or the maximum) is said, not blamed; one
    with no clock to compare against is a cause of unknown size, unless it is only the power cap
    that a GPU at full load sits at."""
    monitor = r.measured.monitor
    reasons = monitor.throttle_reasons or []
    if not reasons:
        return None
    flagged = f"{', '.join(reasons)} flagged in {percent(monitor.throttled_share or 0)} of the readings"
    reference = (parts(base.other).clock_mhz if base else None) or facts.get("sm_clock_max_mhz")
    clock = f"SM clock {p.clock_mhz:.0f} MHz" if p.clock_mhz else "no clock reading"
    if reference and p.clock_mhz:
        where = f"in {_label(base.other)}" if base and parts(base.other).clock_mhz else "max"
        return f"{flagged} with {clock} against {reference:.0f} MHz {where}: it costs no measurable time here"
    if set(reasons) <= {"sw_power_cap"}:
        return (f"{flagged} with {clock}; a GPU at full load sits at its power limit, and no earlier run or "
                f"maximum clock is recorded to tell whether it cost time")
    return Cause("throttled", f"{flagged}; {clock}; no earlier run or maximum clock is recorded to measure what it cost")


# ---- several GPUs -------------------------------------------------------------------------------

def degraded_path(r: Result) -> str | None:
    comm = r.measured.training.all_reduce
    off = [f"{k}={v}" for k, v in comm.nccl_settings.items() if TRANSPORT_OFF.get(k) == str(v)]
    if not off:
        return None
    links = [n for n in comm.nvlinks_active or [] if n]
    fast = []
    if links:
        fast.append(f"NVLink is up ({min(links)} links per GPU)")
    if comm.peer_access:
        fast.append("the GPUs reach each other directly")
    over = "over sockets" if {"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"} <= set(off) else "on a slower path"
    return f"all-reduce {over}: {' and '.join(off)} {'is' if len(off) == 1 else 'are'} set" + (
        f"; {', '.join(fast)}" if fast else "")


def allreduce_seconds(r: Result, record: Result | None) -> float | None:
    """What the gradients' all-reduce should cost a step at the bandwidth `dlbench system` measured."""
    nbytes, world = r.measured.training.all_reduce.gradient_bytes, r.setup.gpus
    busbw = record.measured.system.allreduce_busbw_gbs if record else None
    if not nbytes or not busbw or world < 2:
        return None
    return nbytes * 2 * (world - 1) / world / (busbw * 1e9)


def communication_cause(r: Result, remainder: float, record: Result | None) -> Cause | None:
    path = degraded_path(r)
    if path and remainder > 0:
        return Cause("degraded all-reduce path", f"{path}; unset them to let NCCL use the fast path", remainder)
    return None


def communication_note(r: Result, record: Result | None) -> str | None:
    expected = allreduce_seconds(r, record)
    if expected is None or record is None:
        return None
    nbytes = r.measured.training.all_reduce.gradient_bytes or 0
    return (f"all-reduce of {nbytes / 1e6:,.0f} MB of gradients a step should take "
            f"{ms(expected * 1e3)} ms at the all-reduce bandwidth `dlbench system` measured "
            f"({sig(record.measured.system.allreduce_busbw_gbs)} GB/s)")


# ---- what differed -------------------------------------------------------------------------------

_COMPARED: tuple[tuple[str, Callable[[Measurement], Any], str], ...] = (
    ("SM clock", lambda m: m.monitor.sm_clock_mean_mhz, "{:.0f} MHz"),
    ("power", lambda m: m.monitor.power_mean_w, "{:.0f} W"),
    ("temperature", lambda m: m.monitor.temperature_max_c, "{:.0f} °C"),
    ("GPU busy", lambda m: m.monitor.gpu_util_mean, "{:.0f}%"),
    ("other processes' SM time", lambda m: m.neighbours.gpu_neighbours_sm_share, "{:.0%}"),
    ("other processes on the GPU", lambda m: m.neighbours.other_processes, "{}"),
    ("other processes' CPU", lambda m: m.neighbours.cpu_other_cores, "{:.1f} cores"),
    ("load average", lambda m: m.neighbours.load_average_1m, "{:.1f}"),
    ("data wait", lambda m: m.phase_share("data"), "{:.1%}"),
    ("launching thread's wait for a CPU", lambda m: m.host.launch_wait_share, "{:.1%} of the window"),
    ("steal", lambda m: m.host.cpu_steal_share, "{:.1%}"),
    ("CPU clock", lambda m: m.host.cpu_mhz_mean, "{:.0f} MHz"),
    ("cores allowed", lambda m: m.host.allowed_cores, "{:g}"),
    ("torch threads", lambda m: m.host.torch_threads, "{}"))
_VERSIONS = ("torch", "cuda", "cudnn", "driver", "torchvision")


def differences(r: Result, other: Result) -> list[str]:
    """The measured figures and versions in which two runs differ, and those one of them lacks."""
    out, missing = [], []
    measured = r.measured, other.measured
    for name, figure, fmt in _COMPARED:
        mine, theirs = (figure(m) for m in measured)
        if mine is None or theirs is None:
            if (mine is None) != (theirs is None):
                missing.append(name)
            continue
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and \
                abs(mine - theirs) <= 0.02 * max(abs(mine), abs(theirs), 1e-9):
            continue
        out.append(f"{name} {fmt.format(mine)} against {fmt.format(theirs)}")
    for key in _VERSIONS:
        if r.system.get(key) != other.system.get(key):
            out.append(f"{key} {r.system.get(key)} against {other.system.get(key)}")
    environments = [m.host.environment for m in measured]
    if None not in environments:  # NCCL_* among them: said once, here
        out += environment_differences(r, other)
    else:
        missing += ["environment"] if environments != [None, None] else []
        mine, theirs = (m.training.all_reduce.nccl_settings for m in measured)
        if mine != theirs and (mine or theirs):
            out.append(f"NCCL settings {mine} against {theirs}")
    if missing:
        out.append(f"not recorded in one of them (stored by an earlier dlbench): {', '.join(missing)}")
    return out


def environment_differences(r: Result, other: Result) -> list[str]:
    """The recorded environment variables that change behaviour and differ between two runs; none
    where either run did not record them."""
    mine, theirs = r.measured.host.environment, other.measured.host.environment
    if mine is None or theirs is None:
        return []
    if (r.setup.gpus > 1) != (other.setup.gpus > 1):  # what torchrun sets in its ranks is no user's setting
        mine, theirs = ({k: v for k, v in env.items() if k not in LAUNCHER_SETS} for env in (mine, theirs))
    return [f"{key} {mine.get(key, 'unset')} against {theirs.get(key, 'unset')}"
            for key in sorted(mine.keys() | theirs.keys()) if mine.get(key) != theirs.get(key)]


def nccl_profile_note(r: Result) -> str | None:
    """With --profile on several GPUs: the all-reduce kernels' time a step, and how much of it ran
    under compute (the profile's communication class counts only the exposed part)."""
    profiled = profile.profile_of(r)
    comm = (profiled.classes or {}).get("communication") if profiled else None
    if r.setup.gpus < 2 or comm is None or not comm.kernel_seconds:
        return None
    total, exposed = comm.kernel_seconds, comm.seconds
    return (f"profile: NCCL kernels ran {ms(total * 1e3)} ms a step, {percent(max(0.0, 1 - exposed / total))} of it "
            f"under compute; {ms(exposed * 1e3)} ms exposed ({percent(comm.share)} of the step)")
