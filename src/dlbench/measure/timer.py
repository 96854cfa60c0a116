"""Per-phase step timing: CUDA events on a GPU, a host clock on the CPU.

A step is `begin()`, then `mark(phase)` at the end of each phase. Events are only read
after one synchronize at `finish()`, so timing never stalls the device queue. A step's
time runs from its `begin()` to the next one, so steps add up to the whole window and
whatever runs between phases is counted, never lost.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch


class _HostEvent:
    """A host clock reading with the same interface as a CUDA event."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.t = 0.0

    def record(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.t = time.perf_counter()

    def elapsed_time(self, end: "_HostEvent") -> float:
        return (end.t - self.t) * 1e3


class PhaseTimer:
    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._steps: list[list[tuple[str, object]]] = []

    def _event(self):
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        else:
            event = _HostEvent(self.device)
            event.record()
        return event

    def begin(self) -> None:
        self._steps.append([("", self._event())])

    def mark(self, phase: str) -> None:
        self._steps[-1].append((phase, self._event()))

    def finish(self) -> None:
        """Close the last step and wait for the device; call once after the last step."""
        self._end = self._event()
        if self._cuda:
            torch.cuda.synchronize(self.device)

    def samples(self) -> dict[str, list[float]]:
        """Seconds per step: one list per phase, plus 'step' for the whole step."""
        out: dict[str, list[float]] = defaultdict(list)
        for i, marks in enumerate(self._steps):
            for (_, start), (phase, end) in zip(marks, marks[1:]):
                out[phase].append(start.elapsed_time(end) / 1e3)
            step_end = self._steps[i + 1][0][1] if i + 1 < len(self._steps) else self._end
            out["step"].append(marks[0][1].elapsed_time(step_end) / 1e3)
        return dict(out)

    @property
    def steps(self) -> int:
        return len(self._steps)


class NullTimer:
    """Stands in for PhaseTimer during warm-up."""

    steps = 0

    def begin(self) -> None:
        pass

    def mark(self, phase: str) -> None:
        pass
