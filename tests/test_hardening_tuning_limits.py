"""Remembered tuning is advice: a tuning row that does not validate (edited by hand, damaged, another
program's table) is ignored with one warning line naming it and measured again, and the user's own
--block, --precision and --batch win over it. The system's limits end in one line each: a store name
or path longer than the system takes, a `results` table of other columns, an import the disk cannot
take, an import folder 1,100 levels deep, and a terminal that cannot show a tag. Each situation is
made for real: rows edited with sqlite3, long paths, a small tmpfs, deep folders, other encodings."""

import contextlib
import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.launch import inprocess
from dlbench.launch.tuning import Tuning, batch_check
from dlbench.results.exchange import write_jsonl
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec

from conftest import assert_user_error, cli, make_result
from test_hardening_store_suites import small_disk  # noqa: F401 - a fixture
from test_tuning import volume  # noqa: F401 - a fixture: a tiny model and volume

VALID = {"block": [10, 30, 34], "precision": "fp32", "channels_last": False}


def _spec(volume, block: str = "auto", precision: str = "auto") -> BenchmarkSpec:
    return BenchmarkSpec(workload="volume", model=volume["model"], batch=1, device="cpu", warmup=1, steps=1,
                         precision=precision, options={"input": volume["input"], "halo": "2x2x2", "block": block})


def _run(spec: BenchmarkSpec, store: Store):
    out = io.StringIO()
    result, = inprocess.run_specs([spec], store, console=Console(file=out, width=400))
    assert result.status == "ok", result.error
    return result, out.getvalue()


def _edit(db: Path, sql: str, *args) -> None:
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute(sql, args)


