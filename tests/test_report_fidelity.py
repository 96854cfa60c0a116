"""Each published table and claim as dlbench prints it: the publication's columns, units and
definitions, its sentences checked against its own tables, and measured rows told from
extrapolated ones. Stored results, real SQLite store; no GPU."""

from __future__ import annotations

from decimal import Decimal

import pytest

from conftest import cli, make_result
from dlbench.report import claims, gpus, images, medical, training3d
from dlbench.report.formats import records
from dlbench.results.store import Store

H200 = {"host": "vm", "gpus": [{"name": "NVIDIA H200"}], "cuda": "13.0", "cudnn": "9.19.0", "torch": "2.11.0",
        "cpu": {"model": "Xeon", "cores": 16}}
CPU = {"host": "vm", "gpus": [], "cpu": {"model": "Xeon", "cores": 2}, "torch": "2.14.0"}


def _rows(table):
    return [dict(zip(table.header, row)) for row in table.rows]


def _stalled_train():
    """The H200's Dummy Train run: phase medians 21.9 ms, but 1,253.82 img/s at batch 64 is 51.0 ms
    per batch, because some batches wait long for data."""
    means = {"data": 0.0281, "h2d": 0.0004, "forward": 0.0083, "backward": 0.0128, "optimizer": 0.0006}
    stats = {p: {"mean": v, "median": v / 2} for p, v in means.items()}
    stats["step"] = {"mean": 64 / 1253.82, "median": 0.02409}
    return make_result(spec={"workload": "train", "batch": 64, "precision": "bf16", "options": {"data": "dummy"}},
                       system=H200, metrics={"throughput": 1253.82, "stats": stats, "workers": 4, "steps": 20,
                                             "window_s": 20 * 64 / 1253.82})


# ---- BenchmarkJade's phase table -----------------------------------------------------------

def test_phases_are_means_in_milliseconds_that_add_up_to_the_wall_time_per_batch():
    [table, setup] = images.phase_tables([_stalled_train()])
    [row] = _rows(table)
    phases = ["Data Loading Time [ms]", "Data Processing Time [ms]", "Forward Time [ms]", "Backward Time [ms]",
              "Optimizer Time [ms]", "Other Time [ms]"]
    shown = [Decimal(row[p]) for p in phases if row[p] != "-"]
    assert row["Total [ms]"] == "51.04" and sum(shown) == Decimal("51.04")  # 64 / 1253.82 img/s
    assert row["Data Loading Time [ms]"] == "28.50"  # the stall, in the phase it happens in
    assert row["Median Batch [ms]"] == "24.09" and row["Run"] == "NVIDIA H200 x1, Dummy, Train"
    assert table.title == "ResNet-50: time per batch in each phase"
    [run] = _rows(setup)
    assert run["Run"] == row["Run"] and run["Num Workers"] == 4 and "Cluster" not in run


def test_published_phase_rows_in_milliseconds_digit_for_digit():
    [table, setup] = images.phase_tables([_stalled_train()], published=True)
    runs = {r["Run"]: r for r in _rows(setup)}
    rows = [r for r in _rows(table) if runs[r["Run"]]["Source"] == "BenchmarkJade"]
    first = rows[0]
    assert (first["Run"], first["Data Loading Time [ms]"], first["Forward Time [ms]"], first["Total [ms]"]) == \
        ("TN V100 x1, ImageNet, Inference", "102.2", "112.8", "215.0")  # printed 0.1022, 0.1128 s
    assert (runs[first["Run"]]["Cluster"], runs[first["Run"]]["Num Workers"]) == ("TN", 4)
    jade = next(r for r in rows if r["Run"] == "JADE2 V100 x4, Dummy, Smooth Inference")
    assert jade["Forward Time [ms]"] == "559 †"
    assert any(n.startswith("Check, JADE2 V100 x4, Dummy, Smooth Inference: † Forward Time") and "0.0400" in n
               for n in table.notes)  # under the table whose cell has the †
    assert not any("†" in n for n in setup.notes)
    mine = next(r for r in runs.values() if r["Source"] == "dlbench")
    assert mine["Cluster"] is None  # a host name is no cluster


def test_csv_labels_a_phase_row_by_its_run():
    found = records(images.phase_tables([_stalled_train()]))
    assert {r["label"] for r in found} == {"NVIDIA H200 x1, Dummy, Train"}
    total = next(r for r in found if r["column"] == "Total [ms]")
    assert (total["value"], total["unit"]) == (51.04, "ms")


