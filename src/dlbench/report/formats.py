"""Tables as CSV (one block per table, for spreadsheets) and JSON (for scripts)."""

from __future__ import annotations

import csv
import io
import json

from dlbench.report.tables import Table


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def to_csv(tables: list[Table]) -> str:
    """Each table as a block: its title, its header, its rows, then a blank line."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for t in tables:
        writer.writerow([t.title])
        writer.writerow(t.header)
        writer.writerows([_text(v) for v in row] for row in t.rows)
        writer.writerow([])
    return buffer.getvalue()


def to_dict(t: Table) -> dict:
    return {"title": t.title, "notes": t.notes, "header": t.header,
            "rows": [[_text(v) for v in row] for row in t.rows]}


def to_json(tables: list[Table], **extra: object) -> str:
    return json.dumps({"tables": [to_dict(t) for t in tables], **extra}, indent=1, ensure_ascii=False)
