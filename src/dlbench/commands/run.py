"""`dlbench run <workload>`: one spec, a list of batch sizes, a sweep or a batch search,
checked before anything runs and stored one result per batch run."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from dlbench import scratch, workloads
from dlbench.commands.results import output_file
from dlbench.errors import UserError
from dlbench.launch import batchsize, interrupts, repeats
from dlbench.launch.view import Heartbeat, Terminal
from dlbench.options import MAX_BATCH, MAX_SECONDS, Options, option
from dlbench.results.measurement import Run
from dlbench.results.record import FAILED, Result
from dlbench.results.store import DB_HELP, TAG_HELP, Store, check_writable, one_store
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import RunEstimate, format_seconds, over_a_minute


@dataclass(frozen=True, kw_only=True)
class RunExtras(Options):
    """The parameters of `dlbench run <workload>` beyond the spec: where results go."""
    max_batch: int = option(batchsize.SWEEP_MAX, "Largest batch a sweep or auto search tries.", low=1,
                            high=MAX_BATCH)
    db: str | None = option(None, DB_HELP, parse=one_store)
    tag: str | None = option(None, TAG_HELP)
    retune: bool = option(False, "Measure what --batch auto (and volume's --block auto, --precision auto) chose "
                                 "again, although an earlier run on this machine tuned it for the same work, and "
                                 "keep the new choice.")
    repeat: str | None = option(None, "Run the benchmark this many times, each in a fresh process, and store "
                                      "every run as one set: its figure is the median run, with the spread "
                                      "between runs and its CV (what `compare` and `doctor` judge against). "
                                      "'auto' adds runs until the mean's 95% interval is within ±2% (3 to 20 "
                                      "runs) or --repeat-budget ends.", parse=repeats.parse)
    repeat_budget: float = option(600.0, "With --repeat auto: no new run starts after this many seconds.",
                                  unit="s", low=1, high=MAX_SECONDS)
    results_file: str | None = option(None, "Also write the result to this .json file (an object; a list for a "
                                            "list of batches or a sweep) or .jsonl file (one object per line): "
                                            "throughput, step time percentiles, batch, shape, precision, "
                                            "parameters, FLOPs, peak memory, system.", flag="--results-file")


def run_command(workload: workloads.Workload, values: dict[str, Any], *, view: Terminal) -> int:
    """Run what a `dlbench run` command asks for; the exit status (1 when a run failed: error or oom).
    `workload`: the one the command line looked up by its name. With --results-file, every result
    is also written there as it ends."""
    extras = RunExtras(**{f: values.pop(f) for f in RunExtras.names() if f in values})
    spec, plan, sweep = _plan(workload, dict(values), extras.max_batch)
    check_writable(extras.db)  # the store, the results file and the spec are checked before anything runs
    results_file = _results_path(extras)
    if extras.repeat is not None and plan == "auto":
        raise UserError("--repeat runs one batch again and again: find it with --batch auto first, then give "
                        "--batch N --repeat")
    with starting(spec, plan, view), _head_start(plan, extras.repeat is None) as ranks:
        preflight(spec, view, () if sweep or plan == "auto" else [one.batch for one in plan])
        check_store_apart(spec, extras.db)
        scratch.clean_stale()  # what killed runs left behind
        return _run_plan(spec, plan, sweep, extras, results_file, view, ranks)


STARTING = "starting: loading torch, then the checks and how long it will take"


def starting(spec: BenchmarkSpec, plan: str | list[BenchmarkSpec], view: Terminal) -> contextlib.AbstractContextManager:
    """The first line of a run whose command line is checked: what runs, said before torch loads (seconds,
    more on a busy machine) and repeated every 5 s until the estimate is said, so that the command is
    never silent there. Where torch is loaded already (a plug-in imported it, a caller in Python) the
    estimate comes soon enough, and nothing is said."""
    import sys

    if "torch" in sys.modules:
        return contextlib.nullcontext()
    more = "" if plan == "auto" or len(plan) == 1 else f" (and {len(plan) - 1} more batch sizes)"
    what = f"{spec.label()}{more}" if plan != "auto" else f"{spec.workload} {spec.model} (batch search)"
    return view.waiting(f"{what}: {STARTING}")


@contextlib.contextmanager
def _head_start(plan: str | list[BenchmarkSpec], here: bool = True) -> Iterator[Any]:
    """What the first run of `plan` starts before the checks above it take their seconds (importing
    torch, reading the input): on several GPUs its ranks (launch/torchrun.py `started`: this process
    imports no torch before), else CUDA on this process's GPU (workloads/early.py). A check that
    fails stops them, and nothing ran. Yields the started ranks, or None. `here`: the first run is
    in this process (not with --repeat, whose runs are each a fresh one)."""
    from dlbench.launch import placement

    first = None if plan == "auto" or not here else plan[0]
    if first is not None and placement.of(first).ranks:
        from dlbench.launch import torchrun

        with torchrun.started(first) as ranks:
            yield ranks
        return
    if first is not None and first.device != "cpu":
        from dlbench.workloads import early

        early.start(first.device)
    yield None


def _run_plan(spec: BenchmarkSpec, plan: str | list[BenchmarkSpec], sweep: bool, extras: RunExtras,
              results_file: Path | None, view: Terminal, ranks: Any) -> int:
    several = plan != "auto" and (len(plan) > 1 or extras.repeat not in (None, "1"))
    done: list[Result] = []
    with Store(extras.db) as store, _results_to(results_file, several, view) as write, \
            interrupts.kept(lambda: _kept(done, 1 if plan == "auto" else len(plan), store.path)):
        if plan == "auto":
            result = _search(spec, store, extras, view)
            write(result)
            return 1 if result.status in FAILED else 0
        statuses = []
        expected = announce_estimate(plan, store, view, _least_runs(extras.repeat))
        for one, seconds in zip(plan, expected):
            if extras.repeat is not None:
                results = _repeated(one, store, extras, view)
            else:
                results = [_run(one, store, extras, view, ranks=ranks if one is plan[0] else None, expected=seconds)]
                if results[0].status == "ok" and one is plan[-1]:
                    view.message(ONE_RUN)
            done.extend(results)
            for result in results:
                write(result)
            statuses.append(_set_status(results))
            if statuses[-1] == "oom" and sweep:
                break  # larger batches cannot fit either
    return 1 if _failed(statuses, sweep) else 0


ONE_RUN = ("one run: how far a fresh process of it moves on this machine is unknown; --repeat 5 measures the "
           "spread between runs")


def _set_status(results: list[Result]) -> str:
    """A set's status: ok where a run measured, else its first failure (none ran: interrupted)."""
    statuses = [r.status for r in results]
    return "ok" if "ok" in statuses else next(iter(statuses), "interrupted")


