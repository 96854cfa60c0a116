"""Run a suite: every spec in its own process, each result stored the moment it ends.

A suite run has an id (`Result.run`) shared by all its results, resumes included, so
`--resume` knows what is missing: every spec without an `ok` result of that run on this
machine. The first SIGINT/SIGTERM stores the running benchmark as `interrupted` and stops;
the second stops at once. Either way the store holds only whole records.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console

from dlbench.launch import isolated
from dlbench.launch.interrupts import Interrupts
from dlbench.launch.view import SuiteView
from dlbench.models import registry
from dlbench.results.record import Result, now
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites import Suite, spec_key
from dlbench.suites.estimate import Estimate, estimate, history


@dataclass
class Plan:
    suite: Suite
    run: str
    todo: list[BenchmarkSpec]
    done: list[BenchmarkSpec]  # already ok in this run: skipped
    estimates: list[Estimate]  # one per spec in `todo`
    resumed: bool = False


@dataclass
class Outcome:
    results: list[Result] = field(default_factory=list)
    interrupted: str | None = None  # the signal that stopped the suite


def new_run_id() -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def latest_run(results: list[Result], host: str | None) -> str | None:
    """The id of the newest suite run among `results` on `host`."""
    runs = [(r.started, r.run) for r in results if r.run and r.system.get("host") == host]
    return max(runs)[1] if runs else None


def make_plan(suite: Suite, store: Store | None, host: str | None, *, resume: bool = False,
              run: str | None = None) -> Plan:
    """What to run: with `resume`, the given run (else the newest of this suite here) minus its ok specs."""
    earlier = store.results() if store is not None else []
    if resume and run is None:
        run = latest_run([r for r in earlier if r.suite == suite.name], host)
    resumed = resume and run is not None
    run = run or new_run_id()
    ok = {spec_key(r.spec) for r in earlier if r.run == run and r.status == "ok" and r.system.get("host") == host}
    todo = [s for s in suite.specs if not resumed or spec_key(s) not in ok]
    done = [s for s in suite.specs if resumed and spec_key(s) in ok]
    times = history(earlier, host)
    return Plan(suite, run, todo, done, [estimate(s, times) for s in todo], resumed)


def run_suite(plan: Plan, store: Store, system: dict, *, tag: str | None, default_timeout: float,
              console: Console, describe: Callable[[Result], str]) -> Outcome:
    """Run the plan's specs one after another, each isolated; KeyboardInterrupt on a second signal."""
    outcome = Outcome()
    job = isolated.Job(plan.suite.name, plan.run, tag)
    with Interrupts() as interrupts, SuiteView(console, plan.suite.name, plan.estimates) as view:
        for index, spec in enumerate(plan.todo):
            if interrupts.count:
                break
            timeout = spec.timeout or default_timeout
            view.start(index, spec, timeout)
            try:
                result = isolated.run(spec, system, job, timeout=timeout, interrupts=interrupts, tick=view.tick)
            except KeyboardInterrupt:
                store.add(_interrupted(spec, system, job, interrupts.signal_name))
                raise
            store.add(result)
            outcome.results.append(result)
            view.finish(result, describe(result))
        outcome.interrupted = interrupts.signal_name if interrupts.count else None
    return outcome


def _interrupted(spec: BenchmarkSpec, system: dict, job: isolated.Job, signal_name: str | None) -> Result:
    return Result(spec=spec.to_dict(), system=system, status="interrupted", title=registry.title(spec.model),
                  suite=job.suite, run=job.run, tag=job.tag, finished=now(),
                  error=f"stopped at once by a second {signal_name or 'signal'}")
