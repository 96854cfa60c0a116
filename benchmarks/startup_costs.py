"""What a CPU user waits for beyond the measurement: `dlbench suite smoke --list`, and the smoke suite's
wall time against the sum of its measured windows (warm-up and measured steps), each in fresh
processes, on a fresh store (first run: ceilings measured, FLOPs counted) and on the same store
again (second run: both remembered), and what a benchmark's process loads before it measures (its
imports and the model's parameter count, in a fresh interpreter). Prints one row per run and the
spread (min / median / max), and the load average before and after.

    python benchmarks/startup_costs.py [--runs 3] [--work /tmp/dlbench-startup]
    python benchmarks/startup_costs.py --imports-before OLD/src --runs 5

Where the rest of a run's start-up goes (imports, fingerprint, model build), per process and
stage: benchmarks/fixed_costs.sh with benchmarks/startup/ (summary.py --timeline).
"""
import argparse
import os
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


def windows(db: Path, run_after: str) -> float:
    """Warm-up and measured window of the smoke results stored after `run_after` (ISO time)."""
    from dlbench.results.store import Store
    from dlbench.suites.estimate import _timed_seconds

    with Store(db, read_only=True) as store:
        found = [_timed_seconds(r) for r in store.results(suite="smoke") if r.started >= run_after]
    return sum(s for s in found if s is not None)


def spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default="/tmp/dlbench-startup")
    parser.add_argument("--imports-before", metavar="SRC", help="only time a worker's imports, from the source "
                                                                 "tree SRC and from this one, alternating")
    args = parser.parse_args()
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
