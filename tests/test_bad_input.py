"""Bad, hostile and odd input through the real entry point: every case ends in exit status 2,
one line on stderr that starts with `error: `, no traceback, and a store left as it was.
docs/errors.md lists these cases for users."""

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from dlbench.results.store import Store

from conftest import assert_user_error, cli, export_line, make_result

TINY = ["--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32", "--device", "cpu", "--warmup", "1",
        "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0"]


@pytest.fixture
def stored(db):
    """A store holding one earlier result, and a way to check it is unchanged."""
    earlier = make_result()
    with Store(db) as store:
        store.add(earlier)
    before = db.read_bytes()

    def unchanged() -> bool:
        with Store(db, read_only=True) as store:
            return [r.id for r in store.results()] == [earlier.id] and db.read_bytes() == before

    return unchanged


# Numbers, on every command: NaN, inf, negative, zero, absurd, not a number, a flag that does not exist.
NUMBERS = [
    (["run", "fwdbwd", "--warmup-seconds", "nan"], "--warmup-seconds must be a finite number, got nan"),
    (["run", "fwdbwd", "--min-seconds", "inf"], "--min-seconds must be a finite number, got inf"),
    (["run", "fwdbwd", "--seed", "99999999999999999999999"], "--seed must be ≤ 4.29497e+09"),
    (["run", "fwdbwd", "--seed", "-1"], "--seed must be ≥ 0"),
    (["run", "fwdbwd", "--steps", "100000000000"], "--steps must be ≤ 1e+07"),
    (["run", "fwdbwd", "--batch", "abc"], "Invalid value for '--batch'"),
    (["run", "fwdbwd", "--bacth", "2"], "No such option: --bacth"),
    (["run", "infer", "--batch", "sweep", "--max-batch", "0"], "--max-batch must be ≥ 1, got 0"),
    (["run", "infer", "--batch", "2,4,99999999999"], "--batch must be ≤"),
    (["run", "infer", "--workers", "100000"], "--workers must be ≤ 1024"),
    (["run", "train", "--lr", "nan"], "--lr must be a finite number"),
    (["run", "volume", "--readers", "0"], "--readers must be ≥ 1"),
    (["run", "volume", "--extrapolate", "1e999"], "bad --extrapolate '1e999'"),
    (["run", "volume", "--block", "32x384"], "--block must be ZxYxX (3 sizes), got 32x384"),
    (["compare", "a", "b", "--fail-above", "nan"], "--fail-above must be a finite number, got nan"),
    (["compare", "a", "b", "--fail-above", "-5"], "--fail-above must be ≥ 0 %, got -5.0"),
    (["compare", "a", "b", "--confidence", "1.5"], "--confidence must be ≤ 0.999, got 1.5"),
    (["compare", "a", "b", "--confidence", "0"], "--confidence must be > 0, got 0.0"),
    (["results", "--limit", "-1"], "--limit must be ≥ 1, got -1"),
    (["results", "--limit", "abc"], "Invalid value for '--limit'"),
    (["suite", "quick", "--timeout", "nan"], "--timeout must be a finite number, got nan"),
    (["suite", "quick", "--timeout", "0"], "--timeout must be > 0 s, got 0.0"),
    (["suite", "quick", "--timeout", "1e12"], "--timeout must be ≤"),
    (["suite", "quick", "--device", "gpu0"], "bad device 'gpu0'"),
    (["data", "images", "x", "--n", "0"], "--n must be ≥ 1, got 0"),
    (["data", "images", "x", "--classes", "-1"], "--classes must be ≥ 1, got -1"),
    (["data", "images", "x", "--workers", "0"], "--workers must be ≥ 1, got 0"),
    (["data", "images", "x", "--seed", "-1"], "--seed must be ≥ 0, got -1"),
    (["data", "seg", "x", "--size", "8"], "--size must be ≥ 16, got 8"),
    (["data", "seg", "x", "--n", "99999999"], "--n must be ≤ 1e+06"),
    (["data", "seg", "x", "--format", "jpg"], "--format must be one of tif, png, got 'jpg'"),
    (["data", "volume", "x.zarr", "--workers", "0"], "--workers must be ≥ 1, got 0"),
    (["data", "volume", "x.zarr", "--shape", "0x10x10"], "bad shape '0x10x10'"),
    (["data", "volume", "x.zarr", "--shape", "10x10"], "volume shape must be ZxYxX (3 sizes), got 10x10"),
    (["data", "volume", "x.tif"], "unknown volume format"),
    (["export", "--format", "xml"], "--format must be one of jsonl, csv, got 'xml'"),
    (["report", "--format", "pdf"], "--format must be one of md, csv, json, html, got 'pdf'"),
    (["system", "--device", "tpu"], "bad device 'tpu'"),
]


