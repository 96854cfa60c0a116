"""The report of a 2-GPU machine as a reader meets it: each seed table's 1- and 2-GPU rows, the
precision of every row in its own column, one unit per quantity, no table wider than a page,
marks explained in a legend. Crafted records (tests/report_records.py) in a real SQLite store,
read back by `dlbench report` in a subprocess; no GPU."""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal

import pytest

from conftest import cli, make_result
from dlbench.report import images, legend, tables, training3d
from dlbench.results.store import Store
from report_records import CPU_MODELS, image_run, two_gpu_runs

MAX_COLUMNS = 10  # wider tables wrap on a laptop screen and in a Markdown viewer


def _rows(table):
    return [dict(zip(table.header, row)) for row in table.rows]


def _table(found, title):
    [table] = [t for t in found if t.title == title]
    return table


@pytest.fixture(scope="module")
def report():
    return tables(two_gpu_runs(), with_references=True)


@pytest.fixture
def stored(db):
    with Store(db) as store:
        store.add_many(two_gpu_runs())
    return db


# ---- the whole report through the command line ---------------------------------------------

def test_markdown_from_the_store_reads_without_a_guide(stored):
    proc = cli("report", "--with-references", "--format", "md", "--db", stored)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "&gt;" not in text and "&amp;" not in text  # only what Markdown needs is escaped
    # cnn-benchmarks' conclusions compare GPUs: beside this store's CPU-only fwdbwd runs they are left out,
    assert "M40000" not in text and "Quadro P5000 ==" not in text
    # and beside a GPU run at its setting they are there, the publication's typo only where its sentence is quoted
    beside_gpu = "\n".join(t.markdown() for t in tables(two_gpu_runs() + [make_result()], with_references=True))
    assert "Quadro P5000 > Quadro M4000: 2.2x to 2.5x faster (printed \"Quadro M40000\")" in beside_gpu
    assert beside_gpu.count("M40000") == 1
    assert "[untagged]" not in text and " on vm" not in text  # a lent VM's host name tells a reader nothing
    assert text.rstrip().split("\n## ")[-1].startswith("Legend: abbreviations and marks")
    for block in text.split("\n## ")[1:]:
        lines = block.splitlines()
        assert lines[1] and not lines[1].startswith("|"), lines[0]  # one line on what the table shows, first
        header = next(line for line in lines if line.startswith("|"))
        assert header.count("|") - 1 <= MAX_COLUMNS, (lines[0], header)
    with Store(stored) as store:
        assert store.count() == len(two_gpu_runs())  # the report only reads


def test_csv_and_json_hold_the_same_tables(stored):
    found = list(csv.DictReader(io.StringIO(cli("report", "--with-references", "--format", "csv", "--db", stored).stdout)))
    walls = [r for r in found if r["title"] == "3D U-Net (aniso): prediction" and r["column"] == "Wall time to result [s]"
             and r["value"]]
    assert sorted(float(r["value"]) for r in walls) == [36.9, 58.3, 110.2] and {r["unit"] for r in walls} == {"s"}
    data = json.loads(cli("report", "--with-references", "--format", "json", "--db", stored).stdout)
    titles = [t["title"] for t in data["tables"]]
    assert titles == [t.title for t in tables(two_gpu_runs(), with_references=True)]
    assert all(len(t["header"]) <= MAX_COLUMNS for t in data["tables"])


# ---- seeds 000/001: training and prediction on 1 and 2 GPUs ---------------------------------

def test_training_rows_on_two_gpus_beside_one_with_precision_apart(report):
    table = _table(report, "3D U-Net (aniso): training")
    assert table.header == ["System", "GPUs", "Precision", "Training [s]", "Iters / Min", "Iteration vs 1 GPU",
                            "100k Iters [d]", "Software", "Data", "Source"]
    rows = {(r["System"], r["GPUs"], r["Precision"]): r for r in _rows(table)}
    one, two = rows[("NVIDIA H200", 1, "bf16")], rows[("NVIDIA H200", 2, "bf16")]
    assert (one["Training [s]"], one["Iters / Min"], one["Iteration vs 1 GPU"]) == ("138.1", "434.8", "-")
    # on two GPUs each iteration trains two patches and lasts longer, as the publication's x2 rows do
    assert (two["Training [s]"], two["Iters / Min"], two["Iteration vs 1 GPU"]) == ("142.2", "422.2", "1.03x")
    assert rows[("Cluster:1080Ti", 2, "fp32")]["Iteration vs 1 GPU"] == "1.17x"  # 2053.8 / 1754.2
    # bf16 434.8 iterations/min is no longer read as an FP32 figure: the publication's rows say fp32
    assert rows[("NVIDIA H200", 1, "fp32")]["Training [s]"] == "1861.4 (extrapolated from 10)"
    assert {r["Precision"] for r in _rows(table) if r["Source"] != "dlbench"} == {"fp32"}