# ---- claims: cnn-benchmarks ----------------------------------------------------------------

def _fwdbwd(model, forward, backward, system=H200, device="cuda"):
    steps = [(forward + backward) / 1e3 * (1 + 0.002 * i) for i in range(20)]
    return make_result(spec={"model": model, "device": device}, system=system,
                       metrics={"device": device, "forward_ms": forward, "backward_ms": backward}, samples={"step": steps})


def test_the_publications_conclusions_are_checked_against_its_own_tables():
    [table, *_] = claims.tables([_fwdbwd("resnet50", 7.5, 15.7)], published=True)
    rows = {r["Conclusion"]: r for r in _rows(table)}
    holds = rows['Quadro P5000 > Quadro M4000: 2.2x to 2.5x faster (printed "Quadro M40000")']
    assert (holds["Range"], holds["Check"], holds["Models"]) == ("2.23x to 2.49x", "ok", 9)
    slipped = rows["Quadro M4000 > Tesla K80: 1.05x to 1.25x faster"]
    assert slipped["Range"] == "1.01x to 1.32x" and slipped["Check"].startswith("†")
    assert rows["Quadro P5000 == GTX 1080"]["Check"] == "ok"
    assert rows["Tesla K80 > GRID K520: 1.8 to 2.25 faster"]["Range"] == "1.81x to 2.23x"


def test_dlbench_rows_against_published_gpus_and_each_other():
    results = [_fwdbwd("resnet18", 2.0, 3.0), _fwdbwd("resnet50", 7.5, 15.7),
               _fwdbwd("resnet18", 60.0, 120.0, CPU, "cpu"), _fwdbwd("resnet50", 225.0, 628.0, CPU, "cpu")]
    [table, *_] = claims.tables(results, published=True)
    rows = {r["Conclusion"]: r for r in _rows(table)}
    # GTX 1080's fastest Totals: ResNet-18 43.83 ms, ResNet-50 148.65 ms; the H200's F + B: 5.0 and 23.2 ms
    assert "NVIDIA H200 is 6.41x to 8.77x as fast as GTX 1080" in rows
    measured = [r for r in rows.values() if r["Source"] == "dlbench"]
    assert any(r["Conclusion"].startswith("Across 2 benchmarks, NVIDIA H200 is 36.00x to 36.77x as fast as CPU")
               for r in measured)
    assert any("95% CI" in r["Conclusion"] for r in measured)
    alone = claims.tables([_fwdbwd("resnet18", 60.0, 120.0, CPU, "cpu")])
    assert alone == []  # one system and no publication: nothing to conclude


# ---- claims: BenchmarkJade -----------------------------------------------------------------

def test_jade_claims_beside_what_its_own_table_gives():
    [table] = claims.tables([_stalled_train()], published=True)
    rows = {r["Claim"]: r for r in _rows(table)}
    slower = rows["JADE2 is 9.38 times slower than a A40 (inference)"]
    assert slower["Its own table gives"] == ("5.29x (Dummy Inference, 1 device) to "
                                             "8.54x (ImageNet Inference, 1 device)")
    assert slower["Check"].startswith("† 9.38 cannot be derived from its table")
    should = rows["around 5.8 x slower than it should be"]
    assert (should["Its own table gives"], should["Check"]) == ("5.82", "ok")  # 9.38 x 0.621
    eight = rows["8 x V100 0.927x as fast as 8 x A40"]
    assert eight["Check"] == "not derivable from its table" and "no 8 x V100 on TN" in eight["Its own table gives"]
    one = rows["1 x V100 0.943x as fast as 1 x A40"]
    assert one["Basis"].startswith("external") and one["Its own table gives"].startswith("0.63x")


# ---- the GPU table -------------------------------------------------------------------------

