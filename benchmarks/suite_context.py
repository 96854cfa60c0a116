"""GPU check: plain `dlbench` measures only the benchmark, and says so with one denominator.

Runs the default suite (`quick` on a GPU) into a fresh store, then `dlbench doctor` on it, and
checks that
  (a) no dlbench process but the measuring worker held a GPU context while a benchmark ran (NVML's
      process list sampled in a thread, PIDs named through /proc): never the suite's own process;
  (b) doctor names no other process on the GPU (nor the run's launcher);
  (c) every utilisation figure printed in the session (suite lines, doctor) names the same
      measured ceiling for its precision, and none the datasheet.
Prints a short table and exits 1 when a check fails.

    PYTHONPATH=$PWD/src python benchmarks/suite_context.py [--keep DIR]   # from the repository root
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pynvml

SHARE = re.compile(r"([<\d.]+%) of the (measured (\w+) matmul ceiling of ([\d.,]+) TFLOP/s|datasheet[^;\n]*)")


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def role(pid: int, suite_pid: int) -> str:
    cmd = command_line(pid)
    if pid == suite_pid:
        return "suite process"
    if "dlbench.launch.worker" in cmd:
        return "measuring worker"
    if "dlbench" in cmd:
        return "other dlbench"
    return "not dlbench" if cmd else "unknown pid"


class Sampler(threading.Thread):
    """NVML's compute processes on every GPU, every `interval` seconds: per sample, role -> {pid: GB}."""

    def __init__(self, suite_pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.suite_pid, self.interval = suite_pid, interval
        self.samples: list[dict[str, dict[int, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        while not self.stop.wait(self.interval):
            sample: dict[str, dict[int, float]] = collections.defaultdict(dict)
            for handle in handles:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    sample[role(p.pid, self.suite_pid)][p.pid] = (p.usedGpuMemory or 0) / 1e9
            self.samples.append(sample)


def run_suite(db: Path) -> tuple[str, Sampler]:
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "--db", str(db)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    output, _ = proc.communicate()
    sampler.stop.set()
    sampler.join()
    print(f"dlbench exited with status {proc.returncode}")
    return output, sampler


def context_check(sampler: Sampler) -> list[str]:
    """(a): the table of who held a context, and what is wrong."""
    seen: dict[str, dict[int, float]] = collections.defaultdict(dict)
    problems = []
    for sample in sampler.samples:
        for who, pids in sample.items():
            for pid, gb in pids.items():
                seen[who][pid] = max(gb, seen[who].get(pid, 0.0))
    print(f"\n(a) GPU contexts over {len(sampler.samples)} samples")
    print(f"{'process':<18} {'pids':>4} {'max GB':>7}")
    for who, pids in sorted(seen.items()):
        print(f"{who:<18} {len(pids):>4} {max(pids.values()):>7.2f}")
    problems += [f"{who} held a GPU context" for who in ("suite process", "other dlbench") if who in seen]
    if "unknown pid" in seen and "measuring worker" not in seen:
        problems.append("NVML's PIDs are not this PID namespace's: the processes cannot be named here")
    if "measuring worker" not in seen:
        problems.append("no measuring worker was ever seen on the GPU")
    return sorted(set(problems))


def doctor_check(doctor: str) -> list[str]:
    """(b)"""
    causes = [line for line in doctor.splitlines() if "other processes on the GPU" in line or "launcher on the GPU" in line]
    print(f"\n(b) doctor: {len(causes)} line(s) blame a process on the GPU")
    for line in causes:
        print("   ", line.strip())
    return ["doctor names a process on the GPU"] if causes else []


def denominator_check(texts: dict[str, str]) -> list[str]:
    """(c): every 'N% of the ...' printed names one measured ceiling per precision."""
    found = [(where, m.group(1), m.group(2)) for where, text in texts.items() for m in SHARE.finditer(text)]
    by_precision = collections.defaultdict(set)
    print(f"\n(c) {len(found)} utilisation figures")
    print(f"{'where':<8} {'share':>6}  denominator")
    for where, share, denominator in found:
        print(f"{where:<8} {share:>6}  {denominator}")
        match = SHARE.match(f"{share} of the {denominator}")
        by_precision[match.group(3) or "datasheet"].add(denominator)
    problems = [f"{len(names)} different denominators for {precision}: {sorted(names)}"
                for precision, names in by_precision.items() if len(names) > 1]
    problems += ["a figure names the datasheet"] if "datasheet" in by_precision else []
    problems += ["no utilisation figure was printed"] if not found else []
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="Folder to keep the store in (default: a temporary one).")
    args = parser.parse_args()
    pynvml.nvmlInit()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="dlbench-context-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "context.db"
    start = time.monotonic()
    suite_output, sampler = run_suite(db)
    doctor = subprocess.run([sys.executable, "-m", "dlbench", "doctor", "--db", str(db)], capture_output=True,
                            text=True).stdout
    print(f"suite and doctor took {time.monotonic() - start:.0f} s; store {db}")
    problems = context_check(sampler) + doctor_check(doctor) + denominator_check({"suite": suite_output,
                                                                                   "doctor": doctor})
    print("\n" + ("PASS" if not problems else "FAIL:\n- " + "\n- ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