def _choices(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return [row[0] for row in con.execute("SELECT choice FROM tuning")]


def _args(volume, db: Path, *more: str) -> list:
    return ["run", "volume", "--input", volume["input"], "--model", volume["model"], "--halo", "2x2x2",
            "--device", "cpu", "--warmup", "1", *more, "--db", db]


def _warnings(text: str) -> list[str]:
    """The tuning's warnings. A run estimated from the stored first run says it will take over a
    minute where that one did (a loaded machine): right, and another matter."""
    return [line for line in text.splitlines()
            if line.startswith("warning: ") and not line.startswith("warning: expected to take")]


@pytest.mark.parametrize("choice, reason", [
    ("[1, 2]", "([1, 2] is no choice)"),
    ("{}", "(block None is no block of the 10x30x34 input)"),
    ('{"block": [0, 0, 0], "precision": "fp32", "channels_last": false}', "(block [0, 0, 0] is no block of the"),
    ('{"block": [999, 999, 999], "precision": "fp32", "channels_last": false}', "(block [999, 999, 999] is no block"),
    ('{"block": [10, 30], "precision": "fp32", "channels_last": false}', "(block [10, 30] is no block of the"),
    ('{"block": [10, 30, 34], "precision": "fp64", "channels_last": false}', "(precision 'fp64' is none of fp32"),
    ('{"block": [10, 30, 34], "precision": "fp32", "channels_last": "yes"}', "(channels_last 'yes' is not true"),
    ('{"block": [10, 30, 34], "precision": "fp32", "channels_last": false, "tile_flops": -5}', "(tile_flops -5 is no"),
    ("not json", "is not JSON (Expecting value"),
    ("[" * 100000, "is not JSON ("),
])
def test_a_tuning_row_that_does_not_validate_is_ignored_and_measured_again(tmp_path, volume, choice, reason):
    db = tmp_path / "r.db"
    with Store(db) as store:
        first, _ = _run(_spec(volume), store)
        _edit(db, "UPDATE tuning SET choice = ?", choice)
        again, said = _run(_spec(volume), store)
    warning, = _warnings(said)
    assert warning.startswith(f"warning: the tuning remembered in {db} by run {first.id[:8]} ") and reason in warning
    assert warning.endswith(": ignored; this run measures again")
    assert "tuned_from" not in again.metrics and again.metrics["tuned"]["block"] == [10, 30, 34]
    assert {k: v for k, v in json.loads(_choices(db)[0]).items() if k != "tile_flops"} == VALID  # replaced


def test_a_broken_row_gives_one_warning_on_the_command_line_and_the_run_succeeds(tmp_path, volume):
    db = tmp_path / "r.db"
    with Store(db) as store:
        first, _ = _run(_spec(volume), store)
    _edit(db, "UPDATE tuning SET choice = '[1, 2]'")
    proc = cli(*_args(volume, db))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert _warnings(proc.stderr) == [f"warning: the tuning remembered in {db} by run {first.id[:8]} is not valid "
                                      f"([1, 2] is no choice): ignored; this run measures again"]
    assert "ran block 10x30x34, fp32" in proc.stdout and "as tuned by" not in proc.stdout


def test_the_users_block_wins_over_a_remembered_one(tmp_path, volume):
    """A row under the key of `--block 8x16x16` edited to 999x999x999 (or to another block that fits):
    the run predicts with the block the user gave."""
    db = tmp_path / "r.db"
    args = _args(volume, db, "--block", "8x16x16")
    assert cli(*args).returncode == 0
    for block, reason in (([999, 999, 999], "block [999, 999, 999] is no block of the 10x30x34 input"),
                          ([10, 30, 34], "block 10x30x34 is not the --block 8x16x16 given")):
        _edit(db, "UPDATE tuning SET choice = ?", json.dumps({**VALID, "block": block}))
        proc = cli(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        warning, = _warnings(proc.stderr)
        assert f"is not valid ({reason})" in warning
        assert "ran block 8x16x16, fp32" in proc.stdout
        assert Store(db, read_only=True).results(workload="volume")[-1].metrics["block"] == [8, 16, 16]


def test_the_users_precision_wins_over_a_remembered_one(tmp_path, volume):
    db = tmp_path / "r.db"
    with Store(db) as store:
        _run(_spec(volume, precision="fp32"), store)
        _edit(db, "UPDATE tuning SET choice = ?", json.dumps({**VALID, "precision": "bf16"}))
        again, said = _run(_spec(volume, precision="fp32"), store)
    assert "is not valid (precision bf16 is not the --precision fp32 given)" in _warnings(said)[0]
    assert again.metrics["block_choice"].startswith("block 10x30x34, fp32,")


def test_a_valid_row_with_a_given_block_reuses_its_precision_and_keeps_the_block(tmp_path, volume):
    with Store(tmp_path / "r.db") as store:
        first, _ = _run(_spec(volume, block="8x16x16"), store)
        again, said = _run(_spec(volume, block="8x16x16"), store)
    assert _warnings(said) == [] and again.metrics["tuned_from"]["result"] == first.id
    assert again.metrics["block"] == [8, 16, 16]


def test_a_tuning_table_of_other_columns_is_ignored_and_the_run_goes_on(tmp_path, volume):
    db = tmp_path / "r.db"
    with Store(db):
        pass
    _edit(db, "DROP TABLE tuning")
    _edit(db, "CREATE TABLE tuning (key TEXT, other TEXT)")
    proc = cli(*_args(volume, db))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert _warnings(proc.stderr) == [f"warning: the tuning remembered in {db} cannot be read from its tuning table "
                                      f"(no such column: choice): ignored; this run measures again"]
    assert f"the tuning could not be kept in {db} (table tuning has 2 columns" in proc.stderr
    assert len(Store(db, read_only=True).results(workload="volume")) == 1


@pytest.mark.parametrize("choice", ['{"batch": 0}', '{"batch": 3}', '{"batch": "2"}', '{"batch": true}', "{}"])
def test_a_remembered_batch_outside_the_search_is_ignored(tmp_path, choice):
    warned = []
    with Store(tmp_path / "r.db") as store:
        _edit(store.path, "INSERT INTO tuning VALUES ('k', ?, 'abc123', '2026-01-01')", choice)
        assert Tuning(store, "k", check=batch_check(2)).lookup(warned.append) is None
        _edit(store.path, "UPDATE tuning SET choice = '{\"batch\": 2}'")
        assert Tuning(store, "k", check=batch_check(2)).lookup(warned.append).choice == {"batch": 2}
    assert len(warned) == 1 and "by run abc123 is not valid (batch " in warned[0]
    assert "is not a whole number from 1 to 2)" in warned[0]


BATCH = ["run", "infer", "--model", "resnet18", "--input-shape", "3x16x16", "--device", "cpu", "--batch", "auto",
         "--max-batch", "2", "--warmup", "0", "--warmup-seconds", "0", "--steps", "1", "--min-seconds", "0"]


@pytest.mark.slow
def test_a_broken_batch_row_is_searched_again_and_a_given_batch_is_never_replaced(tmp_path):
    db = tmp_path / "r.db"
    assert cli(*BATCH, "--db", db).returncode == 0
    _edit(db, "UPDATE tuning SET choice = '{\"batch\": 0}'")
    proc = cli(*BATCH, "--db", db)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "is not valid (batch 0 is not a whole number from 1 to 2)" in _warnings(proc.stderr)[0]
    assert "batch search: probing" in proc.stderr and json.loads(_choices(db)[0]) == {"batch": 2}
    given = cli(*[a if a != "auto" else "1" for a in BATCH if a not in ("--max-batch", "2")], "--db", db)
    assert given.returncode == 0 and "as tuned by" not in given.stderr
    assert Store(db, read_only=True).results(workload="infer")[-1].spec["batch"] == 1


# The system's limits


@pytest.mark.parametrize("command", [["results"], ["import", "x.jsonl"], ["run", "fwdbwd", "--device", "cpu"]])
def test_a_store_name_or_path_too_long_ends_in_one_line(tmp_path, command):
    name = tmp_path / ("a" * 300)
    deep = tmp_path.joinpath(*["abcdefgh"] * 470)  # some 4,300 characters
    proc = cli(*command, "--db", name)
    assert_user_error(proc, "store name 'aaaa", "is too long: 300 bytes, where this file system takes at most")
    assert len(proc.stderr) < 400
    proc = cli(*command, "--db", deep)
    assert_user_error(proc, f"is too long: {len(str(deep))} bytes, where this system takes at most")
    assert len(proc.stderr) < 400


def test_a_store_name_at_the_limit_leaves_room_for_sqlites_files(tmp_path):
    """A name the file system takes, but not with `-journal` after it: refused before SQLite fails on it."""
    assert_user_error(cli("results", "--db", tmp_path / ("b" * 250)), "is too long: 250 bytes")
    ok = tmp_path / ("c" * 240)
    assert cli("import", _export(tmp_path, 1), "--db", ok).returncode == 0
    assert Store(ok, read_only=True).count() == 1


def test_a_results_table_of_other_columns_is_refused_untouched(tmp_path):
    db = tmp_path / "other.db"
    _edit(db, "CREATE TABLE results (a, b)")
    _edit(db, "INSERT INTO results VALUES (1, 2)")
    before = db.read_bytes()
    for command in (["results"], ["report"], ["import", _export(tmp_path, 1)],
                    ["run", "fwdbwd", "--model", "resnet18", "--device", "cpu"]):
        assert_user_error(cli(*command, "--db", db), f"store {db} is a SQLite database but not a dlbench store "
                                                     f"(its results table has the columns 'a, b')")
    assert db.read_bytes() == before


def _export(folder: Path, count: int, name: str = "x.jsonl", samples: int = 0) -> Path:
    path = folder / name
    with open(path, "w", encoding="utf-8") as f:
        write_jsonl([make_result(samples={"step": [0.01] * samples} if samples else {}) for _ in range(count)], f)
    return path


def test_an_import_the_disk_cannot_take_ends_in_one_line_and_changes_nothing(small_disk, tmp_path):  # noqa: F811
    db = small_disk / "r.db"
    assert cli("import", _export(tmp_path, 2, "few.jsonl"), "--db", db).returncode == 0
    big = _export(tmp_path, 150, "many.jsonl", samples=2000)  # some 2 MB of records for a 512 KiB disk
    proc = cli("import", big, "--db", db)
    assert_user_error(proc, f"cannot write the store {db}: the disk it is on is full: nothing imported")
    assert Store(db, read_only=True).count() == 2


NEST = "import os, sys\nos.chdir(sys.argv[1])\nfor _ in range(int(sys.argv[2])):\n    os.mkdir('d')\n    os.chdir('d')\n"


def _nest(root: Path, levels: int) -> Path:
    """`root`/d/d/…/d, `levels` folders deep, made one level at a time in a process of its own (a path
    past the system's limit can only be made relative to the folder above it)."""
    root.mkdir()
    subprocess.run([sys.executable, "-c", NEST, str(root), str(levels)], check=True)
    return root


@pytest.fixture
def deep_folder(tmp_path):
    made: list[Path] = []

    def make(name: str, levels: int) -> Path:
        made.append(tmp_path / name)
        return _nest(made[-1], levels)

    yield make
    for root in made:  # shutil.rmtree recurses, and would run out of stack
        subprocess.run(["rm", "-rf", str(root)], check=True)


def test_an_import_of_a_folder_1100_levels_deep_reads_it(tmp_path, deep_folder):
    root = deep_folder("deep", 1100)
    assert_user_error(cli("import", root, "--db", tmp_path / "r.db"), "no record files (*.jsonl) in")
    bottom = _export(tmp_path, 1).read_text(encoding="utf-8")
    subprocess.run(["sh", "-c", f"cd '{root}' && cd {'/'.join(['d'] * 1100)} && cat > r.jsonl"], input=bottom,
                   text=True, check=True)
    proc = cli("import", root, "--db", tmp_path / "r.db")
    assert proc.returncode == 0 and "imported 1 new results" in proc.stderr, proc.stderr


def test_an_import_of_a_folder_past_the_path_limit_ends_in_one_line(tmp_path, deep_folder):
    root = deep_folder("deeper", 2100)  # 4,200 characters of d/
    assert_user_error(cli("import", root, "--db", tmp_path / "r.db"), "cannot read folder '", "/d/d/d' ",
                      "to import from it: File name too long")


@pytest.fixture
def tagged(tmp_path) -> Path:
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.add(make_result(tag="café ✓ 日本"))
    return db


ASCII_ONLY = [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}]


@pytest.mark.parametrize("env", ASCII_ONLY, ids=["PYTHONIOENCODING=ascii", "LC_ALL=C"])
@pytest.mark.parametrize("command", [["results"], ["report"], ["doctor"], ["export"]])
def test_a_tag_the_terminal_cannot_show_is_printed_with_replacements(tagged, env, command):
    proc = cli(*command, "--db", tagged, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    if command == ["results"]:
        assert "caf? ? ??" in proc.stdout


def test_a_non_ascii_tag_typed_under_the_c_locale_is_stored_as_typed(tmp_path):
    db = tmp_path / "r.db"
    run = ["run", "fwdbwd", "--model", "resnet18", "--device", "cpu", "--batch", "2", "--input-shape", "3x32x32",
           "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0", "--tag", "café ✓"]
    proc = cli(*run, "--db", db, env=ASCII_ONLY[1])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert [r.tag for r in Store(db, read_only=True).results(workload="fwdbwd")] == ["café ✓"]