def test_gpu_table_has_the_publications_cloud_columns_and_rows():
    mine = make_result(system={**H200, "cloud": "Lambda", "instance": "gpu_1x_h200"})
    [table] = gpus.tables([mine], published=True)
    assert table.header[:8] == ["GPU", "Cloud", "Instance Name", "Memory", "Architecture", "CUDA Cores",
                                "FP32 TFLOPS", "Release Date"]
    rows = _rows(table)
    assert rows[0]["Cloud"] == "Lambda" and rows[0]["Instance Name"] == "gpu_1x_h200"
    k80 = next(r for r in rows if r["GPU"] == "Tesla K80")
    assert (k80["Cloud"], k80["Instance Name"], k80["FP32 TFLOPS"]) == ("Amazon EC2, Azure, Google Cloud",
                                                                        "p2, NCx, K80", "2.80")
    assert len(rows) == 6 and k80["Source"] == "GPU in the Cloud (cnn-benchmarks)"
    [plain] = gpus.tables([make_result(system=H200)])
    assert "Cloud" not in plain.header  # no cloud named and no publication: no column


# ---- weak scaling above perfect ------------------------------------------------------------

def test_an_efficiency_above_one_is_flagged():
    def train(gpus, throughput):
        return make_result(spec={"workload": "train", "model": "unet2d-medical", "gpus": gpus, "batch": 2,
                                 "device": "cpu", "options": {"data": "synthetic"}}, system=CPU,
                           metrics={"device": "cpu", "throughput": throughput})

    [_, table] = images.throughput_tables([train(1, 1.0), train(2, 19.35)])
    [row] = _rows(table)
    assert row["Weak scaling - FP32"] == "19.35" and row["Scaling efficiency - FP32"] == "9.68 !"
    assert any(n.startswith("! marks a scaling efficiency above 1") for n in table.notes)


# ---- 3D U-Net: measured against extrapolated -----------------------------------------------

def test_three_d_rows_measured_where_the_run_did_what_the_column_means():
    measured = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1}, system=H200,
                           metrics={"iteration_mean_s": 0.14, "steps": 1001, "data_path": "/scratch/cremi.h5"},
                           samples={"step": [0.1] * 500 + [0.18] * 501 + [9.0]})
    short = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1, "precision": "fp32",
                              "options": {"data": "$DLBENCH_TRAIN_VOLUME"}},
                        system={**H200, "gpus": [{"name": "NVIDIA A100"}]},
                        metrics={"iteration_mean_s": 1.8, "steps": 20, "data_path": "/scratch/cremi.h5"})
    small = make_result(spec={"workload": "volume", "model": "unet3d-aniso"}, system=H200,
                        metrics={"mvox_per_s": 48.3, "total_s": 3.1, "volume_shape": [64, 1536, 1536]})
    [training, prediction] = training3d.tables([measured, short, small])
    rows = {r["System"]: r for r in _rows(training)}
    assert rows["NVIDIA H200"]["Training [s]"] == "140.2"  # the first 1001 iterations, added
    assert rows["NVIDIA A100"]["Training [s]"] == "1801.8 (extrapolated from 20)"
    [predicted] = _rows(prediction)
    assert predicted["Inference [s]"] == "39.1 (extrapolated from 64x1536x1536)"  # 1.887e9 / 48.3e6
    assert rows["NVIDIA A100"]["Data"] == "cremi.h5"  # the variable resolved from the path the run read


# ---- seed 003's accuracy table -------------------------------------------------------------

def test_converge_rows_say_the_data_is_generated():
    run = make_result(spec={"workload": "converge", "model": "unet2d-medical", "batch": 8, "precision": "tf32",
                            "options": {"target_dice": 0.89, "folds": 5}}, system=H200,
                      metrics={"mean_dice": 0.9, "dice_per_fold": [0.9] * 5, "target_dice": 0.89, "folds": 5, "gpus": 1,
                               "time_to_train_s": 30.0, "target_reached": True, "data": "generated 30 x 512x512 (seed 0)",
                               "per_fold": [{"steps": 40000, "train_s": 2400.0}] * 5})
    [accuracy, time] = medical.tables([run], published=True)
    assert any(n.startswith("The data is generated, not the ISBI 2012 set") for n in accuracy.notes)
    assert not any("ran only the first folds" in n for n in accuracy.notes)
    assert _rows(time)[0]["40,000 iterations"] == "40.0 min"  # 40,000 steps trained: measured


# ---- a CPU store through the command line --------------------------------------------------