def test_prediction_on_one_and_two_gpus_with_wall_time_and_fp32(report):
    table = _table(report, "3D U-Net (aniso): prediction")
    assert table.header[:8] == ["System", "GPUs", "Precision", "Inference [s]", "Megavox / s", "Speed-up vs 1 GPU",
                                "Wall time to result [s]", "Platynereis, 8.1 Tvox [h]"]
    rows = {(r["GPUs"], r["Precision"]): r for r in _rows(table) if r["Source"] == "dlbench"}
    assert rows[(2, "bf16")]["Megavox / s"] == "87.6" and rows[(2, "bf16")]["Speed-up vs 1 GPU"] == "1.93x"
    assert rows[(2, "bf16")]["Wall time to result [s]"] == "36.9" and rows[(1, "bf16")]["Wall time to result [s]"] == "58.3"
    assert rows[(1, "fp32")]["Megavox / s"] == "20.1"  # FP32 beside bf16
    assert rows[(1, "bf16")]["Speed-up vs 1 GPU"] == rows[(1, "fp32")]["Speed-up vs 1 GPU"] == "-"  # the bases
    assert any(n.startswith("Check, SMC:V100 on 1 GPU: † Platynereis") for n in table.notes)


# ---- seed 002: phases in milliseconds, setup apart -------------------------------------------

def test_phase_rows_of_two_devices_and_a_jpeg_folder(report):
    timing = _table(report, "ResNet-50: time per batch in each phase")
    setup = _table(report, "ResNet-50: the runs of the phase table")
    assert all(h.endswith("[ms]") for h in timing.header[1:])  # one unit for a time per batch, as the other tables
    runs = {r["Run"]: r for r in _rows(setup)}
    assert runs["NVIDIA H200 x2, Dummy, Train"]["# Devices"] == 2
    assert runs["NVIDIA H200 x1, JPEG folder (imagenet-jpeg), Train"]["Dataset"] == "JPEG folder (imagenet-jpeg)"
    assert runs["TN V100 x1, ImageNet, Train"]["Source"] == "BenchmarkJade"
    phases = {r["Run"]: r for r in _rows(timing)}
    assert phases["TN V100 x1, ImageNet, Train"]["Data Loading Time [ms]"] == "10.0"  # printed 0.0100 s
    assert set(phases) == set(runs)


def test_other_time_is_never_negative():
    means = {"data": 0.0101, "forward": 0.0217, "backward": 0.0547, "optimizer": 0.0004}
    run = image_run("train", "dummy", 1, means)
    run.metrics["stats"]["step"]["mean"] = sum(means.values()) - 0.00002  # device phases overlap the host clock
    run.metrics["window_s"] = run.metrics["steps"] * run.metrics["stats"]["step"]["mean"]  # Total: window / batches
    [table, _] = images.phase_tables([run])
    [row] = _rows(table)
    assert row["Other Time [ms]"] == "0 (clamped)"
    assert any(n.startswith("Other Time 0 (clamped)") for n in table.notes)
    runs = [r for r in two_gpu_runs() if r.workload in images.SELECTS]
    for t in images.phase_tables(runs, published=True)[::2]:
        for r in _rows(t):
            other = r["Other Time [ms]"]
            assert other in ("-", None) or Decimal(other.removesuffix(" (clamped)")) >= 0, (t.title, r)


# ---- seed 003: weak scaling, latency, time to train --------------------------------------------

def test_weak_scaling_on_two_gpus_and_the_marked_efficiency(report):
    scaling = _table(report, "U-Net (original) train weak scaling")
    rows = {(r["System"], r["GPUs"], r["Batch size / GPU"]): r for r in _rows(scaling)}
    mine = rows[("NVIDIA H200", 2, 8)]
    assert (mine["Weak scaling - TF32"], mine["Scaling efficiency - TF32"]) == ("1.94", "0.97")  # 250.1 / 128.6
    assert rows[("DGX A100", 8, 8)]["Scaling efficiency - TF32"] == "0.82 †"  # from the † 6.55
    throughput = _table(report, "U-Net (original) train throughput")
    assert {(r["GPUs"], r["Batch size / GPU"]) for r in _rows(throughput) if r["Source"] == "dlbench"} == \
        {(1, 1), (1, 8), (2, 8)}
    assert "Throughput - FP32 [img/s]" in throughput.header


