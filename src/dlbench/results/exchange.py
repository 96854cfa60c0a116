"""Export results as JSON lines (lossless, importable) or CSV (flat, for spreadsheets); import JSON lines."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, TextIO

from dlbench.errors import UserError
from dlbench.options import shown
from dlbench.results.record import FORMAT, SCHEMA_VERSION, Result


def write_jsonl(results: Iterable[Result | str], out: TextIO) -> int:
    """One record per line; a record given as text is a store's JSON of one (`Store.exported`), written as it is."""
    n = 0
    for r in results:
        out.write((r if isinstance(r, str) else json.dumps(r.to_dict(), sort_keys=True)) + "\n")
        n += 1
    return n


def flat_row(r: Result) -> dict[str, object]:
    """One result as a flat row: its own columns first, then spec fields and scalar metrics
    (which never replace the result's own columns, whatever a crafted record names them)."""
    row: dict[str, object] = {
        "id": r.id, "started": r.started, "status": r.status, "suite": r.suite, "run": r.run, "tag": r.tag,
        "system": r.system_label, "host": r.system.get("host"),
    }
    own = set(row)
    for key, value in r.spec.items():
        if key != "options" and key not in own:
            row[key] = "x".join(map(str, value)) if isinstance(value, list) else value
    for key, value in r.metrics.items():
        if (isinstance(value, (int, float, str, bool)) or value is None) and key not in own:
            row[key] = value
    return row


def _flat_record(r: Result | str) -> Result:
    """A result as a flat row reads it: from a store's JSON text without the per-step samples, traces and
    phase statistics, which no flat row holds and which are most of a record to parse."""
    if isinstance(r, Result):
        return r
    data = json.loads(r)
    data["samples"], data["traces"] = {}, {}
    if isinstance(data.get("metrics"), dict):
        data["metrics"] = {k: v for k, v in data["metrics"].items() if not isinstance(v, (dict, list))}
    if _holds_what_rows_read(data):  # this schema's record, as the store wrote it: built without a walk
        return Result(**{k: v for k, v in data.items() if k in _FIELDS})  # of every value (half the time)
    return Result.from_dict(data, strict=False)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Result))


def _holds_what_rows_read(data: dict) -> bool:
    """Whether a record of the store is this schema's with every part a flat row reads in the form it
    reads it; any other goes through `Result.from_dict`, which migrates it or says what is wrong."""
    system = data.get("system")
    return (data.get("format") == FORMAT and data.get("schema") == SCHEMA_VERSION and isinstance(system, dict)
            and isinstance(data.get("spec"), dict) and isinstance(data.get("metrics"), dict)
            and isinstance(system.get("gpus", []), list) and all(isinstance(g, dict) for g in system.get("gpus", []))
            and isinstance(system.get("cpu", {}), dict) and isinstance(data.get("id"), str)
            and isinstance(data.get("status"), str))


# A spreadsheet reads a cell that starts with one of these as a formula (which can run
# commands or send data away); a leading single quote makes it text, as spreadsheets expect.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> object:
    """A CSV cell that no spreadsheet evaluates: text starting like a formula gets a leading
    quote; numbers stay numbers (a negative number is a number, not a formula)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write_csv(results: Iterable[Result | str], out: TextIO) -> int:
    """The header names every column any row has, so it is known only after the last row: the rows wait
    in a temporary file, each with its own columns, never in memory (100,000 rows held 540 MB)."""
    columns: dict[object, int] = {}
    shapes: dict[tuple, int] = {}  # each row's columns, in its order: a few shapes for all the rows
    count = 0
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as spool:
        waiting = csv.writer(spool, lineterminator="\n")
        cells: dict[tuple, tuple] = {}  # each row's names as cells, found once per shape
        for r in results:
            row = flat_row(_flat_record(r))
            names = tuple(row)
            shape = cells.get(names) or cells.setdefault(names, tuple(map(cell, names)))
            if shape not in shapes:
                columns.update((k, 0) for k in shape if k not in columns)
            waiting.writerow([shapes.setdefault(shape, len(shapes)),
                              *(cell(v) if v.__class__ is str else v for v in row.values())])  # numbers: as they are
            count += 1
        spool.seek(0)
        _write_spooled(spool, list(columns), {n: shape for shape, n in shapes.items()}, out)
    return count


def _write_spooled(spool: TextIO, columns: list, shapes: dict[int, tuple], out: TextIO) -> None:
    """The header, then each waiting row with its cells under their columns (empty where it has none)."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    place = {column: i for i, column in enumerate(columns)}
    csv.field_size_limit(max(csv.field_size_limit(), MAX_RECORD_CHARS))  # a cell holds any text a record does
    for shape, *cells in csv.reader(spool):
        names = shapes[int(shape)]
        if list(names) != columns[:len(names)]:
            line = [""] * len(columns)
            for name, value in zip(names, cells):
                line[place[name]] = value
            cells = line
        writer.writerow(cells + [""] * (len(columns) - len(cells)))


