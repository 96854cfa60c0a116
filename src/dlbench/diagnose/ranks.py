"""Every GPU of a multi-process run, judged. The ranks wait for each other every step (train: DDP's
all-reduce; infer and smooth: the run's figure is its slowest rank's window), so what slows one
rank slows the run, whichever GPU it is on.

- A neighbour on a GPU other than rank 0's (rank 0's is diagnose/gpu.py `neighbour_cause`): each
  rank's monitor sampled its own GPU's processes (`Monitor.per_rank`), named with the GPU's index.
- A straggling rank: a rank whose phase medians lie beyond the fastest rank's per-step spread
  (`Data.per_rank`), named even where no neighbour was seen, with what its GPU's readings show.

A record stored before these were gathered says so, where the run had several processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.diagnose.check import Cause, Check, Context, Found, Kind
from dlbench.diagnose.gpu import CLOCK_LOSS, NEIGHBOUR, NEIGHBOUR_SHARE
from dlbench.diagnose.history import Against
from dlbench.figures import ms, percent
from dlbench.report.parts import Parts, on_gpu
from dlbench.results.measurement import PhaseSpread, RankGpu, RankPhases
from dlbench.results.record import Result
from dlbench.workloads import declared

STRAGGLING = Kind("straggling rank", idle=True)  # the other ranks' GPUs wait for it
STRAGGLER_MARGIN = 0.10  # a phase median at least this much above the fastest rank's ...
MIN_RANK_STEPS = 10  # ... over at least this many steps a rank (fewer have no spread to judge by)
MIN_EXCESS_SHARE = 0.02  # ... and by this share of the step (a few µs of a copy is no straggler)
BUSY_APART = 10.0  # GPU busy percentage points apart that the straggler's evidence names


@dataclass(frozen=True)
class Slower:
    """One phase in which a rank is slower than the fastest rank beyond both ranks' spread."""
    phase: str
    mine: PhaseSpread
    reference: PhaseSpread
    against: int  # the fastest rank in this phase

    @property
    def seconds(self) -> float:
        return (self.mine.median_ms - self.reference.median_ms) / 1e3


@dataclass(frozen=True)
class Straggler:
    rank: int
    slower: tuple[Slower, ...]

    @property
    def seconds(self) -> float:
        """Its extra time a step: what the other ranks wait for it."""
        return sum(s.seconds for s in self.slower)


def causes(r: Result, p: Parts, base: Against | None) -> tuple[list[Cause], list[str]]:
    """The causes on the GPUs other than rank 0's and the straggling ranks of a multi-process run, and
    notes of what was seen that costs no time of its own, or that the record lacks to judge them."""
    if r.setup.gpus < 2 or r.status != "ok" or not p.step:
        return [], []
    m = r.measured
    gpus = {g.rank: g for g in m.monitor.per_rank}
    found, notes = neighbour_causes(p, base, gpus)
    shares = {**_shares(gpus), 0: max(_shares(gpus).get(0, 0.0), (p.neighbours or 0.0) / p.step)}
    for s in stragglers(m.data.per_rank):
        text = straggle_text(s, gpus, r.workload)
        if s.rank in found:  # its GPU's neighbour is the cause; the straggle is its evidence
            found[s.rank].evidence += f"; {text}"
        elif shares.get(s.rank, 0.0) >= NEIGHBOUR_SHARE:  # a neighbour counted already, on rank 0's GPU or as a note
            notes.append(f"{text}: the other process on its GPU accounts for it")
        else:
            before = _same_straggler(s.rank, base)
            found[s.rank] = STRAGGLING(text + _gpu_text(s, gpus), max(0.0, s.seconds - before))
    return list(found.values()), notes + missing(r, gpus)


# ---- neighbours on the other GPUs ------------------------------------------------------------

