"""A report table, independent of the format it is rendered in (Markdown here; others build on it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlbench.figures import ODD_LEGEND
from dlbench.report.markdown import cell, table
from dlbench.results.record import Result
from dlbench.results.titles import legacy_title


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
    return "\n\n".join(t.markdown() for t in tables)


def odd_values(results: list[Result]) -> list[Table]:
    """The legend of `?`: which stored values of these results are no valid figures (none: no table)."""
    rows = [[r.id[:8], r.workload, r.model, r.tag, ", ".join(r.odd)] for r in results if r.odd]
    if not rows:
        return []
    return [Table("Stored values that are not valid figures", ["Id", "Workload", "Model", "Tag", "Fields"],
                  "lllll", rows, notes=["The stored values that no table could show as a figure.",
                                 f"{ODD_LEGEND}: `dlbench export` shows it exactly."])]
