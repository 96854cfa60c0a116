"""A suite's specs run: every spec in its own process, each result stored the moment it ends.

A suite run has an id (`Result.run`) shared by all its results, resumes included, so
`--resume` knows what is missing: every spec without an `ok` result of that run on this
machine. The first SIGINT/SIGTERM stores the running benchmark as `interrupted` and stops;
the second stops at once. Either way the store holds only whole records.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rich.console import Console

from dlbench.errors import UserError
from dlbench.launch.interrupts import OWNER, Interrupts, pending
from dlbench.launch.interrupts import kept as interrupts_kept
from dlbench.launch.view import SuiteView, one_line
from dlbench.results.measurement import Run
from dlbench.results.record import Result, now
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites import Suite, spec_key
from dlbench.suites.estimate import Estimate, Known, estimate_run, history, known
from dlbench.system.records import SYSTEM_WORKLOAD, carried_ceiling, here

if TYPE_CHECKING:  # isolated runs import the models, and so torch: only a suite that runs needs them
    from dlbench.launch import isolated


@dataclass
class Plan:
    suite: Suite
    run: str
    todo: list[BenchmarkSpec]
    done: list[BenchmarkSpec]  # already ok in this run: skipped
    estimates: list[Estimate]  # one per spec in `todo`
    resumed: bool = False
    repeat: int | str | None = None  # `dlbench run --repeat`: the runs asked for ('auto'), where not the suite's


@dataclass
class Outcome:
    results: list[Result] = field(default_factory=list)
    interrupted: str | None = None  # the signal that stopped the suite
    stopped: bool = False  # a stop stored the running benchmark as interrupted


def new_run_id() -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def latest_run(results: list[Result], host: str | None) -> str | None:
    """The id of the newest suite run among `results` on `host`."""
    runs = [(r.started, r.run) for r in results if r.run and r.machine.host == host]
    return max(runs)[1] if runs else None


def make_plan(suite: Suite, store: Store | None, host: str | None, *, resume: bool = False,
              run: str | None = None) -> Plan:
    """What to run: with `resume`, the given run (else the newest of this suite here) minus its ok specs.
    The estimates come from what the store and the GPU's name tell (suites/estimate.py `estimate_run`);
    a spec never run here and without a known FLOP count is given a rough figure: nothing is measured
    or counted, and a listing answers in a second or two."""
    earlier = store.results() if store is not None else []
    if resume and run is not None:
        _check_resumable(run, suite, earlier)
    if resume and run is None:
        run = latest_run([r for r in earlier if r.suite == suite.name], host)
    resumed = resume and run is not None
    run = run or new_run_id()
    ok = Counter(spec_key(r.spec) for r in earlier if r.run == run and r.status == "ok" and r.machine.host == host)
    todo: list[BenchmarkSpec] = []
    done: list[BenchmarkSpec] = []
    for spec in suite.specs:  # an entry with `repeat: N` is N runs, each in a fresh process
        runs = suite.runs(spec)
        finished = min(ok[spec_key(spec)], runs) if resumed else 0
        done += [spec] * finished
        todo += [spec] * (runs - finished)
    times = history(earlier, host)
    counts = store.flop_counts() if store is not None else {}
    facts = known(earlier, host, gpu_name(todo, times), counts)
    return Plan(suite, run, todo, done, [estimated(s, facts) for s in todo], resumed)


def estimated(spec: BenchmarkSpec, facts: Known) -> Estimate:
    """A planned run's estimate, counting and measuring nothing; on a GPU where NVML named one or
    a GPU ceiling is stored here."""
    gpu = spec.device != "cpu" and any(kind == "cuda" for kind, _ in facts.rates)
    return estimate_run(spec, facts, "cuda" if gpu else "cpu").run


def gpu_name(todo: list[BenchmarkSpec], times: dict[str, list[float]]) -> str | None:
    """The GPU a spec never run here would run on, for its datasheet figures (NVML: no torch, no CUDA)."""
    if all(spec_key(s) in times or s.device == "cpu" for s in todo):
        return None
    from dlbench.system.info import gpu_names

    names = gpu_names()
    return names[0] if names else None


def _check_resumable(run: str, suite: Suite, earlier: list[Result]) -> None:
    """`--resume --run ID` continues a run of this suite that the store holds, never a new one."""
    suites_of_run = {r.suite for r in earlier if r.run == run}
    if not suites_of_run:
        known = sorted({r.run for r in earlier if r.run and r.suite == suite.name})
        listed = f"; runs of suite {suite.name}: {', '.join(known[-5:])}" if known else f"; suite {suite.name} has none"
        raise UserError(f"--resume --run {run}: the store holds no suite run {run}{listed}")
    if suite.name not in suites_of_run:
        raise UserError(f"--resume --run {run}: that is a run of suite {', '.join(sorted(map(str, suites_of_run)))}, "
                        f"not of {suite.name}")


def run_suite(plan: Plan, store: Store, system: dict, *, tag: str | None, default_timeout: float,
              console: Console, describe: Callable[[Result], str], again: str | None = None,
              enough: Callable[[list[Result]], bool] | None = None, ahead: isolated.Worker | None = None) -> Outcome:
    """Run the plan's specs one after another, each isolated. The first signal stops the running
    child, which is stored as interrupted, and ends the loop; a second stops the command at once
    (launch/interrupts.py), storing the running benchmark as interrupted. `again`: the command that
    resumes, for the line a stop ends with. `enough`: asked before each run whether the results so
    far suffice (`--repeat auto`), which ends the plan early. `ahead`: the first spec's worker, started
    while the plan was checked (isolated.py `started`)."""
    from dlbench.launch import flopcount, isolated, placement

    outcome = Outcome()
    # the runs of `dlbench run --repeat` belong to no suite: their set is their tie
    job = isolated.Job(None, None, tag) if plan.repeat is not None else isolated.Job(plan.suite.name, plan.run, tag)
    known = here(store.results(workload=SYSTEM_WORKLOAD), system)  # the workers' ceilings for FLOP utilisation
    again = again or f"dlbench suite {plan.suite.name}"
    with Interrupts() as interrupts, SuiteView(console, plan.suite.name, plan.estimates) as view, \
            interrupts_kept(lambda: _kept(plan, outcome, store.path, again)), \
            isolated.preloaded(any(not placement.of(spec).ranks for spec in plan.todo)):
        for index, spec in enumerate(plan.todo):
            if interrupts.count or (enough is not None and enough(outcome.results)):
                break
            timeout = spec.timeout or default_timeout or None  # 0: no limit
            view.start(index, spec, timeout)
            with pending(partial(_store_interrupted, store.path, spec, system, job, outcome)) as settle:
                counted = flopcount.lookup(store, spec.to_dict())
                result = isolated.run(spec, system, job, timeout=timeout, interrupts=interrupts, tick=view.tick,
                                      ceilings=known, flops=counted, ahead=ahead if index == 0 else None)
                result.add(_repeat_of(plan, index))
                ceiling = carried_ceiling(result)
                # the ceiling is measured once, by the first run that needed it; later ones reuse it
                not_stored = store.add_kept([r for r in (ceiling, result) if r is not None])
                if ceiling is not None:
                    known.append(ceiling)
                settle()
                if not_stored is None:
                    flopcount.keep(store, spec.to_dict(), result, counted)
            outcome.results.append(result)
            view.finish(result, describe(result))
            if not_stored:  # the suite goes on: each result is kept, and the exit status is the runs'
                console.print(f"warning: {one_line(not_stored)}", style="yellow", highlight=False, markup=False,
                              soft_wrap=True)
        outcome.interrupted = interrupts.signal_name if interrupts.count else None
    return outcome


def repeat_set(run: str, spec: BenchmarkSpec) -> str:
    """The id shared by the runs of one repeated spec in one suite run (resumes included)."""
    return f"{run}:{hashlib.sha1(spec_key(spec).encode()).hexdigest()[:8]}"


def _repeat_of(plan: Plan, index: int) -> Run:
    """Where the plan's run `index` stands in its repeat set: nothing for a spec that runs once."""
    spec = plan.todo[index]
    asked = plan.repeat or plan.suite.runs(spec)
    if asked == 1:
        return Run()
    key = spec_key(spec)
    before = sum(spec_key(s) == key for s in (*plan.done, *plan.todo[:index]))
    return Run(repeat_set=repeat_set(plan.run, spec), repeat_index=before + 1, repeat_of=asked)


