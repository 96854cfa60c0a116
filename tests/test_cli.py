"""The real entry point in subprocesses: good runs, and every bad input a user can give."""

import json

import pytest

from dlbench.results.store import Store

from conftest import assert_user_error, cli, make_result

TINY_FLAGS = ["--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32", "--device", "cpu",
              "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0"]


@pytest.fixture
def stored(db):
    """A store holding one earlier result, and a way to check it is unchanged."""
    earlier = make_result()
    with Store(db) as store:
        store.add(earlier)

    def unchanged() -> bool:
        with Store(db) as store:
            return [r.id for r in store.results()] == [earlier.id]

    return unchanged


def test_run_stores_and_reports(db):
    proc = cli("run", "fwdbwd", *TINY_FLAGS, "--db", db, "--tag", "first")
    assert proc.returncode == 0, proc.stderr
    assert "ok fwdbwd resnet18" in proc.stdout
    with Store(db) as store:
        (r,) = store.results(workload="fwdbwd")  # beside it, the matmul ceiling it measured for its utilisation
    assert r.tag == "first" and r.status == "ok" and r.system["cpu"]["cores"]
    report = cli("report", "--db", db)
    assert "## ResNet-18\nHow long one batch of 2 takes forward and backward" in report.stdout
    assert "\n(input 2 x 3 x 32 x 32)\n" in report.stdout and "dlbench's rows are runs tagged `first`." in report.stdout
    # CPU rows alone: no cuDNN column, which would read None in every row
    assert "|GPU or CPU|Forward (ms)|Backward (ms)|Total (ms)|Median step (ms)|" in report.stdout
    assert "|CPU: " in report.stdout and "None" not in report.stdout
    listing = cli("results", "--db", db)
    assert r.id[:8] in listing.stdout


@pytest.mark.slow
def test_db_from_environment(tmp_path):
    path = tmp_path / "env.db"
    proc = cli("run", "fwdbwd", *TINY_FLAGS, env={"DLBENCH_DB": str(path)})
    assert proc.returncode == 0, proc.stderr
    with Store(path) as store:
        assert len(store.results(workload="fwdbwd")) == 1


@pytest.mark.slow
def test_suite_list_shows_specs():
    proc = cli("suite", "cnn-benchmarks", "--list")
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 12 and "fwdbwd alexnet b16 3x224x224 fp32" in lines[1]
    assert lines[-1].startswith("10 benchmarks: about")


@pytest.mark.parametrize("args, needle", [
    (["run", "fwdbwd", "--model", "resnet5"], "did you mean resnet50"),
    (["run", "fwdbwd", "--batch", "0"], "--batch must be ≥ 1, got 0"),
    (["run", "fwdbwd", "--precision", "fp64"], "--precision must be one of fp32, tf32, fp16, bf16, auto, got 'fp64'"),
    (["run", "fwdbwd", "--device", "cuda"], "no CUDA GPU"),
    (["run", "fwdbwd", "--input-shape", "3xAx2"], "bad shape"),
    (["suite", "nosuchsuite"], "no suite named 'nosuchsuite'"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, db, stored):
    if "--device" in args and __import__("torch").cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert_user_error(cli(*args, "--db", db), needle)
    assert stored()


def test_suite_file_not_yaml(tmp_path, db, stored):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: {workload: fwdbwd\nmatrix: [")
    assert_user_error(cli("suite", bad, "--db", db), "not valid YAML", "line")
    assert stored()


@pytest.mark.slow
def test_suite_file_with_unknown_keys(tmp_path, db, stored):
    bad = tmp_path / "keys.yaml"
    bad.write_text("defaults: {workload: fwdbwd, model: resnet18}\nmatrix: {batch: [1]}\nrepeat: 3\n")
    assert_user_error(cli("suite", bad, "--db", db), "unknown key 'repeat'")
    bad.write_text("defaults: {workload: fwdbwd, model: resnet18, bacth: 2}\nspecs: [{}]\n")
    assert_user_error(cli("suite", bad, "--db", db), "unknown spec key 'bacth'")
    assert stored()


@pytest.mark.slow
def test_store_that_is_not_sqlite(tmp_path):
    path = tmp_path / "text.db"
    path.write_bytes(b"not a database at all\n" * 10)
    for args in (["results"], ["report"], ["run", "fwdbwd", *TINY_FLAGS]):
        assert_user_error(cli(*args, "--db", path), "not a SQLite database")
    assert path.read_bytes() == b"not a database at all\n" * 10


def test_import_of_a_file_that_is_not_an_export(tmp_path, db, stored):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(make_result().to_dict()) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    csv = tmp_path / "x.csv"
    csv.write_text("id,status\n1,ok\n")
    assert_user_error(cli("import", good, bad, "--db", db), "not a dlbench export", "line 1")
    assert_user_error(cli("import", csv, "--db", db), "not a dlbench export")
    assert_user_error(cli("import", tmp_path / "missing.jsonl", "--db", db), "does not exist")
    assert stored()  # the good file in the same call was not imported either


def test_unknown_export_format(db, stored):
    assert_user_error(cli("export", "--format", "xml", "--db", db), "--format must be one of jsonl, csv")


@pytest.mark.slow
def test_suite_report_lines_are_never_wrapped(tmp_path, db):
    suite = tmp_path / "one.yaml"
    suite.write_text("defaults: {workload: infer, model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu,"
                     " warmup: 1, warmup_seconds: 0, steps: 2, min_seconds: 0, data: synthetic}\nspecs: [{}]\n")
    proc = cli("suite", suite, "--db", db, env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    header = [line for line in proc.stdout.splitlines() if line.startswith("|Run|Data Loading Time [ms]|")]
    assert header and header[0].endswith("|Total [ms]|Median Batch [ms]|")  # the BenchmarkJade header on one line
