"""Per-phase step timing: CUDA events on a GPU, a host clock on the CPU.

`record_event` is the one way dlbench takes a time stamp of device work, on any stream;
`Spans` pairs such events into named intervals (the volume pipeline's copies and compute on
their own streams), `PhaseTimer` chains them into steps (the other workloads).

A step is `begin()`, then `mark(phase)` at the end of each phase. Events are only read
after one synchronize at `finish()`, so timing never stalls the device queue. A step's
time runs from its `begin()` to the next one, so steps add up to the whole window and
whatever runs between phases is counted, never lost.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch


class HostEvent:
    """A host clock reading with the part of torch.cuda.Event's interface dlbench uses. Work on
    the CPU is synchronous, so the clock at `record` is when the work queued before it ended."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream: object = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: "HostEvent") -> float:
        return (end.t - self.t) * 1e3


Event = torch.cuda.Event | HostEvent


def record_event(device: torch.device, stream: torch.cuda.Stream | None = None) -> Event:
    """An event recorded now: on a GPU a CUDA event on `stream` (None: the current stream), so it
    times the device's queue without waiting for it; on the CPU a host clock reading."""
    event = torch.cuda.Event(enable_timing=True) if device.type == "cuda" else HostEvent()
    event.record(stream)
    return event


def seconds(start: Event, end: Event) -> float:
    """Seconds from `start` to `end`; for CUDA events only after both have completed."""
    return start.elapsed_time(end) / 1e3


class Spans:
    """Named intervals between pairs of recorded events, turned into seconds only after a
    synchronize (`resolve`): reading a CUDA event earlier would stall the device queue."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, Event, Event]] = []

    def add(self, phase: str, start: Event, end: Event) -> None:
        self._pending.append((phase, start, end))

    def resolve(self) -> dict[str, list[float]]:
        """Seconds per phase, in the order the spans were added; forgets them."""
        out: dict[str, list[float]] = defaultdict(list)
        for phase, start, end in self._pending:
            out[phase].append(seconds(start, end))
        self._pending.clear()
        return dict(out)


class PhaseTimer:
    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._steps: list[list[tuple[str, object]]] = []

    def begin(self) -> None:
        self._steps.append([("", record_event(self.device))])

    def mark(self, phase: str) -> None:
        self._steps[-1].append((phase, record_event(self.device)))

    def finish(self) -> None:
        """Close the last step and wait for the device; call once after the last step."""
        self._end = record_event(self.device)
        if self._cuda:
            torch.cuda.synchronize(self.device)

    def samples(self) -> dict[str, list[float]]:
        """Seconds per step: one list per phase, plus 'step' for the whole step."""
        out: dict[str, list[float]] = defaultdict(list)
        for i, marks in enumerate(self._steps):
            for (_, start), (phase, end) in zip(marks, marks[1:]):
                out[phase].append(seconds(start, end))
            step_end = self._steps[i + 1][0][1] if i + 1 < len(self._steps) else self._end
            out["step"].append(seconds(marks[0][1], step_end))
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
