"""SQLite store of results: one row per Result, each written in its own transaction.

WAL mode lets many processes write at once and readers never block writers; a killed
writer leaves at most its own unfinished transaction behind, which SQLite rolls back.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Iterable, Iterator

from dlbench.errors import UserError
from dlbench.results.record import Result

DEFAULT_DB = "dlbench.db"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id TEXT PRIMARY KEY,
    schema INTEGER NOT NULL,
    started TEXT NOT NULL,
    status TEXT NOT NULL,
    workload TEXT NOT NULL,
    model TEXT NOT NULL,
    suite TEXT,
    tag TEXT,
    host TEXT,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_workload ON results (workload, model);
"""


def default_path() -> Path:
    return Path(os.environ.get("DLBENCH_DB") or DEFAULT_DB)


class Store:
    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path else default_path()
        if self.path.is_dir():
            raise UserError(f"store {self.path} is a directory, not a dlbench database")
        if self.path.exists():
            self._check_header()
        try:
            self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as error:
            raise UserError(f"store {self.path} is not a usable dlbench database: {error}") from None

    def _check_header(self) -> None:
        # Refuse a file that is not SQLite before SQLite touches it.
        with open(self.path, "rb") as f:
            header = f.read(16)
        if header and header != b"SQLite format 3\x00":
            raise UserError(f"store {self.path} is not a SQLite database (use --db to choose another file)")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, result: Result) -> bool:
        """Write one result in one transaction; False if a result with its id is already stored."""
        return self.add_many([result]) == 1

    def add_many(self, results: Iterable[Result]) -> int:
        """Write results in one transaction, skipping ids already stored; returns how many were new."""
        rows = [_row(r) for r in results]
        with _transaction(self._db):
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            return self._db.total_changes - before

    def results(self, *, workload: str | None = None, suite: str | None = None, status: str | None = None) -> list[Result]:
        """Stored results, oldest first."""
        query, args = "SELECT record FROM results WHERE 1=1", []
        for column, value in (("workload", workload), ("suite", suite), ("status", status)):
            if value is not None:
                query += f" AND {column} = ?"
                args.append(value)
        query += " ORDER BY started, rowid"
        return [Result.from_dict(json.loads(row[0])) for row in self._db.execute(query, args)]

    def __iter__(self) -> Iterator[Result]:
        return iter(self.results())

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]


class _transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, error, tb) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def _row(r: Result) -> tuple:
    return (
        r.id, r.schema, r.started, r.status, r.workload, r.model, r.suite, r.tag,
        r.system.get("host"), json.dumps(r.to_dict(), allow_nan=True),
    )
