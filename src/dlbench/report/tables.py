"""A report table, independent of the format it is rendered in (Markdown here; others build on it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlbench.figures import DASH, ODD_LEGEND
from dlbench.report.markdown import cell, table
from dlbench.results.record import Result
from dlbench.results.titles import legacy_title
from dlbench.shorten import CELL_CHARS, shortened


def model_title(r: Result | str) -> str:
    """How the record names its model (ResNet-50); the model's name where it has no title. Given a
    model's name alone (a published row's), the title the built-in models have."""
    if isinstance(r, str):
        return legacy_title(r)
    return r.title or r.model


@dataclass
class Table:
    title: str  # section heading, e.g. "ResNet-50"
    header: list[str]
    align: str  # one 'l' or 'r' per column
    rows: list[list[object]]
    notes: list[str] = field(default_factory=list)  # lines printed between heading and table
    label: str | None = None  # the column that names a row in CSV and JSON; None: the first

    def label_index(self) -> int:
        return self.header.index(self.label) if self.label in self.header else 0

    def markdown(self) -> str:
        # Titles and notes can hold text from results (a model or system name): escaped like cells.
        notes = "".join(f"{_text(n)}\n" for n in self.notes)
        return f"## {_text(self.title)}\n{notes}\n{table(self.header, self.align, self.rows)}"


def _text(value: str) -> str:
    return cell(value).replace("\\|", "|")


def markdown(tables: list[Table]) -> str:
    return "\n\n".join(t.markdown() for t in shown(tables))


_NO_FIGURE = (None, "", DASH, "None")


def shown(tables: list[Table]) -> list[Table]:
    """The tables as every format shows them: a column that no row fills (a Data Processing column
    of runs that have no such phase) is left out, and so is the note text that defines it; a cell of
    huge text (a 1 MB tag) is shortened alike in every format (dlbench/shorten.py)."""
    return [_without_empty_columns(_bounded(t)) for t in tables]


def _bounded(t: Table) -> Table:
    if not any(isinstance(v, str) and len(v) > CELL_CHARS for row in t.rows for v in row):
        return t
    return Table(t.title, t.header, t.align, [[shortened(v) for v in row] for row in t.rows], notes=t.notes,
                 label=t.label)


def _without_empty_columns(t: Table) -> Table:
    if not t.rows:
        return t
    at = t.label_index()
    used = [i == at or any(i < len(row) and row[i] not in _NO_FIGURE for row in t.rows) for i in range(len(t.header))]
    if all(used):
        return t
    dropped = [_name(h) for h, u in zip(t.header, used) if not u]
    keep = [i for i, u in enumerate(used) if u]
    return Table(t.title, [t.header[i] for i in keep], "".join(t.align[i] for i in keep),
                 [[row[i] if i < len(row) else None for i in keep] for row in t.rows],
                 notes=[n for n in (_without_definitions(n, dropped) for n in t.notes) if n], label=t.label)


def _name(column: str) -> str:
    """A column's name without its unit: 'Data Processing Time [ms]' -> 'Data Processing Time'."""
    return re.sub(r"\s*(\[[^\]]*\]|\((ms|s|min|h|d)\))$", "", column)


def _without_definitions(note: str, columns: list[str]) -> str:
    """The note less its '; '-separated parts that define one of `columns` ('Median step: ...')."""
    parts = note.split("; ")
    kept = [p for p in parts if not any(re.match(rf"{re.escape(c)}\b[^;:]*:", p) for c in columns)]
    if len(kept) == len(parts):
        return note
    text = "; ".join(kept).strip()
    return text if not text or text.endswith((".", ")")) else text + "."


def odd_values(results: list[Result]) -> list[Table]:
    """The legend of `?`: which stored values of these results are no valid figures (none: no table)."""
    rows = [[r.id[:8], r.workload, r.model, r.tag, ", ".join(r.odd)] for r in results if r.odd]
    if not rows:
        return []
    return [Table("Stored values that are not valid figures", ["Id", "Workload", "Model", "Tag", "Fields"],
                  "lllll", rows, notes=["The stored values that no table could show as a figure.",
                                 f"{ODD_LEGEND}: `dlbench export` shows it exactly."])]
