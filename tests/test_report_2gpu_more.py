"""The pieces docs/report-2gpu.md lacked: learning curves and the first-evaluation sentence from
real tiny converge runs in a real store, read back by `dlbench report`; the tensor-core table of
the 3D U-Net; a measured 1001-iteration training never hidden by a later extrapolated one; and
the extra suite benchmarks/report-2gpu-more.yaml, which must expand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from conftest import cli, make_result
from dlbench.launch.execute import execute
from dlbench.report import curves, medical, plots, precisions3d, training3d
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint

SUITE = Path(__file__).resolve().parents[1] / "benchmarks" / "report-2gpu-more.yaml"
H200 = {"gpus": [{"name": "NVIDIA H200"}], "cuda": "13.0", "torch": "2.11.0"}


@pytest.fixture(scope="module")
def converged():
    """Two tiny CPU converge runs of 2 folds: one evaluated every 5 steps and every step near an
    easy target, one evaluated first at a step where every fold is past it."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    base = dict(synthetic_n=6, synthetic_size=32, folds=3, fold_limit=2, features=4, lr=1e-3, max_steps=12)
    dense = BenchmarkSpec(workload="converge", model="unet2d", batch=2, device="cpu",
                          options={**base, "target_dice": 0.999, "eval_every": 5, "eval_near": 1.0,
                                   "eval_near_every": 1})
    easy = dataclasses.replace(dense, precision="bf16", options={**base, "target_dice": 0.01, "eval_every": 4})
    try:
        return [execute(s, fingerprint()) for s in (dense, easy)]
    finally:
        torch.set_num_threads(saved)


def test_learning_curve_tables_hold_every_evaluation_of_every_fold(converged):
    dense, _ = converged
    assert dense.status == "ok", dense.error
    [table] = [t for t in curves.tables([dense])]
    assert table.title.startswith("U-Net (2D): learning curve") or "learning curve" in table.title
    assert table.header == ["Step", "Fold 1: loss / DICE", "Fold 2: loss / DICE"]
    steps = [row[0] for row in table.rows]
    assert steps == ["5", "6", "7", "8", "9", "10", "11", "12"]  # every 5, then every step near the target
    first = table.rows[0][1]
    loss, dice = (float(x) for x in first.split(" / "))
    assert loss == pytest.approx(dense.samples["curve_loss"][0], abs=1e-4)
    assert dice == pytest.approx(dense.samples["curve_dice"][0], abs=1e-4)
    assert any("every 1 once the DICE was within 1 of the target" in n for n in table.notes)
    assert not any("first evaluation" in n for n in table.notes)  # the target was not reached at all
    [plot] = plots.learning_curve_plots([dense])
    assert plot.svg.startswith(b"<?xml") and "learning curve" in plot.title


def test_every_fold_at_its_first_evaluation_is_said(converged):
    _, easy = converged
    assert easy.status == "ok", easy.error
    assert curves.reached_at_first(easy) == 4
    [_, time] = medical.tables([easy])
    said = [n for n in time.notes if "every fold reached the target at its first evaluation (step 4)" in n]
    assert len(said) == 1 and "bf16" in said[0] and "an upper bound" in said[0]


def test_report_command_prints_the_curves_from_the_store(converged, tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.add_many(converged)
    out = cli("report", "--db", db)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": learning curve, ") == 2
    assert "every fold reached the target at its first evaluation (step 4)" in out.stdout
    page = tmp_path / "r.html"
    html = cli("report", "--db", db, "--format", "html", "-o", page)
    assert html.returncode == 0, html.stderr
    assert page.read_text().count('id="learning-curve-') == 2


def _train3d(precision, step_s, steps, gpus=1, started="2026-11-26T03:00:00+00:00"):
    return make_result(spec={"workload": "train", "model": "unet3d-aniso", "batch": 1, "precision": precision,
                             "gpus": gpus, "input_shape": [1, 40, 432, 432], "options": {"patch": "40x432x432"}},
                       system=H200, started=started,
                       metrics={"steps": steps, "iteration_mean_s": step_s, "throughput": 1 / step_s,
                                "throughput_unit": "patch/s"},
                       samples={"step": [step_s] * steps})


def test_tensor_core_table_sets_tf32_and_bf16_beside_fp32_on_one_gpu():
    runs = [_train3d("fp32", 1.8, 10), _train3d("tf32", 0.3, 20), _train3d("bf16", 0.15, 300),
            _train3d("bf16", 0.15, 300, gpus=2)]
    [table] = precisions3d.tables(runs, published=True)
    rows = {r[1]: dict(zip(table.header, r)) for r in table.rows}
    assert len(rows) == 3  # the 2-GPU run is not one GPU
    assert rows["TF32 (tensor cores, FP32 storage)"]["vs FP32"] == "6.00x"
    assert rows["bf16 (tensor cores, autocast)"]["vs FP32"] == "12.00x"
    assert rows["FP32 (TF32 off: CUDA cores only)"]["Iters / Min"] == "33.3"
    # Their fastest 1-GPU FP32 iteration: Cluster:1080Ti at 34.2 iters/min, 1.754 s
    assert rows["FP32 (TF32 off: CUDA cores only)"]["vs Cluster:1080Ti (FP32)"] == "0.97x"
    assert precisions3d.tables([_train3d("bf16", 0.15, 300)]) == []  # no FP32 row: nothing to answer


def test_a_measured_1001_iteration_training_is_not_hidden_by_a_later_extrapolation():
    measured = _train3d("fp32", 1.8, 1001, started="2026-11-26T03:00:00+00:00")
    later = _train3d("fp32", 1.7, 15, started="2026-11-27T03:00:00+00:00")
    [table] = training3d.tables([measured, later])
    [cell] = [r[3] for r in table.rows]
    assert cell == "1801.8"  # the 1001 samples added, not "(extrapolated from 15)"
    [alone] = training3d.tables([later])
    assert "extrapolated from 15" in alone.rows[0][3]


def test_the_extra_suite_expands():
    out = cli("suite", SUITE, "--list")
    assert out.returncode == 0, out.stderr
    assert "13 benchmarks" in out.stdout + out.stderr
    assert "eval_near=0.1" in out.stdout
