"""SIGINT and SIGTERM during a suite: the first asks to stop after the running benchmark is
stored as `interrupted`; the second stops at once (KeyboardInterrupt)."""

from __future__ import annotations

import signal
from types import FrameType


class Interrupts:
    def __init__(self) -> None:
        self.count = 0
        self.signal_name: str | None = None
        self._saved: dict[int, object] = {}

    def __enter__(self) -> "Interrupts":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.signal_name = signal.Signals(signum).name
        if self.count >= 2:
            raise KeyboardInterrupt