def neighbour_causes(p: Parts, base: Against | None, gpus: dict[int, RankGpu]) -> tuple[dict[int, Cause], list[str]]:
    """rank → the neighbour cause on its GPU, for every rank but 0 (diagnose/gpu.py names rank 0's).
    The ranks wait for the slowest, so a GPU's neighbour costs only the SM share beyond what is
    counted already (rank 0's neighbour, a larger one on another GPU) and beyond what the comparison
    had on that GPU; one that costs no more than that is a note, so that it is still named."""
    theirs = _shares({g.rank: g for g in base.other.measured.monitor.per_rank}) if base else {}
    counted = (p.neighbours or 0.0) / p.step
    found: dict[int, Cause] = {}
    notes: list[str] = []
    for rank, share in sorted(_shares(gpus).items(), key=lambda item: -item[1]):
        if rank == 0 or share < NEIGHBOUR_SHARE:
            continue
        text, extra = _neighbour_text(gpus[rank], _siblings(gpus)), share - max(counted, theirs.get(rank, 0.0))
        if extra >= NEIGHBOUR_SHARE:
            found[rank] = NEIGHBOUR(text, extra * p.step)
        else:
            notes.append(f"{text}; it costs no more than another GPU's neighbour or the comparison's took already "
                         "(the ranks wait for the slowest)")
        counted = max(counted, share)
    return found, notes


def _siblings(gpus: dict[int, RankGpu]) -> set[int]:
    """The PIDs of the run's own ranks: on another rank's GPU they are no neighbours."""
    return {g.pid for g in gpus.values() if g.pid is not None}


def _shares(gpus: dict[int, RankGpu]) -> dict[int, float]:
    """rank → the SM share other processes took of its GPU."""
    return {rank: sum(n.sm_share for n in g.strangers(_siblings(gpus))) for rank, g in gpus.items()}


def _neighbour_text(g: RankGpu, siblings: set[int]) -> str:
    others = g.strangers(siblings)
    who = "another process" if len(others) == 1 else f"{len(others)} other processes"
    named = "; ".join(f"PID {n.pid} `{n.command or '?'}` took {percent(n.sm_share)} of its SM time"
                      + (f" and held {n.memory_gb:.1f} GB" if n.memory_gb else "") for n in others[:3])
    return f"{who} on {_gpu(g)} (rank {g.rank}): {named}"


# ---- straggling ranks ------------------------------------------------------------------------

def stragglers(lines: list[RankPhases]) -> list[Straggler]:
    """The ranks slower than the fastest in some phase beyond both spreads, that fell behind first.
    A rank that waits for a straggler is slower too, later in the step (the fast rank's backward
    holds its wait in the all-reduce): of the ranks found, those whose first slow phase comes
    earliest in the step are the stragglers."""
    judged = [line for line in lines if line.spread_recorded and (line.steps or 0) >= MIN_RANK_STEPS]
    if len(judged) < 2 or len(judged) < len(lines):
        return []
    order = {phase: i for i, phase in enumerate(judged[0].phases)}  # the step's order, as the workload stored it
    found = [Straggler(line.rank, slow) for line in judged if (slow := _slower(line, judged))]
    if not found:
        return []
    first = min(order.get(s.slower[0].phase, len(order)) for s in found)
    return [s for s in found if order.get(s.slower[0].phase, len(order)) == first]


def _slower(line: RankPhases, lines: list[RankPhases]) -> tuple[Slower, ...]:
    """The phases in which `line`'s rank is slower than the fastest other rank: its median at least
    STRAGGLER_MARGIN above, its p10 above the other's p90 (the spreads do not overlap), and by
    MIN_EXCESS_SHARE of its step or more."""
    step = line.step_ms or sum(s.median_ms for s in line.phases.values())
    out = []
    for phase, mine in line.phases.items():
        others = [(o.phases[phase], o.rank) for o in lines if o.rank != line.rank and phase in o.phases]
        if not others:
            continue
        ref, rank = min(others, key=lambda item: item[0].median_ms)
        if (mine.median_ms >= (1 + STRAGGLER_MARGIN) * ref.median_ms and mine.p10_ms > ref.p90_ms
                and mine.median_ms - ref.median_ms >= MIN_EXCESS_SHARE * step):
            out.append(Slower(phase, mine, ref, rank))
    return tuple(out)


