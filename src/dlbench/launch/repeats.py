"""`dlbench run --repeat N|auto`: one spec run in several fresh processes, stored as one set.

The steps of one process say little about the next process of the same spec: on a shared
machine a host-bound configuration lands 1.5x apart from one start to the next. Only fresh
processes measure that, so each run of the set is an isolated child (launch/isolated.py) whose
result is stored the moment it ends, as a suite's are. `auto` adds runs until the mean's 95%
interval is within ±2% (results/spread.py) or the time budget would be passed.
"""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console

from dlbench.errors import UserError
from dlbench.launch.suiterun import Plan, estimated, gpu_name, new_run_id, run_suite
from dlbench.options import MAX_REPEAT
from dlbench.results.record import Result
from dlbench.results.spread import AUTO_MAX_RUNS, AUTO_MIN_RUNS, AUTO_TARGET, Spread
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites import Suite
from dlbench.suites.estimate import format_seconds, history, known

AUTO = "auto"


def parse(text: str) -> int | str:
    """`--repeat`'s value: a count of runs, or 'auto'."""
    value = str(text).strip().lower()
    if value == AUTO:
        return AUTO
    if value.isdigit() and 1 <= int(value) <= MAX_REPEAT:
        return int(value)
    raise UserError(f"--repeat must be a number of runs from 1 to {MAX_REPEAT} or 'auto', got {text!r}")


@dataclass(frozen=True)
class Budget:
    """When `auto` stops: the set settled, the most runs, or no time left for one more run."""
    seconds: float
    started: float

    def enough(self, results: list[Result]) -> bool:
        ok = [r for r in results if r.status == "ok"]
        if results and not ok:
            return True  # a spec that fails will fail again (the plan holds AUTO_MAX_RUNS runs at most)
        took = [float(r.traces.get("launch", {}).get("wall_s") or 0.0) for r in results]
        one_more = statistics.median(took) if took else 0.0
        if time.monotonic() - self.started + one_more > self.seconds and len(ok) >= 2:
            return True
        return Spread.of(ok).settled()


def announce(spec: BenchmarkSpec, asked: int | str, budget_s: float) -> str:
    """What a repeated run says before it starts."""
    if asked == AUTO:
        return (f"--repeat auto: {spec.label()} in fresh processes until the mean's 95% interval is within "
                f"±{AUTO_TARGET:.0%} ({AUTO_MIN_RUNS} to {AUTO_MAX_RUNS} runs, no new run after "
                f"{format_seconds(budget_s)})")
    return f"--repeat {asked}: {spec.label()} in {asked} fresh processes, one after another"


def run_repeats(spec: BenchmarkSpec, asked: int | str, budget_s: float, store: Store, system: dict, *,
                tag: str | None, console: Console, describe: Callable[[Result], str]) -> list[Result]:
    """Every run of the set, each stored as it ended; a stop ends the set with what ran."""
    count = AUTO_MAX_RUNS if asked == AUTO else int(asked)
    earlier, host = store.results(), socket.gethostname()
    facts = known(earlier, host, gpu_name([spec], history(earlier, host)), store.flop_counts())
    plan = Plan(Suite(spec.label(), "", [spec]), new_run_id(), [spec] * count, [],
                [estimated(spec, facts)] * count, repeat=asked)
    enough = Budget(budget_s, time.monotonic()).enough if asked == AUTO else None
    outcome = run_suite(plan, store, system, tag=tag, default_timeout=spec.timeout or 0.0, console=console,
                        describe=describe, enough=enough)
    return outcome.results
