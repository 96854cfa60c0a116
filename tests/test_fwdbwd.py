import time

import pytest
import torch

from dlbench.measure.loop import run_steps

from dlbench.measure.timer import PhaseTimer, Spans, record_event
from dlbench.models import registry
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.launch.execute import execute
from dlbench.workloads.runtime import precision

from conftest import TINY


@pytest.mark.slow
def test_fwdbwd_resnet18_tiny():
    spec = BenchmarkSpec(**TINY)
    result = execute(spec, fingerprint())
    assert result.status == "ok", result.error
    m, s = result.metrics, result.samples
    assert m["input_shape"] == [2, 3, 32, 32]
    assert len(s["forward"]) == len(s["backward"]) == len(s["step"]) == m["steps"] >= 3
    assert all(v > 0 for v in s["forward"] + s["backward"])
    # Phases lie inside their step; the step also holds zeroing the gradients.
    for f, b, step in zip(s["forward"], s["backward"], s["step"]):
        assert f + b <= step * 1.0001
    assert m["total_ms"] == pytest.approx(m["stats"]["total"]["median"] * 1e3)
    assert m["images_per_s"] == pytest.approx(2 * m["steps"] / sum(s["step"]))
    assert m["warmup_steps"] >= 1


def test_min_seconds_and_warmup_seconds_extend_the_window():
    def step(timer):
        time.sleep(0.02)
        timer.mark("sleep")

    measured = run_steps(step, torch.device("cpu"), warmup=1, warmup_seconds=0.2, steps=1, min_seconds=0.3)
    assert measured.warmup_steps >= 2 and measured.warmup_s >= 0.2
    assert len(measured.samples["step"]) >= 2 and sum(measured.samples["step"]) >= 0.3
    assert all(s >= 0.02 for s in measured.samples["sleep"])


def test_out_of_memory_is_a_result():
    # ~600 GB of input: the allocation fails at once on any machine we run on.
    spec = BenchmarkSpec(**{**TINY, "batch": 1_000_000, "input_shape": (3, 224, 224)})
    result = execute(spec, fingerprint())
    assert result.status == "oom"
    assert result.metrics["batch_tried"] == 1_000_000


def test_a_failing_model_is_an_error_result(monkeypatch):
    entry = registry.ModelEntry("broken", "Broken", lambda: torch.nn.Conv2d(5, 5, 3))  # wrong channel count
    monkeypatch.setitem(registry.MODELS, "broken", entry)
    result = execute(BenchmarkSpec(**{**TINY, "model": "broken"}), fingerprint())
    assert result.status == "error" and "channels" in result.error



def test_a_run_that_breaks_the_device_keeps_its_own_error(monkeypatch):
    """After an illegal memory access every CUDA call fails, the tidying after the run too: the
    run's own error is stored, not a traceback from the tidying."""
    import dlbench.launch.execute as execute_module

    def broken(device):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    entry = registry.ModelEntry("broken", "Broken", lambda: torch.nn.Conv2d(5, 5, 3))
    monkeypatch.setitem(registry.MODELS, "broken", entry)
    monkeypatch.setattr(execute_module, "release_memory", broken)
    result = execute(BenchmarkSpec(**{**TINY, "model": "broken"}), fingerprint())
    assert result.status == "error" and "channels" in result.error
    result = execute(BenchmarkSpec(**TINY), fingerprint())  # a run that went well, then the device broke
    assert result.status == "error" and "illegal memory access" in result.error

def test_precision_switches_are_scoped():
    before = torch.backends.cuda.matmul.allow_tf32
    with precision("tf32", torch.device("cpu")):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    with precision("fp32", torch.device("cpu")):
        assert not torch.backends.cuda.matmul.allow_tf32
    with precision("bf16", torch.device("cpu")):
        assert torch.mm(torch.randn(4, 4), torch.randn(4, 4)).dtype == torch.bfloat16
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_half_precision_forward_sees_updated_weights():
    """A run's autocast context spans many optimizer steps: a cached bf16 weight would freeze the model."""
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with precision("bf16", torch.device("cpu")):
        before = layer(x)
        with torch.no_grad():
            layer.weight.add_(1.0)
        after = layer(x)
    assert not torch.allclose(before.float(), after.float())


def test_bf16_channels_last_runs():
    result = execute(BenchmarkSpec(**{**TINY, "precision": "bf16", "channels_last": True}), fingerprint())
    assert result.status == "ok", result.error


def test_host_timer_phases():
    timer = PhaseTimer("cpu")
    for _ in range(3):
        timer.begin()
        torch.randn(64, 64) @ torch.randn(64, 64)
        timer.mark("a")
        timer.mark("b")
    timer.finish()
    s = timer.samples()
    assert len(s["a"]) == len(s["b"]) == len(s["step"]) == 3
    assert all(a + b <= step + 1e-9 for a, b, step in zip(s["a"], s["b"], s["step"]))


def test_spans_on_the_cpu_time_the_host_clock_between_events():
    spans, cpu = Spans(), torch.device("cpu")
    for pause in (0.01, 0.02):
        start = record_event(cpu, None)
        time.sleep(pause)
        spans.add("sleep", start, record_event(cpu))
    spans.add("none", start, start)
    resolved = spans.resolve()
    assert resolved["none"] == [0.0] and spans.resolve() == {}
    assert len(resolved["sleep"]) == 2 and all(s >= 0.9 * p for s, p in zip(resolved["sleep"], (0.01, 0.02)))


def test_resnet200_is_the_fb_resnet_depth():
    model = registry.build("resnet200")
    blocks = [len(getattr(model, f"layer{i}")) for i in range(1, 5)]
    assert blocks == [3, 24, 36, 3]
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(64.7e6, rel=0.01)


def test_inception_v1_training_output_is_the_logits():
    model = registry.build("inception-v1").train()
    out = model(torch.randn(2, 3, 64, 64))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 1000)


@pytest.mark.parametrize("name", ["alexnet", "googlenet", "vgg16", "vgg19", "resnet18", "resnet34",
                                  "resnet50", "resnet101", "resnet152", "resnet200"])
def test_seed_models_are_registered(name):
    assert registry.resolve(name).title
