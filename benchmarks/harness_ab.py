"""Which part of dlbench's harness costs a GPU-bound step? `dlbench run` with one part switched
off at a time, beside the plain loop, every run a fresh process, interleaved round by round.

    python benchmarks/harness_ab.py [--config fwdbwd] [--rounds 4] [--variants plain,default,...]

Variants (each patches the dlbench process before its command line runs):
  plain        benchmarks/plain.py's loop (pairs.py --plain)
  default      `dlbench run` as a user types it
  monitor-off  no GPU monitor and no host snapshots in the measured window
  slow-monitor the GPU monitor reading NVML once a second instead of every 0.1 s
  no-process   the monitor without NVML's per-process utilisation query
  old-monitor  the per-process query with every reading (before 2026-11-28: default reads it once a second)
  no-flops     no FLOP-counting step before warm-up
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pairs  # noqa: E402

VARIANTS = ("plain", "default", "monitor-off", "slow-monitor", "no-process", "old-monitor", "no-flops")


def patch(variant: str) -> None:
    from dlbench.measure import loop, monitor, nvml

    if variant == "monitor-off":
        class Off(monitor.Monitor):
            def start(self):
                return self

            def stop(self):
                return monitor.MonitorData(available=False, reason="monitor off")
        loop.Monitor = Off
    elif variant == "slow-monitor":
        loop.Monitor = functools.partial(monitor.Monitor, interval=1.0)
    elif variant == "no-process":
        nvml.process_utilisation = lambda *a, **k: []
    elif variant == "old-monitor":
        monitor.PROCESS_EVERY_S = 0.0
    elif variant == "no-flops":
        loop.count_flops = lambda step: None


def child(variant: str, argv: list[str]) -> None:
    patch(variant)
    from dlbench.__main__ import main as dlbench

    sys.argv = ["dlbench", *argv]
    dlbench()


def dlbench_run(variant: str, config: str, steps: int, seconds: float, db: str) -> float:
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "r.json"
        argv = ["run", *pairs.DLBENCH[config], "--steps", str(steps), "--min-seconds", str(seconds), "--db", db,
                "--tag", f"ab-{variant}", "--results-file", str(results)]
        subprocess.run([sys.executable, __file__, "--child", variant, "--", *argv], capture_output=True, text=True,
                       check=True)
        return float(json.loads(results.read_text())["throughput"])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="fwdbwd", choices=sorted(pairs.DLBENCH))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--db", default="/tmp/harness_ab.db")
    args = parser.parse_args()
    variants = args.variants.split(",")
    figures: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for variant in variants[r % len(variants):] + variants[:r % len(variants)]:
            rate = (pairs.plain_run(args.config, args.steps, args.seconds) if variant == "plain"
                    else dlbench_run(variant, args.config, args.steps, args.seconds, args.db))
            figures[variant].append(rate)
            print(f"round {r + 1} {variant:13s} {rate:8,.1f} img/s", flush=True)
    base = statistics.median(figures["plain"]) if figures.get("plain") else None
    print(f"\n| variant | runs | median img/s | range | median / plain |")
    print("| --- | ---: | ---: | --- | ---: |")
    for variant, rates in figures.items():
        median = statistics.median(rates)
        print(f"| {variant} | {len(rates)} | {median:,.1f} | {min(rates):,.1f}–{max(rates):,.1f} | "
              f"{median / base:.3f} |" if base else "")


if __name__ == "__main__":
    main()
