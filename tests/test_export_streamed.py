"""`export` streams a store of any size: records of this schema leave as their stored text, older ones and
records SQLite does not read as JSON through `Result`, and CSV rows wait in a temporary file until the last
row names every column; both formats write what reading each result whole writes."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sqlite3

import pytest
from conftest import cli, make_result

from dlbench.results import exchange, store as store_module
from dlbench.results.record import Result
from dlbench.results.store import Store


def _as_before(db, fmt: str) -> str:
    """The export of every result read whole, oldest first: what `export` wrote before it streamed."""
    with Store(db, read_only=True) as store:
        out = io.StringIO()
        exchange.WRITERS[fmt](store.results(exact=True), out)
        return out.getvalue()


def _streamed(db, fmt: str) -> str:
    with Store(db, read_only=True) as store:
        out = io.StringIO()
        exchange.WRITERS[fmt](store.exported(flat=fmt == "csv"), out)
        return out.getvalue()


def _odd_store(db) -> None:
    """Results of several shapes (other spec fields and metrics, a cell that starts like a formula, a cell
    longer than the csv module reads by default), a record with a NaN that SQLite does not read as JSON and
    one of schema 2, stored in an order that is not their start times' order."""
    results = [make_result(started=f"2026-01-01T00:00:{40 - i:02d}+00:00", tag=f"t{i}") for i in range(5)]
    results[1].metrics["only_here"] = 1.5
    results[2].spec = {"extra": "=cmd", **results[2].spec}  # its own column, first
    results[3].tag = "long-" + "x" * 200_000
    results[4].metrics["forward_ms"] = -2.0
    with Store(db) as store:
        store.add_many(results)
    nan = make_result(started="2026-01-01T00:00:30+00:00", tag="nan", metrics={"forward_ms": float("nan")})
    old = make_result(started="2026-01-01T00:00:10+00:00", tag="old").to_dict()
    old["schema"] = 2
    del old["title"]
    with contextlib.closing(sqlite3.connect(db)) as con, con:  # past every check, as an old dlbench might
        for key, schema, record in ((nan.id, 3, nan.to_dict()), (old["id"], 2, old)):
            con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (key, schema, record["started"], "ok", "fwdbwd", "resnet50", None, record["tag"], "node1",
                         json.dumps(record)))


@pytest.mark.parametrize("chunk", [1, 2, 200])
def test_export_in_either_format_writes_what_reading_whole_writes(db, monkeypatch, chunk):
    _odd_store(db)
    monkeypatch.setattr(store_module, "EXPORT_CHUNK", chunk)  # chunks that split the odd records apart
    text = _streamed(db, "csv")
    assert text == _as_before(db, "csv")
    limit = csv.field_size_limit(1 << 30)  # the long tag's cell: more than the csv module reads by default
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    finally:
        csv.field_size_limit(limit)
    assert [r["tag"][:5] for r in rows] == ["old", "nan", "t4", "long-", "t2", "t1", "t0"]  # oldest first
    assert [r["only_here"] for r in rows] == ["", "", "", "", "", "1.5", ""]  # empty where a row has none
    assert rows[4]["extra"] == "'=cmd" and rows[2]["forward_ms"] == "-2.0"  # a number is no formula
    streamed = [json.loads(line) for line in _streamed(db, "jsonl").splitlines()]
    assert streamed == [json.loads(line) for line in _as_before(db, "jsonl").splitlines()]
    assert streamed[0]["schema"] == 3 and streamed[0]["title"]  # the old record leaves as this schema's


def test_a_stored_record_of_this_schema_leaves_as_its_stored_text(db):
    with Store(db) as store:
        store.add(make_result(tag="a"))
    with contextlib.closing(sqlite3.connect(db)) as con:
        (stored,) = con.execute("SELECT record FROM results").fetchone()
    assert _streamed(db, "jsonl") == stored + "\n"
    assert Result.from_dict(json.loads(stored)).tag == "a"


def test_a_damaged_record_stops_the_export_with_one_line(db, tmp_path):
    with Store(db) as store:
        store.add(make_result(tag="a"))
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE results SET record = substr(record, 1, 50)")  # cut short, as a failing disk might
        con.execute("DROP TABLE csv_rows")  # a store made before CSV rows were kept: its CSV reads the records
    for fmt in ("jsonl", "csv"):
        done = cli("export", "--format", fmt, "--db", db, "-o", tmp_path / f"out.{fmt}")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "holds a damaged record" in done.stderr


def test_rows_of_many_shapes_keep_their_cells_under_their_columns(db):
    """Columns that a later row adds (in another order than an earlier row named them, and a name that
    reads as a formula beside the same name quoted) leave every cell under its own column."""
    results = [make_result(started=f"2026-01-01T00:00:{i:02d}+00:00", tag=f"t{i}") for i in range(6)]
    results[2].spec = {"zeta": "z", **results[2].spec}  # a new column, named before the spec's others
    results[3].metrics.update({"late": -1.0, "=a": 1, "'=a": 2})  # one column for both: the later value
    results[5].spec["device"] = "auto"  # its recorded device, a metric, stands in the spec's column
    with Store(db) as store:
        store.add_many(results)
    text = _streamed(db, "csv")
    assert text == _as_before(db, "csv")
    header, *rows = csv.reader(io.StringIO(text))
    assert header[:8] == ["id", "started", "status", "suite", "run", "tag", "system", "host"]
    assert header.count("'=a") == 1 and "=a" not in header
    found = [dict(zip(header, row)) for row in rows]
    assert all(len(row) == len(header) for row in rows)  # rows written before a column came: empty cells
    assert [r["zeta"] for r in found] == ["", "", "z", "", "", ""]
    assert [(r["late"], r["'=a"]) for r in found][2:4] == [("", ""), ("-1.0", "2")]
    assert {r["device"] for r in found} == {"cuda"} and {r["system"] for r in found} == {"NVIDIA H200"}

