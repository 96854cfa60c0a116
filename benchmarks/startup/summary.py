"""Print what benchmarks/startup/sitecustomize.py wrote: each process's wall time and the
functions of its main thread with the most cumulative time.

    python benchmarks/startup/summary.py DIR [--top 40]
"""
import argparse
import io
import pstats
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    rows = [line.split("\t") for line in (args.folder / "processes.tsv").read_text().splitlines()]
    first = min(float(r[1]) for r in rows)
    for pid, start, wall, argv in sorted(rows, key=lambda r: float(r[1])):
        print(f"\n=== pid {pid}: starts at +{float(start) - first:.2f} s, {float(wall):.2f} s: {argv}")
        text = io.StringIO()
        stats = pstats.Stats(str(args.folder / f"{pid}.prof"), stream=text)
        stats.sort_stats("cumulative").print_stats(args.top)
        print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))


if __name__ == "__main__":
    main()