def test_latency_at_every_published_batch_and_the_data_bound_row(report):
    for precision in ("TF32", "mixed precision (fp16)", "FP32"):
        table = _table(report, f"U-Net (original) inference latency, {precision}")
        assert [r["Batch size"] for r in _rows(table) if r["Source"] == "dlbench"] == [1, 2, 4, 8, 16]
    resnet = _table(report, "ResNet-50 inference latency, FP32")
    [row] = _rows(resnet)
    assert row["Latency Avg [ms]"] == "89.200 (data-bound)"
    assert any(n.startswith("(data-bound), NVIDIA H200, batch 64: 68.8 of the mean 89.2 ms per batch went to waiting")
               and "median batch took 21.2 ms" in n for n in resnet.notes)


def test_time_to_train_one_meaning_per_column(report):
    table = _table(report, "U-Net (original): time to train")
    assert table.header == ["System", "GPUs", "Batch size / GPU", "Precision", "Time to train, as published [min]",
                            "40,000 iterations", "Time to DICE 0.89", "Mixed-precision speed-up", "Source"]
    rows = {(r["System"], r["GPUs"], r["Precision"]): r for r in _rows(table)}
    a100 = rows[("DGX A100", 1, "tf32")]
    assert a100["Time to train, as published [min]"] == "22" and a100["40,000 iterations"] is None
    mine = rows[("NVIDIA H200", 1, "tf32")]
    assert mine["40,000 iterations"] == "42.4 min (extrapolated from 100 steps)"
    assert mine["Time to train, as published [min]"] is None
    assert rows[("NVIDIA H200", 1, "fp32")]["40,000 iterations"].startswith("2.7 h")  # FP32 rows too
    assert any("about 6,700 iterations" in n for n in table.notes)


# ---- seed 004: a CPU row in every model's table -------------------------------------------------

def test_cpu_rows_sit_in_each_models_table(report):
    for model in CPU_MODELS:
        table = next(t for t in report if t.title == model_title(model))
        assert table.header[0] == "GPU or CPU"
        sources = [r["Source"] for r in _rows(table) if str(r["GPU or CPU"]).startswith("CPU")]
        assert "dlbench" in sources, model


def model_title(model: str) -> str:
    from dlbench.report.tables import model_title as title

    return title(model)


# ---- the legend -----------------------------------------------------------------------------

def test_the_legend_explains_every_mark_and_abbreviation_used(report):
    table = report[-1]
    assert table.title == legend.TITLE and table.header == ["Term or mark", "Meaning"]
    terms = {row[0] for row in table.rows}
    assert {"†", "Check", "(extrapolated …)", "(data-bound)", "x1, x2, x4", "aniso", "halo", "TN, JADE2",
            "VM:, Cluster:, SMC:", "Dummy, Synthetic, JPEG folder", "DICE", "fp16, bf16, mixed precision"} <= terms
    text = "\n".join(t.markdown() for t in report[:-1])
    if "channels-last" not in text:
        assert "channels-last" not in terms  # only what the tables use


def test_the_legend_lists_only_what_is_used():
    found = training3d.tables([two_gpu_runs()[0]])
    terms = {row[0] for t in legend.legend(found) for row in t.rows}
    assert "aniso" in terms and "TN, JADE2" not in terms and "(data-bound)" not in terms


def test_no_table_is_wider_than_a_page(report):
    wide = [(t.title, len(t.header)) for t in report if len(t.header) > MAX_COLUMNS]
    assert wide == []
    assert not [t.title for t in report if re.search(r"\[untagged\]", t.markdown())]


def test_a_jpeg_folder_named_by_a_variable_says_so():
    run = image_run("train", "folder:$DLBENCH_IMAGES", 1, {"data": 0.0027, "forward": 0.0217, "backward": 0.0547})
    run.metrics["data_path"] = "/tmp/dlbench-images"  # what the run read, stored by train
    [_, setup] = images.phase_tables([run])
    assert _rows(setup)[0]["Dataset"] == "JPEG folder (dlbench-images)"