@pytest.mark.parametrize("args, needle", NUMBERS, ids=[" ".join(a) for a, _ in NUMBERS])
def test_bad_numbers_and_words(args, needle, db, stored, tmp_path):
    proc = cli(*args, "--db", db, env={"TMPDIR": str(tmp_path)}) if args[0] != "data" else \
        cli(*args[:2], tmp_path / args[2], *args[3:])
    assert_user_error(proc, needle)
    assert stored()
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.zarr").exists()


SHAPES = [
    (["--input-shape", "3x224"], "--input-shape 3x224 has 2 sizes, but resnet50 takes 3 (CxHxW, e.g. 3x224x224)"),
    (["--model", "resnet18", "--input-shape", "1x32x32"], "has 1 channel, but resnet18 takes 3"),
    (["--model", "unet2d", "--input-shape", "3x32x32x32"], "has 4 sizes, but unet2d takes 3"),
    (["--model", "unet3d", "--input-shape", "1x64x64"], "has 3 sizes, but unet3d takes 4 (CxZxYxX"),
    (["--model", "alexnet", "--input-shape", "3x14x14"], "--input-shape 3x14x14 does not fit alexnet"),
    (["--input-shape", "3x0x224"], "bad shape '3x0x224'"),
]


@pytest.mark.parametrize("args, needle", SHAPES, ids=[" ".join(a) for a, _ in SHAPES])
def test_input_shape_checked_against_the_model(args, needle, db, stored):
    assert_user_error(cli("run", "fwdbwd", "--device", "cpu", *args, "--db", db), needle)
    assert stored()


def test_a_suite_with_a_shape_its_model_cannot_take(tmp_path, db, stored):
    suite = tmp_path / "s.yaml"
    suite.write_text("defaults: {workload: fwdbwd, model: resnet18, device: cpu}\n"
                     "specs: [{input_shape: 3x32x32}, {input_shape: 1x32x32}]\n")
    assert_user_error(cli("suite", suite, "--db", db), "has 1 channel, but resnet18 takes 3")
    suite.write_text("defaults: {workload: fwdbwd, model: alexnet, device: cpu, batch: 2}\n"
                     "specs: [{input_shape: 3x14x14}]\n")
    assert_user_error(cli("suite", suite, "--db", db), "fwdbwd alexnet b2 3x14x14 fp32: --input-shape 3x14x14 does "
                                                       "not fit alexnet")
    assert stored()


@pytest.mark.slow
def test_output_paths_checked_before_any_work(tmp_path, db, stored):
    missing = tmp_path / "missing"
    folder = tmp_path / "folder"
    folder.mkdir()
    cases = [
        (["export", "-o", missing / "x.csv"], f"cannot write export {missing}/x.csv: folder {missing} does not exist"),
        (["report", "-o", missing / "r.md"], "folder"),
        (["compare", "a", "b", "-o", missing / "c.md"], "does not exist"),
        (["export", "-o", folder], "it is a folder; give a file name"),
        (["export", "-o", db], "is the result store itself"),
        (["run", "fwdbwd", *TINY, "--results-file", db], "is the result store itself; writing the results file"),
        (["run", "fwdbwd", *TINY, "--results-file", tmp_path / "r.txt"], "name it .json (one JSON document) or .jsonl"),
        (["report", "--format", "html"], "--format html writes a file: add --output report.html"),
        (["run", "volume", "--output", tmp_path / "p.h5"], "name it .zarr or .n5"),
        (["run", "volume", "--device", "cpu", "--output", missing / "p.zarr"], "folder"),
    ]
    for args, needle in cases:
        assert_user_error(cli(*args, "--db", db), needle)
    for args in (["data", "images", missing / "x"], ["data", "seg", missing / "x"],
                 ["data", "volume", missing / "v.h5", "--shape", "4x32x32"]):
        assert_user_error(cli(*args), f"folder {missing} does not exist")
    assert_user_error(cli("run", "fwdbwd", *TINY, "--db", missing / "r.db"),
                      f"cannot create store {missing}/r.db: folder {missing} does not exist")
    assert_user_error(cli("run", "fwdbwd", *TINY, "--db", db, "--results-file", missing / "r.json"),
                      f"cannot write results file {missing}/r.json: folder {missing} does not exist")
    assert not missing.exists() and list(folder.iterdir()) == []
    assert not (tmp_path / "p.h5").exists() and not (tmp_path / "r.txt").exists()
    assert stored()


