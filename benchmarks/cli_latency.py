"""How long the command line takes to answer when nothing is run: help, the version, usage errors,
suite listing and the commands that read the store, each in a fresh process, as a user waits for
it (from start to exit). None should import torch (tests/test_cli_imports.py checks that); this
times them against the 1.5 s a user should wait at most, on the machine at hand.

Prints a table of the median wall time of N runs of each command, PASS/FAIL against the limit,
and exits 1 when one fails.

    PYTHONPATH=$PWD/src python benchmarks/cli_latency.py [--runs 5] [--limit 1.5]   # from the repository root
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = [
    ["--help"],
    ["--version"],
    ["run", "fwdbwd", "--help"],
    ["run", "volume", "--help"],
    ["suite", "--list"],
    ["results"],
    ["export"],
    ["compare", "--help"],
    ["compare", "node1", "node2"],
    ["report"],
    ["report", "@empty"],
    ["run", "fwdbwd", "--model", "nosuchmodel"],
    ["run", "fwdbwd", "--nosuch"],
    ["run", "fwdbwd", "--batch", "0"],
]


def fill_store(path: Path) -> None:
    """Two results from two machines, written through the store's own API."""
    from dlbench.results.record import Result
    from dlbench.results.store import Store

    for host, gpu, forward in (("node1", "NVIDIA H200", 5.0), ("node2", "NVIDIA H100", 7.0)):
        spec = {"workload": "fwdbwd", "model": "resnet50", "batch": 16, "input_shape": [3, 224, 224],
                "precision": "fp32", "device": "cuda"}
        metrics = {"device": "cuda", "forward_ms": forward, "backward_ms": 2 * forward, "total_ms": 3 * forward,
                   "input_shape": [16, 3, 224, 224], "images_per_s": 16e3 / (3 * forward)}
        Store(path).add(Result(spec=spec, system={"host": host, "gpus": [{"name": gpu}]}, metrics=metrics,
                               title="ResNet-50"))


def timed(args: list[str], db: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status): the CPU time is what the command itself costs,
    the wall time also what other work on a busy machine takes from it."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dlbench", "--db", str(db), *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per command")
    parser.add_argument("--limit", type=float, default=1.5, help="seconds a command may take (median)")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cli-latency-"))
    full, empty = folder / "results.db", folder / "empty.db"
    fill_store(full)
    from dlbench.results.store import Store

    Store(empty)
    print(f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; load average {os.getloadavg()[0]:.1f}; median of {options.runs} "
          "fresh processes\n")
    print(f"| command | exit | Enter to prompt, median [s] | max [s] | CPU, median [s] | {options.limit:g} s |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    failed = 0
    for command in COMMANDS:
        db, args = (empty, command[:-1]) if command[-1] == "@empty" else (full, command)
        runs = [timed(args, db) for _ in range(options.runs)]
        median = statistics.median(wall for wall, _, _ in runs)
        cpu = statistics.median(used for _, used, _ in runs)
        verdict = "PASS" if median <= options.limit else "FAIL"
        failed += verdict == "FAIL"
        shown = " ".join(args) + (" (empty store)" if db == empty else "")
        print(f"| `dlbench {shown}` | {runs[-1][2]} | {median:.2f} | {max(wall for wall, _, _ in runs):.2f} | "
              f"{cpu:.2f} | {verdict} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
