"""Optimisation levels: plumbing through every workload, the check against eager, compile time
outside the measured window, GPU-only levels refused on the CPU, and the report section.

torch.compile runs with the "aot_eager" backend (dynamo + AOTAutograd, no inductor code
generation): inductor on two CPU cores takes minutes per model."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import assert_user_error, cli, make_result
from dlbench.data.generate_volume import generate
from dlbench.errors import UserError
from dlbench.models import registry
from dlbench.report import render_markdown
from dlbench.report.optimize import HEADER, tables
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.launch.execute import execute
from dlbench.workloads import optimize

TINY = "test-optimize-tiny"


class TinyNet(nn.Module):
    """Convolution, batch norm, dropout and a classifier: every kind of layer the check must handle."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Dropout(0.5), nn.Linear(4, classes))

    def forward(self, x):
        return self.head(self.features(x))


registry.register(registry.ModelEntry(TINY, "Tiny test net", TinyNet, (3, 8, 8), "classify"))


@pytest.fixture(autouse=True)
def light_compile(monkeypatch, tmp_path):
    monkeypatch.setenv(optimize.BACKEND_ENV, "aot_eager")
    monkeypatch.setenv("DLBENCH_CACHE", str(tmp_path / "cache"))  # compile logs and caches stay in the test's folder
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def spec(workload: str = "fwdbwd", level: str = "compile", **kw) -> BenchmarkSpec:
    base = dict(workload=workload, model=TINY, batch=2, device="cpu", warmup=1, warmup_seconds=0.0, steps=2,
                min_seconds=0.0, optimize=level)
    base.update(kw)
    return BenchmarkSpec(**base)


def assert_checked(result, level: str = "compile") -> None:
    assert result.status == "ok", result.error
    m = result.metrics
    assert m["optimize"] == level and m["compile_s"] > 0
    assert set(m["check_error"]) >= {"outputs"}
    assert all(e <= m["check_tolerance"] for e in m["check_error"].values()), m["check_error"]
    assert result.spec["optimize"] == level


# ---------------------------------------------------------------- every workload


@pytest.mark.parametrize("workload", ["fwdbwd", "train", "infer", "smooth"])
def test_compile_level_runs_and_is_checked_in_image_workloads(workload):
    result = execute(spec(workload), {})
    assert_checked(result)
    training = workload in ("fwdbwd", "train")
    assert set(result.metrics["check_error"]) == ({"outputs", "loss", "gradients"} if training else {"outputs"})
    assert result.metrics["throughput"] > 0 and result.metrics["warmup_steps"] >= optimize.MIN_WARMUP
    # FLOPs come from the eager path (the counter cannot see compiled kernels): the same as eager's
    eager = execute(spec(workload, "eager"), {})
    assert eager.status == "ok" and "compile_s" not in eager.metrics
    assert result.metrics.get("flops_per_step") == eager.metrics.get("flops_per_step")


def test_compile_level_in_volume(tmp_path):
    volume = generate(tmp_path / "v.h5", (10, 30, 34), "hdf5", chunks=(4, 16, 16), seed=1, labels=False)
    s = BenchmarkSpec(workload="volume", model="unet3d:f=2,d=2", batch=1, device="cpu", warmup=1, steps=1,
                      optimize="compile", options={"input": str(volume), "output": str(tmp_path / "out.zarr"),
                                                   "block": "4x16x18", "halo": "9x10x10", "dtype": "float16",
                                                   "readers": 1, "writers": 1, "queue": 2, "extrapolate": "8.1T"})
    result = execute(s, {})
    assert_checked(result)
    assert result.metrics["voxels"] == 10 * 30 * 34


def test_compile_level_in_converge():
    s = BenchmarkSpec(workload="converge", model="unet2d", batch=2, device="cpu", optimize="compile",
                      options=dict(synthetic_n=4, synthetic_size=32, folds=2, fold_limit=1, eval_every=2,
                                   max_steps=2, features=2))
    result = execute(s, {})
    assert result.status == "ok", result.error
    fold = result.metrics["per_fold"][0]["optimize"]
    assert fold["optimize"] == "compile" and set(fold["check_error"]) == {"outputs", "loss", "gradients"}
    assert result.metrics["compile_s"] == pytest.approx(fold["compile_s"]) and result.metrics["compile_s"] > 0


# ---------------------------------------------------------------- the check against eager


class Perturbed:
    """A wrong 'optimisation': the model's output nudged by 1 %."""

    def __init__(self, model):
        self.model = model

    def __call__(self, x):
        return self.model(x) * 1.01