def _repeated(spec: BenchmarkSpec, store: Store, extras: RunExtras, view: Terminal) -> list[Result]:
    """The runs of --repeat, each in a fresh process, then the set's figure on stdout."""
    from dlbench.launch.execute import describe
    from dlbench.results.spread import Spread
    from dlbench.system.info import launcher_fingerprint

    asked = repeats.parse(extras.repeat)
    view.done_waiting()
    view.message(repeats.announce(spec, asked, extras.repeat_budget))
    results = repeats.run_repeats(spec, asked, extras.repeat_budget, store, launcher_fingerprint(), tag=extras.tag,
                                  console=view.err, describe=describe)
    ok = [r for r in results if r.status == "ok"]
    if ok:
        view.text(f"{spec.label()}: {Spread.of(ok).text()}")
    return results


def _failed(statuses: list[str], sweep: bool) -> bool:
    """Whether a run of these results failed. The out-of-memory error that ends a sweep is the end
    it looks for, once a smaller batch has measured."""
    if sweep and statuses[-1] == "oom" and "ok" in statuses:
        statuses = statuses[:-1]
    return any(status in FAILED for status in statuses)


def _kept(done: list[Result], planned: int, path: Path) -> str:
    """What a stop says (launch/interrupts.py): results kept, and the one that was running."""
    running = "; the running benchmark is stored as interrupted" if interrupts.OWNER.ran_pending else ""
    return f"{len(done)} of {planned} results kept in {path}{running}"


def _results_path(extras: RunExtras) -> Path | None:
    """The results file, checked; its name says the format, so JSON lines never land in a .json file."""
    path = output_file(extras.results_file, extras.db, "results file")
    if path is not None and path.suffix.lower() not in (".json", ".jsonl"):
        raise UserError(f"cannot write results file {path}: name it .json (one JSON document) "
                        "or .jsonl (one JSON object per line)")
    return path


@contextlib.contextmanager
def _results_to(path: Path | None, several: bool, view: Terminal) -> Iterator[Callable[[Result], None]]:
    """The writer of each result to the results file (nothing without one)."""
    from dlbench.results.summary import ResultsFile

    if path is None:
        yield lambda result: None
        return
    out = ResultsFile(path, several)
    try:
        yield out.write
    finally:
        if out.close():
            view.message(f"wrote {path}")


