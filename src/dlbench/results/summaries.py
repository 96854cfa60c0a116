"""A small table beside the results: one row per result with what choosing runs needs (its
configuration and machine, status, date, tag, suite, repeat set and headline figures), so that
`report` and `doctor` on a store of 100,000 results choose in SQL and parse only the records they
show, instead of every record (half a millisecond each in Python).

A row is written in the transaction that stores its result. A store made before the table existed
gets its rows once, in chunks that each commit (an interrupted fill goes on where it stopped), the
first time a command that reads it can write it; a store that cannot be written (an archive) is read
whole as before.
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Iterable

from dlbench.results.record import Result, system_label, tamed
from dlbench.results.spread import step_samples

SCHEMA = """
CREATE TABLE IF NOT EXISTS summaries (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    started TEXT NOT NULL,
    status TEXT NOT NULL,
    workload TEXT NOT NULL,
    suite TEXT,
    tag TEXT,
    spec TEXT NOT NULL,
    host TEXT,
    device TEXT NOT NULL,
    repeat_set TEXT,
    throughput REAL,
    unit TEXT,
    step_median REAL,
    timed INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS summaries_by_started ON summaries (started, seq);
"""
# seq: the result's rowid, so that runs of the same second keep the order the store reads them in
_INSERT = ("INSERT OR IGNORE INTO summaries VALUES (?, (SELECT rowid FROM results WHERE id = ?), "
           "?,?,?,?,?,?,?,?,?,?,?,?,?)")
FILL_CHUNK = 2000  # records parsed and committed at a time while an older store is filled in
_TOLD_EVERY_S = 5.0


@dataclass(frozen=True)
class Summary:
    id: str
    started: str
    status: str
    workload: str
    suite: str | None
    tag: str | None
    spec: str  # the spec as JSON, keys sorted: equal text, equal configuration
    host: str | None
    device: str  # the device label (machine_key's second part)
    repeat_set: str | None
    throughput: float | None
    unit: str | None
    step_median: float | None  # statistics.median of spread.step_samples, as spread.step_rate takes it
    timed: bool  # report.compare.timed holds for its steps

    @property
    def machine(self) -> tuple[str, str]:
        return self.host, self.device


def row(r: Result) -> tuple:
    m = r.measured  # read once: a record's measurement is most of what a row costs
    device = m.run.device
    # the machine as system.records.machine_key names it (the GPU or CPU label of its system)
    host, label = r.machine.host, system_label(r.system, str(r.spec.get("device", "") if device is None
                                                                      else device))
    value, unit = m.throughput.value, m.throughput.unit
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        value = None
    steps = step_samples(r)  # the steps runs are compared by (results/spread.py)
    repeat_set = m.run.repeat_set
    return (r.id, r.id, r.started, r.status, r.workload, r.suite, r.tag,
            json.dumps(r.spec, sort_keys=True, default=str), host if host is None else str(host), str(label),
            repeat_set if isinstance(repeat_set, str) else None,
            value, unit if isinstance(unit, str) else None, _median(steps), _timed(steps))


def _median(steps: object) -> float | None:
    if not isinstance(steps, list) or not steps:
        return None
    try:
        middle = statistics.median(steps)
    except TypeError:
        return None
    return float(middle) if isinstance(middle, (int, float)) and not isinstance(middle, bool) else None


def _timed(steps: object) -> bool:
    """report.compare.timed's test: finite step times whose median is positive."""
    found = [float(v) for v in (steps if isinstance(steps, list) else ())
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return bool(found) and statistics.median(found) > 0


def rows(results: Iterable[Result]) -> list[tuple]:
    """The summary rows of `results`, made before their transaction: a record no row can be made of
    (a figure of another type) gets none, and never stops its result from being stored (readers of a
    store with such a record read it whole)."""
    made = []
    for r in results:
        try:
            made.append(row(r))
        except Exception:  # noqa: BLE001 - a summary is only ever a saving
            continue
    return made


def write(db: sqlite3.Connection, made: list[tuple]) -> None:
    """Rows from `rows`, in the caller's transaction, after their results rows."""
    db.executemany(_INSERT, made)


def missing(db: sqlite3.Connection) -> int:
    """Results without a summary row; every result where the table does not exist yet."""
    if not _has_table(db):
        return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    return db.execute("SELECT COUNT(*) FROM results WHERE id NOT IN (SELECT id FROM summaries)").fetchone()[0]


def _has_table(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'summaries'").fetchone() is not None


def fill(db: sqlite3.Connection, parse, begin, tell=None, column: str = "record") -> int:
    """Write the summary rows of every result that has none, FILL_CHUNK at a time, each chunk its own
    transaction (`begin()` opens one, as the store's writers do): an interrupted fill keeps what it
    committed. `column`: what of each record is read (the store's lean read: a summary needs only its
    steps of the samples); `parse(id, text)` reads it as the store does; `tell(line)` hears the
    progress of a long fill. Returns how many rows were written."""
    todo = missing(db)
    if not todo:
        return 0
    db.executescript(SCHEMA)
    done, told, last = 0, time.monotonic(), -1
    while True:  # on from the last rowid read: each chunk's query never walks the rows before it again
        rows = db.execute(f"SELECT rowid, id, {column} FROM results WHERE rowid > ? AND id NOT IN "
                          "(SELECT id FROM summaries) ORDER BY rowid LIMIT ?", [last, FILL_CHUNK]).fetchall()
        if not rows:
            return done
        last = rows[-1][0]
        summaries = [row(tamed(parse(key, text))) for _, key, text in rows]
        with begin():
            db.executemany(_INSERT, summaries)
        done += len(rows)
        if tell is not None and time.monotonic() - told >= _TOLD_EVERY_S:
            tell(f"summarising the store's older results for fast reports: {done:,}/{todo:,}")
            told = time.monotonic()


def read(db: sqlite3.Connection, *, suite: str | None = None) -> list[Summary]:
    """Every summary row, in the order the store reads its results (oldest first)."""
    query = "SELECT id, started, status, workload, suite, tag, spec, host, device, repeat_set, throughput, unit, " \
            "step_median, timed FROM summaries"
    args: list = []
    if suite is not None:
        query += " WHERE suite = ?"
        args.append(suite)
    rows = db.execute(query + " ORDER BY started, seq", args).fetchall()
    return [Summary(*values[:-1], bool(values[-1])) for values in rows]


def told_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
