"""SQLite store of results: one row per Result, each written in its own transaction.

WAL mode lets many processes write at once and readers never block writers; a killed
writer leaves at most its own unfinished transaction behind, which SQLite rolls back.

Commands that only read (results, report, compare, export, doctor) open the store read-only:
they never create or change it, so an archived store (a file without write permission, a
read-only folder or mount) can be read; commands that write refuse such a store up front.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

from dlbench.errors import UserError
from dlbench.options import shown
from dlbench.paths import data_folder, read_only_reason, size_limit
from dlbench.results.record import FORMAT, SCHEMA_VERSION, Result, tamed
from dlbench.results import csvrows, summaries

DEFAULT_DB = "dlbench.db"  # the store's name, in the user's data folder or a working folder that has one
DB_HELP = ("Result store (SQLite). Default: $DLBENCH_DB, else a dlbench.db in the current folder if there is one, "
           "else the store every run on this machine shares, in the user's data folder "
           "(~/.local/share/dlbench/dlbench.db on Linux).")
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
CREATE INDEX IF NOT EXISTS results_by_started ON results (started);  -- the newest N without reading every row
CREATE TABLE IF NOT EXISTS tuning (
    key TEXT PRIMARY KEY,
    choice TEXT NOT NULL,
    result TEXT NOT NULL,
    stored TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS flops (
    key TEXT PRIMARY KEY,
    flops REAL NOT NULL,
    result TEXT NOT NULL,
    stored TEXT NOT NULL
);
"""

# A record as most readers need it: without its traces (the GPU monitor's readings, a traceback) and
# without every per-step sample but the steps' (`Store.results(lean=True)`).
_LEAN = ("CASE WHEN NOT json_valid(record) THEN record "  # read whole, to be refused as damaged
         "WHEN json_type(record, '$.samples.step') IS NULL "
         "THEN json_set(json_remove(record, '$.traces', '$.samples'), '$.samples', json('{}')) "
         "ELSE json_set(json_remove(record, '$.traces', '$.samples'), '$.samples', "
         "json_object('step', json_extract(record, '$.samples.step'))) END")

_COLUMNS = ("id", "schema", "started", "status", "workload", "model", "suite", "tag", "host", "record")


def one_store(path: str) -> None:
    """A command's --db naming another store than the `dlbench --db` before the command is a
    mistake: one of the two would be silently ignored."""
    given = os.environ.get(GLOBAL_DB)
    if given and Path(given).absolute() != Path(path).absolute():
        raise UserError(f"--db given twice with different stores ({given} before the command, {path} after it): "
                        f"give one")


def default_path() -> Path:
    """The store a command uses without --db: $DLBENCH_DB, else a ./dlbench.db that exists (a
    working folder's own history), else the user's store, so that runs from any folder are one
    history and the ceilings one run measured serve every later one."""
    given = os.environ.get("DLBENCH_DB")
    if given:
        return Path(given)
    if Path(DEFAULT_DB).exists():
        return Path(DEFAULT_DB)
    return user_store()


def user_store() -> Path:
    """The store every run of this user on this machine shares (paths.data_folder)."""
    return data_folder() / DEFAULT_DB


def new_store_line(path: Path) -> str:
    """What the command that creates the user's store says, once: where results go, and how to
    choose another store."""
    return f"results go to {path}, the store your runs from any folder share (--db or DLBENCH_DB choose another)"


WAIT_ENV = "DLBENCH_DB_WAIT"  # seconds a command waits for a store another process holds locked
DEFAULT_WAIT_S = 60.0
_QUIET_WAIT_S = 1.0  # writers of one store take turns in milliseconds: only a longer wait is told
T = TypeVar("T")


def lock_wait_s() -> float:
    """How long to wait for a locked store: $DLBENCH_DB_WAIT seconds, else DEFAULT_WAIT_S."""
    given = os.environ.get(WAIT_ENV)
    if not given:
        return DEFAULT_WAIT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= 86400:  # NaN too
        raise UserError(f"{WAIT_ENV} must be a number of seconds from 0 to 86400, got {given!r}")
    return seconds


