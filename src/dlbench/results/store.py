"""SQLite store of results: one row per Result, each written in its own transaction.

WAL mode lets many processes write at once and readers never block writers; a killed
writer leaves at most its own unfinished transaction behind, which SQLite rolls back.

Commands that only read (results, report, compare, export, doctor) open the store read-only:
they never create or change it, so an archived store (a file without write permission, a
read-only folder or mount) can be read; commands that write refuse such a store up front.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Iterable, Iterator

from dlbench.errors import UserError
from dlbench.options import shown
from dlbench.paths import read_only_reason
from dlbench.results.record import Result, tamed

DEFAULT_DB = "dlbench.db"
DB_HELP = "Result store (SQLite). Default: $DLBENCH_DB or ./dlbench.db."
GLOBAL_DB = "DLBENCH_GLOBAL_DB"  # the `dlbench --db X` of this call, set by the command line
TAG_HELP = "Free text stored with every result, to find runs later."
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


def one_store(path: str) -> None:
    """A command's --db naming another store than the `dlbench --db` before the command is a
    mistake: one of the two would be silently ignored."""
    given = os.environ.get(GLOBAL_DB)
    if given and Path(given).absolute() != Path(path).absolute():
        raise UserError(f"--db given twice with different stores ({given} before the command, {path} after it): "
                        f"give one")


def default_path() -> Path:
    return Path(os.environ.get("DLBENCH_DB") or DEFAULT_DB)


class Store:
    def __init__(self, path: str | os.PathLike | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path) if path else default_path()
        self.read_only = read_only
        if not read_only:
            check_writable(self.path)
        elif not self.path.exists():
            raise UserError(f"no store at {self.path}: no results yet (run a benchmark first, or give --db)")
        else:
            _check_file(self.path)
        try:
            self._db = self._open_read_only() if read_only else self._open_for_writing()
        except sqlite3.DatabaseError as error:
            raise UserError(f"store {self.path} is not a usable dlbench database: {error}") from None

    def _open_for_writing(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=60000")
        db.executescript(_SCHEMA)
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        uri = self.path.absolute().as_uri()
        if read_only_reason(self.path) or read_only_reason(self.path.absolute().parent):
            # An archive: read as it is on disk (SQLite could not make its -wal and -shm files
            # beside it, and must not). Results a killed writer left in a -wal file are not seen.
            db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
        else:  # read-write but without creating anything, so SQLite tidies its WAL files on close
            db = sqlite3.connect(f"{uri}?mode=rw", uri=True, timeout=60.0, isolation_level=None)
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "results" not in tables:
            raise UserError(f"store {self.path} is a SQLite database but not a dlbench store (it has no results table)")
        self._empty = not tables
        return db

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

    def results(self, *, workload: str | None = None, suite: str | None = None, status: str | None = None,
                exact: bool = False) -> list[Result]:
        """Stored results, oldest first, as reports may read them (`record.tamed`: a stored value
        that is no valid figure is marked, never raised on); `exact`: as stored (export)."""
        query, args = "SELECT id, record FROM results WHERE 1=1", []
        for column, value in (("workload", workload), ("suite", suite), ("status", status)):
            if value is not None:
                query += f" AND {column} = ?"
                args.append(value)
        query += " ORDER BY started, rowid"
        found = [self._record(key, text) for key, text in self._query(query, args)]
        return found if exact else [tamed(r) for r in found]

    def _query(self, query: str, args: list) -> list[tuple]:
        if self.read_only and self._empty:  # an empty SQLite file: a store with nothing in it yet
            return []
        try:
            return self._db.execute(query, args).fetchall()
        except sqlite3.DatabaseError as error:
            raise UserError(f"store {self.path} is damaged or not a dlbench store: {error}") from None

    def _record(self, key: object, text: object) -> Result:
        try:
            return Result.from_dict(json.loads(text), strict=False)  # type: ignore[arg-type]
        except (ValueError, TypeError, RecursionError) as error:
            raise UserError(f"store {self.path} holds a damaged record ({shown(key)}): {error}") from None

    def __iter__(self) -> Iterator[Result]:
        return iter(self.results())

    def count(self) -> int:
        rows = self._query("SELECT COUNT(*) FROM results", [])
        return rows[0][0] if rows else 0


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise UserError(f"store {path} is a directory, not a dlbench database")
    # Refuse a file that is not SQLite before SQLite touches it.
    try:
        with open(path, "rb") as f:
            header = f.read(16)
    except OSError as error:
        raise UserError(f"cannot read store {path}: {error.strerror or error}") from None
    if header and header != b"SQLite format 3\x00":
        raise UserError(f"store {path} is not a SQLite database (use --db to choose another file)")


def check_writable(path: str | os.PathLike | None) -> None:
    """A writing command can open this store: refused before any work when it cannot."""
    path = Path(path) if path else default_path()
    if path.exists() or path.is_dir():
        _check_file(path)
    folder = path.absolute().parent
    if not folder.is_dir():
        raise UserError(f"cannot create store {path}: folder {folder} does not exist")
    reason = read_only_reason(path) if path.exists() else None
    if reason is None and read_only_reason(folder):
        # WAL writes a -wal and a -shm file beside the store, so its folder must be writable too.
        reason = f"its folder {folder}: {read_only_reason(folder)}"
    if reason:
        raise UserError(f"store {path} is read-only ({reason}): results, report, compare and export can read it; "
                        f"to add results, copy it or give another --db")


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
