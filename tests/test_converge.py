"""converge: real learning on the generated set, the CLI end to end, bad input, the report table."""

import dataclasses

import pytest
import torch

from dlbench.data import generate_seg
from dlbench.errors import UserError
from dlbench.report import render_markdown
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.launch.execute import execute
from dlbench.workloads.losses import loss_for

from conftest import assert_user_error, cli, make_result

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # two busy cores: one thread each is much faster than contending


@pytest.fixture
def one_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _spec(**options) -> BenchmarkSpec:
    base = dict(synthetic_n=6, synthetic_size=64, folds=3, fold_limit=1, features=8, lr=1e-3)
    return BenchmarkSpec(workload="converge", model="unet2d", batch=4, device="cpu", options={**base, **options})


def test_training_really_raises_dice_to_the_target(one_thread):
    result = execute(_spec(target_dice=0.85, eval_every=25, max_steps=250), fingerprint())
    assert result.status == "ok", result.error
    m, s = result.metrics, result.samples
    (fold,) = m["per_fold"]
    assert fold["reached"] and m["target_reached"] and m["folds_reached"] == 1
    assert fold["final_dice"] >= 0.85 and m["mean_dice"] == fold["final_dice"]
    assert s["curve_dice"][0] < fold["final_dice"] - 0.03  # it learned, it did not start there
    assert s["curve_loss"][-1] < s["curve_loss"][0]
    assert fold["steps_to_target"] == fold["steps"] == s["curve_step"][-1] <= 250
    assert fold["steps"] % 25 == 0
    assert 0 < fold["time_to_target_s"] == pytest.approx(fold["wall_s"])
    assert fold["wall_s"] >= fold["train_s"] + fold["eval_s"] * 0.999
    assert m["throughput"] == pytest.approx(4 * fold["steps"] / fold["train_s"])
    assert "evaluations excluded" in m["throughput_method"]
    assert (fold["n_train"], fold["n_val"]) == (4, 2) and m["train_output"] == m["eval_size"] == [64, 64]


def test_evaluations_come_closer_near_the_target(one_thread):
    # Every 10 steps until the DICE is within 1 of an unreachable target (always, from the first
    # evaluation on), then every 3; the budget ends the fold at step 22.
    result = execute(_spec(target_dice=1.0, eval_every=10, eval_near=1.0, eval_near_every=3, max_steps=22,
                           synthetic_size=32, features=2), fingerprint())
    assert result.status == "ok", result.error
    steps = result.samples["curve_step"]
    assert steps == [10, 13, 16, 19, 22]
    far = execute(_spec(target_dice=1.0, eval_every=10, eval_near=1e-6, max_steps=22, synthetic_size=32,
                        features=2), fingerprint())
    assert far.samples["curve_step"] == [10, 20, 22]  # never within 1e-6 of it: every 10
    assert len(result.samples["curve_loss"]) == len(steps)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_paths_run_and_stop_at_the_budget(one_thread, precision):
    spec = dataclasses.replace(_spec(target_dice=1.0, eval_every=2, max_steps=3, synthetic_size=32, folds=2,
                                     fold_limit=None, features=2), precision=precision)
    result = execute(spec, fingerprint())
    assert result.status == "ok", result.error
    m = result.metrics
    assert m["folds_run"] == 2 and not m["target_reached"] and m["steps_to_target"] is None
    assert [f["steps"] for f in m["per_fold"]] == [3, 3] and result.samples["curve_step"] == [2, 3, 2, 3]
    assert m["time_to_train_s"] == pytest.approx(sum(f["wall_s"] for f in m["per_fold"]) / 2)


def test_unpadded_unet_trains_on_crops_with_context(one_thread):
    spec = BenchmarkSpec(workload="converge", model="unet2d-medical", batch=1, device="cpu",
                         input_shape=(1, 252, 252), options=dict(synthetic_n=2, synthetic_size=128, folds=2,
                                                                fold_limit=1, features=2, eval_every=1, max_steps=1))
    result = execute(spec, fingerprint())
    assert result.status == "ok", result.error
    assert result.metrics["train_input"] == [252, 252] and result.metrics["train_output"] == [68, 68]
    assert result.metrics["eval_size"] == [116, 116]  # the largest valid output within 128


