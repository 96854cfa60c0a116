"""Every command that reads the store, on a store of a cluster's year of results (100,000 by default),
timed as a user types it: each in a fresh process, wall time from start to exit and the process's
peak memory (its own ru_maxrss, from os.wait4), in every output format it offers; and `import` of a
large export file. Prints a Markdown table and exits 1 when a read command takes more than
--limit-s seconds or --limit-mb MB.

The store is made from real records: the reference runs dlbench ships (ResNets and U-Nets on GPU
machines, a system record) and, unless --no-cpu-run, one tiny fwdbwd and one train run made here
on the CPU. Each copy gets another id, date (spread over a year), host (with its GPU), suite, tag
and status (errors with tracebacks, out-of-memory, timeouts, interrupted runs), and its figures
scaled by a factor near 1; a few carry huge text (a 1 MB error message or tag).

    PYTHONPATH=$PWD/src python benchmarks/big_store.py [--results 100000] [--keep DIR]   # from the repository root
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "src" / "dlbench" / "system" / "reference_runs.jsonl"
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "NVIDIA L40S")
SUITES = (None, "quick", "cnn-benchmarks", "unet-medical", "jade")
STATUSES = ("ok",) * 90 + ("error",) * 5 + ("oom",) * 3 + ("timeout", "interrupted")
MAX_SAMPLES = 100  # per phase: the measured steps of a typical run
HUGE = 1_000_000  # characters of a huge error message or tag
HUGE_EVERY = 20_000  # one record in this many carries one


def cpu_records(folder: Path) -> list[dict]:
    """Two real runs on this machine's CPU, tiny: what `dlbench run` stores here."""
    db = folder / "cpu.db"
    common = ["--device", "cpu", "--batch", "2", "--warmup", "1", "--steps", "5", "--db", str(db)]
    for workload, extra in (("fwdbwd", ["--model", "resnet18", "--input-shape", "3x32x32"]),
                            ("train", ["--model", "resnet18", "--input-shape", "3x32x32"])):
        subprocess.run([sys.executable, "-m", "dlbench", "run", workload, *extra, *common], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = folder / "cpu.jsonl"
    subprocess.run([sys.executable, "-m", "dlbench", "export", "--db", str(db), "-o", str(out)], check=True,
                   stderr=subprocess.DEVNULL)
    return [json.loads(line) for line in out.read_text().splitlines()]


def templates(folder: Path, with_cpu: bool) -> list[dict]:
    found = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]
    if with_cpu:
        found += cpu_records(folder)
    for record in found:  # a typical run's length: the reference runs of the small models hold 600 steps
        record["samples"] = {k: v[:MAX_SAMPLES] for k, v in record["samples"].items()}
    return found


def _scaled(value: object, key: str, factor: float) -> object:
    """A figure of another run: times scaled by `factor`, rates by its inverse."""
    if isinstance(value, dict):
        return {k: _scaled(v, k if key != "stats" and not isinstance(v, dict) else key, factor)
                for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, float):
        return value
    if key.endswith(("_per_s", "_per_min", "throughput")):
        return value / factor
    if key.endswith(("_ms", "_s")) or key == "stats":
        return value * factor
    return value


def varied(template: dict, index: int, rng: random.Random, start: dt.datetime) -> dict:
    record = copy.copy(template)
    factor = rng.lognormvariate(0, 0.05)
    host = rng.randrange(40)
    gpu = GPUS[host % len(GPUS)]
    system = copy.deepcopy(template["system"])
    system["host"] = f"node{host:02d}"
    if system.get("gpus"):
        system["gpus"] = [{**g, "name": gpu} for g in system["gpus"]]
    record.update(
        id=uuid.UUID(int=rng.getrandbits(128)).hex, system=system,
        started=(start + dt.timedelta(seconds=index * 315)).isoformat(timespec="seconds"),
        suite=rng.choice(SUITES), tag=rng.choice((None, "nightly", "baseline", f"pr-{rng.randrange(500)}")),
        run=None, status=rng.choice(STATUSES),
        metrics={k: _scaled(v, k, factor) for k, v in template["metrics"].items()},
        samples={k: [s * factor for s in v] for k, v in template["samples"].items()},
    )
    if record["status"] == "error":
        record["error"] = "RuntimeError: CUDA error: an illegal memory access was encountered\n" + "".join(
            f'  File "/opt/dlbench/src/dlbench/workloads/train.py", line {n}, in step\n    loss.backward()\n'
            for n in range(60))
        record["metrics"], record["samples"] = {}, {}
    elif record["status"] != "ok":
        record["error"] = {"oom": "CUDA out of memory. Tried to allocate 2.00 GiB", "timeout": "timed out after 600 s",
                           "interrupted": "interrupted (SIGTERM)"}[record["status"]]
        record["metrics"], record["samples"] = {}, {}
    if index % HUGE_EVERY == HUGE_EVERY // 2:
        record["error"] = "Traceback (most recent call last):\n" + "x" * HUGE
    if index % HUGE_EVERY == HUGE_EVERY // 4:
        record["tag"] = "t" * HUGE
    return record


