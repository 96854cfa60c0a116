"""Causes on the host's side of the step, from the CPU figures a run records over its measured window
(measure/host.py; results/measurement.py's `Host`), and other processes' CPU use:

- CPU contention: other processes used a real part of the machine's cores; on a CPU, where the cores
  are the device, it takes the loss the parts measured before it leave (beside the data wait and the
  GPU's gaps it is said by their checks, diagnose/inputs.py and gpu.py);
- the launching thread waited for a CPU: the thread that queues the step's work was runnable but
  off every CPU (schedstat), in seconds a step from its share of the window;
- held to fewer cores: the CPU set (affinity) or cgroup quota the run may use is smaller than the
  machine and its processes filled it; it then takes the place of advice that needs more cores
  (more loader workers, larger kernels);
- hypervisor steal: the share of the CPUs' time the hypervisor gave to other guests.

Where another cause already says why the CPUs fell short (contention, the restriction), the wait is
said with it, as how that cause cost time, not counted twice; beside launch-bound, the idle the
launching thread spent off its CPU is taken from launch-bound's share. Against a baseline only what
grew counts, as with the other causes (diagnose/causes.py).
"""

from __future__ import annotations

from dataclasses import replace

from dlbench.diagnose.check import Cause, Check, Context, Found, Kind, label
from dlbench.diagnose.history import Against
from dlbench.figures import ms, percent
from dlbench.report.parts import Parts, on_gpu, parts
from dlbench.results.record import Result

CONTENDED_CORES = 0.25  # other processes using this share of the cores contend with the run
WAIT_SHARE = 0.03  # without a baseline, a launching thread's wait below this share of the step is no cause
FULL_CORES = 0.8  # the run's processes using this share of the cores they may use have filled them
STEAL_SHARE = 0.05  # steal (or, against a baseline, its growth) at or above this share of the CPUs' time

# contention cannot be on the run's own cores where its processes kept them all busy (others used cores
# it may not use): a full, restricted CPU set is named in its place
CONTENTION = Kind("CPU contention", idle=True, needs_cores="gaps", short_of_cpu=True)
WAITED = Kind("launching thread waited for a CPU", idle=True)
HELD = Kind("held to fewer cores", idle=True, short_of_cpu=True)
STEAL = Kind("hypervisor steal", idle=True)
NOT_RECORDED = ("the host's CPU figures (the launching thread's wait for a CPU, steal, the CPUs allowed, the "
                "environment) were not recorded (stored by an earlier dlbench)")
NO_SCHEDSTAT = "the threads' wait for a CPU was not recorded: this kernel shows no /proc/<pid>/task/<tid>/schedstat"


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


def _contended(ctx: Context) -> Cause | None:
    """On a CPU the cores are the device: other processes' use of them takes the loss the measured
    parts leave."""
    if on_gpu(ctx.run) or not (contended := contention(ctx.run)):
        return None
    rest = max(0.0, ctx.lost - ctx.explained) if ctx.lost is not None else None
    return CONTENTION(f"{contended}: the benchmark runs on the cores they use", rest)


def _revised(ctx: Context) -> Found:
    found, notes = revise(ctx.run, ctx.parts, ctx.base, ctx.lost, list(ctx.found))
    return [*found, *notes]


def revise(r: Result, p: Parts, base: Against | None, lost: float | None,
           found: list[Cause]) -> tuple[list[Cause], list[str]]:
    """`found` with the host's causes: a full, restricted CPU set in place of the causes whose advice
    needs more cores, the launching thread's wait and steal added; and notes of what was not recorded."""
    host = r.measured.host
    if not host.recorded:
        return found, [NOT_RECORDED] if r.status == "ok" else []
    notes = [NO_SCHEDSTAT] if host.launch_thread_wait_s is None and host.window_s else []
    found = held(r, p, base, lost, found)
    wait = waited(r, p, base)
    why = next((c for c in found if c.kind.short_of_cpu), None)
    if wait is not None and why is not None:  # the wait is how that cause cost time: said with it
        found = [replace(c, evidence=f"{c.evidence}; {wait_text(r, p, base)}") if c is why else c for c in found]
    elif wait is not None:
        found = [_less_launch_bound(c, wait.seconds or 0.0) for c in found] + [wait]
    steal = stolen(r, base)
    return found + ([steal] if steal else []), notes


def _less_launch_bound(c: Cause, waited_s: float) -> Cause:
    """The GPU idle the launching thread spent off its CPU is no sign of kernels too small: launch-bound
    keeps only the rest (the doctor leaves out a rest too small to count)."""
    if not c.kind.launch_idle or c.seconds is None:
        return c
    apart = min(waited_s, c.seconds)
    return Cause(c.kind, f"{c.evidence} ({ms(apart * 1e3)} ms a step of that idle is the launching thread's wait "
                         "for a CPU, counted apart)", c.seconds - apart)


# ---- the launching thread -----------------------------------------------------------------------

