"""Export results as JSON lines (lossless, importable) or CSV (flat, for spreadsheets); import JSON lines."""

from __future__ import annotations

import array
import csv
import io
import json
import operator
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, TextIO

from dlbench.errors import UserError
from dlbench.options import shown
from dlbench.results.record import FORMAT, SCHEMA_VERSION, Result, as_typed, now, run_device, system_label


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
    own = {"id": r.id, "started": r.started, "status": r.status, "suite": r.suite, "run": r.run, "tag": r.tag,
           "system": r.system_label, "host": r.machine.host or None}
    return _with_settings(own, r.spec, {key: value for key, value in r.metrics.items()
                                        if isinstance(value, (int, float, str, bool)) or value is None})


def _with_settings(own: dict[str, object], spec: dict, scalars: dict) -> dict[str, object]:
    """`own`, then the spec's fields (a list as 1x2x3) and the scalar metrics; a metric that a spec field
    names too takes that field's place."""
    settings = {key: "x".join(map(str, value)) if isinstance(value, list) else value
                for key, value in spec.items() if key != "options"}
    settings.update(scalars)
    return {**own, **{key: value for key, value in settings.items() if key not in own}}


def _text_row(text: str) -> dict[str, object]:
    """The flat row of a store's JSON text of one result (`Store.exported(flat=True)`): a record of this
    schema as the store wrote it is read as the mapping it is (building a `Result` of each, and its typed
    run record for the device, was an eighth of exporting 100,000 under a profiler)."""
    data = json.loads(text)
    data["samples"], data["traces"] = {}, {}
    if isinstance(data.get("metrics"), dict):
        data["metrics"] = {k: v for k, v in data["metrics"].items() if not isinstance(v, (dict, list))}
    if not _holds_what_rows_read(data):
        return flat_row(Result.from_dict(data, strict=False))
    system, spec, metrics, tag = data["system"], data["spec"], data["metrics"], data.get("tag")
    own = {"id": data["id"], "started": data["started"] if "started" in data else now(), "status": data["status"],
           "suite": data.get("suite"), "run": data.get("run"), "tag": as_typed(tag) if isinstance(tag, str) else tag,
           "system": system_label(system, run_device(metrics.get("device"), spec, system)), "host": system.get("host")}
    return _with_settings(own, spec, metrics)  # as `flat_row` of the `Result` of `data`


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


class _Echo:
    """The file of a csv writer whose `writerow` gives back the row's text (it returns what `write` does)."""
    write = str


_line_of = csv.writer(_Echo(), lineterminator="\n").writerow  # cells as the CSV line a writer writes


def _cells(row: dict[str, object]) -> list[object]:
    """A flat row's cells as `cell` makes them, inline: called for every row of an export."""
    return [("'" + v if v.__class__ is str and v.startswith(FORMULA_STARTS) else v) for v in row.values()]


def _gather(source: list[int]) -> Callable:
    """What picks the cells at `source`'s places, in its order, from a row's cells."""
    return operator.itemgetter(*source) if len(source) > 1 else (lambda cells: (cells[source[0]],))


