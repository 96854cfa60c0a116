"""`dlbench suite`: a suite planned, listed, run here (launch/suiterun.py, every spec in its
own process) or submitted to SLURM (launch/slurm.py); then its report and a count by status.

Every spec is checked as `dlbench run` checks it before the first one runs, and the store is
checked writable, so a mistake anywhere in the suite stops it before anything runs.
"""

from __future__ import annotations

import contextlib
import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from dlbench import scratch
from dlbench.errors import UserError
from dlbench.launch.interrupts import kept as interrupts_kept
from dlbench.launch.interrupts import pending
from dlbench.launch.suiterun import Plan, make_plan, new_run_id, run_suite
from dlbench.launch.view import Terminal
from dlbench.options import MAX_TIMEOUT_S, Options, option, shown
from dlbench.paths import check_new_folder
from dlbench.results.record import FAILED, RUN_ID, Result
from dlbench.results.store import DB_HELP, TAG_HELP, Store, check_writable, default_path, one_store
from dlbench.spec import BenchmarkSpec, check_device
from dlbench.suites import Suite, spec_key
from dlbench.suites.estimate import format_seconds


def announce(plan: Plan) -> str:
    """The suite's first line: what runs, and how long it takes where something says so."""
    skipped = f", {len(plan.done)} already done" if plan.resumed else ""
    head = f"suite {plan.suite.name}, run {plan.run}: {len(plan.todo)} to run{skipped}"
    total = format_seconds(sum(e.seconds or 0.0 for e in plan.estimates))
    rough = sum(1 for e in plan.estimates if e.rough)
    if not rough:
        return f"{head}, about {total}"
    which = "all of them" if rough == len(plan.estimates) else f"{rough} of them"
    return f"{head}, about {total} (rough for {which}: never run here, no FLOP count and ceiling known)"



def checking(count: int) -> str:
    """What a suite says before torch loads (seconds, more on a busy machine)."""
    return (f"loading torch and checking {count} benchmark{'s' if count != 1 else ''} before the first runs, then "
            "how long it will take")


DEFAULT_TIMEOUT_S = 3600.0  # per benchmark, when neither the spec nor its suite sets one


def check_run_id(text: str) -> None:
    # A run id names a folder under --slurm-dir: letters, digits, '.', '_' and '-' only, so it
    # can never reach outside it.
    if not RUN_ID.fullmatch(text):
        raise UserError(f"bad --run {shown(text)}: a run id has letters, digits, '.', '_' and '-' "
                        f"(e.g. {new_run_id()})")


@dataclass(frozen=True, kw_only=True)
class SuiteRequest(Options):
    """Run a suite of benchmarks, each in its own process; store every result and print the report.

    A crash, out-of-memory error or hang of one benchmark is stored (error, oom, timeout) and the suite goes on. Ctrl-C stores the running benchmark as interrupted and stops (press it again to stop at once); `--resume` then runs only what is missing.
    """  # noqa: E501 - one paragraph, or --help breaks it where the source does
    name: str | None = option(None, "Built-in suite name (quick, cnn-benchmarks, ...) or a suite YAML file. Default: "
                                    "quick on a GPU machine, smoke (a short CPU check) without one; with --list and "
                                    "no name: the built-in suites.", argument=True)
    device: str = option("auto", "Run every spec on this device: auto, cpu, cuda or cuda:N.", parse=check_device)
    db: str | None = option(None, DB_HELP, parse=one_store)
    tag: str | None = option(None, TAG_HELP)
    list_only: bool = option(False, "Show the expanded specs with an estimate of the time, and exit.", flag="--list")
    resume: bool = option(False, "Continue the newest run of this suite on this machine (or --run ID): skip specs "
                                 "that already have an ok result in it.")
    run_id: str | None = option(None, "Suite-run id (default: a new one; with --resume: the newest).", flag="--run",
                                parse=check_run_id)
    timeout: float | None = option(None, "Seconds before a benchmark is stopped and stored as timeout, when neither "
                                         "it nor its suite sets one (default 3600).", unit="s", low=0, low_open=True,
                                   high=MAX_TIMEOUT_S)
    slurm: str | None = option(None, "Submit one SLURM job per spec with submitit: partition=P,gpus=N,time=MIN"
                                     "[,cpus=N,mem=64G,account=A,qos=Q,constraint=C]; cluster=local runs the jobs "
                                     "on this machine.")
    slurm_dir: str = option("dlbench-slurm", "Folder on the shared file system for job logs and record files (one "
                                             "subfolder per suite run).")
    wait: bool = option(True, "With --slurm: wait for the jobs and merge their records into the store (else merge "
                              "later with `dlbench import DIR`).")


