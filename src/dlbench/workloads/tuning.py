"""What an earlier run tuned, handed to the workload that tunes the same thing again.

The launcher (launch/tuning.py) looks a matching record up in the store before the run and
sets it here for the run's duration; a workload that finds one uses its choice instead of
measuring, and reports `tuned_from`. A workload that measured reports what it chose as
`Run.tuned`, which the launcher stores. A workload never reads or writes the store.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class Tuned:
    choice: dict[str, Any]  # what the workload reported as `Run.tuned`
    result: str  # id of the run that measured it
    stored: str  # when (ISO 8601)

    def to_dict(self) -> dict[str, Any]:
        return {"choice": self.choice, "result": self.result, "stored": self.stored}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Tuned | None":
        return None if not data else cls(dict(data["choice"]), str(data["result"]), str(data["stored"]))

    def source(self) -> dict[str, str]:
        """`Run.tuned_from` of the run that reuses it."""
        return {"result": self.result, "stored": self.stored}

    def said(self, again: str = "measures again") -> str:
        """'as tuned by run 1a2b3c4d on 2026-11-25; --retune measures again'."""
        return f"as tuned by run {self.result[:8]} on {self.stored[:10]}; --retune {again}"


_given: list[Tuned | None] = [None]


@contextlib.contextmanager
def given(tuned: Tuned | None) -> Iterator[None]:
    """`tuned` is what `current()` returns inside the block."""
    before = _given[0]
    _given[0] = tuned
    try:
        yield
    finally:
        _given[0] = before


def current() -> Tuned | None:
    return _given[0]