class StoreLocked(UserError):
    """Another process held the store's write lock longer than this command waits."""


class NotStored(UserError):
    """Results the store could not take (locked, disk full, an I/O error), kept beside it or printed
    as JSON: the message says where and how to import them. A run that measured goes on and keeps
    its exit status: nothing it measured is lost."""


def _is_busy(error: sqlite3.OperationalError) -> bool:
    return getattr(error, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(error)


class Store:
    def __init__(self, path: str | os.PathLike | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path) if path else default_path()
        self.read_only = read_only
        if not read_only:
            check_writable(self.path)
        else:
            _check_name(self.path)
            if not self.path.exists():
                raise UserError(f"no store at {self.path}: no results yet (run a benchmark first, or give --db)")
            _check_file(self.path, reading=True)
        self.wait_s = lock_wait_s()
        new = not read_only and not self.path.exists()
        try:
            self._db = self._open_read_only() if read_only else self._open_for_writing()
        except StoreLocked as error:
            raise StoreLocked(f"{error}; nothing was run or changed") from None
        except sqlite3.DatabaseError as error:
            raise UserError(self._unusable(error)) from None
        if new and self.path == user_store():
            print(new_store_line(self.path), file=sys.stderr, flush=True)

    def _unusable(self, error: sqlite3.DatabaseError) -> str:
        limit = size_limit()
        if limit is not None and "disk I/O error" in str(error):  # SQLite says no more than this
            return (f"cannot write store {self.path} or the -wal and -shm files SQLite keeps beside it (32 KiB and "
                    f"more) within this process's file-size limit of {limit / 1024:g} KiB (ulimit -f); the store "
                    f"is unchanged: raise the limit (ulimit -f unlimited)")
        if _is_full(error):
            return f"cannot write store {self.path}: the disk it is on is full; nothing was run or changed"
        return f"store {self.path} is not a usable dlbench database: {error}"

    def _patiently(self, work: Callable[[], T], db: sqlite3.Connection | None = None) -> T:
        """`work()`, waiting while another process holds the store locked: told on stderr after a
        moment, and at most `wait_s` in all (then StoreLocked), never the minutes SQLite would."""
        db = db or self._db
        quiet = min(_QUIET_WAIT_S, self.wait_s)
        db.execute(f"PRAGMA busy_timeout={int(quiet * 1000)}")
        try:
            return work()
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or self.wait_s <= quiet:
                if _is_busy(error):
                    raise StoreLocked(self._locked_line()) from None
                raise
        print(f"the store {self.path} is locked by another process; waiting up to {self.wait_s:g} s "
              f"(${WAIT_ENV} sets how long)", file=sys.stderr, flush=True)
        db.execute(f"PRAGMA busy_timeout={int((self.wait_s - quiet) * 1000)}")
        try:
            return work()
        except sqlite3.OperationalError as error:
            if _is_busy(error):
                raise StoreLocked(self._locked_line()) from None
            raise
        finally:
            db.execute(f"PRAGMA busy_timeout={int(quiet * 1000)}")

    def _locked_line(self) -> str:
        return f"the store {self.path} is locked by another process (waited {self.wait_s:g} s)"

    def _open_for_writing(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        self._check_columns(db)  # before anything is written: another program's file stays as it is

        def prepare() -> None:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            db.executescript(summaries.SCHEMA)
            db.executescript(csvrows.SCHEMA)

        self._patiently(prepare, db)
        return db

    def _check_columns(self, db: sqlite3.Connection) -> None:
        """A `results` table of another program (other columns) is refused, never written into or
        misread: SQLite's `CREATE TABLE IF NOT EXISTS` keeps such a table as it is."""
        found = tuple(row[1] for row in self._patiently(lambda: db.execute("PRAGMA table_info(results)").fetchall(), db))
        if found and found != _COLUMNS:  # none: no results table yet
            raise UserError(f"store {self.path} is a SQLite database but not a dlbench store (its results table "
                            f"has the columns {shown(', '.join(found))}); use --db to choose another file")

    def _open_read_only(self) -> sqlite3.Connection:
        uri = self.path.absolute().as_uri()
        if read_only_reason(self.path) or read_only_reason(self.path.absolute().parent):
            # An archive: read as it is on disk (SQLite could not make its -wal and -shm files
            # beside it, and must not). Results a killed writer left in a -wal file are not seen.
            db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
        else:  # read-write but without creating anything, so SQLite tidies its WAL files on close
            db = sqlite3.connect(f"{uri}?mode=rw", uri=True, timeout=0, isolation_level=None)
        try:
            tables = self._patiently(lambda: _tables(db), db)
        except sqlite3.OperationalError:
            if size_limit() is None or self._wal_holds_results():
                raise
            # Under a file-size limit below the 32 KiB of SQLite's -shm file: with no -wal file
            # holding results, the store on disk is all there is, and read as it is.
            db.close()
            db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
            tables = _tables(db)
        if tables and "results" not in tables:
            raise UserError(f"store {self.path} is a SQLite database but not a dlbench store (it has no results table)")
        if tables:
            self._check_columns(db)
        self._empty = not tables
        return db

    def _wal_holds_results(self) -> bool:
        wal = self.path.with_name(self.path.name + "-wal")
        return wal.exists() and wal.stat().st_size > 0

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
        """Write results in one transaction, skipping ids already stored; returns how many were new.
        Where the store cannot take them (locked past the wait, a full disk, an I/O error), they are
        kept in a file beside the store that `dlbench import` adds later, or, where even that cannot
        be written, printed on stderr as JSON lines: NotStored says where. A measurement is never lost."""
        results = list(results)
        rows = [_row(r) for r in results]
        summary_rows = summaries.rows(results)
        csv_rows = csvrows.rows(self._db, rows, _FLAT_CUT)

        def write() -> int:
            with _transaction(self._db):
                before = self._db.total_changes
                self._db.executemany("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
                added = self._db.total_changes - before
                summaries.write(self._db, summary_rows)
                csvrows.write(self._db, csv_rows)
                return added

        try:
            return self._patiently(write)
        except (StoreLocked, sqlite3.Error) as error:
            why = str(error) if isinstance(error, StoreLocked) else self._unwritable(error)
        raise self._kept(results, why)  # outside the except: no chained error reaches the user

    def add_kept(self, results: list[Result]) -> str | None:
        """`add_many`; where the store cannot take the results, the line that says where they are."""
        try:
            self.add_many(results)
        except NotStored as error:
            return str(error)
        return None

    def _unwritable(self, error: sqlite3.Error) -> str:
        if _is_full(error):
            return f"cannot write the store {self.path}: the disk it is on is full"
        limit = size_limit()
        if limit is not None and "I/O" in str(error):  # how SQLite reports a write past `ulimit -f`
            return (f"cannot write the store {self.path} within this process's file-size limit of "
                    f"{limit / 1024:g} KiB (ulimit -f)")
        return f"cannot write the store {self.path}: {error}"

    def _kept(self, results: list[Result], why: str) -> NotStored:
        """`results` kept beside the store, else printed; the error that says where."""
        db = "" if self.path == default_path() else f" --db {self.path}"
        one = len(results) == 1
        them, it = ("the result is", "it") if one else (f"the {len(results)} results are", "them")
        try:
            kept = self._keep_pending(results)
        except OSError as error:  # the same full disk, a name too long: stderr is all that is left
            _print_records(results)
            return NotStored(f"{why}, and no file beside it could hold {it} either ({error.strerror or error}): "
                             f"{them} printed above as JSON, one line each; save {it} in a file and add {it} "
                             f"with `dlbench import FILE{db}`")
        return NotStored(f"{why}: {them} saved in {kept}; add {it} with `dlbench import {kept}{db}`")

    def _keep_pending(self, results: list[Result]) -> Path:
        """The pending file, written whole or not at all: through a temporary file renamed over it, so
        a full disk never leaves an empty or half-written one that an import would misread."""
        from dlbench.results.exchange import write_jsonl

        kept = self.path.with_name(f"{self.path.name}.pending-{results[0].id[:12] if results else 'none'}.jsonl")
        # a temporary name `dlbench import FOLDER` skips (it reads *.jsonl)
        temporary = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
        try:
            # kept before (the same id): a second run's results are added to the first's, never replace them
            earlier = kept.read_text(encoding="utf-8") if kept.exists() else ""
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(earlier)
                write_jsonl(results, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, kept)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise
        return kept

    def merge(self, results: list[Result]) -> int:
        """Import: add the results whose ids are new, all in one transaction, and return how many.
        A result whose id is stored (or given twice) with other contents is a conflict that
        refuses the whole import: keeping either silently would lose the other."""
        given: dict[str, Result] = {}
        for r in results:
            if given.setdefault(r.id, r) != r:
                raise UserError(f"record {_short(r.id)} appears twice with different contents: nothing imported")

        def write() -> int:
            with _transaction(self._db):
                for key, text in self._stored(list(given)):
                    if self._record(key, text) != given[key]:
                        raise UserError(f"record {_short(key)} conflicts with the stored result of the same id "
                                        f"(different contents): nothing imported")
                before = self._db.total_changes
                rows = [_row(r) for r in given.values()]
                self._db.executemany("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
                added = self._db.total_changes - before
                summaries.write(self._db, summaries.rows(given.values()))
                csvrows.write(self._db, csvrows.rows(self._db, rows, _FLAT_CUT))
                return added

        try:
            return self._patiently(write)
        except StoreLocked as error:
            raise StoreLocked(f"{error}: nothing imported; run the import again later") from None
        except sqlite3.Error as error:  # a full disk, an I/O error: the transaction is rolled back
            raise UserError(f"{self._unwritable(error)}: nothing imported") from None

    def merge_each(self, results: Iterable[Result]) -> tuple[int, int]:
        """`merge` of a stream of results (an import of any size): written IMPORT_CHUNK at a time within
        one transaction, so memory holds one chunk, never the whole import; all are kept or, where
        anything fails on the way (a bad record further on, a conflict, a full disk), none, and the
        error says so. Returns (how many were new, how many were given)."""
        seen: dict[str, bytes] = {}  # each id's digest: a record given twice with other contents is refused
        transaction = _transaction(self._db)
        try:
            self._patiently(transaction.__enter__)
        except StoreLocked as error:
            raise StoreLocked(f"{error}: nothing imported; run the import again later") from None
        added = given = 0
        try:
            for chunk in _chunks(results, IMPORT_CHUNK):
                added += self._merge_chunk(chunk, seen)
                given += len(chunk)
            transaction.__exit__(None, None, None)
        except sqlite3.Error as error:  # a full disk, an I/O error: rolled back
            transaction.__exit__(type(error), error, None)
            raise UserError(f"{self._unwritable(error)}: nothing imported") from None
        except UserError as error:
            transaction.__exit__(type(error), error, None)
            text = str(error)
            raise UserError(text if text.endswith("nothing imported") else f"{text}; nothing imported") from None
        except BaseException as error:  # an interrupt: nothing is kept either
            transaction.__exit__(type(error), error, None)
            raise
        return added, given

    def _merge_chunk(self, chunk: list[Result], seen: dict[str, bytes]) -> int:
        rows = {}
        for r in chunk:
            row = _row(r)
            digest = hashlib.blake2b(row[-1].encode("utf-8", "surrogatepass"), digest_size=16).digest()
            if seen.setdefault(r.id, digest) != digest:
                raise UserError(f"record {_short(r.id)} appears twice with different contents: nothing imported")
            rows.setdefault(r.id, (r, row))
        for key, text in self._stored(list(rows)):
            if self._record(key, text) != rows[key][0]:
                raise UserError(f"record {_short(key)} conflicts with the stored result of the same id "
                                f"(different contents): nothing imported")
        before = self._db.total_changes
        self._db.executemany("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
                             [row for _, row in rows.values()])
        added = self._db.total_changes - before
        summaries.write(self._db, summaries.rows(r for r, _ in rows.values()))
        csvrows.write(self._db, csvrows.rows(self._db, [row for _, row in rows.values()], _FLAT_CUT))
        return added

    def _stored(self, ids: list[str]) -> Iterator[tuple]:
        for start in range(0, len(ids), 500):  # SQLite takes a bounded number of parameters
            chunk = ids[start:start + 500]
            yield from self._db.execute(f"SELECT id, record FROM results WHERE id IN ({','.join('?' * len(chunk))})",
                                        chunk).fetchall()

    def results(self, *, workload: str | None = None, suite: str | None = None, status: str | None = None,
                exact: bool = False, lean: bool = False, newest: int | None = None) -> list[Result]:
        """Stored results, oldest first, as reports may read them (`record.tamed`: a stored value
        that is no valid figure is marked, never raised on); `exact`: as stored (export). `lean`:
        without what only a few readers need and most of a record's size is (the traces, and every
        per-step sample but the steps'), read by SQLite before Python parses anything; `complete`
        gives the whole records back. `newest`: only the newest N."""
        query, args = f"SELECT id, {_LEAN if lean else 'record'} FROM results WHERE 1=1", []
        for column, value in (("workload", workload), ("suite", suite), ("status", status)):
            if value is not None:
                query += f" AND {column} = ?"
                args.append(value)
        if newest is not None:
            rows = self._query(query + " ORDER BY started DESC, rowid DESC LIMIT ?", [*args, newest])[::-1]
        else:
            rows = self._query(query + " ORDER BY started, rowid", args)
        found = [self._record(key, text) for key, text in rows]
        return found if exact else [tamed(r) for r in found]

    def complete(self, results: list[Result]) -> list[Result]:
        """`results` (read `lean`) with everything stored in them, read again by id: for the few a
        reader looks at closely (the runs the doctor judges)."""
        by_id = {}
        ids = [r.id for r in results]
        for start in range(0, len(ids), 500):  # SQLite takes a bounded number of parameters
            chunk = ids[start:start + 500]
            rows = self._query(f"SELECT id, record FROM results WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            by_id.update((key, tamed(self._record(key, text))) for key, text in rows)
        return [by_id.get(r.id, r) for r in results]

    def summaries(self, *, suite: str | None = None) -> list[summaries.Summary] | None:
        """Every result's summary row (results/summaries.py), oldest first, for readers that choose in
        them which records to read. A store made before summaries were kept gets them first, once, where
        it can be written; None where it has none and cannot be given them (an archive, a record no
        summary can be made of): the reader then reads every record, as before."""
        if self.read_only and self._empty:
            return []
        try:
            if self._patiently(lambda: summaries.missing(self._db)):
                if read_only_reason(self.path) or read_only_reason(self.path.absolute().parent):
                    return None
                self._patiently(lambda: summaries.fill(self._db, self._record, lambda: _transaction(self._db),
                                                       summaries.told_on_stderr, _LEAN))
            return self._patiently(lambda: summaries.read(self._db, suite=suite))
        except (sqlite3.DatabaseError, UserError, ValueError, TypeError, KeyError, AttributeError):
            return None  # a damaged record or a locked store: read whole, where that says why

    def records(self, ids: list[str], *, lean: bool = False) -> list[Result]:
        """The results of these ids, in the order given (as `results` reads them: tamed), lean or whole."""
        found: dict[str, Result] = {}
        for start in range(0, len(ids), 500):  # SQLite takes a bounded number of parameters
            chunk = ids[start:start + 500]
            rows = self._query(f"SELECT id, {_LEAN if lean else 'record'} FROM results "
                               f"WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            found.update((key, tamed(self._record(key, text))) for key, text in rows)
        return [found[key] for key in ids if key in found]

    def count(self, *, status: str | None = None) -> int:
        rows = self._query("SELECT COUNT(*) FROM results" + (" WHERE status = ?" if status else ""),
                           [status] if status else [])
        return rows[0][0] if rows else 0

    def exported(self, *, flat: bool = False) -> Iterator[str | Result]:
        """Every stored result, oldest first, one at a time (an export of 100,000 never holds them all):
        a record stored by this schema as its stored JSON text, which is what an export writes of it;
        any other (an older schema, a record SQLite does not read as JSON) as a Result, exactly.
        `flat`: the text without what no flat row holds (samples, traces, phase statistics)."""
        if self.read_only and self._empty:
            return
        # The order is found on the small columns alone: ORDER BY over the records themselves sorts the
        # whole store's text through temporary files (14 of the 15 s of exporting 100,000 results).
        order = [rowid for (rowid,) in self._query("SELECT rowid FROM results ORDER BY started, rowid", [])]
        for chunk in _chunks(order, EXPORT_CHUNK):
            for key, schema, text in self._export_chunk(chunk, flat):
                yield text if self._is_current(schema, text, flat) else self._record(key, text)

    def kept_csv(self) -> csvrows.Kept | None:
        """Every result's CSV row kept in the store (results/csvrows.py), in export order, for `export --format
        csv`. A store made before rows were kept gets them first, once, where it can be written; None where it
        has none and cannot be given them (an archive) or a record has none: the export then builds the rows
        from the records, as before."""
        if self.read_only and self._empty:
            return None
        try:
            if self._patiently(lambda: csvrows.missing(self._db)):
                if read_only_reason(self.path) or read_only_reason(self.path.absolute().parent):
                    return None
                self._patiently(lambda: csvrows.fill(self._db, lambda: _transaction(self._db), _FLAT_CUT,
                                                     csvrows.told_on_stderr))
            return self._patiently(lambda: csvrows.kept(self._db, self._query))
        except (sqlite3.DatabaseError, UserError):
            return None  # a locked or damaged store: built from the records, where that says why

    def _export_chunk(self, rowids: list[int], flat: bool) -> list[tuple]:
        """These rows' (id, schema, text) in the order given. The text of a flat export is the record less
        its samples, traces and phase statistics, cut by SQLite, which stops on a record it does not read
        as JSON (a NaN): only a chunk that holds one is read again, checking each record first. It also lacks
        the system's facts that name no machine (`_FLAT_CUT`)."""
        marks = ",".join("?" * len(rowids))
        cut = f"json_remove(record, {_FLAT_CUT})"
        query = "SELECT rowid, id, {schema}, {text} FROM results WHERE rowid IN (" + marks + ")"
        try:
            rows = self._query(query.format(schema="schema", text=cut if flat else "record"), rowids)
        except UserError:
            if not flat:
                raise
            rows = self._query(query.format(schema="CASE WHEN json_valid(record) THEN schema END",  # else read whole
                                            text=f"CASE WHEN json_valid(record) THEN {cut} ELSE record END"), rowids)
        found = {rowid: rest for rowid, *rest in rows}
        return [found[rowid] for rowid in rowids if rowid in found]

    @staticmethod
    def _is_current(schema: object, text: object, flat: bool) -> bool:
        """Whether the stored text is what an export writes of its record: a record stored by this schema
        (the row's schema column, written with it) that reads as JSON. Checked without parsing 14 kB of
        figures: the text names the format at the top level, as every record this schema wrote does, and
        ends where an object ends (a flat text was parsed by SQLite already)."""
        if schema != SCHEMA_VERSION or not isinstance(text, str):
            return False
        return flat or (f'"format": "{FORMAT}"' in text and text.rstrip().endswith("}"))

    def _query(self, query: str, args: list) -> list[tuple]:
        if self.read_only and self._empty:  # an empty SQLite file: a store with nothing in it yet
            return []
        try:
            return self._patiently(lambda: self._db.execute(query, args).fetchall())
        except sqlite3.DatabaseError as error:
            raise UserError(f"store {self.path} is damaged or not a dlbench store: {error}") from None

    def _record(self, key: object, text: object) -> Result:
        try:
            return Result.from_dict(json.loads(text), strict=False)  # type: ignore[arg-type]
        except (ValueError, TypeError, RecursionError) as error:
            raise UserError(f"store {self.path} holds a damaged record ({shown(key)}): {error}") from None

    def tuned(self, key: str) -> dict | None:
        """The tuning stored under `key` (launch/tuning.py): {"choice", "result", "stored"}; None when
        there is none (a store made before tunings were kept has no table for them). ValueError says
        why a row or table that is there cannot be read (edited, damaged, another program's)."""
        try:
            rows = self._patiently(lambda: self._db.execute(
                "SELECT choice, result, stored FROM tuning WHERE key = ?", [key]).fetchall())
        except sqlite3.DatabaseError as error:
            if "no such table" in str(error):
                return None
            raise ValueError(f"cannot be read from its tuning table ({error})") from None
        if not rows:
            return None
        choice, result, stored = rows[0]
        try:
            return {"choice": json.loads(choice), "result": result, "stored": stored}
        except (ValueError, TypeError, RecursionError) as error:
            raise ValueError(f"by run {run_named(result)} is not JSON ({error})") from None

    def keep_tuning(self, key: str, choice: dict, result: str, stored: str) -> None:
        """Store (or replace) the tuning under `key`, in one transaction."""
        def write() -> None:
            with _transaction(self._db):
                self._db.execute("INSERT OR REPLACE INTO tuning VALUES (?,?,?,?)",
                                 [key, json.dumps(choice, sort_keys=True), result, stored])

        self._patiently(write)

    def flop_counts(self) -> dict[str, float]:
        """The FLOPs per step counted for each configuration (launch/flopcount.py keys them); empty for a
        store made before counts were kept. A table that cannot be read is as good as empty: a count
        is only ever a saving, and the run counts again."""
        try:
            rows = self._patiently(lambda: self._db.execute("SELECT key, flops FROM flops").fetchall())
        except sqlite3.DatabaseError:
            return {}
        return {key: float(value) for key, value in rows if isinstance(value, (int, float)) and value > 0}

    def keep_flops(self, key: str, flops: float, result: str, stored: str) -> None:
        """Store (or replace) the FLOPs per step counted for `key`, in one transaction."""
        def write() -> None:
            with _transaction(self._db):
                self._db.execute("INSERT OR REPLACE INTO flops VALUES (?,?,?,?)", [key, float(flops), result, stored])

        self._patiently(write)

    def __iter__(self) -> Iterator[Result]:
        return iter(self.results())



def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _is_full(error: sqlite3.Error) -> bool:
    return getattr(error, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(error)


def _print_records(results: list[Result]) -> None:
    """The records on stderr, one JSON line each, in the export format `dlbench import` reads."""
    from dlbench.results.exchange import write_jsonl

    with contextlib.suppress(OSError, ValueError):  # stderr closed too: nothing more can be done
        sys.stderr.flush()
        write_jsonl(results, sys.stderr)
        sys.stderr.flush()


def run_named(value: object) -> str:
    """A stored run id as a message names it: its first 8 characters, quoted where a hand-edited row
    holds something that is no id."""
    text = str(value)[:8]
    return text if text.isalnum() else shown(text)


def _short(key: str) -> str:
    return f"{key[:8]}…" if len(key) > 8 else key


def _check_file(path: Path, *, reading: bool = False) -> None:
    """Refuse what is no store before SQLite touches it: a folder, a device or pipe (/dev/null
    reads as empty and swallows writes), a file that is not SQLite, and for reading an empty
    file (a store dlbench made is never empty; only a path that does not exist is a new store)."""
    if path.is_dir():
        raise UserError(f"store {path} is a directory, not a dlbench database")
    if not path.is_file():
        raise UserError(f"store {path} is not a dlbench store (it is not a regular file; use --db to choose another)")
    try:
        with open(path, "rb") as f:
            header = f.read(16)
    except OSError as error:
        raise UserError(f"cannot read store {path}: {error.strerror or error}") from None
    if not header and reading:
        raise UserError(f"store {path} is not a dlbench store (it is an empty file; use --db to choose another)")
    if header and header != b"SQLite format 3\x00":
        raise UserError(f"store {path} is not a SQLite database (use --db to choose another file)")


_BESIDE = len("-journal")  # the longest suffix SQLite adds to the store's name for a file beside it


def _check_name(path: Path) -> None:
    """A name or path longer than the file system takes ends in one line before anything touches it;
    the room SQLite needs for the files it keeps beside the store (`-journal`) is counted in."""
    folder = path.absolute().parent
    name_max = _path_limit(folder, "PC_NAME_MAX", 255)
    path_max = _path_limit(folder, "PC_PATH_MAX", 4096)
    name, whole = len(os.fsencode(path.name)) + _BESIDE, len(os.fsencode(path.absolute())) + _BESIDE
    if name > name_max:
        raise UserError(f"store name {shown(path.name)} is too long: {name - _BESIDE} bytes, where this file system "
                        f"takes at most {name_max - _BESIDE} for a store; give a shorter --db")
    if whole >= path_max:
        raise UserError(f"store path {shown(str(path))} is too long: {whole - _BESIDE} bytes, where this system takes "
                        f"at most {path_max - _BESIDE - 1} for a store; give a shorter --db")


def _path_limit(folder: Path, name: str, default: int) -> int:
    """The system's limit `name` (os.pathconf) where `folder` is, or `default` where it cannot say
    (a folder that does not exist yet, or whose own path is too long)."""
    try:
        return os.pathconf(folder if folder.is_dir() else "/", name)
    except (OSError, ValueError):
        return default


def check_writable(path: str | os.PathLike | None) -> None:
    """A writing command can open this store: refused before any work when it cannot."""
    path = Path(path) if path else default_path()
    _check_name(path)
    if path.exists():
        _check_file(path)
    folder = path.absolute().parent
    if path == user_store() and not folder.exists():
        _make_folder(folder)
    if not folder.is_dir():
        raise UserError(f"cannot create store {path}: folder {folder} does not exist")
    reason = read_only_reason(path) if path.exists() else None
    if reason is None and read_only_reason(folder):
        # WAL writes a -wal and a -shm file beside the store, so its folder must be writable too.
        reason = f"its folder {folder}: {read_only_reason(folder)}"
    if reason:
        raise UserError(f"store {path} is read-only ({reason}): results, report, compare and export can read it; "
                        f"to add results, copy it or give another --db")


def _make_folder(folder: Path) -> None:
    """The user's data folder, made for its first store; where it cannot be, one line says why."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create the folder {folder} for the result store: {error.strerror or error}; "
                        f"give --db or set DLBENCH_DB to choose another store") from None


class _transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, error, tb) -> None:
        if kind is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error:  # a full disk can fail the commit itself
                self._roll_back()
                raise
        self._roll_back()

    def _roll_back(self) -> None:
        if not self.db.in_transaction:  # SQLite ends a transaction itself on some errors (a full disk)
            return
        with contextlib.suppress(sqlite3.Error):  # the error that stopped the work is the one to tell
            self.db.execute("ROLLBACK")


IMPORT_CHUNK = 1000  # records an import holds and writes at a time


EXPORT_CHUNK = 200  # rows an export reads at a time: a few MB, never the store
# What a flat export cuts from each record before Python parses it: what no flat row holds and no check of
# it reads (the per-step samples, traces, phase statistics, and the system's facts but the host, GPUs and
# CPU that name the machine; those facts were an eighth of the text left to parse).
_FLAT_CUT = ", ".join(f"'$.{path}'" for path in (
    "samples", "traces", "metrics.stats", *(f"system.{key}" for key in (
        "os", "python", "ram_bytes", "gpu_count", "driver", "gpu_uuids", "cuda", "cudnn", "torch", "torchvision",
        "cluster", "cloud", "instance"))))


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _row(r: Result) -> tuple:
    return (
        r.id, r.schema, r.started, r.status, r.workload, r.model, r.suite, r.tag,
        r.machine.host or None, json.dumps(r.to_dict(), allow_nan=True),
    )