@pytest.mark.parametrize("options, needle", [
    ({"target_dice": 0}, "--target-dice must be > 0, got 0"),
    ({"target_dice": 1.01}, "--target-dice must be ≤ 1, got 1.01"),
    ({"folds": 1}, "--folds must be ≥ 2, got 1"),
    ({"eval_every": 0}, "--eval-every must be ≥ 1, got 0"),
    ({"eval_near": 0}, "--eval-near must be > 0, got 0"),
    ({"eval_near_every": 0}, "--eval-near-every must be ≥ 1, got 0"),
    ({"max_seconds": float("inf")}, "--max-seconds must be a finite number"),
    ({"data": "/no/such/folder"}, "does not exist"),
])
def test_bad_options_stop_when_the_spec_is_built(options, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _spec(**options)


def test_loss_is_cross_entropy_plus_soft_dice():
    target = torch.randint(0, 2, (2, 8, 8))
    perfect = torch.nn.functional.one_hot(target, 2).permute(0, 3, 1, 2).float() * 100
    assert loss_for("segment-dice")(perfect, target).item() == pytest.approx(0.0, abs=1e-6)
    logits = torch.randn(2, 2, 8, 8)
    assert loss_for("segment-dice")(logits, target) > torch.nn.functional.cross_entropy(logits, target)


def test_wrong_input_size_and_task_are_user_errors():
    spec = BenchmarkSpec(workload="converge", model="unet2d-medical", batch=1, device="cpu", input_shape=(1, 570, 570),
                         options=dict(synthetic_n=2, synthetic_size=32, folds=2))
    with pytest.raises(UserError, match="input size 570 does not fit unet2d-medical.*use 556 .output 372. or 572"):
        execute(spec, fingerprint())
    spec = BenchmarkSpec(workload="converge", model="resnet18", batch=1, device="cpu")
    with pytest.raises(UserError, match="converge trains segmentation models"):
        execute(spec, fingerprint())


def test_cli_data_seg_then_converge_then_report(tmp_path, db):
    data = tmp_path / "seg"
    proc = cli("data", "seg", data, "--n", "4", "--size", "32", "--format", "png", env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert len(list((data / "masks").glob("*.png"))) == 4
    proc = cli("run", "converge", "--data", data, "--folds", "2", "--eval-every", "2", "--max-steps", "2",
               "--features", "2", "--batch", "2", "--device", "cpu", "--precision", "bf16", "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert "ok converge unet2d" in proc.stdout and "reached in" in proc.stdout
    with Store(db) as store:
        (r,) = store.results()
    assert r.spec["options"]["data"] == str(data.resolve()) and r.metrics["folds_run"] == 2
    report = cli("report", "--db", db).stdout
    assert "|System|GPUs|Batch size / GPU|Precision|Accuracy (mean DICE)|DICE per fold|Data|" in report
    assert "|System|GPUs|Batch size / GPU|Precision|40,000 iterations|Time to DICE 0.89|" in report


@pytest.mark.slow
def test_two_processes_train_one_fold_together(tmp_path, db):
    data = generate_seg.write(tmp_path / "seg", n=4, size=32)
    proc = cli("run", "converge", "--data", data, "--folds", "2", "--fold-limit", "1", "--eval-every", "2",
               "--max-steps", "4", "--features", "2", "--batch", "2", "--device", "cpu", "--gpus", "2", "--db", db,
               env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        (r,) = store.results()
    m = r.metrics
    assert m["processes"] == 2 and m["global_batch"] == 4 and m["folds_run"] == 1
    assert m["per_fold"][0]["steps"] == 4  # both processes stop at the same step
    assert "|2|2|" in cli("report", "--db", db).stdout  # GPUs, batch per GPU


@pytest.fixture
def bad_sets(tmp_path):
    good = generate_seg.write(tmp_path / "good", n=2, size=32)
    return good


@pytest.mark.parametrize("break_it, needle", [
    (lambda root: (root / "masks" / "seg_001.tif").unlink(), "image seg_001.tif has no mask"),
    (lambda root: __import__("PIL.Image").Image.fromarray(__import__("numpy").full((32, 32), 7, "uint8"))
     .save(root / "masks" / "seg_000.tif"), "has label values 7; expected 0/1 or 0/255"),
    (lambda root: __import__("PIL.Image").Image.fromarray(__import__("numpy").zeros((30, 32), "uint8"))
     .save(root / "masks" / "seg_000.tif"), "is 32x32 but its mask is 32x30"),
])
def test_cli_bad_data_is_one_line_and_nothing_stored(bad_sets, break_it, needle, db):
    earlier = make_result()
    with Store(db) as store:
        store.add(earlier)
    break_it(bad_sets)
    assert_user_error(cli("run", "converge", "--data", bad_sets, "--device", "cpu", "--db", db, env=ONE_THREAD), needle)
    with Store(db) as store:
        assert [r.id for r in store.results()] == [earlier.id]


def test_cli_target_outside_0_1_is_one_line(db):
    assert_user_error(cli("run", "converge", "--target-dice", "1.5", "--db", db), "--target-dice must be ≤ 1, got 1.5")


def _converge(precision, gpus=1, dice=0.89, minutes=10.0, reached=True, status="ok", **overrides):
    spec = {"workload": "converge", "model": "unet2d-medical", "batch": 8, "precision": precision, "gpus": gpus,
            "options": {"target_dice": 0.89, "folds": 5}}
    # per fold: DICE, and 1000 steps at the time per step that makes 40,000 iterations take `minutes`
    metrics = {"mean_dice": dice, "time_to_train_s": minutes * 60, "target_reached": reached, "gpus": gpus,
               "target_dice": 0.89, "folds": 5, "data": "generated 30 x 512x512 (seed 0)", "dice_per_fold": [dice] * 2,
               "per_fold": [{"steps": 1000, "train_s": minutes * 60 / 40}] * 2}
    if status == "oom":
        metrics = {k: metrics[k] for k in ("gpus", "target_dice", "folds", "data")} | {"batch_tried": 8}
    return make_result(spec=spec, metrics=metrics, status=status, **overrides)


def _block(text: str, title: str) -> list[str]:
    return text.split(f"## {title}\n")[1].split("\n## ")[0].splitlines()


def test_report_in_the_seeds_terms_one_row_per_precision():
    results = [_converge("tf32", dice=0.8908, minutes=22), _converge("fp16", dice=0.8910, minutes=10),
               _converge("tf32", gpus=8, dice=0.8938, minutes=2.6), _converge("fp16", gpus=8, dice=0.8942, minutes=2.5),
               make_result()]  # a fwdbwd result: not in this table
    text = render_markdown(results)
    block = _block(text, "U-Net (original): accuracy")
    assert "5-fold cross-validation, target DICE 0.89" in block[0]
    assert any("The data is generated, not the ISBI 2012 set" in n for n in block) and "ran only the first folds" in text
    lines = [line for line in block if line.startswith("|")]
    assert lines[0] == "|System|GPUs|Batch size / GPU|Precision|Accuracy (mean DICE)|DICE per fold|Data|"
    # the random seed of generated data stays in the record, not in the table
    assert lines[2] == "|NVIDIA H200|1|8|tf32|0.8908|0.8908, 0.8908|generated 30 x 512x512|"
    assert lines[3] == "|NVIDIA H200|1|8|fp16|0.8910|0.8910, 0.8910|generated 30 x 512x512|"
    lines = [line for line in _block(text, "U-Net (original): time to train") if line.startswith("|")]
    assert lines[0] == ("|System|GPUs|Batch size / GPU|Precision|40,000 iterations|Time to DICE 0.89|"
                        "Mixed-precision speed-up|")
    x = " (extrapolated from 1,000 steps)"  # the folds trained 1,000 steps, not the publication's 40,000
    assert lines[2:4] == [f"|NVIDIA H200|1|8|tf32|22.0 min{x}|22.0 min|-|",
                          f"|NVIDIA H200|1|8|fp16|10.0 min{x}|10.0 min|2.20 (from TF32)|"]
    assert lines[5] == f"|NVIDIA H200|8|8|fp16|2.5 min{x}|2.5 min|1.04 (from TF32)|"
    assert "## ResNet-50" in text


def test_report_marks_missed_targets_oom_and_keeps_the_latest():
    results = [_converge("fp32", minutes=99, started="2026-01-01T00:00:00+00:00"),
               _converge("fp32", minutes=48, dice=0.8910, started="2026-02-01T00:00:00+00:00"),
               _converge("fp16", minutes=19, dice=0.80, reached=False),
               _converge("bf16", status="oom")]
    text = render_markdown(results)
    lines = [line for line in _block(text, "U-Net (original): time to train") if line.startswith("|")]
    assert lines[2:] == ["|NVIDIA H200|1|8|fp32|48.0 min (extrapolated from 1,000 steps)|48.0 min|-|",
                         "|NVIDIA H200|1|8|fp16|19.0 min (extrapolated from 1,000 steps)|19.0 min *|2.53 (from FP32)|",
                         "|NVIDIA H200|1|8|bf16|OOM|OOM|-|"]
    accuracy = [line for line in _block(text, "U-Net (original): accuracy") if line.startswith("|")]
    data = "generated 30 x 512x512"  # the random seed stays in the record
    assert accuracy[2:4] == [f"|NVIDIA H200|1|8|fp32|0.8910|0.8910, 0.8910|{data}|",
                             f"|NVIDIA H200|1|8|fp16|0.8000|0.8000, 0.8000|{data}|"]


def test_unet_medical_suite_expands_to_the_converge_runs():
    from dlbench import suites

    loaded = suites.load("unet-medical")
    converge = [s for s in loaded.specs if s.workload == "converge"]
    assert [s.precision for s in converge] == ["fp32", "tf32", "fp16"]
    assert {(s.model, s.batch, s.options["target_dice"], s.options["folds"]) for s in converge} == {
        ("unet2d-medical", 8, 0.89, 5)}
    throughput = [s for s in loaded.specs if s.workload != "converge"]
    assert {(s.workload, s.warmup, s.steps) for s in throughput} == {("train", 200, 800), ("infer", 200, 400)}
    assert {s.batch for s in throughput} == {1, 2, 4, 8, 16}
    assert {s.precision for s in throughput} == {"fp32", "tf32", "fp16", "bf16"}


@pytest.mark.parametrize("args, needle", [
    ((0, 64, "tif"), "--n must be at least 1"),
    ((2, 8, "tif"), "--size must be at least 16"),
    ((2, 64, "bmp"), "unknown image format 'bmp'"),
])
def test_data_seg_bad_arguments(tmp_path, args, needle):
    with pytest.raises(UserError, match=needle):
        generate_seg.check(tmp_path / "seg", *args)
    assert not (tmp_path / "seg").exists()
