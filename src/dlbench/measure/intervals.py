"""Arithmetic on intervals of a timeline: how much of it is covered, and by whom.

Used to split profiled steps: kernels on several streams overlap, host operators nest, and
every instant must be counted once.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Hashable, Iterable


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def exclusive_time(items: Iterable[tuple[float, float, float, Hashable]]) -> dict[Hashable, float]:
    """Each instant covered by at least one (start, end, priority, key) goes to the key of the
    covering item with the highest priority (ties: the one added last); returns time per key.
    With priority = start, nested intervals give each one its own (self) time."""
    bounds = []
    for index, (start, end, priority, key) in enumerate(items):
        if end > start:
            bounds.append((start, 1, index, priority, key))
            bounds.append((end, 0, index, priority, key))
    bounds.sort(key=lambda b: (b[0], b[1]))  # at one instant, ends before starts
    out: dict[Hashable, float] = defaultdict(float)
    active: list[tuple[float, int, Hashable]] = []
    ended: set[int] = set()
    last = None
    for at, is_start, index, priority, key in bounds:
        while active and active[0][1] in ended:
            heapq.heappop(active)
        if active and last is not None and at > last:
            out[active[0][2]] += at - last
        if is_start:
            heapq.heappush(active, (-priority, -index, key))
        else:
            ended.add(-index)
        last = at
    return dict(out)