def write_csv(results: Iterable[Result | str], out: TextIO) -> int:
    """The header names every column any row has, so it is known only after the last row: the rows wait
    in a temporary file, never in memory (100,000 rows held 540 MB), each written once with its cells
    under their columns. A column is only ever added at the end, so a row written before the last one
    was added lacks only empty cells at its end, added as the rows are copied out."""
    columns: dict[object, int] = {}  # each column's place
    plans: dict[tuple, tuple[int, Callable]] = {}  # a row's names: the width and the gathering of its line
    widths: list[tuple[int, int]] = []  # (first row, width) of each run of rows written as wide
    sizes = array.array("q")  # each waiting row's characters
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as spool:
        waiting: list[str] = []
        for r in results:
            row = _text_row(r) if isinstance(r, str) else flat_row(r)
            names = tuple(row)
            width, gather = plans.get(names) or (0, None)
            if gather is None or width < len(columns):  # a new shape, or columns added since its plan
                width, gather = plans[names] = _plan(names, columns)
                if not widths or widths[-1][1] != width:
                    widths.append((len(sizes), width))
            cells = _cells(row)
            cells.append("")  # the cell of a column the row has not
            line = _line_of(gather(cells))
            sizes.append(len(line))
            waiting.append(line)
            if len(waiting) >= _SPOOL_ROWS:
                spool.write("".join(waiting))
                waiting.clear()
        spool.write("".join(waiting))
        spool.seek(0)
        csv.writer(out, lineterminator="\n").writerow(list(columns))
        _copy_spooled(spool, sizes, widths, len(columns), out)
    return len(sizes)


_SPOOL_ROWS = 1000  # rows written to the spool at a time


def _plan(names: tuple, columns: dict[object, int]) -> tuple[int, Callable]:
    """The width of a row of these names (every column known, once they are added to `columns`) and the
    gathering of its line from its cells and one empty cell after them. Where two names make one column
    (a name and the same name quoted as no formula), the later one's value is kept."""
    gather = _gather(_sources(names, columns))  # first: it adds the row's new columns
    return len(columns), gather


def _sources(names: tuple, columns: dict[object, int]) -> list[int]:
    """The place among a row's cells (and one empty cell after them) of each column's cell; its names'
    columns are added to `columns` first."""
    own = [cell(name) for name in names]
    for name in own:
        columns.setdefault(name, len(columns))
    source = [len(names)] * len(columns)
    for i, name in enumerate(own):
        source[columns[name]] = i
    return source


def write_kept_csv(kept, out: TextIO) -> int:
    """`write_csv` of rows kept as CSV lines (`results/csvrows.py`: `kept.sets`, the column sets in the order
    they first appear, and `kept.lines`, each row's set and line): the header is known before the first row,
    so each line is written as it is read, as it is where its set is the header, else with its cells moved
    under their columns and the columns it lacks left empty."""
    columns: dict[object, int] = {}
    for names in kept.sets:  # the columns in the order a row first names them, as write_csv adds them
        _sources(names, columns)
    moves = [_move(names, _sources(names, columns)) for names in kept.sets]
    csv.writer(out, lineterminator="\n").writerow(list(columns))
    n, waiting = 0, []
    for place, line in kept.lines:
        move = moves[place]
        waiting.append(line if move is None else move(line))
        n += 1
        if len(waiting) >= _SPOOL_ROWS:
            out.write("".join(waiting))
            waiting.clear()
    out.write("".join(waiting))
    return n


def _move(names: tuple, source: list[int]) -> Callable[[str], str] | None:
    """What turns a line of these names into a line of the header's columns; None where it is one."""
    if source == list(range(len(names))):
        return None
    gather = _gather(source)

    def move(line: str) -> str:
        if '"' not in line:  # no cell is quoted, so every comma ends one
            cells = line[:-1].split(",")
            cells.append("")
            return ",".join(gather(cells)) + "\n"
        cells = next(csv.reader([line[:-1]]))
        cells.append("")
        return _line_of(gather(cells))

    return move


def _copy_spooled(spool: TextIO, sizes: array.array, widths: list[tuple[int, int]], final: int, out: TextIO) -> None:
    """The waiting rows; each run of rows written narrower than the header gets its missing empty cells."""
    ends = [first for first, _ in widths[1:]] + [len(sizes)]
    for (first, width), end in zip(widths, ends):
        pad = "," * (final - width)
        if not pad:
            left = sum(sizes[first:end])
            while left:
                block = spool.read(min(left, 1 << 20))
                out.write(block)
                left -= len(block)
            continue
        for size in sizes[first:end]:
            out.write(spool.read(size)[:-1] + pad + "\n")


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
