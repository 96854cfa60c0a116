"""A new user's first hour: the global --db, output that other tools read, the default run
without a GPU, help that speaks of the user's world."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import cli, make_result
from dlbench.figures import ms
from dlbench.results.store import Store, user_store

RUN = ("run", "fwdbwd", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32", "--device", "cpu",
       "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0")


def here(*args, cwd, **kw):
    """`dlbench` run from `cwd` without DLBENCH_DB: a store there or the user's would show --db ignored."""
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "DLBENCH_DB": ""}, timeout=600, **kw)


@pytest.fixture
def stocked(tmp_path):
    """A store elsewhere holding results of two systems, and a working folder without a store."""
    store_path = tmp_path / "elsewhere.db"
    with Store(store_path) as store:
        store.add_many([make_result(tag="a"), make_result(tag="b", system={"host": "node2"},
                                                            metrics={"total_ms": 30.0})])
    work = tmp_path / "work"
    work.mkdir()
    return store_path, work


@pytest.mark.parametrize("args, expect", [
    (("results",), "resnet50"),
    (("report",), "ResNet-50"),
    (("compare", "a", "b"), "ResNet-50"),
    (("export",), '"tag": "a"'),
    (("doctor",), "fwdbwd resnet50 b16 fp32 on NVIDIA H200 (node1)"),
    (("suite", "quick", "--list"), "benchmarks"),
])
def test_global_db_is_read_by_every_command(stocked, args, expect):
    store_path, work = stocked
    proc = here("--db", store_path, *args, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert expect in proc.stdout
    assert not (work / "dlbench.db").exists() and not user_store().exists()


def test_two_different_stores_in_one_call_are_refused(stocked):
    store_path, work = stocked
    for args in (("results", "--db", work / "other.db"), ("export", "--db", work / "other.db")):
        proc = here("--db", store_path, *args, cwd=work)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].endswith("--db given twice with different stores "
                                                            f"({store_path} before the command, {work / 'other.db'} "
                                                            "after it): give one")
    assert here("--db", store_path, "results", "--db", store_path, cwd=work).returncode == 0  # the same store twice
    assert not (work / "other.db").exists()


def test_global_db_is_written_by_run_and_import(stocked):
    store_path, work = stocked
    assert here("--db", store_path, *RUN, cwd=work).returncode == 0
    exported = here("--db", store_path, "export", "-o", work / "all.jsonl", cwd=work)
    assert exported.returncode == 0, exported.stderr
    other = work.parent / "other.db"
    assert here("--db", other, "import", work / "all.jsonl", cwd=work).returncode == 0
    assert not (work / "dlbench.db").exists() and not user_store().exists()
    with Store(store_path) as store, Store(other) as copy:
        # two stocked, the run, and the matmul ceiling the run measured for its FLOP utilisation
        assert store.count() == 4 and copy.count() == 4


def test_run_result_goes_to_stdout_and_to_a_json_file(tmp_path, db):
    out = tmp_path / "result.json"
    proc = cli(*RUN, "--db", db, "--results-file", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok fwdbwd resnet18") and "\n" == proc.stdout[-1] and proc.stdout.count("\n") == 1
    row = json.loads(out.read_text())
    assert row["status"] == "ok" and row["workload"] == "fwdbwd" and row["batch"] == 2
    assert row["input_shape"] == [2, 3, 32, 32] and row["precision"] == "fp32"
    assert row["parameters"] == 11_689_512  # ResNet-18
    assert row["flops_per_step"] > 0 and row["throughput"] > 0 and row["throughput_unit"] == "img/s"
    assert row["step_ms_p50"] <= row["step_ms_p99"] and row["steps"] >= 2
    # one median of the per-step totals, wherever it is read: the run line prints the stored one
    with Store(db) as store:
        stored, = store.records([row["id"]])
    assert f"median forward + backward {ms(stored.measured.window.total_ms)} ms" in proc.stdout
    assert row["peak_host_rss_mb"] > 0 and row["peak_memory_mb"] is None  # no GPU here
    assert row["system"]["label"].startswith("CPU") and row["system"]["torch"]


def test_results_as_json_lines_with_typed_values(tmp_path, db):
    lines = tmp_path / "sweep.jsonl"
    assert cli("run", "infer", *RUN[2:], "--batch", "1,2", "--db", db, "--results-file", lines).returncode == 0
    rows = [json.loads(line) for line in cli("results", "--format", "json", "--db", db).stdout.splitlines()]
    ceilings = [r for r in rows if r["workload"] == "system"]  # measured once, by the first run, for its utilisation
    rows = [r for r in rows if r["workload"] != "system"]
    assert [r["batch"] for r in rows] == [1, 2] and len(ceilings) == 1
    assert [json.loads(line)["id"] for line in lines.read_text().splitlines()] == [r["id"] for r in rows]
    assert all(isinstance(r["throughput"], float) and isinstance(r["parameters"], int) for r in rows)
    assert cli("results", "--format", "xml", "--db", db).returncode == 2


@pytest.mark.slow
def test_a_list_of_batches_is_one_json_document_and_each_line_names_its_batch(tmp_path, db):
    out = tmp_path / "r.json"
    out.write_text("an earlier file\n")
    proc = cli("run", "infer", *RUN[2:], "--batch", "1,2", "--db", db, "--results-file", out)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())  # valid JSON: a list, as timm writes for several models
    assert [r["batch"] for r in rows] == [1, 2] and all(r["status"] == "ok" for r in rows)
    first, second = proc.stdout.splitlines()
    assert first.startswith("ok infer resnet18 batch 1 on CPU") and second.startswith("ok infer resnet18 batch 2 on")