def test_a_folder_without_write_permission(tmp_path, db, stored):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)  # refused for root too: the permission bits are read, not only os.access
    try:
        assert_user_error(cli("export", "-o", locked / "x.jsonl", "--db", db),
                          f"folder {locked} is read-only (it has no write permission)")
        assert_user_error(cli("data", "images", locked / "set"), "is read-only")
    finally:
        locked.chmod(0o755)
    assert list(locked.iterdir()) == [] and stored()


@pytest.mark.parametrize("text, needle", [
    ("defaults: {workload: fwdbwd, model: resnet18}\nmatrix:\n  batch: [1, 2]\n  batch: [4]\n",
     "line 4: duplicate key 'batch'"),
    ("defaults: {workload: fwdbwd, model: resnet18, model: resnet50}\nspecs: [{}]\n", "duplicate key 'model'"),
    ("defaults: {workload: fwdbwd, model: resnet18}\nmatrix:\n" +
     "".join(f"  {k}: [{', '.join(str(i) for i in range(1, 12))}]\n" for k in ("batch", "steps", "warmup", "seed")),
     "the matrix expands to 14,641 benchmarks (11 x 11 x 11 x 11); at most 10,000 are allowed"),
    ("defaults: {workload: fwdbwd, model: resnet18, batch: .nan}\nspecs: [{}]\n", "--batch must be an integer"),
    ("defaults: {workload: fwdbwd, model: resnet18, warmup_seconds: .inf}\nspecs: [{}]\n", "must be a finite number"),
    ("defaults: {workload: [fwdbwd]}\nspecs: [{}]\n", "workload must be a name, got ['fwdbwd']"),
    ("!!python/object/apply:os.system ['touch pwned']\n", "not valid YAML"),
])
def test_bad_suite_files(tmp_path, db, stored, text, needle):
    suite = tmp_path / "s.yaml"
    suite.write_text(text)
    assert_user_error(cli("suite", suite, "--list", "--db", db), needle)
    assert stored() and not (tmp_path / "pwned").exists()


def test_merge_keys_may_override_what_they_merge(tmp_path):
    from dlbench import suites

    suite = tmp_path / "s.yaml"
    suite.write_text("base: &base {workload: fwdbwd, model: resnet18, batch: 2}\n"
                     "specs: [{<<: *base, batch: 4}]\n")
    with pytest.raises(Exception, match="unknown key 'base'"):  # the anchor's holder is not a suite key
        suites.load(str(suite))
    suite.write_text("defaults: &base {workload: fwdbwd, model: resnet18, batch: 2}\n"
                     "specs: [{<<: *base, batch: 4}]\n")
    assert [s.batch for s in suites.load(str(suite)).specs] == [4]


def test_an_alias_bomb_in_a_suite_gives_a_short_line(tmp_path, db, stored):
    node, names = "&a [x,x,x,x,x,x,x,x,x]", "abcdefgh"  # 9**8 strings once expanded
    for previous, name in zip(names, names[1:]):
        node = f"&{name} [{node}, " + ", ".join(f"*{previous}" for _ in range(8)) + "]"
    suite = tmp_path / "bomb.yaml"
    suite.write_text(f"defaults:\n  workload: fwdbwd\n  model: {node}\nspecs: [{{}}]\n")
    proc = cli("suite", suite, "--db", db, timeout=60)
    assert_user_error(proc, f"suite {suite} is refused at line 3: it holds more than 50,000 values")  # before it expands
    assert len(proc.stderr) < 500 and stored()


def test_resume_of_an_unknown_or_foreign_run(tmp_path, db, stored):
    with Store(db) as store:
        store.add(make_result(suite="other", run="20260101T000000Z-abcdef"))
    before = db.read_bytes()
    assert_user_error(cli("suite", "quick", "--resume", "--run", "nosuch", "--db", db),
                      "--resume --run nosuch: the store holds no suite run nosuch; suite quick has none")
    assert_user_error(cli("suite", "quick", "--resume", "--run", "20260101T000000Z-abcdef", "--list", "--db", db),
                      "that is a run of suite other, not of quick")
    assert_user_error(cli("suite", "quick", "--run", "../../etc", "--db", db), "bad --run '../../etc'")
    assert db.read_bytes() == before


