"""The store keeps what it is given and never stops a reader: imports are checked value by value
and all or nothing, a stored value that is no valid figure is marked, never raised on, what is
not a store is refused, and a store another process holds locked is waited for a bounded time
without losing a measured result. Real SQLite stores and real `dlbench` processes throughout."""

import contextlib
import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from dlbench.results.store import Store

from conftest import assert_user_error, cli, export_line, make_result


def _rows(db) -> list[tuple[str, str]]:
    """Every stored row as it is on disk (id and record text)."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        return sorted(con.execute("SELECT id, record FROM results").fetchall())


@pytest.fixture
def one_stored(db):
    with Store(db) as store:
        store.add(make_result(tag="earlier"))
    return _rows(db)


def _deep(levels: int) -> str:
    """A record whose spec options nest `levels` deep (written as text: json.dumps would recurse)."""
    return export_line(spec__options="DEEP").replace('"DEEP"', '{"x": ' * levels + "{}" + "}" * levels)


@pytest.mark.parametrize("line, needle", [
    (export_line(metrics__forward_ms=1e308), "metric 'forward_ms' must be a number from 0 to 1e+11, got 1e+308"),
    (export_line(metrics__forward_ms=float("nan")), "metric 'forward_ms' must be a number from 0 to 1e+11, got nan"),
    (export_line(metrics__images_per_s=float("inf")), "metric 'images_per_s' must be a number from 0 to 1e+15, got inf"),
    (export_line(metrics__backward_ms=-1.0), "metric 'backward_ms' must be a number from 0 to 1e+11, got -1.0"),
    (export_line(metrics__phase_s={"read": -2.0}), "metric 'phase_s' must be a number from 0 to 1e+10, got -2.0"),
    (export_line(metrics__flops_per_step=float("inf")), "metric 'flops_per_step' must be finite"),
    (export_line(spec__input_shape=[3, -224, 224]), "spec 'input_shape' must be a list of at most 8 sizes from 1 to 2^31"),
    (export_line(spec__batch=-2), "spec 'batch' must be a whole number from 0 to 16777216, got -2"),
    (export_line(samples={"step": [0.1, float("nan")]}), "samples 'step' must be numbers from 0 to 1e+08, got nan"),
    (export_line(samples={"step": [0.1, -0.1]}), "samples 'step' must be numbers from 0 to 1e+08, got -0.1"),
    (export_line(traces={"power": [100, float("inf")]}), "result field 'traces' holds inf"),
    (_deep(950), "the record nests deeper than 32 levels"),
])
def test_an_import_with_one_odd_value_is_refused_whole(tmp_path, db, one_stored, line, needle):
    export = tmp_path / "bad.jsonl"
    export.write_text(json.dumps(make_result(tag="fine").to_dict()) + "\n" + line + "\n")
    before = export.read_bytes()
    proc = cli("import", export, "--db", db)
    record = json.loads(line)["id"]
    assert_user_error(proc, f"bad.jsonl is not a dlbench export (line 2, record {record[:8]}…: {needle}")
    assert _rows(db) == one_stored and export.read_bytes() == before  # the good first line is not imported either


def test_an_id_stored_with_other_contents_is_a_conflict(tmp_path, db, one_stored):
    (key, text), = one_stored
    other = json.loads(text) | {"tag": "changed elsewhere"}
    (tmp_path / "same.jsonl").write_text(text + "\n")
    (tmp_path / "other.jsonl").write_text(json.dumps(make_result(tag="new").to_dict()) + "\n" + json.dumps(other) + "\n")
    same = cli("import", tmp_path / "same.jsonl", "--db", db)
    assert same.returncode == 0 and "imported 0 new results (1 already stored)" in same.stderr
    assert_user_error(cli("import", tmp_path / "other.jsonl", "--db", db),
                      f"record {key[:8]}… conflicts with the stored result of the same id (different contents): "
                      "nothing imported")
    assert _rows(db) == one_stored  # neither the conflicting record nor the new one beside it


def test_an_import_giving_one_id_twice_with_different_contents_is_refused(tmp_path, db, one_stored):
    twice = make_result(tag="a").to_dict()
    export = tmp_path / "twice.jsonl"
    export.write_text(json.dumps(twice) + "\n" + json.dumps(twice | {"tag": "b"}) + "\n")
    assert_user_error(cli("import", export, "--db", db), f"record {twice['id'][:8]}… appears twice with different")
    assert _rows(db) == one_stored


ODD = {  # tag: metrics (and batch, shape, samples) no import accepts, written into the store by hand
    "huge": {"forward_ms": 1e308, "total_ms": 1e308, "images_per_s": 1e308},
    "nan": {"forward_ms": float("nan")},
    "inf": {"backward_ms": float("inf"), "images_per_s": float("inf")},
    "negative": {"forward_ms": -5.0, "total_ms": -1.0},
    "text": {"forward_ms": "fast", "total_ms": [1, 2], "input_shape": "x"},
}


def _write_by_hand(db) -> None:
    """Odd records straight into a real store, past every check (as an old dlbench or a hand might)."""
    with Store(db) as store:
        store.add(make_result(tag="good", samples={"step": [0.01, 0.02]}))
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        for tag, metrics in ODD.items():
            r = make_result(tag=tag, metrics=metrics, samples={"step": [0.01, float("nan"), -1.0, 1e308]})
            record = r.to_dict()
            if tag == "negative":
                record["spec"].update(batch=-3, input_shape=[3, -224, 224])
            con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (r.id, 3, r.started, "ok", "fwdbwd", "resnet50", None, tag, "node1", json.dumps(record)))


def test_odd_values_in_the_store_are_marked_and_never_stop_a_reader(tmp_path, db):
    _write_by_hand(db)
    before = _rows(db)
    html = tmp_path / "r.html"
    for args in (["report"], ["report", "--format", "csv"], ["report", "--format", "json"], ["report", "-o", html],
                 ["results"], ["compare", "good", "huge"], ["compare", "good", "text", "--format", "json"],
                 ["doctor"], ["export"]):
        proc = cli(*args, "--db", db)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
        shown = html.read_text() if args[-1] == html else proc.stdout
        if args[0] != "export":  # export is the data exactly
            assert "?" in shown and "valid figure" in shown, (args, shown[-3000:])  # the mark and its legend
    report = cli("report", "--db", db).stdout
    assert "|huge|" in report and "|?|" in report and "metrics.forward_ms, metrics.total_ms" in report
    assert json.loads(cli("report", "--format", "json", "--db", db).stdout)["cells"]  # valid JSON: no NaN in it
    exported = [json.loads(line) for line in cli("export", "--db", db).stdout.splitlines()]
    assert {r["tag"]: r["metrics"]["forward_ms"] for r in exported}["huge"] == 1e308  # kept as stored
    assert _rows(db) == before


@pytest.mark.parametrize("make", ["empty", "device"])
def test_an_empty_file_or_a_device_is_not_a_store(tmp_path, make):
    db = tmp_path / "empty.db"
    if make == "empty":
        db.write_bytes(b"")
    else:
        db = "/dev/null"
    why = "it is an empty file" if make == "empty" else "it is not a regular file"
    for args in (["results"], ["report"], ["export"], ["doctor"], ["compare", "a", "b"]):
        assert_user_error(cli(*args, "--db", db), f"store {db} is not a dlbench store ({why}")
    assert_user_error(cli("results", env={"DLBENCH_DB": str(db)}), f"store {db} is not a dlbench store")
    if make == "empty":
        assert db.read_bytes() == b""
    else:
        assert_user_error(cli("import", tmp_path / "none.jsonl", "--db", db), "is not a dlbench store (it is not a regular")


def test_a_path_that_does_not_exist_is_a_new_store(tmp_path):
    export = tmp_path / "x.jsonl"
    export.write_text(json.dumps(make_result().to_dict()) + "\n")
    fresh = tmp_path / "fresh.db"
    assert cli("import", export, "--db", fresh).returncode == 0 and len(_rows(fresh)) == 1


HOLD = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    if sys.argv[2] == "rollback":  # a journal where even readers wait for a writer
        db.execute("PRAGMA journal_mode=DELETE")
    db.execute("BEGIN EXCLUSIVE")
    db.execute("UPDATE results SET tag = 'mid-write'")
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it
    db.execute("ROLLBACK")
""")


