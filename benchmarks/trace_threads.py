"""What each host thread of a profiled run spent in CUDA calls, and the GPU's streams beside them.

    python benchmarks/trace_threads.py TRACE.json [--top 8] [--long-ms 1]

TRACE.json is a Chrome trace from `dlbench run ... --profile N --profile-trace TRACE.json` (on a
GPU: one step with host operators and the kernels). Prints, per host thread: its CPU operators'
time, its CUDA runtime and driver calls by name (count, total, longest), and every call longer
than --long-ms; then each GPU stream's busy time over the trace's span. A decoding thread that
waits in a synchronising call (cudaFree, cudaStreamSynchronize, a blocking copy) while the
training stream is busy shows here.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--long-ms", type=float, default=1.0)
    args = parser.parse_args()
    with open(args.trace, encoding="utf-8") as f:
        trace = json.load(f)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    names = {(e.get("pid"), e.get("tid")): e["args"].get("name") for e in trace.get("traceEvents", [])
             if e.get("ph") == "M" and e.get("name") == "thread_name" and "args" in e}
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    print(f"trace span {(end - start) / 1e3:.1f} ms, {len(events)} events")
    calls: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    ops: dict[tuple, float] = defaultdict(float)
    streams: dict[tuple, float] = defaultdict(float)
    long_calls = []
    for e in events:
        where = (e.get("pid"), e.get("tid"))
        cat = e.get("cat", "")
        if cat in ("cuda_runtime", "cuda_driver"):
            calls[where][e["name"]].append(e["dur"] / 1e3)
            if e["dur"] / 1e3 >= args.long_ms:
                long_calls.append((where, e["name"], e["dur"] / 1e3, (e["ts"] - start) / 1e3))
        elif cat == "cpu_op":
            ops[where] += e["dur"] / 1e3
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            streams[(e.get("pid"), e.get("tid"))] += e["dur"] / 1e3
    for where in sorted(set(calls) | set(ops)):
        label = names.get(where) or where[1]
        total = sum(sum(v) for v in calls[where].values())
        print(f"\nthread {label}: CPU operators {ops[where]:.1f} ms (nested included), CUDA calls {total:.1f} ms")
        ranked = sorted(calls[where].items(), key=lambda kv: -sum(kv[1]))[:args.top]
        for name, durs in ranked:
            print(f"  {name:40s} {len(durs):5d} calls  {sum(durs):8.2f} ms  longest {max(durs):7.2f} ms")
    print(f"\ncalls of {args.long_ms:g} ms or more (thread, call, ms, at ms):")
    for where, name, dur, at in sorted(long_calls, key=lambda c: c[3]):
        print(f"  {names.get(where) or where[1]} {name} {dur:.2f} at {at:.1f}")
    print("\nGPU streams, busy ms over the span:")
    for where, busy in sorted(streams.items(), key=lambda kv: -kv[1]):
        print(f"  stream {where[1]}: {busy:.1f} ms ({busy / ((end - start) / 1e3):.0%})")


if __name__ == "__main__":
    main()