def perturb(level, model, example, training):
    return Perturbed(model)


def test_check_catches_a_wrong_optimised_step():
    model = TinyNet()
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(optimize.MismatchError, match=r"does not match eager at fp32: relative error outputs 0\.01"):
        optimize.prepare(spec(), model, x, loss=lambda out: out.square().sum(), apply=perturb)
    # the same nudge passes at bf16's tolerance: the tolerance follows the precision
    _, metrics = optimize.prepare(spec(precision="bf16"), model, x, loss=lambda out: out.square().sum(), apply=perturb)
    assert metrics["check_error"]["outputs"] == pytest.approx(0.01, rel=1e-3)


class EagerStep(optimize.StepGraphs):
    """StepGraphs with its phases run eagerly instead of captured (CUDA graphs need a GPU): the
    check around it and the step that replays it are what is tested. `scale` != 1 makes its
    gradients wrong; `frozen` makes its forward read a copy of the weights taken at capture, as a
    graph would that missed the optimizer's updates."""

    scale, frozen = 1.0, False

    def _capture(self, phases, warmup):
        if self.frozen:  # values from the weights at capture, gradients still reach the model's
            frozen = copy.deepcopy(self.model)
            self.run = lambda x: self.model(x) + (frozen(x) - self.model(x)).detach()

        def backward() -> None:
            self.model.zero_grad(set_to_none=True)  # a replay writes the gradients afresh
            (self.value * self.scale).backward()

        return {**phases, "backward": backward}


def square(out):
    return out.square().sum()


def test_a_captured_step_is_checked_against_eager_like_a_model(monkeypatch):
    model, x = TinyNet().train(), torch.randn(2, 3, 8, 8)
    monkeypatch.setattr(optimize, "StepGraphs", EagerStep)
    graphs, metrics = optimize.capture_step(spec(level="graphs"), model, x, loss=square)
    assert isinstance(graphs, EagerStep) and metrics["optimize"] == "graphs"
    assert metrics["step_graphs"] == ["forward", "backward"] and "check_update_error" not in metrics
    assert set(metrics["check_error"]) == {"outputs", "loss", "gradients"}
    assert all(e <= 1e-6 for e in metrics["check_error"].values()) and metrics["compile_s"] >= 0
    assert model.head[0].training  # dropout back on, and the step captured again with it
    monkeypatch.setattr(EagerStep, "scale", 1.01)
    with pytest.raises(optimize.MismatchError, match=r"relative error gradients 0\.01"):
        optimize.capture_step(spec(level="graphs"), model, x, loss=square)


def test_a_captured_optimizer_step_must_reach_the_next_forward(monkeypatch):
    model, x = TinyNet().train(), torch.randn(2, 3, 8, 8)
    before = [p.detach().clone() for p in model.parameters()]
    monkeypatch.setattr(optimize, "StepGraphs", EagerStep)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    graphs, metrics = optimize.capture_step(spec(level="graphs"), model, x, square, optimizer)
    assert metrics["step_graphs"] == ["forward", "backward", "optimizer"] and metrics["check_update_error"] <= 1e-6
    # warm-up and the checks ran optimizer steps; the weights are put back after each
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    monkeypatch.setattr(EagerStep, "frozen", True)
    with pytest.raises(optimize.MismatchError, match="the captured optimizer step does not reach the next forward"):
        optimize.capture_step(spec(level="graphs"), model, x, square, optimizer)


@pytest.mark.parametrize("workload", ["train", "fwdbwd"])
def test_graphs_level_captures_the_whole_step(monkeypatch, workload):
    """Through execute on the CPU with the eager stand-in for the graphs: the step that replays
    them is timed per phase, and the data feeds the static input."""
    monkeypatch.setattr(optimize, "StepGraphs", EagerStep)
    monkeypatch.setattr(optimize, "check_level", lambda level, device: None)
    result = execute(spec(workload, "graphs", options={"data": "dummy", "dummy_images": 8, "workers": 0}) if workload == "train" else
                     spec(workload, "graphs"), {})
    assert_checked(result, "graphs")
    phases = ["forward", "backward", "optimizer"] if workload == "train" else ["forward", "backward"]
    assert result.metrics["step_graphs"] == phases
    assert all(result.metrics["stats"][phase]["median"] > 0 for phase in phases)
    eager = execute(spec(workload, "eager"), {})
    assert result.metrics["flops_per_step"] == eager.metrics["flops_per_step"] > 0


