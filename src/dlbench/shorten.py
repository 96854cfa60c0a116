"""Text from results as every output shows it: bounded. A tag, an error message or a name has no
length limit in a record (the store keeps it whole, and `dlbench export` writes it whole), but a
table cell, a listing's line or a report's field of 1 MB makes the output unreadable and large; each
output format cuts such text here, the same way, with its middle elided."""

from __future__ import annotations

CELL_CHARS = 240  # a table cell's longest: 50 runs with 100 kB tags made a 10 MB page


def shorten(text: object, limit: int = CELL_CHARS) -> str:
    """`text` in at most `limit` characters, its middle elided: the model at the start and the
    settings or tag at the end, which tell runs apart, both stay."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def shortened(value: object, limit: int = CELL_CHARS) -> object:
    """A value as an output shows it: text shortened (see `shorten`), anything else as it is."""
    return shorten(value, limit) if isinstance(value, str) and len(value) > limit else value
