"""Markdown tables whose cells are safe: text from results can neither break the table nor inject HTML."""

from __future__ import annotations

import html
from typing import Sequence


def cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """`align` holds 'l' or 'r' per column, written as `---` or `---:` like the seeds."""
    lines = ["|" + "|".join(cell(h) for h in header) + "|", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["|" + "|".join(cell(v) for v in row) + "|" for row in rows]
    return "\n".join(lines)


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt(value: float | None, digits: int = 1) -> str | None:
    """A figure rounded like the seeds, or None (rendered `-`)."""
    return None if value is None else f"{value:.{digits}f}"