def straggle_text(s: Straggler, gpus: dict[int, RankGpu], workload: str) -> str:
    """'rank 1 (GPU 1) forward 18.5 ms a step against 8.4 ms on rank 0 (...); the all-reduce waits
    for the slowest rank'."""
    where = f" ({_gpu(gpus[s.rank])})" if s.rank in gpus and gpus[s.rank].gpu is not None else ""
    phases = ", ".join(f"{x.phase} {ms(x.mine.median_ms)} ms a step against {ms(x.reference.median_ms)} ms on rank "
                       f"{x.against} (p10–p90 {ms(x.mine.p10_ms)}–{ms(x.mine.p90_ms)} against "
                       f"{ms(x.reference.p10_ms)}–{ms(x.reference.p90_ms)} ms)" for x in s.slower)
    waits = "the all-reduce waits for the slowest rank" if declared(workload).trains else \
        "the run's figure is its slowest rank's"
    return f"rank {s.rank}{where} {phases}; {waits}"


def _gpu_text(s: Straggler, gpus: dict[int, RankGpu]) -> str:
    """What the straggler's GPU readings show against the fastest rank's: a lower SM clock, less busy,
    and that no other process computed on it."""
    mine, ref = gpus.get(s.rank), gpus.get(s.slower[0].against)
    if mine is None or mine.readings is None:
        return ""
    said = []
    if ref is not None and mine.sm_clock_mean_mhz and ref.sm_clock_mean_mhz and \
            mine.sm_clock_mean_mhz < (1 - CLOCK_LOSS) * ref.sm_clock_mean_mhz:
        said.append(f"its SM clock {mine.sm_clock_mean_mhz:,.0f} MHz against {ref.sm_clock_mean_mhz:,.0f} MHz on "
                    f"{_gpu(ref)}")
    if ref is not None and mine.gpu_util_mean is not None and ref.gpu_util_mean is not None and \
            abs(mine.gpu_util_mean - ref.gpu_util_mean) >= BUSY_APART:
        said.append(f"its GPU busy {mine.gpu_util_mean:.0f}% against {ref.gpu_util_mean:.0f}%")
    if mine.neighbours_sm_share is not None and not mine.strangers(_siblings(gpus)):
        said.append(f"no other process computed on {_gpu(mine)}")
    return "; " + "; ".join(said) if said else ""


def _same_straggler(rank: int, base: Against | None) -> float:
    """The same rank's extra time in the comparison run, where it straggled there too."""
    if base is None:
        return 0.0
    return sum(s.seconds for s in stragglers(base.other.measured.data.per_rank) if s.rank == rank)


def _gpu(g: RankGpu) -> str:
    return f"GPU {g.gpu}" if g.gpu is not None else f"rank {g.rank}'s device"


# ---- records that lack the figures --------------------------------------------------------------

def missing(r: Result, gpus: dict[int, RankGpu]) -> list[str]:
    """What a multi-process record stored by an earlier dlbench lacks to judge its ranks; said only for
    the workloads that store a line per rank (train, infer, smooth)."""
    lines = r.measured.data.per_rank
    if not lines:
        return []
    notes = []
    if not gpus and on_gpu(r):
        notes.append("each rank's GPU was not watched in this record (stored by an earlier dlbench): a neighbour on "
                     "a GPU other than rank 0's cannot be named")
    if not all(line.spread_recorded for line in lines):
        notes.append("each rank's per-step spread was not recorded (stored by an earlier dlbench): no straggling "
                     "rank is judged")
    return notes


def _ranked(ctx: Context) -> Found:
    found, notes = causes(ctx.run, ctx.parts, ctx.base)
    return [*found, *notes]


RANKS = Check("the other GPUs and the ranks", "each rank's GPU monitor (its neighbours' SM share) and each rank's "
              "phase medians with their p10–p90 spread", _ranked, (NEIGHBOUR, STRAGGLING))
