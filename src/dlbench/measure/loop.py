"""The warm-up and measurement policy shared by every workload.

Warm-up runs at least `warmup` steps and `warmup_seconds`; measurement at least `steps`
steps and `min_seconds`. The host clock only decides when to stop; the numbers come
from the PhaseTimer after one synchronize.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from dlbench.measure.timer import NullTimer, PhaseTimer


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int) -> None: ...


def _no_progress(stage: str, done: int, total: int) -> None:
    pass


@dataclass
class Measured:
    samples: dict[str, list[float]]
    warmup_steps: int
    warmup_s: float
    window_s: float  # wall time of the measured window, device work included


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_steps(
    step: Callable[[PhaseTimer | NullTimer], None],
    device: torch.device,
    *,
    warmup: int,
    warmup_seconds: float,
    steps: int,
    min_seconds: float,
    progress: Progress = _no_progress,
) -> Measured:
    null = NullTimer()
    start = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - start < warmup_seconds:
        step(null)
        done += 1
        progress("warm-up", done, warmup)
    synchronize(device)
    warmup_s = time.perf_counter() - start

    timer = PhaseTimer(device)
    start = time.perf_counter()
    while timer.steps < steps or time.perf_counter() - start < min_seconds:
        timer.begin()
        step(timer)
        progress("measure", timer.steps, steps)
    timer.finish()
    window_s = time.perf_counter() - start
    return Measured(timer.samples(), done, warmup_s, window_s)
