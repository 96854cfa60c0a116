"""Which setting of `dlbench run`'s process costs a GPU-bound step? Plain loop and dlbench, each
with and without an environment variable, every run a fresh process, interleaved round by round.

    python benchmarks/env_ab.py [--config fwdbwd] [--rounds 4] [--env CUDA_DEVICE_MAX_CONNECTIONS=8,32]

For each value of the variable, runs benchmarks/pairs.py's plain loop and `dlbench run` (as
pairs.py runs them) with the variable set, in a rotating order, and prints every run's img/s and
each variant's median and range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pairs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="fwdbwd", choices=sorted(pairs.DLBENCH))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--env", default="CUDA_DEVICE_MAX_CONNECTIONS=8,32")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--db", default="/tmp/env_ab.db")
    args = parser.parse_args()
    name, values = args.env.split("=", 1)
    variants = [(side, value) for value in values.split(",") for side in ("plain", "dlbench")]
    figures: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for side, value in order:
            os.environ[name] = value
            run = pairs.plain_run if side == "plain" else lambda c, s, t: pairs.dlbench_run(c, s, t, args.db)
            rate = run(args.config, args.steps, args.seconds)
            figures[(side, value)].append(rate)
            print(f"round {r + 1} {side:7s} {name}={value:4s} {rate:8,.1f} img/s", flush=True)
    print(f"\n| side | {name} | runs | median img/s | range |")
    print("| --- | --- | ---: | ---: | --- |")
    for (side, value), rates in figures.items():
        print(f"| {side} | {value} | {len(rates)} | {statistics.median(rates):,.1f} | {min(rates):,.1f}–{max(rates):,.1f} |")


if __name__ == "__main__":
    main()
