"""Print what benchmarks/startup/sitecustomize.py wrote: each process's wall time and the
functions of its main thread with the most cumulative time. With --timeline, also from the
wall-clock samples: the main thread's phases in order (start, end, seconds, what ran), and per
thread its sampled seconds and the functions it spent them in, waits included.

    python benchmarks/startup/summary.py DIR [--top 40] [--timeline [--min 0.05]]

--top 0 leaves the cProfile listing out. A phase is the import under way, else the innermost
function of the workload's module (dlbench.workloads.volume:_warmup) > the innermost dlbench
function under it outside the models, and in brackets what took most of it outside dlbench.
"""
import argparse
import io
import json
import pstats
import statistics
from collections import Counter
from pathlib import Path

WIDTH = 160
IMPORTING = {"importlib", "importlib._bootstrap", "importlib._bootstrap_external",
             "_frozen_importlib", "_frozen_importlib_external"}
OUTSIDE = IMPORTING | {"runpy", "__main__", "sitecustomize", "threading"}


def _module(frame: str) -> str:
    return frame.partition(":")[0]


def _ours(frame: str) -> bool:
    return _module(frame).startswith("dlbench")


def _short(frame: str) -> str:
    module, _, function = frame.partition(":")
    return ".".join(module.split(".")[:2]) + ":" + function


def _imported(stack: list) -> str | None:
    """'import X (by Y)' while the import machinery runs: X the first module outside dlbench being
    imported (torch, not torch._dynamo.utils that torch imports), Y the frame importing it."""
    loads = [i for i in range(1, len(stack)) if stack[i].endswith(":<module>")
             and _module(stack[i - 1]) in IMPORTING and _module(stack[i]) not in IMPORTING]
    if not loads:
        return None
    at = next((i for i in loads if not _ours(stack[i])), loads[-1])
    name = _module(stack[at])
    name = name if _ours(stack[at]) else ".".join(name.split(".")[:2])
    by = next((f for f in reversed(stack[:at]) if _module(f) not in IMPORTING and _module(f) != name), None)
    if by is None:
        return f"import {name}"
    text = f"import {name} (by {by.removesuffix(':<module>')})"
    if _ours(by) or _module(by) == "__main__":
        return text
    # An import that a library makes when first called: the phase that called it is the news.
    machinery = next(i for i, f in enumerate(stack) if _module(f) in IMPORTING)
    return f"{text} in {label(stack[:machinery])[0]}"


def label(stack: list) -> tuple:
    """(phase, innermost frame outside dlbench or None) of one sample of the main thread. Model
    code is left out of the phase: a model's layers run in the warm-up and in the prediction alike,
    and the phase is which of those it was."""
    imported = _imported(stack)
    if imported:
        return imported, None
    inner = None if not stack or _ours(stack[-1]) else _short(stack[-1])
    workload = next((_module(f) for f in stack if _module(f).startswith("dlbench.workloads.")), None)
    phase = next((i for i in reversed(range(len(stack))) if _module(stack[i]) == workload), None)
    helpers = [f for f in stack[(phase or 0):] if _ours(f) and not _module(f).startswith("dlbench.models")]
    helpers = helpers or [f for f in stack if _ours(f)]
    if phase is not None:
        return stack[phase] + (f" > {helpers[-1]}" if helpers[-1] != stack[phase] else ""), inner
    if helpers:
        return helpers[-1], inner
    if not stack:
        return "(no Python frame)", None
    outer = next((f for f in stack if _module(f) not in OUTSIDE), stack[-1])
    return outer, (inner if outer != stack[-1] else None)


def read_samples(path: Path) -> tuple:
    """The samples, and each tick's seconds: from it to the next tick, so a tick the sampler got
    late (the GIL held by a long call) still counts the time up to it."""
    samples = [json.loads(line) for line in path.read_text().splitlines() if line]
    ticks = sorted({s["t"] for s in samples})
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    return samples, dict(zip(ticks, gaps + [statistics.median(gaps) if gaps else 0.01]))