class _Locked:
    """Another process holding the store's write lock, in a transaction it never commits."""

    def __init__(self, db, journal: str = "wal") -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db), journal], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> "_Locked":
        assert self.proc.stdout.readline().strip() == "held"
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0


def _lock_message(proc, db, seconds: str) -> list[str]:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[-2] == (f"the store {db} is locked by another process; waiting up to {seconds} s "
                         "($DLBENCH_DB_WAIT sets how long)")
    assert lines[-1].startswith(f"error: the store {db} is locked by another process (waited {seconds} s)")
    return lines


def test_readers_wait_a_bounded_time_for_a_locked_store_and_say_so(db, one_stored):
    with _Locked(db, "rollback"):
        for args in (["results"], ["report"], ["export"], ["doctor"]):
            proc = cli(*args, "--db", db, env={"DLBENCH_DB_WAIT": "1.5"}, timeout=60)
            assert _lock_message(proc, db, "1.5")[-1].endswith("nothing was run or changed")
    assert _rows(db) == one_stored


def test_an_import_into_a_locked_store_imports_nothing(tmp_path, db, one_stored):
    export = tmp_path / "x.jsonl"
    export.write_text(json.dumps(make_result(tag="new").to_dict()) + "\n")
    with _Locked(db):
        proc = cli("import", export, "--db", db, env={"DLBENCH_DB_WAIT": "1.5"}, timeout=60)
        assert _lock_message(proc, db, "1.5")[-1].endswith("nothing imported; run the import again later")
    assert _rows(db) == one_stored
    assert cli("import", export, "--db", db).returncode == 0 and len(_rows(db)) == 2


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e9"])
def test_a_bad_wait_is_refused(db, one_stored, value):
    assert_user_error(cli("results", "--db", db, env={"DLBENCH_DB_WAIT": value}),
                      f"DLBENCH_DB_WAIT must be a number of seconds from 0 to 86400, got '{value}'")


