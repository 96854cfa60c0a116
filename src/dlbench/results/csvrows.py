"""Each result's CSV row kept in the store beside its record, so that `export --format csv` of 100,000
results writes rows it reads as text instead of reading and parsing 1.3 GB of records (8 of its 16 s).

A row is the result's flat row (`exchange`) as one CSV line, its cells in the row's own column order,
and the id of its column set (the ordered names, kept once in `csv_columns`: most results share a
handful). It is made by the code an export used before, from the same text, so the file is the same.
A row is written in the transaction that stores its result; a store made before the table existed gets
its rows once, in chunks that each commit (an interrupted fill goes on where it stopped), the first
time an export can write it; a store that cannot be written (an archive) is exported from its records.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from dlbench.results.exchange import _cells, _line_of, _text_row, flat_row
from dlbench.results.record import SCHEMA_VERSION, Result

SCHEMA = """
CREATE TABLE IF NOT EXISTS csv_columns (
    id INTEGER PRIMARY KEY,
    names TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS csv_rows (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    started TEXT NOT NULL,
    columns INTEGER,
    line TEXT
);
CREATE INDEX IF NOT EXISTS csv_rows_in_order ON csv_rows (started, seq, columns, id);
"""
# seq: the result's rowid, so that the rows come in the order an export reads the results (started,
# rowid) from this table alone. columns and line NULL: no row could be made of the record, and an
# export builds every row from the records, which says what is wrong with that one.
_INSERT = "INSERT OR IGNORE INTO csv_rows VALUES (?, (SELECT rowid FROM results WHERE id = ?), ?, ?, ?)"
FILL_CHUNK = 2000  # records read and committed at a time while an older store is filled in
READ_CHUNK = 1000  # rows an export reads at a time
_TOLD_EVERY_S = 5.0


@dataclass(frozen=True)
class Kept:
    """A store's CSV rows in export order: the column sets in the order they first appear, and each
    row as (its set's place in `sets`, its line)."""
    sets: list[tuple[str, ...]]
    lines: Iterator[tuple[int, str]]


def made(key: str, schema: object, cut: str | None, whole: str) -> tuple[tuple[str, ...], str] | None:
    """The column names and CSV line of one stored result, as an export built them from its row of
    `Store._export_chunk`: `cut` is the record less what no flat row holds (None where SQLite does not
    read the record as JSON), `whole` the record. None where no row can be made of it."""
    try:
        if cut is not None and schema == SCHEMA_VERSION:
            row = _text_row(cut)
        else:
            row = flat_row(Result.from_dict(json.loads(cut if cut is not None else whole), strict=False))
        return tuple(row), _line_of(_cells(row))
    except Exception:  # noqa: BLE001 - a kept row is only ever a saving; the export says what is wrong
        return None


class _Sets:
    """The ids of column sets, interned in `csv_columns` and remembered for this connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.ids = db, {}

    def id(self, names: tuple[str, ...]) -> int:
        found = self.ids.get(names)
        if found is None:
            text = json.dumps(names)
            self.db.execute("INSERT OR IGNORE INTO csv_columns (names) VALUES (?)", [text])
            found = self.ids[names] = self.db.execute("SELECT id FROM csv_columns WHERE names = ?",
                                                      [text]).fetchone()[0]
        return found


def cut_of(db: sqlite3.Connection, text: str, cut: str) -> str | None:
    """`text` less the paths `cut` names, by SQLite as an export cuts it; None where SQLite does not read
    it as JSON (a NaN)."""
    return db.execute(f"SELECT CASE WHEN json_valid(?1) THEN json_remove(?1, {cut}) END", [text]).fetchone()[0]


def rows(db: sqlite3.Connection, results: list[tuple], cut: str) -> list[tuple]:
    """(id, started, names, line) of each stored row (id, schema, started, ..., record), made before its
    transaction; a row of which none can be made is kept as such (names and line None)."""
    found = []
    for key, schema, started, *_, text in results:
        try:
            one = made(key, schema, cut_of(db, text, cut), text)
        except sqlite3.Error:
            one = None
        found.append((key, started, *(one or (None, None))))
    return found


def write(db: sqlite3.Connection, made_rows: list[tuple]) -> None:
    """Rows from `rows`, in the caller's transaction, after their results rows."""
    sets = _Sets(db)
    db.executemany(_INSERT, [(key, key, started, None if names is None else sets.id(names), line)
                             for key, started, names, line in made_rows])


def missing(db: sqlite3.Connection) -> int:
    """Results without a CSV row; every result where the table does not exist yet."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'csv_rows'").fetchone() is None:
        return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    return db.execute("SELECT COUNT(*) FROM results WHERE id NOT IN (SELECT id FROM csv_rows)").fetchone()[0]


def fill(db: sqlite3.Connection, begin: Callable, cut: str, tell: Callable[[str], None] | None = None) -> int:
    """Write the CSV row of every result that has none, FILL_CHUNK at a time, each chunk its own
    transaction (`begin()` opens one): an interrupted fill keeps what it committed. `tell(line)` hears
    the progress of a long fill. Returns how many rows were written."""
    todo = missing(db)
    if not todo:
        return 0
    db.executescript(SCHEMA)
    done, told, last = 0, time.monotonic(), -1
    valid = "json_valid(record)"
    while True:  # on from the last rowid read: each chunk's query never walks the rows before it again
        chunk = db.execute(f"SELECT rowid, id, schema, started, CASE WHEN {valid} THEN json_remove(record, {cut}) END, "
                           f"CASE WHEN {valid} THEN NULL ELSE record END FROM results WHERE rowid > ? AND id NOT IN "
                           "(SELECT id FROM csv_rows) ORDER BY rowid LIMIT ?", [last, FILL_CHUNK]).fetchall()
        if not chunk:
            return done
        last = chunk[-1][0]
        made_rows = [(key, started, *(made(key, schema, text, whole) or (None, None)))
                     for _, key, schema, started, text, whole in chunk]
        with begin():
            write(db, made_rows)
        done += len(chunk)
        if tell is not None and time.monotonic() - told >= _TOLD_EVERY_S:
            tell(f"keeping the store's older results as CSV rows for fast exports: {done:,}/{todo:,}")
            told = time.monotonic()


def kept(db: sqlite3.Connection, query: Callable[[str, list], list[tuple]]) -> Kept | None:
    """The store's CSV rows in export order (started, then the order stored); None where a result has
    none that can be written as it is (the export then builds every row from the records). `query(sql, args)`
    reads the lines as the store reads (waiting for a lock, one line for a damaged store)."""
    order = db.execute("SELECT rowid, columns FROM csv_rows WHERE id IN (SELECT id FROM results) "
                       "ORDER BY started, seq").fetchall()
    places: dict[object, int] = {}
    for _, columns in order:
        if columns not in places:
            if columns is None:
                return None
            places[columns] = len(places)
    names = dict(db.execute("SELECT id, names FROM csv_columns"))
    if any(key not in names for key in places):
        return None
    sets = [tuple(json.loads(names[key])) for key in places]
    return Kept(sets, _lines(query, [(rowid, places[columns]) for rowid, columns in order]))


def _lines(query: Callable[[str, list], list[tuple]], order: list[tuple[int, int]]) -> Iterator[tuple[int, str]]:
    for start in range(0, len(order), READ_CHUNK):
        chunk = order[start:start + READ_CHUNK]
        found = dict(query(f"SELECT rowid, line FROM csv_rows WHERE rowid IN ({','.join('?' * len(chunk))})",
                           [rowid for rowid, _ in chunk]))
        for rowid, place in chunk:
            yield place, found[rowid]


def told_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
