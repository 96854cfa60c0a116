"""Image workloads through the real entry point: generated JPEGs, two processes, bad inputs."""

import os

import pytest
import torch

from dlbench.report import images as report_images
from dlbench.figures import add, fixed
from dlbench.report import render_markdown
from dlbench.models import registry
from dlbench.results.store import Store

from conftest import CORRUPT_JPEG, assert_user_error, cli, make_result

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # CI has 2 cores: processes and workers must not fight over them
TINY = ["--model", "resnet18", "--input-shape", "3x32x32", "--device", "cpu", "--warmup", "1",
        "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0", "--workers", "1"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    proc = cli("data", "images", root, "--n", "16", "--classes", "2", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert "wrote 16 images in 2 classes" in proc.stderr
    return root


@pytest.fixture
def stored(db):
    earlier = make_result()
    with Store(db) as store:
        store.add(earlier)
    return lambda: [r.id for r in Store(db).results()] == [earlier.id]


@pytest.mark.slow
def test_train_on_a_jpeg_folder_and_the_seed_002_report(folder, db):
    proc = cli("run", "train", *TINY, "--batch", "2,4", "--data", f"folder:{folder}", "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        results = store.results(workload="train")
    assert [r.spec["batch"] for r in results] == [2, 4] and {r.status for r in results} == {"ok"}
    assert results[0].metrics["dataset_images"] == 16
    report = render_markdown(results)
    # training has no processing phase: that column, empty, is left out
    assert "|Run|Data Loading Time [ms]|Forward Time [ms]|Backward Time [ms]|" \
           "Optimizer Time [ms]|Other Time [ms]|Total [ms]|Median Batch [ms]|" in report
    assert results[0].metrics["workers"] == 1
    [table, setup] = report_images.phase_tables(results)
    for row, run in zip(table.rows, setup.rows):
        assert run[:5] == [row[0], f"JPEG folder ({folder.name})", "Train", run[3], 1] and run[3].startswith("CPU: ")
        # means: the phases and Other add up to the wall time per batch, the window over its batches
        assert add(*[v for v in row[1:7] if v != "-"]) == row[7].removesuffix(" (clamped)")
    wall = {r.spec["batch"]: r.metrics["window_s"] / r.metrics["steps"] * 1e3 for r in results}
    assert [float(row[7]) for row in table.rows] == pytest.approx([wall[2], wall[4]], rel=0.02)
    assert "Throughput - FP32 [img/s]" in report


@pytest.mark.slow
def test_two_processes_store_one_merged_result(folder, db):
    proc = cli("run", "train", *TINY, "--batch", "2", "--gpus", "2", "--data", f"folder:{folder}", "--db", db,
               env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert "on 2 processes" in proc.stdout
    with Store(db) as store:
        (r,) = store.results(workload="train")
    m = r.metrics
    assert m["processes"] == 2 and [line["rank"] for line in m["ranks"]] == [0, 1]
    assert m["images"] == 2 * 2 * m["steps"]
    assert m["throughput"] == pytest.approx(m["images"] / m["window_s"])
    assert len(r.samples["step"]) == 2 * m["steps"]  # every rank's steps
    comm = r.measured.training.all_reduce  # what decides the all-reduce's speed, read back typed
    assert comm.backend == "gloo" and comm.gradient_bytes == 4 * sum(p.numel() for p in registry.build("resnet18").parameters())
    assert comm.stored() == m["communication"]


@pytest.mark.slow
def test_weak_scaling_of_real_runs_on_one_and_two_processes(db):
    """The throughput table's weak scaling from what two real runs stored: the 2-process throughput
    (all processes' images over the slowest's window) over the 1-process one at the same batch
    per process, and its efficiency, both in the 2-process row only."""
    for gpus in ("1", "2"):
        proc = cli("run", "train", *TINY, "--batch", "2", "--gpus", gpus, "--db", db, env=ONE_THREAD)
        assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        runs = {r.metrics["processes"]: r for r in store.results(workload="train")}
    one, two = runs[1].metrics["throughput"], runs[2].metrics["throughput"]
    assert runs[2].spec["gpus"] == 2 and runs[2].metrics["images"] == 2 * 2 * runs[2].metrics["steps"]
    report = cli("report", "--db", db)
    assert report.returncode == 0, report.stderr
    assert "|System|Processes|Batch size / process|Throughput - FP32 [img/s]|" in report.stdout
    assert "|System|Processes|Batch size / process|Weak scaling - FP32|Scaling efficiency - FP32|" in report.stdout
    system = runs[1].system_label
    assert f"|{system}|1|2|{fixed(one)}|" in report.stdout and f"|{system}|2|2|{fixed(two)}|" in report.stdout
    weak = two / one
    assert f"|{system}|2|2|{fixed(weak)}|{report_images._efficiency(weak / 2)}|" in report.stdout


@pytest.mark.slow
def test_infer_batch_search_is_recorded(db):
    proc = cli("run", "infer", *TINY, "--batch", "auto", "--max-batch", "4", "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        (r,) = store.results(workload="infer")
    assert r.spec["batch"] == 4 and r.metrics["batch_search"]["largest"] == 4
    assert [t["batch"] for t in r.metrics["batch_search"]["tried"]] == [1, 2, 4]
    assert r.metrics["latency_p99_ms"] >= r.metrics["latency_p50_ms"]


def test_smooth_and_a_workers_warning(db):
    many = str((os.cpu_count() or 1) + 2)
    proc = cli("run", "smooth", *TINY[:-1], many, "--batch", "3", "--data", "dummy", "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: --workers {many} is more than this machine's" in proc.stderr
    with Store(db) as store:
        (r,) = store.results(workload="smooth")
    assert r.metrics["noise_copies"] == 3 and r.metrics["warnings"]


def _corrupt_folder(tmp_path):
    root = tmp_path / "corrupt" / "c"
    root.mkdir(parents=True)
    for i in range(6):
        (root / f"bad{i}.jpg").write_bytes(CORRUPT_JPEG)
    return root.parent


@pytest.mark.parametrize("args, needle", [
    (["--data", "folder:{tmp}/missing"], "does not exist"),
    (["--data", "folder:{corrupt}", "--batch", "2"], "6 of 6 images could not be decoded"),
    (["--cpu-share", "1.5"], "--cpu-share must be ≤ 1, got 1.5"),
])  # the other bad data options are checked in-process (test_images.py): starting torch costs seconds
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path, db, stored):
    (tmp_path / "empty").mkdir()
    (tmp_path / "text" / "c").mkdir(parents=True)
    (tmp_path / "text" / "c" / "notes.txt").write_text("hello")
    paths = {"tmp": tmp_path / "empty", "text": tmp_path / "text", "corrupt": _corrupt_folder(tmp_path)}
    args = [a.format(**paths) for a in args]
    if "{tmp}/missing" in str(args):
        args = [a.replace(str(tmp_path / "empty") + "/missing", str(tmp_path / "missing")) for a in args]
    proc = cli("run", "train", *TINY, *args, "--db", db, env=ONE_THREAD)
    # found only once the run reads its data: after the line that said how long it takes
    assert_user_error(proc, needle, started="corrupt" in str(args))
    if "corrupt" in str(args):
        assert "train resnet18 b2 3x32x32 fp32: about " in proc.stderr, proc.stderr
    assert stored()


def test_more_gpus_than_present(db, stored):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert_user_error(cli("run", "train", "--gpus", "2", "--db", db), "--gpus 2 asked for, but this machine has 0 GPU(s)")
    assert stored()


def test_a_refusing_worker_is_one_line(monkeypatch, tmp_path):
    """torchrun's workers print a user error on stderr (possibly prefixed with their rank): it becomes
    the same one-line error as in-process (a real two-process run: test_two_processes_store_one_merged_result)."""
    from dlbench.errors import UserError
    from dlbench.launch import torchrun
    from dlbench.spec import BenchmarkSpec

    stderr = "W1122 torchrun noise\n[rank1]:error: 6 of 6 images could not be decoded: bad0.jpg\n"
    monkeypatch.setattr(torchrun, "_supervised", lambda *a, **k: stderr)
    spec = BenchmarkSpec(workload="infer", model="resnet18", device="cpu", gpus=2)
    with pytest.raises(UserError, match="^6 of 6 images could not be decoded: bad0.jpg$"):
        torchrun.run(spec, {})
    monkeypatch.setattr(torchrun, "_supervised", lambda *a, **k: "Segfault\n")
    assert torchrun.run(spec, {}).status == "error"


def _result(workload, gpus, precision, throughput, batch=8, **metrics):
    return make_result(spec={"workload": workload, "gpus": gpus, "precision": precision, "batch": batch,
                             "options": {"data": "synthetic"}},
                       metrics={"throughput": throughput, "data_ms": 1.0, "h2d_ms": 0.5, "forward_ms": 20.0,
                                "backward_ms": 40.0, **metrics})


def test_report_weak_scaling_and_latency_tables():
    latency = {"latency_avg_ms": 4.0, "latency_p90_ms": 4.5, "latency_p95_ms": 4.6, "latency_p99_ms": 5.0}
    results = [_result("train", 1, "tf32", 100.0), _result("train", 8, "tf32", 640.0),
               _result("train", 1, "bf16", 250.0), _result("train", 8, "bf16", 1500.0),
               _result("infer", 1, "bf16", 300.0, batch=1, **latency), _result("infer", 1, "bf16", 500.0, batch=2, **latency),
               _result("smooth", 1, "fp32", 50.0, noise_ms=2.0)]
    text = render_markdown(results)
    assert "|System|GPUs|Batch size / GPU|Throughput - TF32 [img/s]|Throughput - mixed precision (bf16) [img/s]|" \
           "Throughput speedup (TF32 - mixed precision (bf16))|" in text
    assert "|NVIDIA H200|1|8|100.00|250.00|2.50|" in text and "|NVIDIA H200|8|8|640.00|1500.00|2.34|" in text
    # weak scaling as seed 003, in its own table: 640 / 100 on 8 GPUs; its efficiency 6.40 / 8 apart
    assert "## ResNet-50 train weak scaling\n" in text
    assert "|System|GPUs|Batch size / GPU|Weak scaling - TF32|Weak scaling - mixed precision (bf16)|" \
           "Scaling efficiency - TF32|Scaling efficiency - mixed precision (bf16)|" in text
    assert "|NVIDIA H200|8|8|6.40|6.00|0.80|0.75|" in text
    assert "|System|Batch size|Resolution|Throughput Avg [img/s]|Latency Avg [ms]|Latency 90% [ms]|" in text
    assert "|NVIDIA H200|2|224x224x3|500.00|4.000|4.500|4.600|5.000|" in text
    # milliseconds per batch like every table (data + copy 1.5 ms, noise 2, forward 20, backward 40); a record
    # without phase means says its figures are medians; the columns no row fills are left out
    assert "|NVIDIA H200 x1, Synthetic, Smooth Inference|1.50|2.00|20.00|40.00|63.50 (medians)|" in text
    assert report_images.tables([make_result()]) == []  # fwdbwd results are not image-workload rows
