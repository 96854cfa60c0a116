"""Every note printed under a report table speaks only of what that table shows: the columns it
defines are the table's columns, the marks it explains are in the table's cells, and the rows it
names (a publication's, dlbench's) are there. Checked on the reports of the published stores
(docs/data/report-*.jsonl, loaded as tests/test_report_docs.py loads them) and on small ones."""

import re
from pathlib import Path

import pytest

from conftest import cli
from dlbench import report
from dlbench.report.tables import Table
from dlbench.results.store import Store

ROOT = Path(__file__).resolve().parent.parent
STORES = sorted((ROOT / "docs" / "data").glob("report-*.jsonl"))

# (what a note says when it explains a mark, what in a cell shows the mark)
MARKS = (
    (r"†", r"†"),
    (r"(^|\s)! marks", r" !$"),
    (r"\(clamped\)", r"\(clamped\)"),
    (r"\(data-bound\)", r"\(data-bound\)"),
    (r"\(host-bound\)", r"\(host-bound\)"),
    (r"\(medians\)", r"\(medians\)"),
    (r"\(extrapolated", r"\(extrapolated"),
    (r"(^|\s)\* marks", r"\d\*$| \*$"),
)
# what a note says when it speaks of a kind of column, and the column's name
PHRASES = ((r"speeds? (?:that|it) up|\bspeedup\b", r"speedup"),
           (r"\befficiency\b", r"efficiency"),
           (r"\bweak scaling\b", r"weak scaling"))


def _name(column: str) -> str:
    return re.sub(r"\s*(\[[^\]]*\]|\([^)]*\))$", "", column).strip().lower()


def _defined(note: str, columns: list[str]) -> list[str]:
    """The names of `columns` that a note defines ('Forward, Backward: medians ...; Total: ...'). A
    published row's Check names the row first; a bracket's terms are its own ('(VM: a virtual machine;
    ...)'); a short fact ('Tag: `x`.', 'Data: generated 30 images.') is a caption, no definition."""
    if note.startswith("Check, "):
        return []
    while re.search(r"\([^()]*\)", note):
        note = re.sub(r"\([^()]*\)", "", note)
    terms = []
    for part in re.split(r"; |\. ", note):
        found = re.match(r"^([^:;]{1,48}?):\s+(.*)$", part.strip())
        if not found or len(found.group(2).split()) < 5:
            continue
        pieces = [found.group(1).strip(), *re.split(r", | and ", found.group(1).strip())]
        if all(_has(p, columns) for p in pieces[1:]):  # every name a column somewhere, else a row's label
            terms += pieces[1:]
    return terms


def _has(term: str, headers: list[str]) -> bool:
    """A column named `term`, or whose name holds it as words ('speedup' in 'Throughput speedup (…)')."""
    name = _name(term)
    return bool(name) and any(re.search(rf"(^|\s){re.escape(name)}($|\s)", _name(h)) for h in headers)


def wrong_notes(tables: list[Table]) -> list[str]:
    """What each note says that its table does not show."""
    everyone = [h for t in tables for h in t.header]
    wrong = []
    for t in tables:
        cells = ["-" if v is None else str(v) for row in t.rows for v in row]
        for note in t.notes:
            where = f"{t.title!r}: {note[:90]!r}"
            for said, shown in MARKS:
                if re.search(said, note) and not any(re.search(shown, c) for c in cells):
                    wrong.append(f"{where} explains {said!r}, which no cell shows")
            for term in _defined(note, everyone):
                if not _has(term, t.header):  # a column of another table
                    wrong.append(f"{where} defines {term!r}, a column this table does not have")
            for said, column in PHRASES:
                if re.search(said, note, re.IGNORECASE) and not any(re.search(column, h, re.IGNORECASE)
                                                                    for h in t.header):
                    wrong.append(f"{where} speaks of {column!r}, a column this table does not have")
            if note.startswith("dlbench's rows") and "dlbench" not in cells:
                wrong.append(f"{where} speaks of dlbench's rows, and the table has none")
    return wrong


@pytest.fixture(scope="module", params=[s.name for s in STORES])
def published(request, tmp_path_factory):
    db = tmp_path_factory.mktemp("notes") / "r.db"
    assert cli("import", ROOT / "docs" / "data" / request.param, "--db", db).returncode == 0
    with Store(db) as store:
        return report.tables(store.results(), with_references=True)


def test_every_note_of_the_published_reports_speaks_of_its_own_table(published):
    assert published and any(t.notes for t in published)
    assert wrong_notes(published) == []


def test_the_check_finds_a_note_of_a_column_or_mark_the_table_lacks():
    speed = Table("T train throughput", ["System", "Throughput - FP32 [img/s]", "Source"], "lrl",
                  [["H200", "2,000", "NVIDIA UNet_Medical"]],
                  notes=["How many images per second each system trains, and how much mixed precision speeds that up.",
                         "Throughput: images over the time; speedup: mixed-precision throughput over full-precision throughput.",
                         "! marks a scaling efficiency above 1.", "dlbench's rows are runs tagged `x`.",
                         "† marks a published figure."])
    other = Table("U", ["Throughput speedup (FP32 - bf16)", "Scaling efficiency - FP32"], "rr", [["2.0", "0.9"]])
    found = "\n".join(wrong_notes([speed, other]))
    for said in ("'speedup', a column", "explains '(^|\\\\s)! marks'", "speaks of dlbench's rows",
                 "explains '†'", "speaks of 'efficiency'"):
        assert said in found, (said, found)
    assert wrong_notes([other]) == []
