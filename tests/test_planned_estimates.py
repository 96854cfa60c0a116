"""3D training and converge say how long they take from what they will compute (their `planned`): the
patch, not the model's default input; converge's folds, steps, evaluations and images, with the bound
it goes by where the steps to the target cannot be known. Before, both counted the model's default
input (40x432x432, 572x572) and said hours for runs of a minute."""

import re

import pytest

from dlbench.data.generate_volume import generate
from dlbench.errors import UserError
from dlbench.results.record import Result
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import CONV_EFFICIENCY, ROUGH_STARTUP_S, Known, estimate_run, known
from dlbench.workloads import converge, plans
from dlbench.workloads.plans import TRAIN3D_CPU_EFFICIENCY

from conftest import assert_user_error, cli

TINY3D = "unet3d-aniso:f=2,d=2"
QUICK = ("--device", "cpu", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0")
NOTHING = Known({}, {}, {}, None)


def _counting(counted: list):
    def forward(spec: BenchmarkSpec) -> int:
        counted.append((spec.batch, spec.input_shape))
        return 10**9
    return forward


def _train(**options) -> BenchmarkSpec:
    return BenchmarkSpec(workload="train", model="unet3d-aniso", batch=1, device="cpu", warmup=2, steps=5,
                         warmup_seconds=0, min_seconds=0, options={"patch": "8x64x64", **options})


def _converge(**options) -> BenchmarkSpec:
    return BenchmarkSpec(workload="converge", model="unet2d-medical", batch=2, device="cpu",
                         options={"synthetic_n": 8, "synthetic_size": 96, "folds": 2, "max_steps": 20,
                                  "eval_every": 10, **options})


# ---------------------------------------------------------------- 3D training


def test_3d_training_is_estimated_from_its_patch_and_its_steps():
    counted = []
    facts = Known({}, {}, {("cpu", "fp32"): 1e10}, 3.0)
    found = estimate_run(_train(), facts, "cpu", forward=_counting(counted))
    assert counted == [(1, (1, 8, 64, 64))]  # the patch after the model's one channel, not 40x432x432
    assert found.basis == "FLOPs over this machine's measured ceiling"
    step = 3e9 / (1e10 * TRAIN3D_CPU_EFFICIENCY)  # three forward passes over the ceiling at a 3D step's share of it
    assert found.seconds == pytest.approx(3.0 + 2 * step + (2 + 5) * step)  # start, FLOP count, warm-up, steps


def test_3d_trainings_lower_share_of_the_ceiling_is_a_cpus_only():
    # On the 2-core EPYC a 3D step reached half a 2D net's share of the matmul ceiling; no GPU said so.
    facts = Known({}, {}, {("cpu", "fp32"): 1e10, ("cuda", "fp32"): 1e10}, 0.0)
    on_cpu, on_gpu = (estimate_run(_train(), facts, kind, forward=lambda s: 10**9).seconds for kind in ("cpu", "cuda"))
    assert TRAIN3D_CPU_EFFICIENCY < CONV_EFFICIENCY["cpu"]
    assert on_cpu == pytest.approx(9 * 3e9 / (1e10 * TRAIN3D_CPU_EFFICIENCY))
    assert on_gpu == pytest.approx(9 * 3e9 / (1e10 * CONV_EFFICIENCY["cuda"]))


def test_3d_training_steps_last_at_least_their_seconds():
    facts = Known({}, {}, {("cpu", "fp32"): 1e12}, 0.0)
    spec = BenchmarkSpec(workload="train", model="unet3d-aniso", batch=1, device="cpu", warmup=1, steps=1,
                         warmup_seconds=4, min_seconds=6, options={"patch": "8x64x64"})
    assert estimate_run(spec, facts, "cpu", forward=lambda s: 10**6).seconds == pytest.approx(10, abs=0.1)


def test_2d_training_and_epochs_keep_the_general_estimate():
    classify = BenchmarkSpec(workload="train", model="resnet18", batch=2, device="cpu")
    assert plans.train(classify) is None
    assert plans.train(_train(epochs=1)) is None


def test_a_stored_3d_training_run_remembers_its_patchs_flops():
    spec = _train()
    result = Result(spec=spec.to_dict(), system={"host": "elsewhere"}, status="ok")
    result.metrics.update({"flops_per_step": 7 * 10**9, "input_shape": [1, 1, 8, 64, 64]})
    facts = known([Result.from_dict(result.to_dict())], "here", None)
    counted = []
    found = estimate_run(spec, Known({}, facts.flops, {("cpu", "fp32"): 1e10}, 0.0), "cpu",
                         forward=_counting(counted))
    assert counted == [] and found.basis == "FLOPs over this machine's measured ceiling"


def test_dlbench_run_train_says_seconds_for_a_small_patch(tmp_path):
    volume = generate(tmp_path / "cremi.h5", (8, 40, 40), chunks=(4, 20, 20), seed=1)
    done = cli("run", "train", "--model", TINY3D, "--data", volume, "--patch", "4x24x24", "--workers", "0", *QUICK,
               "--db", tmp_path / "r.db")
    assert done.returncode == 0, done.stderr
    said = re.search(r"^train \S+ b1 fp32: about (\d+) s \(rough\)(?:, after \d+ s of start-up)?$", done.stderr, re.M)
    assert said, done.stderr
    assert int(said.group(1)) < 2 * ROUGH_STARTUP_S["cpu"] and "expected to take" not in done.stderr


# ---------------------------------------------------------------- converge


def test_converge_plans_every_folds_step_budget_and_its_evaluations():
    plan = converge.planned(_converge())
    # 96x96 images: the largest valid output within them is 84, with 92 pixels of context on each side
    assert plan.shape == (2, 1, 268, 268) and plan.warmup == 0 and plan.counted_free
    # 2 folds of 20 steps; 2 evaluations a fold of its 4 validation images (a third of a step's cost each)
    assert plan.steps == 40 + 3
    assert plan.bound == "the bound: 2 folds of --max-steps 20, sooner where --target-dice 0.89 is reached"
    assert converge.planned(_converge(fold_limit=1)).steps == 20 + 2
    assert "or --max-seconds 30 a fold" in converge.planned(_converge(max_seconds=30)).bound


def test_converge_features_scale_the_counted_default_models_flops():
    default, small = converge.planned(_converge()), converge.planned(_converge(features=16))
    assert small.passes == pytest.approx(default.passes / 16)


def test_converge_estimate_says_it_is_a_bound():
    found = estimate_run(_converge(), NOTHING, "cpu", forward=lambda s: 10**9)
    assert found.bound and found.text().startswith("at most about ")
    assert found.text().endswith("; the bound: 2 folds of --max-steps 20, sooner where --target-dice 0.89 is reached)")


def test_converge_of_a_folder_reads_only_the_first_images_size(tmp_path):
    done = cli("data", "seg", tmp_path / "seg", "--n", "3", "--size", "120", "--format", "png")
    assert done.returncode == 0, done.stderr
    spec = BenchmarkSpec(workload="converge", model="unet2d-medical", batch=1, device="cpu",
                         options={"data": str(tmp_path / "seg"), "folds": 3, "max_steps": 4, "eval_every": 2})
    plan = converge.planned(spec)
    assert plan.prepare == () and plan.shape[-2:] == (300, 300)  # 116 output pixels of 120, and the context


def test_images_too_small_for_the_unpadded_unet_stop_before_the_estimate():
    with pytest.raises(UserError, match="images of 64x64 are too small for this unpadded U-Net .unet2d-medical., "
                                        "which needs 92 pixels of context on each side: give images of at least 93x93"):
        converge.preflight(_converge(synthetic_size=64))


def test_dlbench_run_converge_says_its_bound_and_a_small_image_is_one_line(tmp_path):
    args = ("run", "converge", "--model", "unet2d-medical", "--synthetic-n", "4", "--folds", "2", "--max-steps", "2",
            "--eval-every", "2", "--features", "2", "--batch", "1", "--device", "cpu", "--db", tmp_path / "r.db")
    small = cli(*args, "--synthetic-size", "64")
    assert_user_error(small, "images of 64x64 are too small", "at least 93x93")
    done = cli(*args, "--synthetic-size", "96")
    assert done.returncode == 0, done.stderr
    said = re.search(r"^converge unet2d-medical b1 fp32: at most about (\d+) s \(rough; the bound: 2 folds of "
                     r"--max-steps 2, sooner where --target-dice 0.89 is reached\)(?:, after \d+ s of start-up)?$", done.stderr, re.M)
    assert said, done.stderr
    assert int(said.group(1)) < 2 * ROUGH_STARTUP_S["cpu"]