def test_mismatch_is_a_stored_error_result_not_a_number(tmp_path, monkeypatch):
    monkeypatch.setattr(optimize, "apply_level", perturb)
    result = execute(spec("train"), {})
    assert result.status == "error"
    assert "does not match eager" in result.error and "relative error" in result.error and "allowed 0.0001" in result.error
    assert "throughput" not in result.metrics
    with Store(tmp_path / "r.db") as store:
        store.add(result)
        (stored,) = store.results()
    assert stored.status == "error" and stored.error == result.error


def test_dropout_is_off_during_the_check_only():
    model = TinyNet().train()
    _, metrics = optimize.prepare(spec(), model, torch.randn(2, 3, 8, 8), loss=lambda out: out.sum())
    assert metrics["check_error"]["outputs"] == 0.0
    assert model.head[0].training  # dropout back on for the measurement


def test_relative_error():
    a = torch.ones(4)
    assert optimize.relative_error(a, a) == 0.0
    assert optimize.relative_error(a * 1.1, a) == pytest.approx(0.1)
    assert np.isnan(optimize.relative_error(torch.ones(3), a))
    with pytest.raises(optimize.MismatchError, match="gradients nan"):
        optimize.verdict({"outputs": 0.0, "gradients": float("nan")}, {"outputs": 1e-4, "gradients": 1e-4},
                         "fp32", "compile")


class Chaotic(nn.Module):
    """Rounding-sized input changes move the output by O(1), as deep batch-norm nets do to gradients."""

    def forward(self, x):
        return torch.sin(1e9 * x)


def test_allowed_error_follows_eager_own_sensitivity():
    x = torch.rand(64) + 1
    _, metrics = optimize.prepare(spec(), Chaotic(), x, apply=perturb)  # 1% off: within the noise
    assert metrics["check_noise"]["outputs"] > 0.5
    assert metrics["check_allowed"]["outputs"] == optimize.NOISE_FACTOR * metrics["check_noise"]["outputs"]
    # a quiet model keeps the fixed tolerance, and the same 1% is refused
    with pytest.raises(optimize.MismatchError, match=r"outputs 0\.01 \(allowed 0\.0001\)"):
        optimize.prepare(spec(), nn.Identity(), x, apply=perturb)


# ---------------------------------------------------------------- compile time outside the window


def test_compile_time_is_reported_and_never_measured(monkeypatch):
    delay = 0.4

    class SlowFirstCall:
        def __init__(self, model):
            self.model, self.first = model, True

        def __call__(self, x):
            if self.first:
                time.sleep(delay)  # stands in for compilation
                self.first = False
            return self.model(x)

    monkeypatch.setattr(optimize, "apply_level", lambda level, model, example, training: SlowFirstCall(model))
    result = execute(spec("fwdbwd", steps=3), {})
    assert result.status == "ok", result.error
    assert result.metrics["compile_s"] >= delay
    assert max(result.samples["step"]) < delay


# ---------------------------------------------------------------- user errors