@pytest.mark.slow
def test_read_only_store_is_read_and_never_written(tmp_path):
    folder = tmp_path / "archive"
    folder.mkdir()
    db = folder / "results.db"
    with Store(db) as store:
        store.add(make_result(tag="archived"))
        store.add(make_result(system={"host": "node2"}))
    for locked in (db, folder):  # a file without write permission, then a read-only folder
        locked.chmod(0o444 if locked == db else 0o555)
        try:
            before = sorted((p.name, p.read_bytes()) for p in folder.iterdir())
            for args in (["results"], ["report"], ["export"], ["doctor"], ["compare", "node1", "node2"],
                         ["suite", "quick", "--list"]):
                proc = cli(*args, "--db", db)
                assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, (args, proc.stderr)
            assert "archived" in cli("results", "--db", db).stdout
            for args in (["run", "fwdbwd", *TINY], ["import", tmp_path / "none.jsonl"], ["suite", "quick"]):
                assert_user_error(cli(*args, "--db", db), f"store {db} is read-only (", "can read it")
            assert sorted((p.name, p.read_bytes()) for p in folder.iterdir()) == before
        finally:
            locked.chmod(0o755 if locked == folder else 0o644)


def test_readers_never_create_a_store(tmp_path):
    typo = tmp_path / "reslts.db"
    for args in (["results"], ["report"], ["export"], ["compare", "a", "b"], ["doctor"]):
        assert_user_error(cli(*args, "--db", typo), f"no store at {typo}")
    assert not typo.exists()
    other = tmp_path / "other.sqlite"
    import sqlite3
    sqlite3.connect(other).execute("CREATE TABLE notes (x)").connection.commit()
    assert_user_error(cli("results", "--db", other), "is a SQLite database but not a dlbench store")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    assert_user_error(cli("results", "--db", empty), f"store {empty} is not a dlbench store (it is an empty file")
    assert empty.read_bytes() == b""


@pytest.mark.parametrize("line, needle", [
    (export_line(id="../../etc/passwd"), "bad result id '../../etc/passwd'"),
    (export_line(id="a\nb"), "bad result id"),
    (export_line(schema=True), "result schema True is not one this dlbench understands"),
    (export_line(schema=0), "result schema 0"),
    (export_line(spec="fwdbwd"), "result field 'spec' must be a mapping"),
    (export_line(spec__batch="16"), "spec 'batch' must be a whole number from 0 to 16777216, got '16'"),
    (export_line(spec__input_shape=[3, "x"]), "spec 'input_shape' must be a list of at most 8 sizes from 1 to 2^31"),
    (export_line(spec__model="m" * 5000), "spec 'model' must be text of at most 256 characters"),
    (export_line(metrics__total_ms="fast"), "metric 'total_ms' must be a number or a mapping of numbers, got 'fast'"),
    (export_line(samples={"step": [0.1, "x"]}), "samples 'step' must be a list of numbers"),
    (export_line(started="yesterday"), "'started' must be an ISO date and time"),
    (export_line(tag=["a"]), "result field 'tag' must be text"),
    (export_line(run="../../x"), "bad suite-run id '../../x'"),
    (export_line(system__gpus=[{"name": 7}]), "GPU 'name' must be text"),
    (export_line(status="done"), "unknown result status 'done'"),
    ("[" * 100000 + "]" * 100000, "not a dlbench export (line 1"),
    ('{"format": "dlbench-result", "schema": ' + "9" * 5000 + '}', "not a dlbench export (line 1"),
])
def test_crafted_export_files_are_refused_whole(tmp_path, db, stored, line, needle):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(make_result().to_dict()) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n")
    proc = cli("import", good, bad, "--db", db)
    assert_user_error(proc, "bad.jsonl is not a dlbench export", needle)
    assert len(proc.stderr) < 1000 and stored()


def test_import_of_something_that_is_not_a_file(db, stored):
    assert_user_error(cli("import", "/dev/zero", "--db", db, timeout=60), "/dev/zero is not a regular file")
    assert stored()


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\u202eevil\r\x00"