@pytest.mark.slow
def test_a_run_whose_store_stays_locked_keeps_its_result_for_import(db, one_stored):
    run = ["run", "fwdbwd", "--model", "resnet18", "--device", "cpu", "--batch", "2", "--input-shape", "3x32x32",
           "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0", "--db", db]
    with _Locked(db):
        proc = cli(*run, env={"DLBENCH_DB_WAIT": "2"})
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr  # it measured: its own status
        assert (f"the store {db} is locked by another process; waiting up to 2 s ($DLBENCH_DB_WAIT sets how long)"
                in lines)
        warning = next(line for line in lines if line.startswith("warning: "))
        assert warning.startswith(f"warning: the store {db} is locked by another process (waited 2 s): ")
        pending = list(db.parent.glob(f"{db.name}.pending-*.jsonl"))
        assert len(pending) == 1 and f"saved in {pending[0]}; add" in warning  # with the CPU's ceiling it measured
        assert f"with `dlbench import {pending[0]} --db {db}`" in warning
    assert _rows(db) == one_stored
    added = cli("import", pending[0], "--db", db)
    assert added.returncode == 0 and "imported" in added.stderr
    assert [r.status for r in Store(db, read_only=True).results() if r.workload == "fwdbwd" and r.tag != "earlier"] \
        == ["ok"]


HOSTILE_TAG = "a\x1b]0;owned\x07\x1b[2Jred\u202eevil\x00"


def test_hostile_text_never_reaches_the_terminal_through_plots(tmp_path, db):
    with Store(db) as store:
        for tag in (HOSTILE_TAG, "other"):
            store.add(make_result(tag=tag, samples={"step": [0.01, 0.02]},
                                  system={"host": "n\x07" + tag, "gpus": [{"name": "GPU\x1b[31m\u202e" + tag}]}))
    html = tmp_path / "r.html"
    proc = cli("report", "-o", html, "--db", db)
    assert proc.returncode == 0 and html.stat().st_size > 0
    for char in ("\x1b", "\x07", "\u202e", "\x00"):
        assert char not in proc.stderr and char not in proc.stdout
    assert "Glyph" not in proc.stderr


def test_plot_labels_show_invisible_characters_as_escapes():
    from dlbench.report.plots import visible

    assert visible(HOSTILE_TAG) == "a\\x1b]0;owned\\x07\\x1b[2Jred\\u202eevil\\x00"
