"""GPU kernels of a torch.profiler run, summed: what the benchmarks' profiles report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Kernels:
    seconds: dict[str, float]  # total time by kernel name
    calls: dict[str, int]  # launches by kernel name
    busy_s: float  # union of kernel intervals: kernels overlapping on several streams count once
    window_s: float  # first kernel start to last kernel end

    @property
    def idle_share(self) -> float | None:
        return 1 - self.busy_s / self.window_s if self.window_s else None


def kernels(prof) -> Kernels:
    events = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
    seconds: dict[str, float] = {}
    calls: dict[str, int] = {}
    for e in events:
        seconds[e.name] = seconds.get(e.name, 0.0) + (e.time_range.end - e.time_range.start) / 1e6
        calls[e.name] = calls.get(e.name, 0) + 1
    if not events:
        return Kernels(seconds, calls, 0.0, 0.0)
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy, end = 0.0, spans[0][0]
    for s, e in spans:
        if e > end:
            busy += e - max(s, end)
            end = e
    return Kernels(seconds, calls, busy / 1e6, (spans[-1][1] - spans[0][0]) / 1e6)


def print_tile_profile(run: Callable[[], object], label: str, calls: int, top: int) -> None:
    """Profile `calls` calls of `run` (one untimed first, under the caller's autocast) and print
    the `top` kernels by time, per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                run()
            torch.cuda.synchronize()
    k = kernels(prof)
    total = sum(k.seconds.values())
    print(f"\nkernels of {label}: {total / calls * 1e3:.1f} ms a tile, idle {k.idle_share:.1%}")
    for name, s in sorted(k.seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {s / total:6.1%}  {k.calls[name] // calls:4d}x  {name[:110]}")
