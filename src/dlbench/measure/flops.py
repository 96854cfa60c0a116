"""FLOPs of one step, counted by torch.utils.flop_counter (matmuls, convolutions, attention).

Counting dispatches every op through Python, so it runs once per configuration, outside the
measured window: the launcher remembers the count in the store (launch/flopcount.py) and hands
it to the next run of the same work here (`given`), which then counts nothing. Elementwise ops are not counted: the figure is the model's math, the
same convention as published TFLOP/s of networks.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


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


_given: list[int | None] = [None]


@contextlib.contextmanager
def given(flops: int | None) -> Iterator[None]:
    """`flops` (a step's count, remembered from an earlier run of the same work) is what
    `remembered()` returns inside the block; None: the run counts."""
    before = _given[0]
    _given[0] = flops
    try:
        yield
    finally:
        _given[0] = before


def remembered() -> int | None:
    return _given[0]
