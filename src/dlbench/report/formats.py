"""Report tables as tidy data: one record per table cell, numbers as numbers.

CSV and JSON are for programs (pandas, jq, a spreadsheet), so they hold the figures, not the
tables' text layout (that is Markdown's and HTML's). Each record names its table (position
and title), its row (position and label, the row's first cell, usually the system), its
column, and then either `value` (a number) or `text` (anything else: a name, a version,
`OOM`); a missing cell has neither. `unit` is the number's unit where the cell or the
column's name gives one (`Forward (ms)`, `Training [s]`, `25%`, `4,000.0 img/s`); `note` is
what the table printed after the number (`†` for a published figure whose arithmetic does
not hold, `(x1.50)` for a speed-up).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re

from dlbench.figures import DASH
from dlbench.report.tables import Table
from dlbench.results.exchange import cell as sheet_cell

FIELDS = ("table", "title", "row", "label", "column", "value", "unit", "text", "note")

# A figure as the tables print it: thousands separators, then an optional unit (`%`, `img/s`)
# and an optional mark after a space (`†`, `(x1.50)`).
_FIGURE = re.compile(r"(?P<number>[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                     r"(?P<unit>%| [A-Za-z][\w/]*)?(?: (?P<note>\S.*))?")
# A unit in a column's name: any `[...]`; in parentheses only a time, because `(bf16)` is no unit.
_HEADER_UNIT = re.compile(r"\[(?P<square>[^\]]+)\]$|\((?P<round>ms|s|min|h|d)\)$")


def _number(text: str) -> int | float:
    plain = text.replace(",", "")
    return int(plain) if re.fullmatch(r"[-+]?\d+", plain) else float(plain)


def _header_unit(column: str) -> str | None:
    found = _HEADER_UNIT.search(column.strip())
    return None if found is None else found["square"] or found["round"]


def _parsed(value: object, numeric: bool, column: str) -> dict[str, object]:
    """value, unit, text and note of one cell; only right-aligned columns hold figures (a CUDA
    version `9.1` in a left-aligned column is text)."""
    empty = {"value": None, "unit": None, "text": None, "note": None}
    if value is None or value in (DASH, ""):
        return empty
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        figure = value if math.isfinite(value) else None  # JSON has no NaN
        return {**empty, "value": figure, "unit": _header_unit(column) if figure is not None else None}
    text = str(value).strip()
    found = _FIGURE.fullmatch(text) if numeric else None
    if found is None:
        return {**empty, "text": text}
    unit = (found["unit"] or "").strip() or _header_unit(column)
    return {**empty, "value": _number(found["number"]), "unit": unit, "note": found["note"]}


def records(tables: list[Table]) -> list[dict[str, object]]:
    """Every cell but a row's label (its first, or the table's `label` column) as one record; see
    the module's docstring."""
    out = []
    for number, t in enumerate(tables, 1):
        at = t.label_index()
        for position, row in enumerate(t.rows, 1):
            label = None if row[at] in (None, DASH) else str(row[at])
            for i, (column, align, value) in enumerate(zip(t.header, t.align, row)):
                if i == at:
                    continue
                out.append({"table": number, "title": t.title, "row": position, "label": label,
                            "column": column, **_parsed(value, align == "r", column)})
    return out


def to_csv(tables: list[Table]) -> str:
    """The records with a header line; no cell starts like a spreadsheet formula (numbers,
    negative ones included, stay numbers), as in `dlbench export`."""
    found = records(tables)
    if not found:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: sheet_cell(v) for k, v in r.items()} for r in found)
    return buffer.getvalue()


def to_dict(t: Table) -> dict:
    """A table as its text layout (every cell as printed, `-` where missing), which
    `dlbench compare --format json` keeps beside its own figures."""
    return {"title": t.title, "notes": t.notes, "header": t.header,
            "rows": [[DASH if v is None else str(v) for v in row] for row in t.rows]}


def to_json(tables: list[Table], **extra: object) -> str:
    """The records under `cells`, and each table's title, notes and header under `tables`."""
    about = [{"table": n, "title": t.title, "notes": t.notes, "header": t.header} for n, t in enumerate(tables, 1)]
    return json.dumps({**extra, "tables": about, "cells": records(tables)}, indent=1, ensure_ascii=False)