@pytest.mark.slow
def test_piped_lines_are_not_wrapped_and_long_runs_report_progress(db):
    proc = cli(*RUN[:-2], "--min-seconds", "12", "--db", db, env={"COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and len(proc.stdout) > 80
    progress = [line for line in proc.stderr.splitlines() if ": measure " in line]
    assert len(progress) >= 1, proc.stderr


LONG_SUITE = """name: long
defaults: {model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu, warmup: 1, warmup_seconds: 0, steps: 2,
           min_seconds: 14}
specs: [{workload: fwdbwd}]
"""


@pytest.mark.slow
def test_piped_suite_progress_arrives_as_lines_while_it_runs(tmp_path, db):
    # `dlbench | tee log` over ssh, nohup, CI: no terminal, so rich would draw its bars once, at the end.
    suite = tmp_path / "long.yaml"
    suite.write_text(LONG_SUITE)
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "suite", suite, "--db", db], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": ""})
    arrived = [(time.monotonic(), line.rstrip("\n")) for line in proc.stderr]  # each line as it is written
    report = proc.stdout.read()
    assert proc.wait(timeout=60) == 0, arrived
    finished = next(t for t, line in arrived if line.startswith("ok fwdbwd resnet18 batch 2"))
    progress = [t for t, line in arrived if "0/1 done, ETA" in line]
    assert progress and progress[0] < finished - 1.0, arrived  # a heartbeat, seconds before the result
    assert all(line.strip() and "━" not in line for _, line in arrived), arrived  # no bar, no blank line
    assert "ResNet-18" in report


def test_version_and_suites_listed_without_a_name():
    assert cli("--version").stdout.strip().startswith("dlbench 0.")
    listed = cli("suite", "--list")
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()][:-1]
    assert names == ["cnn-benchmarks", "gpu-benchmarks-3d", "jade", "quick", "smoke", "unet-medical"]


@pytest.mark.parametrize("args", [(), ("run", "fwdbwd"), ("run", "volume"), ("run", "train"), ("data", "volume"),
                                  ("data", "seg"), ("suite",), ("report",)])
def test_help_speaks_of_the_users_world(args):
    text = cli(*args, "--help").stdout.lower()
    assert not re.search(r"seed( \d|'s|s'| 00)", text), text  # "the seed's volume", "seed 004's method"
    assert "--compile" not in text


def test_a_flag_in_help_shows_no_value_to_give():
    lines = cli("run", "volume", "--help").stdout.splitlines()
    [resume] = [line.split("Complete")[0] for line in lines if "--resume" in line]
    [queue] = [line.split("Tiles")[0] for line in lines if "--queue" in line]
    assert not re.search(r"<bool>|BOOLEAN", resume) and re.search(r"<int>|INTEGER", queue), (resume, queue)


@pytest.mark.slow
def test_default_run_without_a_gpu_is_the_short_cpu_check(tmp_path):
    proc = here(cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA GPU found: running the `smoke` suite" in proc.stderr
    assert "these are CPU figures" in proc.stderr
    assert not (tmp_path / "dlbench.db").exists()  # the user's store, shared by every folder's runs
    with Store(Path(os.environ["XDG_DATA_HOME"], "dlbench", "dlbench.db")) as store:
        results = store.results(suite="smoke")
    assert sorted(r.workload for r in results) == ["fwdbwd", "infer", "train"]
    assert all(r.status == "ok" for r in results)
    # A fresh store: nothing to estimate from, and nothing is measured for it: a rough figure, said to be one.
    assert "3 to run, about " in proc.stderr
    assert "(rough for all of them: never run here, no FLOP count and ceiling known)" in proc.stderr
