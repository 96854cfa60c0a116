"""FLOPs of one step, counted by torch.utils.flop_counter (matmuls, convolutions, attention).

Counting dispatches every op through Python, so it runs once per spec, outside the
measured window. Elementwise ops are not counted: the figure is the model's math, the
same convention as published TFLOP/s of networks.
"""

from __future__ import annotations

from typing import Callable


def count_flops(fn: Callable[[], object]) -> int:
    """Total FLOPs (multiply and add counted separately) of everything `fn` runs."""
    # Imported here: a run that reuses a tuned count never needs it, and its import is half a second.
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def achieved_tflops(flops_per_step: float, step_seconds: list[float]) -> float | None:
    """TFLOP/s over the measured window (total FLOPs / total time)."""
    total = sum(step_seconds)
    if not flops_per_step or total <= 0:
        return None
    return flops_per_step * len(step_seconds) / total / 1e12
