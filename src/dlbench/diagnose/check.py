"""What one of the doctor's checks is: it reads a run's figures (a `Context`) and returns the causes it
finds, each a `Cause` of one `Kind` with its evidence, its fix and the seconds a step it accounts for,
and notes of what it saw that costs no time of its own. diagnose/causes.py holds the checks in order.

A kind says how its causes stand beside the others' (the GPU idle they account for, the cores their
fix needs), so that no list elsewhere has to name them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dlbench.diagnose.history import Against
from dlbench.report.parts import Parts, mean_step, parts
from dlbench.results.measurement import GpuFacts
from dlbench.results.record import Result


@dataclass(frozen=True)
class Kind:
    """A cause the doctor can name, and how it stands beside the others."""
    name: str
    # it accounts for the GPU idle a profile sees (a loader, other processes): no launch-bound advice then
    idle: bool = False
    # its fix needs more cores than a full, restricted CPU set has: that restriction is named in its
    # place, with what it saw ('data': the wait for data; 'gaps': the GPU's idle apart from it)
    needs_cores: str = ""
    # it says why the host's CPUs fell short: the launching thread's wait is how it cost time, said with it
    short_of_cpu: bool = False
    # its seconds are GPU idle the host left: the part of it the launching thread spent off its CPU is
    # counted apart
    launch_idle: bool = False

    def __call__(self, evidence: str, seconds: float | None = None) -> Cause:
        return Cause(self, evidence, seconds)


@dataclass
class Cause:
    kind: Kind
    evidence: str
    seconds: float | None = None  # of each step's time this cause accounts for
    share: float | None = None  # of the step
    explains: float | None = None  # of the time lost against the baseline

    @property
    def name(self) -> str:
        return self.kind.name


Found = Cause | str | None | Iterable[Cause | str]  # what a check returns: causes and notes, one or several


@dataclass(frozen=True)
class Context:
    """What a check reads: the run, where its step went, what it is compared with (`base`, with its
    parts `theirs` and the seconds a step `lost` against it), the machine's system record, and the
    causes the checks before it found (`explained`: the seconds of those that measure a part)."""
    run: Result
    parts: Parts
    base: Against | None
    record: Result | None
    theirs: Parts | None = None
    lost: float | None = None
    found: tuple[Cause, ...] = ()
    explained: float = 0.0

    @classmethod
    def of(cls, r: Result, base: Against | None, record: Result | None) -> Context:
        lost = None if base is None else mean_step(r) - mean_step(base.other)
        return cls(r, parts(r), base, record, parts(base.other) if base else None, lost)

    def grown(self, part: str) -> float | None:
        """The seconds of a part of the step (a field of Parts) that grew as a share against the
        comparison (a run slower all over keeps its shares); without one, the whole part."""
        mine = getattr(self.parts, part)
        if mine is None:
            return None
        return mine - ((getattr(self.theirs, part) or 0.0) * self.parts.step / self.theirs.step if self.base else 0.0)

    @property
    def facts(self) -> GpuFacts:
        """What the system record's survey found of the run's GPU (its link, clocks, power limit)."""
        if self.record is None:
            return GpuFacts()
        index = int(str(self.run.measured.device or "cuda:0").partition(":")[2] or 0)
        return self.record.measured.system.facts_of(index)


@dataclass(frozen=True)
class Check:
    """One cause, or one family of them, the doctor looks for: `measure` finds it in a run's figures."""
    name: str
    reads: str  # the recorded figures it reads
    measure: Callable[[Context], Found]  # the causes it finds, each with its share and fix, and notes
    names: tuple[Kind, ...]  # the causes it can name
    # it takes the loss the parts measured before it leave (the checks that do so never count each other)
    rest: bool = False
    # it sees the causes the checks before it found and returns them as it leaves them, its own added
    revises: bool = False
    machine: bool = False  # a condition of the machine with no share of the step measured: listed apart

    def found(self, ctx: Context) -> list[Cause | str]:
        """What `measure` returned, as a list."""
        found = self.measure(ctx)
        return [] if found is None else [found] if isinstance(found, (Cause, str)) else list(found)


def label(r: Result) -> str:
    """'run 5c78e2a1 (2026-11-28 04:12)'."""
    return f"run {r.id[:8]} ({r.started[:16].replace('T', ' ')})"