def test_gpu_levels_on_the_cpu_are_a_user_error(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.add(make_result())
    proc = cli("run", "fwdbwd", "--model", "resnet18", "--device", "cpu", "--optimize", "graphs", "--db", db)
    assert_user_error(proc, "--optimize graphs needs a CUDA GPU")
    with Store(db) as store:
        assert len(store.results()) == 1  # nothing lost, nothing added
    with pytest.raises(UserError, match="--optimize max needs a CUDA GPU"):
        execute(spec("train", "max"), {})


def test_unknown_level_is_a_user_error():
    with pytest.raises(UserError, match="--optimize must be one of eager, compile, graphs, max, got 'fast'"):
        spec(level="fast")
    with pytest.raises(UserError, match="--optimize must be one of eager, compile, graphs, max, got 'fast'"):
        BenchmarkSpec.from_dict({"workload": "infer", "model": TINY, "optimize": "fast"})


def test_spec_field_round_trip_and_label():
    s = BenchmarkSpec.from_dict({"workload": "train", "model": TINY, "optimize": "max", "device": "cpu"})
    assert s.optimize == "max" and BenchmarkSpec.from_dict(s.to_dict()) == s
    assert s.label().endswith(" max")
    assert BenchmarkSpec.from_dict({"workload": "train", "model": TINY}).optimize == "eager"
    run = optimize.effective_spec(s)
    assert run.channels_last and run.warmup >= optimize.MIN_WARMUP
    assert optimize.effective_spec(spec(level="eager")) == spec(level="eager")


def test_fused_optimizer_only_at_max_on_gpu_parameters():
    params = list(TinyNet().parameters())
    assert optimize.optimizer_kwargs(spec(level="compile"), params) == {}
    assert optimize.optimizer_kwargs(BenchmarkSpec(workload="train", model=TINY, optimize="max"), params) == {}


@pytest.mark.slow
def test_every_run_command_takes_optimize():
    for workload in ("fwdbwd", "train", "infer", "smooth", "volume", "converge"):
        proc = cli("run", workload, "--help")
        assert proc.returncode == 0 and "--optimize" in proc.stdout, workload


# ---------------------------------------------------------------- the report section


def result(level: str, throughput: float, **metrics):
    return make_result(spec={"workload": "train", "optimize": level, "precision": "bf16", "batch": 256},
                       metrics={"throughput": throughput, "throughput_unit": "img/s", **metrics})


def test_report_section_layout():
    results = [result("eager", 4000.0), result("compile", 6000.0, compile_s=42.0),
               result("max", 7000.0, compile_s=120.0, achieved_tflops=180.0, ceiling_fraction=0.25),
               make_result()]  # an eager-only benchmark: no row
    (table,) = tables(results)
    assert table.header == list(HEADER)
    assert len(table.rows) == 1
    row = dict(zip(HEADER, table.rows[0]))
    assert row["eager"] == "4,000.0 img/s"
    assert row["compile"] == "6,000.0 img/s (x1.50)"
    assert row["graphs"] == "-"
    assert row["max"] == "7,000.0 img/s (x1.75)"
    assert (row["Best"], row["Compile (s)"], row["TFLOP/s"], row["Of measured ceiling"]) == ("max", "120.0", "180.0", "25%")
    assert row["Benchmark"].startswith("train ResNet-50 256x3x224x224 bf16")
    assert "## Optimisation levels" in render_markdown(results)


def test_report_marks_mismatch_and_newest_wins():
    old = result("compile", 1000.0)
    mismatch = result("compile", 0.0)
    mismatch.status, mismatch.error = "error", "--optimize compile does not match eager at bf16: relative error ..."
    mismatch.started = old.started + "z"  # newer
    (table,) = tables([result("eager", 4000.0), old, mismatch])
    assert dict(zip(HEADER, table.rows[0]))["compile"] == "mismatch"
    assert tables([make_result(), result("eager", 1.0)]) == []


def test_suite_key_of_eager_specs_is_unchanged_by_the_field():
    from dlbench.suites import spec_key

    s = spec(level="eager")
    old = {k: v for k, v in s.to_dict().items() if k != "optimize"}  # stored before the field existed
    assert spec_key(s) == spec_key(old)
    assert spec_key(spec(level="compile")) != spec_key(old)


def test_optimised_model_follows_train_and_eval_and_shares_parameters():
    model = TinyNet()
    fast, _ = optimize.prepare(spec(), model, torch.randn(2, 3, 8, 8), loss=lambda out: out.sum())
    assert {id(p) for p in fast.parameters()} == {id(p) for p in model.parameters()}
    fast.eval()
    assert not model.training and not fast.fast.training
    with torch.no_grad():  # another shape in eval mode (converge's evaluation)
        assert fast(torch.randn(3, 3, 12, 12)).shape == (3, 5)


def test_max_lets_cudnn_time_its_algorithms_for_the_run_only():
    before = torch.backends.cudnn.benchmark
    with optimize.switches("max"):
        assert torch.backends.cudnn.benchmark
    with optimize.switches("compile"):
        assert torch.backends.cudnn.benchmark == before
    assert torch.backends.cudnn.benchmark == before


def test_max_times_as_many_cudnn_algorithms_as_the_internal_setting_says(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark_limit", 10, raising=False)
    with optimize.switches("max"):  # unset: as torch has it
        assert torch.backends.cudnn.benchmark_limit == 10
        assert optimize.recorded_switches("max").to_metrics() == {"cudnn_benchmark_limit": 10}
    monkeypatch.setenv(optimize.CUDNN_LIMIT_ENV, "0")
    with optimize.switches("max"):
        assert torch.backends.cudnn.benchmark_limit == 0
        assert optimize.recorded_switches("max").to_metrics() == {"cudnn_benchmark_limit": 0}
    with optimize.switches("compile"):
        assert torch.backends.cudnn.benchmark_limit == 10
        assert optimize.recorded_switches("compile").to_metrics() == {}
    assert torch.backends.cudnn.benchmark_limit == 10
    monkeypatch.setenv(optimize.CUDNN_LIMIT_ENV, "all")
    with pytest.raises(UserError, match="count of algorithms"):
        with optimize.switches("max"):
            pass
