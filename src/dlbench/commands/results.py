"""`dlbench results`, `export` and `import`: the stored results listed, written out and merged in;
and the check of every output path a command writes (`output_file`).

Each declares its parameters as typed options (the command line is made from them, and a
bad value ends in one line before the store is opened) and every output path is checked
before anything is read or rendered. Only `import` writes the store; the others open it
read-only, so an archived store can be read.
"""

from __future__ import annotations

import io
import itertools
import sys
from dataclasses import MISSING, dataclass
from pathlib import Path

from dlbench.errors import UserError
from dlbench.launch.view import Terminal
from dlbench.options import Options, option
from dlbench.paths import check_new_file, replacing
from dlbench.results.store import DB_HELP, IMPORT_CHUNK, Store, check_writable, default_path, one_store

OUTPUT_HELP = "Write to this file instead of stdout."


def output_file(path: str | None, db: str | None, what: str) -> Path | None:
    """The output file, checked: its folder exists and is writable, and it is not the store."""
    if path is None:
        return None
    output = Path(path)
    check_new_file(output, what)
    store = Path(db) if db else default_path()
    if output.exists() and store.exists() and output.resolve() == store.resolve():
        raise UserError(f"{output} is the result store itself; writing the {what} there would destroy the results")
    return output


@dataclass(frozen=True, kw_only=True)
class ResultsRequest(Options):
    """List stored results, newest last. Each shows its benchmark, input shape, throughput in its unit,
    machine and median step."""
    db: str | None = option(None, DB_HELP, parse=one_store)
    limit: int = option(50, "Show the newest N results.", low=1, high=10**9)
    all: bool = option(False, "Show every result (may be long: a store can hold 100,000).")
    format: str = option("table", "table, or json: one object per result and line (throughput, step time "
                                  "percentiles, batch, shape, precision, parameters, FLOPs, peak memory, system).",
                         choices=("table", "json"))


def results(request: ResultsRequest, view: Terminal) -> None:
    with Store(request.db, read_only=True) as store:
        rows = store.results(newest=None if request.all else request.limit)
        total = store.count() if len(rows) == request.limit else len(rows)
    view.results(rows) if request.format == "table" else view.summaries(rows)
    if total > len(rows):  # on stderr: a pipe of --format json gets the records alone
        view.message(f"showing the newest {len(rows):,} of {total:,} results; --limit N shows more, --all every one")


@dataclass(frozen=True, kw_only=True)
class ExportRequest(Options):
    """Export all stored results."""
    format: str = option("jsonl", "jsonl (complete, importable) or csv (flat; text that a spreadsheet would "
                                  "read as a formula starts with ').", choices=("jsonl", "csv"))
    output: str | None = option(None, "File to write (default: stdout).", short="-o")
    db: str | None = option(None, DB_HELP, parse=one_store)


def export(request: ExportRequest, view: Terminal) -> None:
    from dlbench.results import exchange

    output = output_file(request.output, request.db, "export")
    with Store(request.db, read_only=True) as store:  # read one record at a time while writing
        # CSV from the rows the store keeps ready, where it has them all; else built from the records
        kept = store.kept_csv() if request.format == "csv" else None
        records = kept if kept is not None else store.exported(flat=request.format == "csv")
        write = exchange.write_kept_csv if kept is not None else exchange.WRITERS[request.format]
        if output is None and sys.stdout.isatty():  # on a terminal, through its control-character filter
            text = io.StringIO()
            write(records, text)
            view.text(text.getvalue().rstrip("\n"))
            return
        if output is None:  # to a pipe or file: the data exactly
            write(records, sys.stdout)
            return
        with replacing(output) as f:  # a full disk, a device that refuses, the file-size limit: one line
            count = write(records, f)
    view.message(f"wrote {count} results to {output}")


@dataclass(frozen=True, kw_only=True)
class ImportRequest(Options):
    """Merge results exported on other machines; results already stored are skipped. All or nothing: a
    bad record, or one whose id is stored with other contents, refuses the whole import."""
    files: list[str] = option(MISSING, "JSON-lines files written by `dlbench export`, or folders of record files "
                                       "(e.g. a `--slurm` run's folder).", argument=True)
    db: str | None = option(None, DB_HELP, parse=one_store)


def import_(request: ImportRequest, view: Terminal) -> None:
    from dlbench.results import exchange

    check_writable(request.db)
    files = exchange.record_files([Path(f) for f in request.files])
    total = sum(_size(f) for f in files)
    with view.progress("reading records to import", max(1, total // 2**20), "MB") as told:
        read = [0]

        def tell(size: int) -> None:
            read[0] += size
            told(read[0] // 2**20, total)

        records = exchange.each_record(files, tell)
        # a small import is checked whole before the store opens; a large one is written a chunk at a
        # time within one transaction, which anything that fails further on rolls back
        first = list(itertools.islice(records, IMPORT_CHUNK))
        with Store(request.db) as store:
            added, given = store.merge_each(itertools.chain(first, records))
    view.message(f"imported {added} new results ({given - added} already stored)")


def _size(path: Path) -> int:
    """The file's size, 0 where it cannot be told (reading it says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
