"""Markdown tables whose cells are safe: text from results can neither break the table nor inject HTML."""

from __future__ import annotations

import re
from typing import Sequence

# Control characters (CR included) would break a line or hide text; `](` would let a crafted
# name render as a link (`[click](javascript:...)`), so its parenthesis is escaped. Only `<` can
# open HTML: it alone becomes `&lt;`, so `->` and `A > B` read as written (no `&gt;`).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def cell(value: object) -> str:
    text = _CONTROL.sub(" ", "-" if value is None else str(value))
    text = text.replace("<", "&lt;").replace("|", "\\|")
    return text.replace("](", "]\\(")


def line(value: object) -> str:
    """Text outside a table (a heading, a note, a line of `doctor`), made safe like a cell; a
    `|` cannot break anything there, so it stays as it is."""
    return cell(value).replace("\\|", "|")


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """`align` holds 'l' or 'r' per column, written as `---` or `---:` like the seeds."""
    lines = ["|" + "|".join(cell(h) for h in header) + "|", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["|" + "|".join(cell(v) for v in row) + "|" for row in rows]
    return "\n".join(lines)
