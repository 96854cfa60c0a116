"""Why a run is slow, measured: each cause is a part of the step's time that a recorded figure
accounts for, in seconds per step, and against a baseline (the same configuration's median run on
the machine, or the same work on one GPU) only the part that grew.

Every cause is found by one check of CHECKS (diagnose/check.py says what a check is), in this order:
- the input pipeline: the share of the measured time the step waited for its batch, and why
  (diagnose/inputs.py);
- host gaps: the GPU idle apart from that wait (NVML's busy share, or the profile's idle), time in
  which the host did not keep the GPU fed; neighbours: the SM time other processes took on the same
  GPU; clocks: the busy time lost to a lower SM clock than the baseline's (diagnose/gpu.py);
- on several processes, the other GPUs' neighbours and the straggling ranks (diagnose/ranks.py);
- what the parts above leave of the loss: CPU contention on a CPU (diagnose/host.py), a degraded
  all-reduce path (diagnose/allreduce.py);
- the host's CPUs: the launching thread's wait for a CPU, a CPU set or quota the run filled, steal;
  it revises the causes before it (diagnose/host.py);
- conditions of the machine, with no share measured, listed apart (diagnose/machine.py).
What the figures cannot name is said as unexplained, with the measured differences listed.
"""

from __future__ import annotations

from dataclasses import replace

from dlbench.diagnose import allreduce, gpu, host, inputs, machine, ranks
from dlbench.diagnose.check import Cause, Check, Context, Kind
from dlbench.diagnose.differences import differences, environment_differences
from dlbench.diagnose.history import against_text
from dlbench.figures import ms
from dlbench.report.parts import mean_step

# In the order they are measured: a check that takes the rest of the loss comes after the parts it
# leaves, and the host's check, which revises what the others found, after them all.
CHECKS: tuple[Check, ...] = (inputs.INPUT, gpu.HOST_GAPS, gpu.NEIGHBOURS, ranks.RANKS, gpu.CLOCKS, host.CONTENDED,
                             allreduce.ALL_REDUCE, host.HOST,
                             machine.DEGRADED_LINK, machine.OWN_LAUNCHER, machine.LOW_CEILING)
MIN_CAUSE_SHARE = 0.03  # a part of the step smaller than this (of the step and of the loss) is no cause
UNEXPLAINED_SHARE = 0.5  # causes explaining less than this share of a loss leave it unexplained

CHANGED = Kind("changed environment")  # a setting that changes how CUDA, NCCL or PyTorch run
UNEXPLAINED = Kind("unexplained")


def measured(ctx: Context) -> tuple[list[Cause], list[str]]:
    """The causes the record's figures account for, largest first, and notes of what was checked."""
    found: list[Cause] = []
    parted: list[Cause] = []  # found by the checks that measure a part of their own
    notes: list[str] = []
    for check in CHECKS:
        if check.machine:
            continue
        seen = check.found(replace(ctx, found=tuple(found), explained=sum(c.seconds or 0.0 for c in parted)))
        causes = [c for c in seen if isinstance(c, Cause)]
        notes += [note for note in seen if isinstance(note, str)]
        found = causes if check.revises else found + causes
        parted += [] if check.rest or check.revises else causes
    return _largest_first(ctx, found), notes


def _largest_first(ctx: Context, found: list[Cause]) -> list[Cause]:
    """The causes with their shares of the step and of the loss, those too small to count left out."""
    lost = ctx.lost
    for c in found:
        if c.seconds is not None:
            c.share = c.seconds / ctx.parts.step
            c.explains = min(1.0, c.seconds / lost) if lost and lost > 0 else None
    found = [c for c in found if c.share is None or c.share >= MIN_CAUSE_SHARE or (c.explains or 0) >= MIN_CAUSE_SHARE]
    return sorted(found, key=lambda c: -(c.seconds or 0.0))


def about_the_machine(ctx: Context) -> list[Cause]:
    """The conditions of the machine the checks found, with no share of the step measured."""
    return [c for check in CHECKS if check.machine for c in check.found(ctx) if isinstance(c, Cause)]


def explain_idle(causes: list[Cause]) -> bool:
    """Whether a cause accounts for the GPU idle a profile sees (the loader, other processes)."""
    return any(c.kind.idle for c in causes)


def unexplained(ctx: Context, found: list[Cause]) -> Cause | None:
    """A loss against the machine's own runs that the causes leave mostly unaccounted for."""
    r, base, lost = ctx.run, ctx.base, ctx.lost
    if lost is None or lost <= 0:
        return None
    explained = sum(min(c.seconds or 0.0, lost) for c in found)
    if explained >= UNEXPLAINED_SHARE * lost:
        return None
    unaccounted = lost - explained
    shares = unaccounted, unaccounted / mean_step(r), unaccounted / lost
    changed = environment_differences(r, base.other)
    if changed:  # a setting that changes how CUDA, NCCL or PyTorch run is the one recorded difference of its kind
        return Cause(CHANGED, f"{'; '.join(changed)} ({against_text(base)}); {ms(unaccounted * 1e3)} of the "
                              f"{ms(lost * 1e3)} ms a step lost is accounted for by no other figure: set them as in "
                              f"run {base.other.id[:8]}", *shares)
    what = "; ".join(differences(r, base.other)) or "none of the recorded figures"
    return Cause(UNEXPLAINED, f"{against_text(base)}; {ms(unaccounted * 1e3)} of the {ms(lost * 1e3)} ms a step "
                              f"lost is not accounted for; what differed: {what}", *shares)