def test_hostile_text_in_imported_results(tmp_path, db):
    crafted = make_result(tag="=HYPERLINK(\"http://x\")" + HOSTILE, system={"host": "-2+3"},
                          metrics={"note": "@SUM(A1)", "delta": -1.5, "=cmd": "+1"})
    export = tmp_path / "crafted.jsonl"
    export.write_text(json.dumps(crafted.to_dict()) + "\n")
    assert cli("import", export, "--db", db).returncode == 0
    listing = cli("results", "--db", db)
    assert listing.returncode == 0 and "red" in listing.stdout
    for char in "\x1b\x07\x00\r\u202e":
        assert char not in listing.stdout
    header, values = list(csv.reader(io.StringIO(cli("export", "--format", "csv", "--db", db).stdout)))
    row = dict(zip(header, values))
    assert row["host"] == "'-2+3" and row["note"] == "'@SUM(A1)" and row["'=cmd"] == "'+1"
    assert row["delta"] == "-1.5" and row["tag"].startswith("'=HYPERLINK(") and row["batch"] == "16"


def test_an_error_naming_hostile_input_stays_one_clean_line(db, stored):
    proc = cli("run", "fwdbwd", "--model", "x\x1b[2J\nnext line\u202e", "--db", db)
    assert_user_error(proc, "unknown model")
    assert "\x1b" not in proc.stderr and "\u202e" not in proc.stderr
    assert stored()