def read_jsonl(path: Path, *, strict: bool = True, progress: Callable[[int], None] | None = None) -> list[Result]:
    """Every record in an export file; any line that is not a dlbench result rejects the whole file.
    `strict`: every value checked too (see `Result.from_dict`); off only for records this dlbench
    wrote itself (a SLURM job's), which are never refused for an odd figure."""
    return list(_each_in_file(path, progress, strict))


def _each_record(path: Path, f: BinaryIO, strict: bool, progress: Callable[[int], None] | None) -> Iterator[Result]:
    read = 0
    for number, raw in enumerate(f, 1):
        read += len(raw)
        if progress is not None:
            progress(len(raw))
        line = raw.decode("utf-8")
        if not line.strip():
            continue
        data = None
        try:
            if len(line) > MAX_RECORD_CHARS:
                raise ValueError(f"a record of {len(line):,} characters (at most {MAX_RECORD_CHARS:,})")
            data = json.loads(line)
            result = Result.from_dict(data, strict=strict)
        except (ValueError, TypeError, RecursionError) as error:  # RecursionError: absurdly nested JSON
            raise UserError(f"{path} is not a dlbench export (line {number}{_record_id(data)}: {error})") from None
        yield result


# The largest record a real run writes: 10 million steps (the bound of --steps) of a few phases'
# samples is some hundreds of MB; beyond that a line is no record but an attempt to exhaust memory.
MAX_RECORD_CHARS = 2**30


def _record_id(data: object) -> str:
    """', record 1234abcd…' where the line names a plain id, to find the record in the file."""
    key = data.get("id") if isinstance(data, dict) else None
    if isinstance(key, str) and key.isascii() and key.isalnum() and key:
        return f", record {key[:8]}…" if len(key) > 8 else f", record {key}"
    return ""


WRITERS = {"jsonl": write_jsonl, "csv": write_csv}


def record_files(paths: list[Path]) -> list[Path]:
    """The export files given and the record files (*.jsonl) in the folders given."""
    files = [p for path in paths for p in (_record_files(path) if path.is_dir() else [path])]
    if not files:
        raise UserError(f"no record files (*.jsonl) in {', '.join(map(str, paths))}")
    return files


def read_all(paths: list[Path], progress: Callable[[int], None] | None = None) -> list[Result]:
    """Every record in these export files and folders of record files (*.jsonl), all checked
    before the caller writes anything; `progress(bytes)` as in `read_jsonl`."""
    return [r for path in record_files(paths) for r in read_jsonl(path, progress=progress)]


def each_record(paths: list[Path], progress: Callable[[int], None] | None = None) -> Iterator[Result]:
    """`read_all`'s records one at a time, each checked as it is reached: an import of 100,000 never
    holds them all, and writes them in one transaction that a bad line further on rolls back."""
    for path in record_files(paths):
        yield from _each_in_file(path, progress)


def _each_in_file(path: Path, progress: Callable[[int], None] | None, strict: bool = True) -> Iterator[Result]:
    """The file's records one at a time, read a line at a time (a file of 100,000 records is never
    held as one text); `progress(bytes)` is told the bytes read."""
    if Path(path).exists() and not Path(path).is_file():  # a FIFO or a device would be read forever
        raise UserError(f"import file {path} is not a regular file")
    found = 0
    try:
        with open(path, "rb") as f:
            for result in _each_record(path, f, strict, progress):
                found += 1
                yield result
    except FileNotFoundError:
        raise UserError(f"import file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read import file {path}: {error}") from None
    if not found:
        raise UserError(f"{path} holds no dlbench results")


def _record_files(folder: Path) -> list[Path]:
    """The *.jsonl files under `folder` at any depth, sorted. Walked with a list of the folders left to
    read: Path.rglob and os.walk recurse, and a folder some 1,000 levels deep exhausts Python's
    stack. Links to folders are not followed, so a link loop ends."""
    found, left = [], [folder]
    while left:
        here = left.pop()
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        left.append(Path(entry.path))
                    elif entry.name.endswith(".jsonl"):
                        found.append(Path(entry.path))
        except OSError as error:  # a path past the system's limit, a folder without read permission
            raise UserError(f"cannot read folder {shown(str(here))} to import from it: "
                            f"{error.strerror or error}") from None
    return sorted(found)
