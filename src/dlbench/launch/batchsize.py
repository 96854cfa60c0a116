"""Batch sizes from the command line: a list (`1,2,4`), a sweep (powers of two until memory
runs out) or `auto` (the largest batch that fits, found by short probe runs).

The search doubles the batch until a probe runs out of memory, then bisects between the
last batch that fitted and the first that did not. Every probe is recorded with its status
and throughput, so the result says both the largest batch and the throughput-optimal one.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

from dlbench.errors import UserError
from dlbench.results.record import Result
from dlbench.spec import BenchmarkSpec

SWEEP_MAX = 1024  # a sweep or search stops here even if memory never runs out (CPU runs)
PROBE = dict(warmup=1, warmup_seconds=0.0, steps=2, min_seconds=0.0)

Probe = Callable[[int], tuple[str, float | None]]  # batch -> (status, throughput)
Told = Callable[[int, "float | None"], None]  # (batch, guessed seconds) before each probe
CPU_BUDGET_S = 60.0  # a search on a CPU, where memory seldom runs out before SWEEP_MAX


def parse(text: str) -> list[int] | str:
    """'16' -> [16]; '1,2,4' -> [1, 2, 4]; 'sweep' and 'auto' stay words."""
    text = str(text).strip().lower()
    if text in ("sweep", "auto"):
        return text
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(s <= 0 for s in sizes):
        raise UserError(f"bad --batch {text!r}: give a positive integer, a list like 1,2,4, 'sweep' or 'auto'")
    return sizes


def sweep_sizes(limit: int = SWEEP_MAX) -> list[int]:
    return [2**i for i in range(limit.bit_length()) if 2**i <= limit]


@dataclass(frozen=True)
class Probed:
    """One probe of a batch search: its batch, how it ended, its throughput and how long it took."""
    batch: int
    status: str
    throughput: float | None
    seconds: float = 0.0


@dataclass(frozen=True)
class Search:
    """What a batch search found: the largest batch that fitted (None: none did, or the search was cut
    short before one failed), the batch of the highest throughput, and every probe in order."""
    largest: int | None
    best_throughput_batch: int | None
    limit: int
    tried: tuple[Probed, ...]
    stopped: str | None = None  # "time": no probe started that would have ended past `budget_s`
    budget_s: float | None = None

    def stored(self) -> dict[str, Any]:
        """As the record keeps it (`Run.batch_search`)."""
        found = {"largest": self.largest, "best_throughput_batch": self.best_throughput_batch, "limit": self.limit,
                 "tried": [dataclasses.asdict(t) for t in self.tried]}
        return found | ({"stopped": self.stopped, "budget_s": self.budget_s} if self.stopped else {})


def search(probe: Probe, limit: int = SWEEP_MAX, start: int = 1, *, budget_s: float | None = None,
           clock: Callable[[], float] = time.monotonic, told: Told | None = None) -> Search:
    """Largest batch ≤ limit for which `probe` does not run out of memory, and the probes made.
    With `budget_s` (a CPU, where memory seldom runs out) no probe starts that would end past the
    budget, guessing each probe takes its batch's share of the last one's time: the largest batch
    then is the largest tried in that time (`stopped: "time"`). `told(batch, guess_s)` before each probe."""
    tried: list[Probed] = []
    began = clock()

    def timed(batch: int) -> bool | None:
        """Whether `batch` fitted; None where its probe would not end within the budget."""
        # a step's time grows about as its batch does
        expected = tried[-1].seconds * batch / tried[-1].batch if tried else None
        if budget_s is not None and expected is not None and clock() - began + expected > budget_s:
            return None
        if told:
            told(batch, expected)
        started = clock()
        status, throughput = probe(batch)
        tried.append(Probed(batch, status, throughput, round(clock() - started, 3)))
        if status not in ("ok", "oom"):
            raise UserError(f"batch search stopped: the run at batch {batch} ended with status {status}")
        return status == "ok"

    low, high, stopped = _bracket(timed, start, limit)
    while stopped is None and high is not None and high - low > max(1, low // 16):  # within ~6 % of the boundary
        middle = (low + high) // 2
        fitted = timed(middle)
        if fitted is None:
            stopped = "time"
        elif fitted:
            low = middle
        else:
            high = middle
    fitted_runs = [t for t in tried if t.status == "ok"]
    best = max(fitted_runs, key=lambda t: t.throughput or 0.0).batch if fitted_runs else None
    return Search(low or None, best, limit, tuple(tried), stopped, budget_s if stopped else None)


def _bracket(timed: Callable[[int], bool | None], start: int, limit: int) -> tuple[int, int | None, str | None]:
    """(a batch that fits or 0, one that does not or None, "time" where cut short): doubling from
    `start`, then the limit itself where every doubling fitted."""
    low, high, batch = 0, None, start
    while batch <= limit:
        fitted = timed(batch)
        if fitted is None:
            return low, high, "time"
        if not fitted:
            return low, batch, None
        low, batch = batch, batch * 2
    if 0 < low < limit:
        fitted = timed(limit)
        if fitted is None:
            return low, high, "time"
        return (limit, None, None) if fitted else (low, limit, None)
    return low, high, None


def probe_with(run: Callable[[BenchmarkSpec], Result], spec: BenchmarkSpec) -> Probe:
    """A probe that runs `spec` briefly at a given batch through `run`."""

    def probe(batch: int) -> tuple[str, float | None]:
        result = run(dataclasses.replace(spec, batch=batch, **PROBE))
        return result.status, result.measured.throughput.value

    return probe
