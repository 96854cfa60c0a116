"""What a CPU user waits for beyond the measurement: `dlbench suite smoke --list`, and the smoke suite's
wall time against the sum of its measured windows (warm-up and measured steps), each in fresh
processes, on a fresh store (first run: ceilings measured, FLOPs counted) and on the same store
again (second run: both remembered), and what a benchmark's process loads before it measures (its
imports and the model's parameter count, in a fresh interpreter). Prints one row per run and the
spread (min / median / max), and the load average before and after.

    python benchmarks/startup_costs.py [--runs 3] [--work /tmp/dlbench-startup]
    python benchmarks/startup_costs.py --imports-before OLD/src --runs 5
    python benchmarks/startup_costs.py --forkserver-ab --runs 4 [--again]

`--forkserver-ab`: the plain `dlbench` as a new user types it (a fresh HOME, so a fresh store),
its benchmarks forked from one preloaded process (launch/forkserver.py) or each a fresh
interpreter (DLBENCH_FORKSERVER=0), alternating, first the fresh interpreters each time.

Where the rest of a run's start-up goes (imports, fingerprint, model build), per process and
stage: benchmarks/fixed_costs.sh with benchmarks/startup/ (summary.py --timeline).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dlbench", *args], check=True, capture_output=True)
    return time.perf_counter() - start


# What a smoke benchmark's worker loads before its first step (launch/worker.py, launch/execute.py).
WORKER_IMPORTS = ("from dlbench.launch.execute import parameter_count; import dlbench.launch.worker, "
                  "dlbench.workloads.fwdbwd, dlbench.workloads.train, dlbench.workloads.infer; "
                  "parameter_count('resnet18')")


def imports(src: str | None = None) -> float:
    """`WORKER_IMPORTS` in a fresh interpreter; with `src`, from that source tree (PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": src} if src else None
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", WORKER_IMPORTS], check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def imports_against(before: str, runs: int) -> None:
    """A worker's imports from another source tree (e.g. a copy of an older one) and from this one,
    alternating, `runs` fresh interpreters each."""
    rows: dict[str, list[float]] = {"before": [], "after": []}
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for _ in range(runs):
        rows["before"].append(imports(before))
        rows["after"].append(imports())
    print(f"load average at end: {os.getloadavg()}")
    for name, values in rows.items():
        print(f"| a worker's imports and parameter count, {name} | {spread(values)} |")


def windows(db: Path, run_after: str, suite: str | None = "smoke") -> float:
    """Warm-up and measured window of the results of `suite` (None: any) stored after `run_after` (ISO time)."""
    from dlbench.results.store import Store
    from dlbench.suites.estimate import _timed_seconds

    with Store(db, read_only=True) as store:
        found = [_timed_seconds(r) for r in store.results(suite=suite) if r.suite and r.started >= run_after]
    return sum(s for s in found if s is not None)


def plain_run(forkserver: bool, home: Path) -> tuple[float, float, str]:
    """The plain `dlbench` in `home`: its wall time, its windows from the store it made, and its estimate."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "DLBENCH_FORKSERVER": "1" if forkserver else "0"}
    env.pop("XDG_DATA_HOME", None)
    env.pop("DLBENCH_DB", None)
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dlbench"], check=True, capture_output=True, text=True, env=env,
                          cwd=home)
    wall = time.perf_counter() - start
    said = re.search(r"to run, (about [^\n]*)", done.stderr)
    return wall, windows(home / ".local" / "share" / "dlbench" / "dlbench.db", started, None), said[1] if said else "-"


def forkserver_ab(runs: int, work: Path, again: bool) -> None:
    shutil.rmtree(work, ignore_errors=True)
    rows: dict[str, list[float]] = {}
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for i in range(runs):
        for forked in (False, True):
            name = "forked from a preloaded process" if forked else "fresh interpreters"
            home = work / f"home-{i}-{int(forked)}"
            for which in ("first", "again") if again else ("first",):
                wall, timed_s, said = plain_run(forked, home)
                rows.setdefault(f"{name}, {which}: wall s", []).append(wall)
                rows.setdefault(f"{name}, {which}: windows s", []).append(timed_s)
                rows.setdefault(f"{name}, {which}: wall / windows", []).append(wall / timed_s)
                print(f"pair {i + 1}, {name}, {which}: wall {wall:.1f} s, windows {timed_s:.1f} s, "
                      f"ratio {wall / timed_s:.2f}, estimate {said}, load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    print("\n| what | min / median / max |\n|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {spread(values)} |")


def spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default="/tmp/dlbench-startup")
    parser.add_argument("--imports-before", metavar="SRC", help="only time a worker's imports, from the source "
                                                                 "tree SRC and from this one, alternating")
    parser.add_argument("--forkserver-ab", action="store_true", help="only the plain `dlbench` in fresh homes, "
                                                                      "forked workers against fresh interpreters")
    parser.add_argument("--again", action="store_true", help="with --forkserver-ab: each home's command twice")
    args = parser.parse_args()
    if args.forkserver_ab:
        forkserver_ab(args.runs, Path(args.work), args.again)
        return
    if args.imports_before:
        imports_against(args.imports_before, args.runs)
        return
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows: dict[str, list[float]] = {}
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for i in range(args.runs):
        rows.setdefault("a worker's imports and parameter count", []).append(imports())
        db = work / f"s{i}.db"
        rows.setdefault("suite smoke --list, no store", []).append(timed(["suite", "smoke", "--list", "--db", str(db)]))
        for which in ("first", "second"):
            started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            wall = timed(["suite", "smoke", "--db", str(db)])
            timed_s = windows(db, started)
            rows.setdefault(f"smoke {which} run: wall s", []).append(wall)
            rows.setdefault(f"smoke {which} run: windows s", []).append(timed_s)
            rows.setdefault(f"smoke {which} run: wall / windows", []).append(wall / timed_s if timed_s else float("nan"))
        rows.setdefault("suite smoke --list, stored runs", []).append(timed(["suite", "smoke", "--list", "--db", str(db)]))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rows.items()), flush=True)
    print(f"load average at end: {os.getloadavg()}")
    print("\n| what | min / median / max |\n|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {spread(values)} |")


if __name__ == "__main__":
    main()
