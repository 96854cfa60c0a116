"""The store keeps each result's CSV row (results/csvrows.py), written with the result, so that `export
--format csv` writes rows instead of parsing every record: the file is the one built from the records, an
older store gets its rows once (an interrupted fill goes on), and an archive that cannot be given them is
exported from its records. (docs/performance.md times it on 100,000 results.)"""

from __future__ import annotations

import contextlib
import csv
import io
import sqlite3
import stat

import pytest
from conftest import cli, make_result

from dlbench.results import csvrows, exchange
from dlbench.results.store import Store


def _built(db) -> str:
    """The CSV built from every record, as export wrote it before rows were kept."""
    with Store(db, read_only=True) as store:
        out = io.StringIO()
        exchange.write_csv(store.exported(flat=True), out)
        return out.getvalue()


def _exported(db, tmp_path) -> tuple[str, str]:
    """The CSV and stderr of a real `dlbench export --format csv`."""
    out = tmp_path / "out.csv"
    done = cli("export", "--format", "csv", "--db", db, "-o", out)
    assert done.returncode == 0, done.stderr
    return out.read_bytes().decode("utf-8"), done.stderr


def _kept_lines(db) -> int:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return con.execute("SELECT COUNT(*) FROM csv_rows WHERE line IS NOT NULL").fetchone()[0]


def _shapes(db) -> list:
    """Results whose rows name different columns in different orders (a spec field before the others, metrics
    only some have, a name that reads as a formula beside the same name quoted), a tag a CSV line must quote,
    a cell that starts like a formula and a NaN SQLite does not read as JSON, stored out of start order."""
    results = [make_result(started=f"2026-01-01T00:00:{40 - i:02d}+00:00", tag=f"t{i}") for i in range(8)]
    results[1].metrics["only_here"] = 1.5
    results[2].spec = {"zeta": "=cmd", **results[2].spec}
    results[3].tag = 'a, "quoted"\nand long ' + "x" * 5000
    results[4].metrics.update({"late": -1.0, "=a": 1, "'=a": 2})
    results[5].metrics["forward_ms"] = float("nan")
    results[6].spec["device"] = "auto"
    with Store(db) as store:
        store.add_many(results[:4])
        for r in results[4:]:
            store.add(r)
    return results


def _drop_rows(db) -> None:
    """The store as dlbench wrote it before CSV rows were kept."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as con:
        con.execute("DROP TABLE csv_rows")
        con.execute("DROP TABLE csv_columns")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # into the file itself, which an archive is read as


def test_rows_kept_with_each_result_are_the_rows_built_from_its_record(db, tmp_path):
    results = _shapes(db)
    assert _kept_lines(db) == len(results)  # written with the results, before any export
    built = _built(db)
    text, err = _exported(db, tmp_path)
    assert text == built and err.startswith("wrote 8 results") and "keeping" not in err
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("SELECT COUNT(*) FROM csv_columns").fetchone()[0] > 2  # sets that differ, interned
    header, *rows = csv.reader(io.StringIO(text))
    found = [dict(zip(header, row)) for row in rows]
    assert all(len(row) == len(header) for row in rows)
    assert [r["tag"][:5] for r in found] == [f"t{i}" for i in range(7, 3, -1)] + ['a, "q', "t2", "t1", "t0"]
    assert found[5]["zeta"] == "'=cmd" and found[3]["late"] == "-1.0" and found[3]["'=a"] == "2"
    assert found[2]["forward_ms"] == "nan" and [r["only_here"] for r in found].count("1.5") == 1


def test_an_older_store_gets_its_rows_once_and_an_interrupted_fill_goes_on(db, tmp_path, monkeypatch, capsys):
    _shapes(db)
    built = _built(db)
    _drop_rows(db)
    monkeypatch.setattr(csvrows, "FILL_CHUNK", 3)
    made, real = [0], csvrows.made

    def stopped(*args):
        made[0] += 1
        if made[0] > 4:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(csvrows, "made", stopped)
    with Store(db, read_only=True) as store, pytest.raises(KeyboardInterrupt):
        store.kept_csv()
    assert _kept_lines(db) == 3  # the one whole chunk
    monkeypatch.setattr(csvrows, "made", real)
    monkeypatch.setattr(csvrows, "_TOLD_EVERY_S", 0.0)
    with Store(db, read_only=True) as store:
        kept = store.kept_csv()
        out = io.StringIO()
        assert exchange.write_kept_csv(kept, out) == 8 and out.getvalue() == built
    assert capsys.readouterr().err.splitlines() == [
        f"keeping the store's older results as CSV rows for fast exports: {n}/5" for n in (3, 5)]
    assert _kept_lines(db) == 8
    text, err = _exported(db, tmp_path)  # once: nothing left to fill, nothing said
    assert text == built and "keeping" not in err


def test_a_read_only_archive_without_rows_exports_from_its_records(db, tmp_path):
    _shapes(db)
    built = _built(db)
    _drop_rows(db)
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "results.db").write_bytes(db.read_bytes())
    stored = archive / "results.db"
    stored.chmod(stat.S_IRUSR | stat.S_IRGRP)
    archive.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        text, err = _exported(stored, tmp_path)
        assert text == built and "keeping" not in err
        with contextlib.closing(sqlite3.connect(f"{stored.as_uri()}?mode=ro", uri=True)) as con:
            assert "csv_rows" not in {n for (n,) in con.execute("SELECT name FROM sqlite_master")}  # unchanged
    finally:
        archive.chmod(stat.S_IRWXU)


def test_a_record_no_row_can_be_made_of_sends_the_export_to_the_records(db, tmp_path):
    """A record stored past every check with a damaged text gets no row; the export then reads the records,
    and says which one is damaged, in one line."""
    _shapes(db)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute("INSERT INTO results VALUES ('bad1', 3, '2026-01-02', 'ok', 'fwdbwd', 'resnet50', NULL, NULL, "
                    "'node1', '{\"format\": ')")
    done = cli("export", "--format", "csv", "--db", db, "-o", tmp_path / "out.csv")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "holds a damaged record ('bad1')" in done.stderr
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("SELECT columns, line FROM csv_rows WHERE id = 'bad1'").fetchone() == (None, None)


def test_a_record_damaged_after_its_row_was_kept_still_exports_its_row(db, tmp_path):
    """The CSV is the rows kept with the results: a record damaged later on disk is not read by it (the
    JSON-lines export, which reads every record, says so)."""
    _shapes(db)
    built = _built(db)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE results SET record = substr(record, 1, 50)")
    assert _exported(db, tmp_path)[0] == built
    done = cli("export", "--db", db, "-o", tmp_path / "out.jsonl")
    assert done.returncode == 2 and "holds a damaged record" in done.stderr


def test_a_line_is_moved_under_the_header_whether_or_not_its_cells_are_quoted():
    kept = csvrows.Kept([("a", "b"), ("b", "c", "a")],
                        iter([(0, "1,2\n"), (1, '"x,\ny",3,4\n'), (1, "5,6,7\n")]))
    out = io.StringIO()
    assert exchange.write_kept_csv(kept, out) == 3
    assert out.getvalue() == 'a,b,c\n1,2,\n4,"x,\ny",3\n7,5,6\n'
    assert list(csv.reader(io.StringIO(out.getvalue())))[2] == ["4", "x,\ny", "3"]