@pytest.mark.slow
def test_temporary_folders_of_a_killed_run_are_removed_by_the_next(tmp_path, db):
    make = ("import os, sys; from dlbench import scratch; "
            "p = scratch.make('volume'); open(os.path.join(p, 'big'), 'w').write('x'); print(p, flush=True); "
            "os.kill(os.getpid(), 9)")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", make], capture_output=True, text=True, env=env)
    left = tmp_path / os.path.basename(killed.stdout.strip())
    assert killed.returncode == -9 and left.is_dir()
    foreign = tmp_path / "dlbench-abcdef"  # not named by dlbench's scheme: never touched
    foreign.mkdir()
    live = tmp_path / f"dlbench-run-{os.getpid()}-x"  # a live process's
    live.mkdir()
    proc = cli("run", "fwdbwd", *TINY, "--db", db, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert not left.exists() and foreign.is_dir() and live.is_dir()


def test_a_read_only_mount_is_read_only_for_root_too(tmp_path, monkeypatch):
    """A read-only mount cannot be made in a test; its one symptom dlbench reads is statvfs's flag."""
    from dlbench import paths
    from dlbench.errors import UserError

    db = tmp_path / "r.db"
    with Store(db) as store:
        store.add(make_result())
    real = os.statvfs

    class ReadOnly:
        def __init__(self, path):
            self.f_flag = real(path).f_flag | os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", ReadOnly)
    assert paths.read_only_reason(db) == "it is on a read-only file system"
    with Store(db, read_only=True) as store:
        assert store.count() == 1
    with pytest.raises(UserError, match="is read-only .it is on a read-only file system.: results, report"):
        Store(db)
    with pytest.raises(UserError, match="folder .* is read-only"):
        paths.check_new_file(tmp_path / "new.csv", "export")


def test_only_stale_temporary_folders_are_removed(tmp_path):
    from dlbench import scratch

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"dlbench-run-{gone.stdout.strip()}-abc"
    alive = tmp_path / f"dlbench-volume-{os.getpid()}-abc"
    other = tmp_path / "dlbench-abc"
    for folder in (dead, alive, other):
        folder.mkdir()
    (dead / "spec.json").write_text("{}")
    assert scratch.clean_stale(tmp_path) == [dead]
    assert not dead.exists() and alive.is_dir() and other.is_dir()


def test_terminal_text_loses_control_characters():
    from dlbench.launch.view import clean, one_line

    assert clean("a\x1b[2Jb\tc\nd\r\x00\x7f\x9b\u202ee\u2066f") == "a[2Jb\tc\ndef"
    assert one_line("first\nsecond\r\n third") == "first second third"


@pytest.mark.slow
def test_images_never_mix_into_a_folder_that_holds_other_files(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    assert_user_error(cli("data", "images", home, "--n", "2"), "holds other files: write the images into a new")
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]
    made = tmp_path / "set"
    assert cli("data", "images", made, "--n", "2", "--workers", "1").returncode == 0
    assert_user_error(cli("data", "images", made, "--n", "3"), "already holds a generated set: pass --overwrite")
    again = cli("data", "images", made, "--n", "1", "--classes", "1", "--workers", "1", "--overwrite")
    assert again.returncode == 0, again.stderr
    assert [p.name for p in made.rglob("*.jpg")] == ["img0000000.jpg"]


def test_a_disk_that_refuses_the_write(db, stored):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    assert_user_error(cli("export", "-o", "/dev/full", "--db", db), "cannot write /dev/full: No space left")
    assert stored()


def test_the_shape_check_never_builds_a_plug_in_model(monkeypatch):
    """A plug-in's model may abort or hang when built or run; only its benchmark's process may risk that."""
    from dlbench.models import registry

    built = []
    entry = registry.ModelEntry("plugged", "Plugged", lambda: built.append(1), (3, 224, 224))
    monkeypatch.setitem(registry.MODELS, "plugged", entry)
    registry.check_fits("plugged", (3, 8, 8), 2)
    assert built == []
    monkeypatch.setitem(registry.MODELS, "resnet18", entry)  # a plug-in that replaces a built-in name
    registry.check_fits("resnet18", (3, 8, 8), 2)
    assert built == []


def test_markdown_report_neutralises_crafted_names(db):
    crafted = "[click](javascript:alert(1))\r\nx|y<img src=x>\x1b[2J"
    with Store(db) as store:
        store.add(make_result(tag=crafted, title=crafted, system={"host": crafted}))
    text = cli("report", "--db", db).stdout
    assert "](javascript:" not in text  # the parenthesis is escaped: never a link
    assert "\r" not in text and "\x1b" not in text and "<img" not in text
    assert "[click]\\(javascript:alert(1))" in text


def _torchvision_made_for(tmp_path, version: str) -> dict:
    """An environment whose torchvision fails on import as one made for another torch does
    (a CPU torch beside a CUDA torchvision from PyPI): its operators cannot register."""
    site = tmp_path / "site"
    (site / "torchvision").mkdir(parents=True)
    (site / "torchvision" / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    (site / f"torchvision-{version}.dist-info").mkdir()
    (site / f"torchvision-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torchvision\nVersion: {version}\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
            "DLBENCH_DB": str(tmp_path / "r.db")}


@pytest.mark.slow
def test_a_torchvision_made_for_another_torch_is_one_line_with_the_fix(tmp_path):
    import torch

    public = torch.__version__.split("+")[0]
    matching = f"0.{int(public.split('.')[1]) + 15}"  # torchvision 0.N is made for torch 2.(N-15)
    env = _torchvision_made_for(tmp_path, "0.26.0")
    for args in ([], ["run", "infer", *TINY]):  # the default suite, and a run
        assert_user_error(cli(*args, env=env), "torchvision 0.26.0 is made for torch 2.11, but torch here is "
                          f"{torch.__version__} (operator torchvision::nms does not exist); install a matching "
                          f"pair: pip install --force-reinstall torch=={public} 'torchvision=={matching}.*' "
                          "--index-url https://download.pytorch.org/whl/")
    assert not (tmp_path / "r.db").exists()
    same_versions = _torchvision_made_for(tmp_path / "build", f"{matching}.0")
    assert_user_error(cli("run", "infer", *TINY, env=same_versions),
                      f"torchvision {matching}.0 was built for another torch than {torch.__version__}")


@pytest.mark.parametrize("torchvision, torch", [("0.19.1", "2.4"), ("0.26.0", "2.11"), ("0.29.0+cpu", "2.14")])
def test_torchvision_releases_pair_with_torch_releases(torchvision, torch):
    from dlbench import vision

    assert vision.made_for(torchvision) == torch
    assert vision.matching_torchvision(f"{torch}.1+cpu") == f"torchvision=={torchvision.rsplit('.', 1)[0]}.*"


def test_remove_takes_a_file_a_folder_tree_or_a_link_and_leaves_what_a_link_points_to(tmp_path):
    from dlbench.paths import remove

    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "tree" / "a" / "chunk").write_bytes(b"x")
    (tmp_path / "file.h5").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "tree")
    for name in ("link", "tree", "file.h5", "missing"):
        remove(tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "kept")
    remove(tmp_path / "link")
    assert (tmp_path / "kept").is_dir()  # an output given as a link: the link goes, not the folder