def waited(r: Result, p: Parts, base: Against | None) -> Cause | None:
    """The launching thread's wait for a CPU, in seconds a step (its share of the window times the
    mean step); against a baseline, the part that grew."""
    share = r.measured.host.launch_wait_share
    if share is None or not p.step:
        return None
    theirs = base.other.measured.host.launch_wait_share if base else None
    seconds = (share - (theirs or 0.0)) * p.step
    if seconds <= 0 or (base is None and share < WAIT_SHARE):
        return None
    allowed = r.measured.host.allowed_cores
    if restriction(r):  # the run's own processes fill the cores it may use
        fix = f"the run's own processes take turns on the {allowed:g} cores it may use; lift the restriction"
    else:
        fix = ("other threads held its cores; free them, or run fewer threads beside it (`OMP_NUM_THREADS`, "
               "loader workers)")
    return WAITED(f"{wait_text(r, p, base)}: {fix}", seconds)


def wait_text(r: Result, p: Parts, base: Against | None) -> str:
    """'the launching thread waited 6.10 ms a step for a CPU (N involuntary switches, M migrations);
    steal 9%', and against the baseline's wait."""
    host = r.measured.host
    share = host.launch_wait_share or 0.0
    theirs = base.other.measured.host.launch_wait_share if base else None
    switches, migrations = host.launch_thread_switches, host.launch_thread_migrations
    counts = [f"{switches:,} involuntary switches"] if switches is not None else []
    counts += [f"{migrations:,} migrations"] if migrations is not None else []
    text = f"the launching thread waited {ms(share * p.step * 1e3)} ms a step for a CPU" + (
        f" ({', '.join(counts)})" if counts else "")
    if host.cpu_steal_share is not None:
        text += f"; steal {percent(host.cpu_steal_share)}"
    if base is not None and theirs is not None:
        text += f"; against {ms(theirs * parts(base.other).step * 1e3)} ms in {label(base.other)}"
    allowed = host.allowed_cores
    if host.torch_threads and allowed and host.torch_threads > allowed:
        text += f"; torch runs {host.torch_threads} threads on {allowed:g} allowed cores"
    return text


# ---- the cores it may use ------------------------------------------------------------------------

def restriction(r: Result) -> str | None:
    """'held to 2 of 32 cores by its CPU affinity (its processes used 2.0 cores)' where the run may use
    fewer cores than the machine has and its processes used nearly all of them."""
    host, seen = r.measured.host, r.measured.neighbours
    allowed, used = host.allowed_cores, seen.cpu_own_cores
    machine = seen.cpu_cores or r.machine.cpu.cores
    if allowed is None or used is None or not machine or allowed >= machine or used < FULL_CORES * allowed:
        return None
    by = "its CPU affinity" if host.cpus_allowed == allowed else "its cgroup's CPU quota"
    return f"held to {allowed:g} of {machine} cores by {by} (its processes used {used:.1f} cores)"


def held(r: Result, p: Parts, base: Against | None, lost: float | None, found: list[Cause]) -> list[Cause]:
    """`found` with a full, restricted CPU set named in place of the causes whose advice needs more
    cores (their seconds are its). On a CPU, where the cores are the device, it is named with the
    rest of the loss where the baseline could use more cores, else with no share measured."""
    text = restriction(r)
    if text is None:
        return found
    taken = [c for c in found if c.kind.needs_cores]
    kept = [c for c in found if not c.kind.needs_cores]
    gpu = on_gpu(r)
    what = {"data": f"the step waited for data {percent((p.data or 0.0) / (p.step or 1.0))} of the measured time",
            "gaps": f"the GPU waited for the host {ms((p.idle or 0.0) * 1e3)} ms a step apart from data" if gpu
            else "the benchmark runs on those cores"}
    why = [what[c.kind.needs_cores] for c in taken]
    measured = [c.seconds for c in taken if c.seconds is not None]
    seconds = sum(measured) if measured else None
    if not taken:
        if gpu:
            return found  # the GPU lost no time the host's cores account for
        why.append(what["gaps"])
        theirs = base.other.measured.host.allowed_cores if base else None
        if lost is not None and theirs is not None and theirs > (r.measured.host.allowed_cores or 0):
            seconds = max(0.0, lost - sum(c.seconds or 0.0 for c in found))
    fix = ("run it on more cores: lift the restriction (`taskset -c`, `numactl`, the job's or container's CPU "
           "limit); more loader workers or threads would only share the same cores")
    return kept + [HELD(f"{text}; {'; '.join(dict.fromkeys(why))}: {fix}", seconds)]


# ---- the hypervisor -----------------------------------------------------------------------------

def stolen(r: Result, base: Against | None) -> Cause | None:
    """Steal at or above STEAL_SHARE of the CPUs' time (against a baseline, grown by that much); the
    step's share of it is not measured."""
    steal = r.measured.host.cpu_steal_share
    theirs = base.other.measured.host.cpu_steal_share if base else None
    if steal is None or steal - (theirs or 0.0) < STEAL_SHARE:
        return None
    text = f"the hypervisor took {percent(steal)} of the CPUs' time (steal)"
    if base is not None and theirs is not None:
        text += f", against {percent(theirs)} in {label(base.other)}"
    return STEAL(text + ": other guests of this virtual machine's host used its CPUs; a dedicated or "
                               "less loaded host gives them back")


CONTENDED = Check("CPU contention on a CPU", "other processes' CPU time from /proc over the window, the load average",
                  _contended, (CONTENTION,), rest=True)
HOST = Check("the host's CPUs", "the launching thread's wait for a CPU (schedstat), the CPUs the run may use and "
             "its processes' use of them, steal", _revised, (WAITED, HELD, STEAL), revises=True)