def _kept(plan: Plan, outcome: Outcome, path: Path, again: str) -> str:
    """What a stop says: how many results the store kept, and how to run the rest."""
    finished = [r for r in outcome.results if r.status != "interrupted"]
    stopped = outcome.stopped or any(r.status == "interrupted" for r in outcome.results)
    running = "; the running benchmark is stored as interrupted" if stopped else ""
    if plan.repeat is not None:
        return f"{len(finished)} runs of the set kept in {path}{running}"
    rest = f"; `{again} --resume` runs the rest" if len(finished) < len(plan.todo) else ""
    return f"{len(finished)} of {len(plan.todo)} results of run {plan.run} kept in {path}{running}{rest}"


def _store_interrupted(path: Path, spec: BenchmarkSpec, system: dict, job: isolated.Job, outcome: Outcome) -> None:
    """The running benchmark as interrupted, through a connection of its own: a stop may come from
    the watchdog thread, while the main thread still holds the store."""
    from dlbench.models import registry

    with Store(path) as store:
        store.add(Result(spec=spec.to_dict(), system=system, status="interrupted", title=registry.title(spec.model),
                         suite=job.suite, run=job.run, tag=job.tag, finished=now(),
                         error=f"stopped at once by a second {OWNER.signal_name or 'signal'}"))
    outcome.stopped = True
