"""The same `dlbench run ... --optimize max` twice, each in a new process: how long the first
(cold) and the second (warm cache) compile take, where the compiler's output went, and whether
any of it reached the terminal.

Both runs share one dlbench cache folder (--cache; by default a new one, so the first run is
cold), which holds Inductor's cache, the mega-cache files and the compile logs. Output is piped,
as in a log or a batch job: dlbench's progress lines name the compile phase with its elapsed time.

  python benchmarks/compile_cache.py [--cache DIR] [--timeout 420] [-- train --model resnet50 --optimize max]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from dlbench.results.store import Store  # noqa: E402

DEFAULT = ["train", "--model", "resnet50", "--optimize", "max"]  # issue 27's command
# What the compiler says when it talks: Inductor, Dynamo and Triton logging, autotuning reports.
STORED: list[str] = []  # ids of the results already shown
COMPILER = re.compile(r"triton|inductor|dynamo|autotun|out of resource|^[WEI]\d{4} |torch/", re.IGNORECASE)


def run_once(args: list[str], cache: Path, db: Path, timeout: float) -> dict:
    env = {**os.environ, "DLBENCH_CACHE": str(cache), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # dlbench's own cache folder, in `cache`
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "dlbench", "run", *args, "--db", str(db)], capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"the run took more than {timeout:.0f} s (--timeout); compile logs are in {cache / 'compile-logs'}")
    wall = time.perf_counter() - start
    lines = (proc.stdout + proc.stderr).splitlines()
    with Store(db) as store:
        stored = store.results()
    if len(stored) <= len(STORED):
        sys.exit(f"no result stored (exit {proc.returncode}): {proc.stderr.strip()[-1000:]}")
    result = max(stored, key=lambda r: r.started)
    STORED.append(result.id)
    return {"wall": wall, "rc": proc.returncode, "result": result, "lines": lines,
            # dlbench's own lines name the phase ("max-autotune") and the log: not the compiler's
            "compiler_lines": [line for line in lines if COMPILER.search(line) and ": compile (" not in line
                               and not line.startswith(("ok ", "error ", "oom "))],
            "phase_lines": [line for line in lines if ": compile (" in line]}


def show(name: str, run: dict) -> None:
    r = run["result"]
    m = r.metrics
    cache = m.get("compile_cache") or {}
    log = Path(m["compile_log"]) if m.get("compile_log") else None
    print(f"{name}: status {r.status}, exit {run['rc']}, process {run['wall']:.0f} s, compile_s "
          f"{m.get('compile_s', float('nan')):.1f} s, throughput {m.get('throughput', float('nan')):.1f}")
    print(f"  cache: warm {cache.get('warm')}, FX graph hits {cache.get('fx_graph_hit')} misses "
          f"{cache.get('fx_graph_miss')}, AOTAutograd hits {cache.get('autograd_hit')} misses "
          f"{cache.get('autograd_miss')}, mega-cache artefacts loaded {cache.get('artifacts_loaded')}, dir {cache.get('dir')}")
    if log:
        size = log.stat().st_size if log.exists() else 0
        print(f"  compiler log: {log} ({size:,} bytes)")
    print(f"  terminal: {len(run['lines'])} lines, {len(run['phase_lines'])} progress lines of the compile phase "
          f"(last: {run['phase_lines'][-1].strip() if run['phase_lines'] else '-'}), "
          f"{len(run['compiler_lines'])} compiler lines")
    for line in run["compiler_lines"][:5]:
        print(f"    {line[:200]}")
    if r.status != "ok":
        print(f"  error: {(r.error or '')[:500]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, help="dlbench cache folder both runs share (default: a new one)")
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds each run may take")
    parser.add_argument("args", nargs="*", help="`dlbench run` arguments (after --)")
    options = parser.parse_args()
    args = options.args or DEFAULT
    cache = options.cache or Path(tempfile.mkdtemp(prefix="compile-cache-bench-"))
    db = cache / "results.db"
    print(f"dlbench run {' '.join(args)}; cache {cache}", flush=True)
    runs = []
    for name in ("first (cold)" if options.cache is None else "first", "second"):
        runs.append(run_once(args, cache, db, options.timeout))
        show(name, runs[-1])
    first, second = (run["result"].metrics.get("compile_s") for run in runs)
    if first and second:
        print(f"compile: first {first:.1f} s, second {second:.1f} s ({first / second:.1f}x faster)")


if __name__ == "__main__":
    main()