def suite_command(request: SuiteRequest, view: Terminal) -> int:
    """Plan, then list, run here or submit to SLURM; the exit status (1: a benchmark failed, 130: stopped)."""
    from dlbench import suites

    if request.name is None and request.list_only:
        view.suites([(name, suites.load(name).description) for name in suites.builtin_names()])
        return 0
    loaded, options = _load(request, view)
    host = socket.gethostname()  # the fingerprint's host, without the fingerprint's imports
    default_timeout = request.timeout or DEFAULT_TIMEOUT_S
    if request.list_only:
        view.plan(_plan_without_writing(loaded, request, host), default_timeout)
        return 0
    check_writable(request.db)
    with _head_start(loaded, request, options) as ahead:
        if options is None:
            # PyTorch loads and every spec is checked first: on two busy cores that can take a minute, so
            # the line is said before torch loads and repeated every 5 s until the suite's estimate.
            with view.waiting(f"suite {loaded.name}: {checking(len(loaded.specs))}"):
                from dlbench import vision  # noqa: F401 - a torchvision made for another torch: one line, not one a spec

                # compute nodes, not this machine, decide under --slurm
                loaded.specs = _runnable(loaded.specs, view, _proven(request.db, host))
            scratch.clean_stale()  # what killed runs left behind
        with Store(request.db) as store:
            plan = make_plan(loaded, store, host, resume=request.resume, run=request.run_id)
            view.message(announce(plan))
            if options is not None:
                return _submit(plan, store, options, request, default_timeout, view)
            return _run_here(plan, store, request, default_timeout, view, ahead)


@contextlib.contextmanager
def _head_start(loaded: Suite, request: SuiteRequest, options: dict | None) -> Iterator[Any]:
    """The first benchmark's worker, started before the checks and the plan (launch/isolated.py
    `started`): its imports of torch and the workload (seconds) overlap this process's, where a
    second core is idle; so do those of the process that the later workers are forked from
    (`preloaded`). Isolation holds: it runs nothing until it is let go, in its own process. A
    check that fails stops it, and nothing ran or was stored. None where the first run is not known
    yet (--resume) or does not run here in one process (--slurm, several GPUs)."""
    first = loaded.specs[0] if loaded.specs else None
    if options is not None or request.resume or first is None or first.gpus != 1:
        yield None
        return
    from dlbench.launch import isolated

    with isolated.preloaded(), isolated.started(first) as worker:
        yield worker


def _load(request: SuiteRequest, view: Terminal) -> tuple[Suite, dict | None]:
    """The suite and the SLURM options (None: run here), checked before anything slow or written."""
    from dlbench import suites
    from dlbench.launch import slurm

    options = slurm.parse_options(request.slurm) if request.slurm is not None else None
    if options is not None:
        slurm.check(options)
        check_new_folder(request.slurm_dir, "job files to")
    name = request.name or default_suite(view)
    return suites.load(name, {"device": request.device} if request.device != "auto" else None), options


LOOKING = "looking for a CUDA GPU (loading torch): the `quick` suite on a GPU, the short CPU check `smoke` without one"
NO_GPU = ("no CUDA GPU found: running the `smoke` suite, a short CPU check that dlbench works here (its figures are "
          "CPU figures, not GPU ones; `dlbench suite quick --device cpu` runs the full quick suite on the CPU)")


def default_suite(view: Terminal) -> str:
    """`quick` on a GPU machine; without a GPU the short `smoke` check, said as such. NVML or the
    absence of a GPU driver tells in milliseconds where there is none (system/info.py `gpus_seen`);
    where it sees a GPU, or cannot tell, only torch can say whether CUDA works (a CPU build of torch
    on a GPU machine), and it loads in seconds (more on a busy machine): the plain `dlbench` says what
    it waits for before, and every 5 s until it knows."""
    from dlbench.system.info import gpus_seen

    found = gpus_seen() != 0
    if found:
        with view.waiting(LOOKING):
            import torch

            from dlbench import vision  # noqa: F401 - a torchvision made for another torch fails here, in one line

            found = torch.cuda.is_available()
    if found:
        return "quick"
    view.message(NO_GPU)
    return "smoke"


def _plan_without_writing(loaded: Suite, request: SuiteRequest, host: str) -> Plan:
    path = Path(request.db) if request.db else default_path()
    store = Store(path, read_only=True) if path.exists() else None  # listing never creates or changes a store
    try:
        return make_plan(loaded, store, host, resume=request.resume, run=request.run_id)
    finally:
        if store is not None:
            store.close()


def _proven(db: str | None, host: str) -> set[str]:
    """The CPU specs (by spec_key) with an ok result on this host: they passed these checks before,
    and checking them again loads PyTorch and the models in this process (seconds on two busy cores)
    for benchmarks that each load them again in their own. A spec on a GPU is checked every time:
    the GPUs a process may use change with CUDA_VISIBLE_DEVICES. Read only: a suite refused by its
    checks leaves no store behind."""
    path = Path(db) if db else default_path()
    if not path.exists():
        return set()
    with Store(path, read_only=True) as store:
        return {spec_key(r.spec) for r in store.results(status="ok", lean=True) if r.machine.host == host
                and r.spec.get("device") == "cpu"}


