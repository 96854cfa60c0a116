"""Every figure dlbench prints is consistent, faithful to the reports it reproduces, and
explained: one test per rule, on stored records and on the seeds' own figures."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from conftest import cli, make_result
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.references import load_references
from dlbench.diagnose.render import render as render_doctor
from dlbench.results.measurement import Measurement
from dlbench.report import derived, published, render
from dlbench.report import cnn, images, medical, training3d
from dlbench.figures import add, fixed, ms, percent, sig
from dlbench.results.store import Store

H200 = {"host": "gpu01", "gpus": [{"name": "NVIDIA H200"}], "gpu_count": 1, "cuda": "13.0", "cudnn": "9.19.0",
        "torch": "2.11.0+cu130", "cpu": {"model": "Xeon", "cores": 16}}
CPU = {"host": "laptop", "gpus": [], "cpu": {"model": "Xeon E5-2630 v3", "cores": 16}, "cuda": "13.0", "torch": "2.11.0"}


def _table(tables, title):
    (found,) = [t for t in tables if t.title == title]
    return found


def _rows(table):
    return [dict(zip(table.header, row)) for row in table.rows]


def fwdbwd(model="googlenet", forward=5.57, backward=9.52, step=16.13, **kw):
    """A stored fwdbwd result whose per-step total median is not the sum of the phase medians
    (the H200 Inception-V1 run: 5.57 + 9.52 ms, median step 16.13 ms)."""
    stats = {"total": {"median": step / 1e3}}
    return make_result(spec={"model": model, **kw.pop("spec", {})}, system=kw.pop("system", H200),
                       metrics={"forward_ms": forward, "backward_ms": backward, "total_ms": step, "stats": stats,
                                "images_per_s": 16e3 / step, **kw.pop("metrics", {})}, **kw)


# ---- totals add up -------------------------------------------------------------------------

def test_seed_004_total_is_forward_plus_backward_and_the_median_step_has_its_own_column():
    [table] = cnn.tables([fwdbwd()])
    [row] = _rows(table)
    assert (row["Forward (ms)"], row["Backward (ms)"], row["Total (ms)"]) == ("5.57", "9.52", "15.09")
    assert row["Median step (ms)"] == "16.13"
    assert "Total = Forward + Backward" in " ".join(table.notes)


def test_every_seed_004_row_adds_up_and_none_is_marked():
    results = [fwdbwd(m) for m in published.seed004_models()]
    for table in cnn.tables(results, published=True):
        for row in _rows(table):
            if row["Forward (ms)"] == "OOM":
                continue
            parts = Decimal(row["Forward (ms)"]) + Decimal(row["Backward (ms)"])
            if row["Source"] == "dlbench":
                assert Decimal(row["Total (ms)"]) == parts
            else:  # the seed's totals were summed before rounding: within one unit of the last place
                assert abs(Decimal(row["Total (ms)"]) - parts) <= Decimal("0.01"), (table.title, row)
        assert "Check" not in table.header


def _train(**metrics):
    base = {"throughput": 4657.0, "throughput_unit": "img/s", "data_ms": 0.07, "h2d_ms": 0.03, "forward_ms": 19.65,
            "backward_ms": 42.56, "optimizer_ms": 0.38, "step_ms": 62.76, "data_share": 0.002, "processes": 1}
    base.update(metrics)
    return make_result(spec={"workload": "train", "batch": 64, "precision": "bf16", "options": {"data": "synthetic"}},
                       system=H200, metrics=base, tag="before-upgrade")


def test_train_phase_table_of_a_record_without_means_says_its_phases_are_medians():
    [table, _] = images.phase_tables([_train()])
    [row] = _rows(table)
    phases = ["Data Loading Time [ms]", "Data Processing Time [ms]", "Forward Time [ms]", "Backward Time [ms]",
              "Optimizer Time [ms]", "Other Time [ms]"]
    shown = [row[p] for p in phases if row[p] != "-"]
    assert row["Total [ms]"] == "62.76 (medians)" and row["Other Time [ms]"] == "-" and row["Median Batch [ms]"] == "62.76"
    assert add(*shown) == "62.69"  # phase medians need not add up to the wall time per batch
    assert row["Data Loading Time [ms]"] == "0.10"  # data + copy to the device


def test_one_line_results_add_up():
    from dlbench.workloads import fwdbwd as fb, train

    line = fb.describe(fwdbwd().measured)
    assert "forward 5.57 + backward 9.52 = 15.09 ms" in line and "median forward + backward 16.13 ms" in line
    line = train.describe(_train().measured)
    assert "data 0.070 + copy to GPU 0.030 + forward 19.65 + backward 42.56 + optimizer 0.38 = 62.69 ms" in line
    assert "median step 62.76 ms" in line and "4657 img/s" in line


# ---- weak scaling as seed 003 means it -----------------------------------------------------

def test_weak_scaling_is_n_gpu_over_one_gpu_with_efficiency_apart():
    spec = {"workload": "train", "model": "unet2d-medical", "batch": 1, "precision": "tf32", "input_shape": [1, 572, 572]}
    results = [make_result(spec={**spec, "gpus": g}, system=H200, metrics={"throughput": t, "throughput_unit": "img/s"})
               for g, t in ((1, 29.81), (8, 169.62))]  # seed 003's DGX A100 TF32 figures
    [_, table] = images.throughput_tables(results)
    [row] = _rows(table)
    assert row["Weak scaling - TF32"] == "5.69" == fixed(derived.weak_scaling(169.62, 29.81))
    assert row["Scaling efficiency - TF32"] == "0.71" == fixed(derived.scaling_efficiency(169.62, 29.81, 8))


# ---- doctor ----------------------------------------------------------------------------------

def test_doctor_judges_unet3d_aniso_training_in_iterations_per_minute():
    v100 = {"host": "smc", "gpus": [{"name": "Tesla V100-SXM2-16GB"}], "gpu_count": 1}
    run = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1},
                      system=v100, metrics={"device": "cuda:0", "throughput": 0.54, "throughput_unit": "patch/s",
                                            "iters_per_min": 32.2, "iteration_mean_s": 60 / 32.2})
    [d] = diagnose([run])
    assert d.unit == "iters/min" and d.reference.model == "unet3d-aniso" and d.reference.unit == "iters/min"
    assert "SMC" in d.reference.source and d.ratio == pytest.approx(1.0, rel=0.01)
    assert "as expected" in render_doctor([d])


def test_doctor_judges_unet2d_medical_against_seed_003_and_prediction_in_mvox():
    a100 = {"host": "dgx", "gpus": [{"name": "NVIDIA A100-SXM4-40GB"}], "gpu_count": 1}
    run = make_result(spec={"workload": "train", "model": "unet2d-medical", "batch": 8, "precision": "tf32",
                            "input_shape": [1, 572, 572]}, system=a100,
                      metrics={"device": "cuda:0", "throughput": 40.5, "throughput_unit": "img/s"})
    volume = make_result(spec={"workload": "volume", "model": "unet3d-aniso", "batch": 16},
                         system=a100, metrics={"device": "cuda:0", "throughput": 100.0, "throughput_unit": "Mvox/s",
                                               "mvox_per_s": 100.0})
    found = {d.result.workload: d for d in diagnose([run, volume])}
    assert "NVIDIA UNet_Medical" in found["train"].reference.source and found["train"].ratio == pytest.approx(1.0)
    assert found["volume"].unit == "Mvox/s" and "GPU Benchmark" in found["volume"].reference.source


def test_references_without_a_batch_are_not_comparable_never_a_verdict():
    run = make_result(spec={"workload": "train", "model": "resnet50", "batch": 256, "options": {"data": "dummy"}},
                      system={"host": "n", "gpus": [{"name": "NVIDIA A40"}], "gpu_count": 1},
                      metrics={"device": "cuda:0", "throughput": 900.0, "throughput_unit": "img/s"},
                      samples={"step": [0.28] * 5})
    [d] = diagnose([run])
    text = render_doctor([d])
    assert d.expected is None and d.ratio is None
    assert "not comparable" in text and "batch size is not published" in text and "faster than expected" not in text
    assert "280.00 ms/step" in text  # steps in milliseconds, like every table


def test_a_cpu_is_never_judged_against_a_gpu():
    run = make_result(spec={"device": "cpu", "gpus": 2}, system=CPU,
                      metrics={"device": "cpu", "throughput": 5.0, "throughput_unit": "img/s"})
    [d] = diagnose([run])
    text = render_doctor([d])
    assert d.expected is None and "not comparable" in text and "a CPU is not judged against a GPU" in text
    assert "x2 processes" in text and "GPUs" not in text.splitlines()[0]


def test_without_ceilings_doctor_says_to_run_dlbench_system():
    run = make_result(system={"host": "new", "gpus": [{"name": "NVIDIA Future X1"}], "gpu_count": 1},
                      metrics={"device": "cuda:0", "throughput": 3000.0, "throughput_unit": "img/s"},
                      samples={"step": [0.005]})
    [d] = diagnose([run])
    text = render_doctor([d])
    assert "Run `dlbench system` here" in text and "no reference" not in text
    [d] = diagnose([fwdbwd(metrics={"device": "cuda:0", "throughput": 1000.0, "throughput_unit": "img/s"})])
    assert any("run `dlbench system`" in h for h in d.hints)


def test_every_reference_is_a_gpu_with_datasheet_figures():
    from dlbench.system.datasheet import lookup

    refs = load_references()
    assert all(lookup(r.gpu) is not None for r in refs)
    publications = ("GPU Benchmark", "BenchmarkJade", "NVIDIA UNet_Medical")
    assert {r.model for r in refs if r.source.startswith(publications) and r.workload in ("train", "volume")} >= \
        {"unet3d-aniso", "unet2d-medical", "resnet50"}
    assert not [r for r in refs if r.model == "unet3d" or r.model == "unet2d"]


# ---- the seeds' rows beside yours ----------------------------------------------------------

def test_report_with_references_from_the_command_line(db):
    train3d = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1,
                                "options": {"data": "/scratch/cremi.h5", "patch": "40x432x432"}}, system=H200,
                          metrics={"iteration_mean_s": 0.131, "iters_per_min": 458.0, "patch": [40, 432, 432],
                                   "steps": 20}, tag="lent")
    with Store(db) as store:
        store.add_many([fwdbwd("resnet50", 7.51, 15.71, 23.22), train3d])
    plain = cli("report", "--db", db)
    assert plain.returncode == 0, plain.stderr
    assert "GTX 1080" not in plain.stdout and "Source" not in plain.stdout
    proc = cli("report", "--with-references", "--db", db)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    resnet = text.split("## ResNet-50\n")[1].split("\n## ")[0]
    assert "|NVIDIA H200|9.19.0|7.51|15.71|23.22|23.22|dlbench|" in resnet
    assert "|GTX 1080|5.1.10|50.24|98.41|148.65|-|GPU in the Cloud (cnn-benchmarks)|" in resnet
    assert "seed 00" not in text  # users know the publications by their titles
    unet = text.split("## 3D U-Net (aniso): training\n")[1].split("\n## ")[0]
    assert "|NVIDIA H200|1|fp32|131.1 (extrapolated from 20)|458.0|-|0.15|CUDA 13.0, PyTorch 2.11.0|cremi.h5|dlbench|" in unet
    assert "|Cluster:1080Ti|1|fp32|1754.2|34.2|-|2.0|CUDA 9.1, PyTorch 0.4.0|CREMI|" in unet
    assert "|SMC:V100|4|fp32|2308.8|26.0|1.24x|-|CUDA 9.1, PyTorch 0.4.0|CREMI|GPU Benchmarks|" in unet
    prediction = text.split("## 3D U-Net (aniso): prediction\n")[1].split("\n## ")[0]
    assert "|Cluster:1080Ti|1|fp32|215.3|8.8|25.7 †|CUDA 9.1, PyTorch 0.4.0|" in prediction


# ---- seeds 000/001 layout ------------------------------------------------------------------

def test_seed_000_001_layout_in_two_tables_titled_by_the_volume_used():
    train3d = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1},
                          system=H200, metrics={"iteration_mean_s": 0.914, "iters_per_min": 65.6, "steps": 1001})
    volume = make_result(spec={"workload": "volume", "model": "unet3d-aniso", "batch": 16},
                         system=H200, metrics={"mvox_per_s": 89.4, "total_s": 21.1, "volume_shape": [200, 3072, 3072],
                                               "extrapolate_voxels": 1e12, "world_size": 1, "wall_to_result_s": 33.46})
    [training, prediction] = training3d.tables([train3d, volume])
    assert training.header == ["System", "GPUs", "Precision", "Training [s]", "Iters / Min", "Iteration vs 1 GPU",
                               "100k Iters [d]", "Software", "Data"]
    assert training.rows == [["NVIDIA H200", 1, "fp32", "914.9", "65.6", "-", "1.1", "CUDA 13.0, PyTorch 2.11.0",
                              "Synthetic"]]
    assert prediction.header == ["System", "GPUs", "Precision", "Inference [s]", "Megavox / s", "Speed-up vs 1 GPU",
                                 "Wall time to result [s]", "1 Tvox [h]", "Software"]
    assert prediction.rows == [["NVIDIA H200", 1, "fp32", "21.1", "89.4", "-", "33.5", "3.1", "CUDA 13.0, PyTorch 2.11.0"]]


def test_seed_000_001_arithmetic_slips_are_marked_beside_their_rows():
    [training, prediction] = training3d.tables([make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1},
                                                            system=H200, metrics={"iteration_mean_s": 0.2})], published=True)
    rows = {(r["System"], r["GPUs"]): r for r in _rows(training)}
    assert rows[("Cluster:1080Ti", 2)]["Iters / Min"] == "29.4 †"
    assert any(n.startswith("Check, Cluster:1080Ti on 2 GPUs: † Iters / Min") and "60 x 1001 / 2053.8 s gives 29.2" in n
               for n in training.notes)
    predicted = {r["System"]: r for r in _rows(prediction)}
    assert predicted["SMC:V100"]["Platynereis, 8.1 Tvox [h]"] == "17.8 †"
    assert any(n.startswith("Check, SMC:V100 on 1 GPU: † Platynereis") and "gives 177.2" in n for n in prediction.notes)
    assert predicted["Cluster:1080Ti"]["Megavox / s"] == "8.8" and not any("VM:P40-Grid" in n for n in prediction.notes)


# ---- seed 003 ------------------------------------------------------------------------------

def _converge(precision, dice, reached=True):
    return make_result(spec={"workload": "converge", "model": "unet2d-medical", "batch": 8, "precision": precision,
                             "options": {"target_dice": 0.89, "folds": 5}}, system=H200,
                       metrics={"mean_dice": sum(dice) / len(dice), "dice_per_fold": dice, "target_dice": 0.89,
                                "folds": 5, "gpus": 1, "time_to_train_s": 90.0, "target_reached": reached,
                                "data": "generated", "per_fold": [{"steps": 300, "train_s": 15.0}] * len(dice)})


def test_seed_003_per_fold_dice_and_time_to_train_both_ways():
    [accuracy, time] = medical.tables([_converge("tf32", [0.9012, 0.8955]), _converge("fp16", [0.9001, 0.8801], False)])
    tf32, fp16 = _rows(accuracy)
    assert tf32["DICE per fold"] == "0.9012, 0.8955" and tf32["Accuracy (mean DICE)"] == "0.8983"
    tf32, fp16 = _rows(time)
    # the seed's definition: one fold of 40,000 iterations at 50 ms per training step
    assert tf32["40,000 iterations"] == "33.3 min (extrapolated from 300 steps)"
    assert tf32["Time to DICE 0.89"] == "90.0 s" and fp16["Time to DICE 0.89"] == "90.0 s *"
    assert fp16["Mixed-precision speed-up"] == "1.00 (from TF32)" and tf32["Mixed-precision speed-up"] is None


def test_seed_003_slips_are_marked_where_its_rows_are_shown():
    spec = {"workload": "train", "model": "unet2d-medical", "batch": 8, "precision": "tf32", "input_shape": [1, 572, 572]}
    [table, scaling] = images.throughput_tables([make_result(spec=spec, system=H200, metrics={"throughput": 127.4})],
                                                published=True)
    rows = [r for r in _rows(table) if r["System"] == "DGX A100"]
    one_by_8 = next(r for r in rows if (r["GPUs"], r["Batch size / GPU"]) == (1, 8))
    assert one_by_8["Throughput speedup (TF32 - mixed precision (fp16))"] == "2.58 †"
    assert any(n.startswith("Check, DGX A100, GPUs 1, Batch size / GPU 8: † Throughput speedup")
               and "120.08 / 40.50 gives 2.96" in n for n in table.notes)
    eight_by_8 = next(r for r in _rows(scaling) if (r["System"], r["GPUs"], r["Batch size / GPU"]) == ("DGX A100", 8, 8))
    assert eight_by_8["Weak scaling - TF32"] == "6.55 †"
    # an efficiency derived from the marked figure is marked too, and its Check says what the throughputs give
    assert eight_by_8["Scaling efficiency - TF32"] == "0.82 †"
    [check] = [n for n in scaling.notes if n.startswith("Check, DGX A100, GPUs 8, Batch size / GPU 8")]
    assert "304.64 / 40.50 gives 7.52" in check and "7.52 / 8 = 0.94" in check
    assert not any("Weak scaling" in n for n in table.notes if n.startswith("Check"))


def test_every_published_slip_is_found():
    found = {(r.seed, r.cells.get("system") or r.cells.get("cluster"), r.cells.get("batch"), s.column, s.printed)
             for r, s in published.slips()}
    expected = {("000, 001", "Cluster:1080Ti (x2)", None, "Iters / Min", "29.4"),
                ("002", "JADE2", None, "Forward Time", "0.559"),
                ("003", "DGX A100", "8", "Throughput speedup (TF32 - mixed precision)", "2.58"),
                ("003", "DGX A100", "8", "Weak scaling - TF32", "6.55")}
    expected |= {("000, 001", s, None, "Platynereis [h]", h) for s, h in
                 (("Cluster:1080Ti", "25.7"), ("Cluster:P100", "26.3"), ("SMC:P100", "24.0"), ("SMC:V100", "17.8"))}
    expected |= {("003", s, b, "Throughput Avg [img/s]", t) for s, b, t in
                 (("DGX A100", "8", "382.48"), ("DGX A100", "16", "400.58"), ("DGX A100", "8", "131.54"),
                  ("DGX A100", "16", "137.41"), ("DGX-1", "8", "178.28"), ("DGX-1", "16", "181.94"),
                  ("DGX-1", "8", "54.41"), ("DGX-1", "16", "67.11"))}
    assert found == expected


def test_published_figures_stay_as_printed():
    rows = published.seed002()
    tn = next(r for r in rows if (r.cells["cluster"], r.cells["dataset"], r.cells["benchmark"]) ==
              ("TN", "ImageNet", "Inference") and r.cells["device"] == "V100")
    assert tn.cells["data_s"] == "0.1022" and published.seconds_to_ms("0.1022") == "102.2"
    assert published.seconds_to_ms("0.0009") == "0.9" and published.seconds_to_ms("5.8355") == "5835.5"
    assert published.seed004("vgg16")[0].cells["total_ms"] == "180.30"


# ---- units and precision -------------------------------------------------------------------

@pytest.mark.parametrize("value", [0.004, 0.0004, 4e-7, 0.049, 0.0099999])
def test_a_nonzero_value_never_shows_as_zero(value):
    for text in (fixed(value, 2), fixed(value, 1), fixed(value, 4), sig(value), ms(value)):
        assert float(text) != 0 and text != "0.00"
    assert percent(0.001) == "0.1%" and sig(0) == "0" and fixed(None) == "-"


def test_reports_use_ms_for_step_times_and_no_zero_figures():
    smooth = make_result(spec={"workload": "smooth", "batch": 64, "options": {"data": "synthetic"}}, system=H200,
                         metrics={"throughput": 50.0, "data_ms": 0.004, "h2d_ms": 0.0, "noise_ms": 0.0021,
                                  "forward_ms": 8.2, "step_ms": 8.3})
    text = render([smooth, fwdbwd(forward=0.004, backward=0.009, step=0.0131)], "md")
    assert not re.search(r"\|-?0\.0*\|", text)  # no measured figure reads 0 (a count of 0 workers may)
    # milliseconds per batch in every table: the phases as the forward/backward tables
    assert "Data Processing Time [ms]" in text and "|0.0040|0.0021|8.20|" in text and "|0.0040|0.0090|0.0130|0.013|" in text


def test_three_d_training_is_never_drawn_on_an_img_s_axis():
    from dlbench.report.plots import throughput_of, throughput_plots

    train3d = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1}, system=H200,
                          metrics={"throughput": 7.6, "throughput_unit": "patch/s", "iters_per_min": 458.0,
                                   "iteration_mean_s": 0.131})
    assert throughput_of(train3d) == (458.0, "iters/min")
    plots = throughput_plots([train3d, _train()])
    assert sorted(p.caption.split(".")[0] for p in plots) == ["Throughput (img/s), latest run of each benchmark",
                                                              "Throughput (iters/min), latest run of each benchmark"]


# ---- rows that differ are told apart; the system and its tag -------------------------------

def test_rows_that_differ_in_data_or_input_are_told_apart():
    dummy = _train()
    dummy.spec["options"] = {"data": "dummy", "workers": 8}
    dummy.started = "2030-01-01T00:00:00+00:00"
    small = _train()
    small.spec["input_shape"] = [3, 128, 128]
    [table, *_] = images.throughput_tables([_train(), dummy, small])
    assert "Data" in table.header and "Input" in table.header
    assert {r["Data"] for r in _rows(table)} == {"Synthetic", "Dummy"}
    from dlbench.report.plots import _short

    assert _short(dummy, [dummy, _train()]).endswith("Dummy") and "Synthetic" not in _short(dummy, [dummy])


def test_system_column_shows_the_system_and_the_tag_its_own_column():
    [_, table] = images.phase_tables([_train()])
    [row] = _rows(table)
    # a host name is no cluster: without one given (DLBENCH_CLUSTER, SLURM) the column is left out
    assert "Cluster" not in row and row["Device Name"] == "NVIDIA H200"
    assert "dlbench's rows are runs tagged `before-upgrade`." in table.notes  # one tag: a note, not a column
    [_, table] = images.phase_tables([_train(), make_result(spec=_train().spec, system={**H200, "cluster": "TN"},
                                                            metrics=_train().metrics)])
    assert [r["Cluster"] for r in _rows(table)] == [None, "TN"]
    # the second run has no tag: no sentence that every row carries one, a Tag column instead
    assert [r["Tag"] for r in _rows(table)] == ["before-upgrade", None] and not any("tagged" in n for n in table.notes)


# ---- CPU rows in CPU terms -----------------------------------------------------------------

def test_cpu_rows_in_cpu_terms():
    train3d = make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1, "device": "cpu", "gpus": 2},
                          system=CPU, metrics={"device": "cpu", "iteration_mean_s": 30.0, "iters_per_min": 2.0})
    [table] = training3d.tables([train3d])
    assert table.header[1] == "GPUs or CPU processes"
    assert table.rows[0][:3] == ["CPU: Xeon E5-2630 v3 (16 cores)", 2, "fp32"] and table.rows[0][7] == "PyTorch 2.11.0"
    cpu = fwdbwd(spec={"device": "cpu"}, system=CPU, metrics={"device": "cpu"})
    [table] = cnn.tables([cpu])
    assert "cuDNN" not in table.header  # no row ran on a GPU: the column means nothing
    [table] = cnn.tables([cpu, fwdbwd()])
    assert [r["cuDNN"] for r in _rows(table) if r["GPU or CPU"].startswith("CPU")] == ["-"]  # beside a GPU: none
    from dlbench.workloads import volume

    line = volume.describe(Measurement.read({"device": "cpu", "voxels": 1e6, "total_s": 2.0, "mvox_per_s": 0.5, "blocks": 1,
                            "blocks_skipped": 0, "extrapolate_voxels": 8.1e12, "extrapolate_hours": {"1": 4500.0}}))
    assert "on this CPU" in line and "GPU" not in line