def _plan(workload: workloads.Workload, values: dict[str, Any],
          limit: int) -> tuple[BenchmarkSpec, str | list[BenchmarkSpec], bool]:
    """The spec; 'auto' or the specs of every batch to run (all made, so all checked, now); whether it is a sweep."""
    batch = values.pop("batch", None)
    plan = batchsize.parse(batch) if workload.batch_plans and batch is not None else [batch]
    spec = BenchmarkSpec.from_dict({"workload": workload.name, **values, "batch": 1 if isinstance(plan, str) else plan[0]})
    if plan == "auto":
        return spec, plan, False
    sizes = batchsize.sweep_sizes(limit) if plan == "sweep" else plan
    specs = [spec if size in (None, spec.batch) else dataclasses.replace(spec, batch=size) for size in sizes]
    return spec, specs, plan == "sweep"


def check_store_apart(spec: BenchmarkSpec, db: str | None) -> None:
    """An output the run removes and makes again (`--overwrite`) never holds the result store."""
    output, overwrite = getattr(spec.opts, "output", None), getattr(spec.opts, "overwrite", False)
    if not output or not overwrite:
        return
    from dlbench.data.prediction_store import PredictionStore
    from dlbench.paths import overlap
    from dlbench.results.store import default_path

    store, folder = Path(db) if db else default_path(), PredictionStore(output).path
    if overlap(store, folder) in ("same", "inside"):
        raise UserError(f"--output {output}: --overwrite would remove {folder}, which holds the result store "
                        f"{store}; give another output path or --db")


def preflight(spec: BenchmarkSpec, view: Terminal, batches: Sequence[int] | None = None) -> None:
    """Devices, the input shape, files and data checked, warnings shown, before anything runs.
    `batches`: the batches that will run (default: the spec's); none for a sweep or a search, where a
    batch of one that cannot train fails alone and larger ones go on. A workload that trains is
    checked in training mode at its smallest batch: sizes do not depend on the batch, and only a
    batch of one can leave BatchNorm a single value per channel."""
    from dlbench.launch import placement
    from dlbench.models import registry
    from dlbench.workloads import optimize
    from dlbench.workloads.runtime import resolve_device

    placement.of(spec).check()
    optimize.check_level(spec.optimize, resolve_device(spec.device))  # before its estimate is said
    workload = spec.declared
    if "input_shape" in workload.general:
        training = workload.trains and batches != ()
        registry.check_fits(spec.model, spec.input_shape, min(batches or [spec.batch]), training=training)
    for warning in workload.preflight(spec):
        view.warning(warning)


def _run(spec: BenchmarkSpec, store: Store, extras: RunExtras, view: Terminal, extra: Run | None = None,
         ranks: Any = None, expected: float | None = None) -> Result:
    """`ranks`: the ranks started for `spec` already (`_head_start`); `expected`: its estimate in seconds,
    which the progress counts down against."""
    from dlbench.launch.inprocess import run_specs

    result = run_specs([spec], store, tag=extras.tag, console=view.err, extra_metrics=extra, retune=extras.retune,
                       ranks=ranks, expected=[expected])[0]
    view.result(result, stdout=True)
    return result


def _least_runs(repeat: str | None) -> int:
    """The runs --repeat makes at least ('auto': its fewest)."""
    from dlbench.results.spread import AUTO_MIN_RUNS

    asked = repeats.parse(repeat) if repeat is not None else 1
    return AUTO_MIN_RUNS if asked == repeats.AUTO else int(asked)


def run_estimates(specs: Sequence[BenchmarkSpec], store: Store,
                  search_s: float | None = None) -> tuple[list[RunEstimate], str]:
    """How long each run of `specs` will take (suites/estimate.py `estimate_run`: stored runs here, else
    FLOPs over the measured ceiling, else rough), and the device kind they run on."""
    import socket

    from dlbench.launch.flopcount import forward_flops
    from dlbench.suites.estimate import estimate_run, known
    from dlbench.workloads.runtime import resolve_device

    kind = "cuda" if resolve_device(specs[0].device).type == "cuda" else "cpu"
    gpu = None
    if kind == "cuda":
        from dlbench.system.info import gpu_names

        gpu = next(iter(gpu_names()), None)
    facts = known(store.results(), socket.gethostname(), gpu, store.flop_counts())
    return [estimate_run(spec, facts, kind, forward=forward_flops, search_s=search_s) for spec in specs], kind


