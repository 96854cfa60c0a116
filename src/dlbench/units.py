"""Parsers for the quantities users type: shapes ('3x224x224') and close-name suggestions."""

from __future__ import annotations

import difflib

from dlbench.errors import UserError


def parse_shape(text: str | list | tuple) -> tuple[int, ...]:
    """'3x224x224' (or a list of ints) -> (3, 224, 224)."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    else:
        parts = str(text).lower().replace("×", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise UserError(f"bad shape {text!r}: expected sizes joined by 'x', e.g. 3x224x224") from None
    if not shape or any(s <= 0 for s in shape):
        raise UserError(f"bad shape {text!r}: every size must be a positive integer")
    return shape


def suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""
