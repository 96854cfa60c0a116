"""Batch sizes from the command line: a list (`1,2,4`), a sweep (powers of two until memory
runs out) or `auto` (the largest batch that fits, found by short probe runs).

The search doubles the batch until a probe runs out of memory, then bisects between the
last batch that fitted and the first that did not. Every probe is recorded with its status
and throughput, so the result says both the largest batch and the throughput-optimal one.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

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


def search(probe: Probe, limit: int = SWEEP_MAX, start: int = 1, *, budget_s: float | None = None,
           clock: Callable[[], float] = time.monotonic, told: Told | None = None) -> dict:
    """Largest batch ≤ limit for which `probe` does not run out of memory, and the probes made.
    With `budget_s` (a CPU, where memory seldom runs out) no probe starts that would end past the
    budget, guessing each probe takes its batch's share of the last one's time: the largest batch
    then is the largest tried in that time (`stopped: "time"`). `told(batch, guess_s)` before each probe."""
    tried: list[dict] = []
    began = clock()

    def attempt(batch: int) -> bool:
        status, throughput = probe(batch)
        tried.append({"batch": batch, "status": status, "throughput": throughput})
        if status not in ("ok", "oom"):
            raise UserError(f"batch search stopped: the run at batch {batch} ended with status {status}")
        return status == "ok"

    def guess(batch: int) -> float | None:  # a step's time grows about as its batch does
        return tried[-1]["seconds"] * batch / tried[-1]["batch"] if tried else None

    def timed(batch: int) -> bool | None:
        """The probe's outcome; None where it would not end within the budget."""
        expected = guess(batch)
        if budget_s is not None and expected is not None and clock() - began + expected > budget_s:
            return None
        if told:
            told(batch, expected)
        started = clock()
        fitted = attempt(batch)
        tried[-1]["seconds"] = round(clock() - started, 3)
        return fitted

    low, high, stopped = 0, None, None  # low fits; high does not (None: nothing failed yet)
    batch = start
    while batch <= limit:
        fitted = timed(batch)
        if fitted is None:
            stopped = "time"
            break
        if not fitted:
            high = batch
            break
        low, batch = batch, batch * 2
    if stopped is None and high is None and 0 < low < limit:
        fitted = timed(limit)
        if fitted is None:
            stopped = "time"
        elif fitted:
            low = limit
        else:
            high = limit
    while stopped is None and high is not None and high - low > max(1, low // 16):  # within ~6 % of the boundary
        middle = (low + high) // 2
        fitted = timed(middle)
        if fitted is None:
            stopped = "time"
        elif fitted:
            low = middle
        else:
            high = middle
    fitted_runs = [t for t in tried if t["status"] == "ok"]
    best = max(fitted_runs, key=lambda t: t["throughput"] or 0.0)["batch"] if fitted_runs else None
    found = {"largest": low or None, "best_throughput_batch": best, "limit": limit, "tried": tried}
    if stopped:
        found.update(stopped=stopped, budget_s=budget_s)
    return found


def probe_with(run: Callable[[BenchmarkSpec], Result], spec: BenchmarkSpec) -> Probe:
    """A probe that runs `spec` briefly at a given batch through `run`."""

    def probe(batch: int) -> tuple[str, float | None]:
        result = run(dataclasses.replace(spec, batch=batch, **PROBE))
        return result.status, result.measured.throughput.value

    return probe