def announce_estimate(specs: Sequence[BenchmarkSpec], store: Store, view: Terminal, runs: int = 1,
                      search_s: float | None = None) -> list[float]:
    """Says before anything runs how long it will take, prominently where that is over a minute on a
    CPU; each run's estimate in seconds, for its progress to count down against."""
    found, kind = run_estimates(specs, store, search_s)
    total = sum(e.seconds for e in found) * runs
    if len(found) == 1 and runs == 1:
        line = f"{specs[0].label()}: {found[0].text()}"
    else:
        each = ", ".join(f"batch {s.batch} {e.text()}" for s, e in zip(specs, found))
        times = f", {runs} runs each" if runs > 1 else ""
        line = f"{len(specs) * runs} runs: about {format_seconds(total)} in all ({each}{times})"
    view.done_waiting()
    view.message(line + _spent())
    warning = over_a_minute(total, kind)
    if warning:
        view.warning(warning)
    return [e.seconds for e in found]


def _spent() -> str:
    """What the command took before its estimate (loading torch, the checks: seconds, more on a busy
    machine), said beside it: the estimate is of what is left, and the wait from Enter is both."""
    import time

    import dlbench

    if dlbench.command_started is None:
        return ""
    spent = time.monotonic() - dlbench.command_started
    return f", after {format_seconds(spent)} of start-up" if spent >= 1.0 else ""


def _search(spec: BenchmarkSpec, store: Store, extras: RunExtras, view: Terminal) -> Result:
    """The largest batch that fits, by short unstored probes, then the stored run at that batch; the
    batch an earlier search found for the same work on this machine, unless --retune."""
    from dlbench.launch.inprocess import store_interrupted
    from dlbench.launch.tuning import Tuning, batch_check, batch_key
    from dlbench.system.info import launcher_fingerprint

    from dlbench.workloads.runtime import resolve_device

    tag, limit = extras.tag, extras.max_batch
    tuning = Tuning(store, batch_key(spec, launcher_fingerprint(), limit), extras.retune, batch_check(limit))
    view.done_waiting()
    tuned = tuning.lookup(view.message)
    if tuned is not None:
        view.message(f"batch {tuned.choice['batch']} {tuned.said('searches again')}")
        remembered = dataclasses.replace(spec, batch=tuned.choice["batch"])
        [expected] = announce_estimate([remembered], store, view)
        return _run(remembered, store, extras, view, Run(tuned_from=tuned.source()), expected=expected)

    budget = batchsize.CPU_BUDGET_S if resolve_device(spec.device).type == "cpu" else None
    bound = f"; on a CPU no probe starts that would end after {format_seconds(budget)}" if budget else ""
    view.message(f"searching the largest batch for {spec.label()} (up to {limit}{bound})")
    if budget:  # the search's bound, and a run at its first batch; the run at the batch found is told once found
        announce_estimate([spec], store, view, search_s=budget)
    stop = partial(store_interrupted, store.path, spec, launcher_fingerprint(), None, tag)
    heartbeat = Heartbeat(view.err, always=True)  # one probe can take minutes and says nothing

    def told(batch: int, guess: float | None) -> None:
        about = f", about {format_seconds(guess)}" if guess is not None else ""
        line = f"batch search: probing batch {batch}{about}"
        view.message(line)
        heartbeat.said(line)

    with interrupts.pending(stop), heartbeat:  # the probes are part of the benchmark: a stop stores it as interrupted
        found = batchsize.search(batchsize.probe_with(_unstored, spec), limit=limit, budget_s=budget, told=told)
    timed_out = f"; stopped at the CPU's bound of {format_seconds(budget)}" if found.stopped else ""
    view.message(f"batch search: largest {found.largest}, best throughput at {found.best_throughput_batch} "
                 f"({len(found.tried)} probes{timed_out})")
    final = spec if found.largest is None else dataclasses.replace(spec, batch=found.largest)
    [expected] = announce_estimate([final], store, view)
    result = _run(final, store, extras, view, Run(batch_search=found.stored()), expected=expected)
    if found.largest is not None and not found.stopped:  # a search cut short found no largest batch
        note = tuning.keep(result, {"batch": found.largest})
        if note:
            view.message(note)
    return result


def _unstored(spec: BenchmarkSpec) -> Result:
    """Runs a spec without storing it (the probes of a batch search)."""
    from dlbench.launch import placement, torchrun
    from dlbench.launch.execute import execute

    place = placement.of(spec)
    return (torchrun.run if place.ranks else execute)(spec, place.fingerprint())