def test_cpu_report_has_no_gpu_columns_and_distinct_sections(db):
    fwdbwd = make_result(spec={"model": "resnet18", "device": "cpu"}, system=CPU, metrics={"device": "cpu"})
    train = make_result(spec={"workload": "train", "model": "resnet18", "device": "cpu", "batch": 4,
                              "options": {"data": "synthetic"}}, system=CPU, metrics={"device": "cpu", "throughput": 9.0,
                                                                                      "step_ms": 400.0})
    with Store(db) as store:
        store.add_many([fwdbwd, train])
    text = cli("report", "--db", db).stdout
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(headings) == len(set(headings)) and "## ResNet-18: time per batch in each phase" in headings
    assert "cuDNN" not in text and "Cluster" not in text and "|vm|" not in text and "None" not in text
    csv = cli("report", "--db", db, "--format", "csv").stdout
    assert ",vm," not in csv and "CPU: Xeon (2 cores)" in csv


@pytest.mark.parametrize("name", ["cnn-benchmarks", "gpu-benchmarks-3d", "unet-medical"])
def test_the_publications_suites_run_what_their_columns_mean(name):
    from dlbench import suites

    specs = suites.load(name).specs
    if name == "cnn-benchmarks":
        assert sorted(s.model for s in specs) == sorted(["alexnet", "googlenet", "vgg16", "vgg19", "resnet18", "resnet34",
                                                         "resnet50", "resnet101", "resnet152", "resnet200"])
        assert {(s.batch, tuple(s.input_shape), s.precision, s.workload) for s in specs} == {
            (16, (3, 224, 224), "fp32", "fwdbwd")}
    elif name == "gpu-benchmarks-3d":
        assert any(s.workload == "train" and s.steps == 1001 for s in specs)
        assert any(s.workload == "volume" and s.opts.volume_shape == "200x3072x3072" for s in specs)
    else:
        converge = [s for s in specs if s.workload == "converge"]
        assert {s.precision for s in converge} >= {"tf32", "fp16"}
        assert all(s.opts.folds == 5 and not s.opts.fold_limit for s in converge)


def test_the_cudnn_conclusion_is_checked_against_its_own_tables():
    [table, *_] = claims.tables([_fwdbwd("resnet50", 7.5, 15.7)], published=True)
    rows = {r["Conclusion"]: r for r in _rows(table)}
    newest = rows["Prefer latest cuDNN: cuDNN 5.1.10 faster than 5.1.05"]
    # GTX 1080 is the one GPU on both: VGG-16 182.79 / 183.42 and ResNet-34 72.09 / 72.17 ms, newer slower
    assert (newest["Models"], newest["Range"]) == (7, "0.997x to 1.045x")
    assert newest["Check"].startswith("† slower on 2 of 7 models")
    assert "VGG-16 (0.997x)" in newest["Check"] and "ResNet-34 (0.999x)" in newest["Check"]
    older = rows["Prefer latest cuDNN: cuDNN 5.1.05 faster than 5.0.05"]
    assert older["Check"] == "not derivable from its tables: they have no cuDNN 5.0.05 row"
    caveat = next(r for c, r in rows.items() if "failed on ResNet-152" in c)
    assert caveat["Check"].startswith("ok: its ResNet-152 table notes the failure")


def _jade_run(workload, data, throughput, gpus=1):
    return make_result(spec={"workload": workload, "model": "resnet50", "batch": 64, "gpus": gpus,
                             "options": {"data": data, "workers": 4}}, system=H200,
                       metrics={"throughput": throughput, "throughput_unit": "img/s"}, samples={"step": [0.05] * 10})


def test_jade_compares_dlbench_rows_with_each_other_real_against_dummy_data():
    results = [_jade_run("infer", "dummy", 1275.5), _jade_run("infer", "folder:/data/images", 893.6),
               _jade_run("train", "dummy", 800.0, gpus=2), _jade_run("train", "folder:/data/images", 900.0, gpus=2),
               _jade_run("smooth", "dummy", 47.0)]  # no folder run: no pair
    [table] = claims.tables(results, published=True)
    mine = [r for r in _rows(table) if r["Source"] == "dlbench"]
    assert len(mine) == 2 and all(r["Basis"] == "throughput, data loading included" for r in mine)
    assert mine[0]["Claim"].startswith("NVIDIA H200, ResNet-50 infer (batch 64, fp32, 1 GPU): dummy data is 1.43x "
                                       "as fast as the JPEG folder (1275.50 against 893.60")
    assert "2 GPUs): the JPEG folder is 1.12x as fast as dummy data (900.00 against 800.00" in mine[1]["Claim"]