def make_store(db: Path, count: int, folder: Path, with_cpu: bool) -> None:
    """The store's own schema and row layout (results/store.py); each template is read as a Result once,
    and its copies are written as the store writes a Result's dict (checking 100,000 copies would take
    longer than the commands timed here)."""
    from dlbench.results.record import Result
    from dlbench.results.store import Store

    rng, base = random.Random(48), [Result.from_dict(t).to_dict() for t in templates(folder, with_cpu)]
    start = dt.datetime(2025, 11, 28, tzinfo=dt.timezone.utc)
    with Store(db) as store:
        store._db.execute("PRAGMA synchronous=OFF")
        for first in range(0, count, 5000):
            rows = []
            for i in range(first, min(count, first + 5000)):
                r = varied(rng.choice(base), i, rng, start)
                rows.append((r["id"], r["schema"], r["started"], r["status"], r["spec"].get("workload", ""),
                             r["spec"].get("model", ""), r["suite"], r["tag"], r["system"].get("host"),
                             json.dumps(r, allow_nan=True)))
            with store._db:
                store._db.execute("BEGIN")
                store._db.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            print(f"  stored {first + len(rows):,}/{count:,}", file=sys.stderr, flush=True)


def timed(args: list[str], db: Path, timeout: float) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in MB, exit status, last line of stderr) of one fresh process."""
    command = [sys.executable, "-m", "dlbench", *args, "--db", str(db)]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return wall, usage.ru_maxrss / 1024, proc.returncode, (lines[-1][:100] if lines else "")


def commands(folder: Path) -> list[list[str]]:
    out = str(folder / "out")
    return [
        ["results"], ["results", "--format", "json"], ["results", "--limit", "5"],
        ["report"], ["report", "--format", "csv"], ["report", "--format", "json"],
        ["report", "-o", f"{out}.html"], ["report", "--suite", "quick"],
        ["compare", "node01", "node02"], ["compare", "node01", "node02", "--format", "json"],
        ["compare", "baseline", "nightly"],
        ["doctor"], ["doctor", "--format", "json"], ["doctor", "--workload", "train"],
        ["export", "-o", f"{out}.jsonl"], ["export", "--format", "csv", "-o", f"{out}.csv"],
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=100_000, help="results in the generated store")
    parser.add_argument("--import-results", type=int, default=None,
                        help="records in the file `import` reads (default: the whole store's export)")
    parser.add_argument("--keep", type=Path, default=None, help="make (or reuse) the store in this folder")
    parser.add_argument("--no-cpu-run", action="store_true", help="only the shipped reference runs as templates")
    parser.add_argument("--limit-s", type=float, default=10.0)
    parser.add_argument("--limit-mb", type=float, default=1024.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a command is stopped")
    parser.add_argument("--only", default=None, help="only commands whose words contain this")
    options = parser.parse_args()
    folder = options.keep or Path(tempfile.mkdtemp(prefix="big-store-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / f"store-{options.results}.db"
    if not db.exists():
        began = time.perf_counter()
        make_store(db, options.results, folder, not options.no_cpu_run)
        print(f"made {db} ({db.stat().st_size / 2**20:,.0f} MB) in {time.perf_counter() - began:.0f} s",
              file=sys.stderr)
    fill_summaries(db)
    print(f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; {options.results:,} results, store "
          f"{db.stat().st_size / 2**20:,.0f} MB; load average {os.getloadavg()[0]:.1f}\n")
    print(f"| command | exit | wall [s] | peak RSS [MB] | within {options.limit_s:g} s, {options.limit_mb:g} MB "
          f"| last line on stderr |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    failed = 0
    for args in commands(folder):
        if options.only and options.only not in " ".join(args):
            continue
        wall, peak, code, last = timed(args, db, options.timeout)
        good = wall <= options.limit_s and peak <= options.limit_mb and code in (0, 1)
        failed += not good
        shown = " ".join(a if not a.startswith(str(folder)) else Path(a).name for a in args)
        print(f"| `dlbench {shown}` | {code} | {wall:.1f} | {peak:,.0f} | {'PASS' if good else 'FAIL'} | "
              f"{last.replace('|', '/')} |", flush=True)
    if not options.only or "import" in options.only:
        failed += import_row(folder, db, options)
    return 1 if failed else 0


def fill_summaries(db: Path) -> None:
    """The summaries a store made here (or by an older dlbench) lacks, written once as the first report or
    doctor on it would (results/summaries.py), timed apart from the commands: they read a store that has them."""
    try:
        from dlbench.results import summaries
    except ImportError:  # an older dlbench (the figures before the change) keeps none
        return
    from dlbench.results.store import Store

    with Store(db, read_only=True) as store:
        missing = summaries.missing(store._db)
        if missing:
            began = time.perf_counter()
            store.summaries()
            print(f"summarised {missing:,} results once in {time.perf_counter() - began:.0f} s", file=sys.stderr)


def import_row(folder: Path, db: Path, options: argparse.Namespace) -> int:
    """`dlbench import` of an export of the store (or its first --import-results lines) into a new store."""
    count = options.import_results or options.results
    source = folder / f"export-{count}.jsonl"
    if not source.exists():  # what an export writes of these records (their stored text), made once
        import sqlite3

        with sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True) as store, \
                open(f"{source}.partial", "w") as out:
            for (text,) in store.execute("SELECT record FROM results ORDER BY started, rowid LIMIT ?", [count]):
                out.write(text + "\n")
        os.replace(f"{source}.partial", source)
    target = folder / "imported.db"
    for stale in folder.glob("imported.db*"):
        stale.unlink()
    lines = sum(1 for _ in open(source, "rb"))
    wall, peak, code, last = timed(["import", str(source)], target, max(options.timeout, 1200))
    print(f"| `dlbench import {source.name}` ({lines:,} records, {source.stat().st_size / 2**20:,.0f} MB) | {code} | "
          f"{wall:.1f} | {peak:,.0f} | {'PASS' if code == 0 else 'FAIL'} | {last.replace('|', '/')} |", flush=True)
    return code != 0


if __name__ == "__main__":
    sys.exit(main())