def _runnable(specs: list[BenchmarkSpec], view: Terminal,
              proven: set[str] | frozenset[str] = frozenset()) -> list[BenchmarkSpec]:
    """Specs this machine can run; a device it lacks is a user error, too few GPUs skips the spec.
    Each kept spec passes the checks of `dlbench run` (input shape, files, data), so a
    mistake anywhere in the suite stops it before its first benchmark; a spec in `proven`
    (`_proven`) is kept unchecked."""
    if all(spec_key(spec) in proven for spec in specs):
        return list(specs)  # nothing to check: PyTorch stays unloaded here
    import torch

    from dlbench.commands.run import preflight
    from dlbench.suites import title
    from dlbench.workloads.runtime import resolve_device

    kept = []
    for spec in specs:
        if spec_key(spec) in proven:
            kept.append(spec)
            continue
        device = resolve_device(spec.device)
        visible = torch.cuda.device_count() if device.type == "cuda" else None
        if visible is not None and spec.gpus > visible:
            view.message(f"skipped {title(spec)}: needs {spec.gpus} GPUs, {visible} visible")
            continue
        try:
            preflight(spec, view)
        except UserError as error:
            raise UserError(f"{title(spec)}: {error}") from None
        kept.append(spec)
    return kept


def _run_here(plan: Plan, store: Store, request: SuiteRequest, default_timeout: float, view: Terminal,
              ahead: Any = None) -> int:
    """Run the plan; a signal ends in launch/interrupts.py's one line (what was kept) and status 130.
    `ahead`: the first benchmark's worker, started already (`_head_start`)."""
    from dlbench.system.info import launcher_fingerprint

    again = f"dlbench suite {request.name or plan.suite.name}"
    outcome = run_suite(plan, store, launcher_fingerprint(), tag=request.tag, default_timeout=default_timeout,
                        console=view.err, describe=_describer(plan), again=again, ahead=ahead)
    if outcome.interrupted:
        return 130  # the line that says what was kept comes from interrupts.answered
    with interrupts_kept(lambda: f"all {len(outcome.results)} results of run {plan.run} kept in {store.path}"):
        return _finish(store, plan, view, outcome.results)


def _describer(plan: Plan) -> Callable[[Result], str]:
    """launch/execute.py's `describe`, whose imports (torch and the workloads' modules: seconds on two
    busy cores) run in a thread beside the first benchmark, not before it: this process needs them
    only once a benchmark has ended, and where every spec's checks were remembered it had none yet."""
    import importlib
    import threading

    from dlbench import workloads

    modules = (getattr(workloads.get(w).describe, "module", None) for w in dict.fromkeys(s.workload for s in plan.todo))
    names = ["dlbench.launch.execute", *(m for m in modules if m)]

    def load() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - describing a result imports it again, and says what is wrong
                return

    loading = threading.Thread(target=load, name="dlbench-describe-imports", daemon=True)
    loading.start()

    def describe(result: Result) -> str:
        loading.join()  # one importer at a time
        from dlbench.launch.execute import describe as line

        return line(result)

    return describe


def _finish(store: Store, plan: Plan, view: Terminal, ran: Sequence[Result] = ()) -> int:
    """The report of this suite run and a count by status; 1 when something failed. `ran`: this
    command's results, some perhaps kept outside a store that could not take them."""
    from dlbench.report import render_markdown

    mine = [r for r in store.results(suite=plan.suite.name) if r.run == plan.run]
    stored = {r.id for r in mine}
    mine += [r for r in ran if r.id not in stored]
    view.text(render_markdown([r for r in mine if r.status == "ok"]))
    latest = {spec_key(r.spec): r.status for r in mine}  # oldest first: the newest result of each spec wins
    counts = Counter(latest.values())
    view.message("results of run " + plan.run + ": " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if plan.suite.name == "smoke":
        view.message("these are CPU figures from a short check, not what a GPU would do")
    return 1 if any(counts.get(status) for status in FAILED) else 0


def _submit(plan: Plan, store: Store, options: dict, request: SuiteRequest, default_timeout: float,
            view: Terminal) -> int:
    from dlbench.launch import slurm

    folder = Path(request.slurm_dir) / plan.run
    submitted = slurm.submit(plan.todo, options, folder, suite=plan.suite.name, run=plan.run, tag=request.tag,
                             timeout=lambda spec: spec.timeout or default_timeout)
    view.message(f"submitted {len(submitted)} jobs; records go to {slurm.records_dir(folder)}")
    if not request.wait:
        view.message(f"merge them later with: dlbench import {folder}")
        return 0
    poll = 1.0 if options.get("cluster") == "local" else 10.0
    merged: list[int] = []

    def merge() -> None:  # on a stop, from whichever thread stops: a connection of its own
        with Store(store.path) as own:
            merged.append(slurm.merge(folder, own))

    said = (lambda: f"stopped waiting ({sum(merged)} records merged); the jobs keep running. "
                    f"Merge the rest with: dlbench import {folder}")
    with pending(merge), interrupts_kept(said):
        slurm.wait(submitted, folder, store, suite=plan.suite.name, run=plan.run, tag=request.tag, poll_s=poll,
                   on_result=view.result)
    return _finish(store, plan, view)