def timeline(samples: list, seconds: dict, shortest: float) -> list:
    """[start, end, phase, Counter of seconds by innermost frame] of the main thread. A run of
    samples under `shortest` seconds joins the phase before it; several in a row (a loop whose
    phase changes every sample) are cut into stretches of `shortest`, each named by most of it."""
    runs = []
    for s in samples:
        if s["thread"] != "MainThread":
            continue
        (name, inner), start, end = label(s["stack"]), s["t"], s["t"] + seconds[s["t"]]
        if not runs or runs[-1][2] != name:
            runs.append([start, end, name, Counter()])
        runs[-1][1] = end
        if inner:
            runs[-1][3][inner] += end - start
    phases, pending, lead = [], [], []  # lead: where the first phase starts if short runs precede it

    def add(run: list) -> None:
        if phases and phases[-1][2] == run[2]:
            phases[-1][1] = run[1]
            phases[-1][3].update(run[3])
        else:
            phases.append([lead.pop() if lead else run[0], run[1], run[2], Counter(run[3])])

    def settle() -> None:
        if pending and pending[-1][1] - pending[0][0] < shortest:
            if phases:
                for run in pending:
                    phases[-1][1] = run[1]
                    phases[-1][3].update(run[3])
            else:
                lead.append(pending[0][0])
        elif pending:
            stretch, weights = [pending[0][0], 0, "", Counter()], Counter()
            for run in pending:
                weights[run[2]] += run[1] - run[0]
                stretch[1] = run[1]
                stretch[3].update(run[3])
                if stretch[1] - stretch[0] >= shortest:
                    stretch[2] = weights.most_common(1)[0][0]
                    add(stretch)
                    stretch, weights = [run[1], 0, "", Counter()], Counter()
            if weights:
                phases[-1][1] = stretch[1]
                phases[-1][3].update(stretch[3])
        pending.clear()

    for run in runs:
        if run[1] - run[0] < shortest:
            pending.append(run)
        else:
            settle()
            add(run)
    settle()
    return phases


def threads(samples: list, seconds: dict, top: int) -> None:
    """Per thread: sampled seconds and the functions with the most, each counted once a sample.
    Callers that only ever call one function show its figures, so a chain shows once."""
    totals, count, inclusive, own, depth = Counter(), Counter(), {}, {}, {}
    for s in samples:
        name, dt, stack = s["thread"], seconds[s["t"]], s["stack"]
        totals[name] += dt
        count[name] += 1
        for i, frame in enumerate(stack):
            depth.setdefault(frame, i)
        inclusive.setdefault(name, Counter()).update(dict.fromkeys(stack, dt))
        if stack:
            own.setdefault(name, Counter())[stack[-1]] += dt
    for name, total in totals.most_common():
        print(f"\n  thread {name}: {total:.2f} s sampled ({count[name]} samples)")
        shown: dict = {}  # (seconds, own seconds) -> frames with those figures, outermost first
        for frame, n in inclusive[name].items():
            shown.setdefault((round(n, 6), round(own[name].get(frame, 0), 6)), []).append(frame)
        for frames in shown.values():
            frames.sort(key=depth.get)
        rows = sorted(shown.items(), key=lambda kv: (-kv[0][0], depth[kv[1][0]]))[:top]
        print(f"    {'incl s':>8} {'%':>5} {'self s':>8}  function (and its callers with the same figures)")
        for (n, mine), frames in rows:
            chain = f" (< {frames[-2]}" if len(frames) > 1 else ""
            chain += f" < {len(frames) - 2} more)" if len(frames) > 2 else ")" if chain else ""
            print(f"    {n:8.2f} {100 * n / total:5.1f} {mine:8.2f}  {frames[-1]}{chain}"[:WIDTH])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=40, help="cProfile functions per process (0: none)")
    parser.add_argument("--timeline", action="store_true", help="also the wall-clock samples")
    parser.add_argument("--min", type=float, default=0.05, help="shortest phase in the timeline, seconds")
    args = parser.parse_args()
    rows = [line.split("\t") for line in (args.folder / "processes.tsv").read_text().splitlines()]
    first = min(float(r[1]) for r in rows)
    for pid, start, wall, argv in sorted(rows, key=lambda r: float(r[1])):
        print(f"\n=== pid {pid}: starts at +{float(start) - first:.2f} s, {float(wall):.2f} s: {argv}")
        if args.top and (args.folder / f"{pid}.prof").exists():
            text = io.StringIO()
            stats = pstats.Stats(str(args.folder / f"{pid}.prof"), stream=text)
            stats.sort_stats("cumulative").print_stats(args.top)
            print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))
        path = args.folder / f"{pid}.samples"
        if not args.timeline or not path.exists():
            continue
        samples, seconds = read_samples(path)
        print(f"\n  main thread, phases of {args.min} s or more:")
        print(f"  {'start s':>8} {'end s':>8} {'s':>7}  phase [outside dlbench]")
        for a, b, name, inner in timeline(samples, seconds, args.min):
            most = ", ".join(f"{f} {n:.2f}" for f, n in inner.most_common(2) if n >= 0.2 * (b - a))
            print((f"  {a:8.2f} {b:8.2f} {b - a:7.2f}  {name}" + (f" [{most}]" if most else ""))[:WIDTH])
        threads(samples, seconds, 15)


if __name__ == "__main__":
    main()
