"""Layers `--optimize max` runs in another form in a training step (workloads.rewrites): each
computes what the layer computes, on the real code paths, at tiny shapes on the CPU."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from dlbench.errors import UserError
from dlbench.workloads import optimize, rewrites
from dlbench.workloads.rewrites import SpaceToDepthConv, space_to_depth


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


@pytest.mark.parametrize("size", [(32, 32), (33, 31), (16, 22)])
@pytest.mark.parametrize("kernel,channels,bias", [(7, 3, False), (5, 1, True), (9, 4, False)])
def test_space_to_depth_convolution_is_the_strided_convolution(size, kernel, channels, bias):
    torch.manual_seed(0)
    conv = nn.Conv2d(channels, 6, kernel, stride=2, padding=kernel // 2, bias=bias).double()
    assert SpaceToDepthConv.fits(conv)
    x = torch.randn(2, channels, *size, dtype=torch.float64, requires_grad=True)
    want = conv(x)
    grads_want = torch.autograd.grad(want.square().sum(), [x, *conv.parameters()])
    got = SpaceToDepthConv(conv)(x)
    assert got.shape == want.shape
    assert relative(got, want) < 1e-12
    grads = torch.autograd.grad(got.square().sum(), [x, *conv.parameters()])
    for g, w in zip(grads, grads_want):
        assert relative(g, w) < 1e-12


def test_space_to_depth_moves_each_block_of_pixels_into_channels():
    t = torch.arange(2 * 4 * 6, dtype=torch.float32).reshape(1, 2, 4, 6)
    s = space_to_depth(t, 16)
    assert s.shape == (1, 16, 2, 3)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                assert torch.equal(s[0, 4 * c + 2 * i + j], t[0, c, i::2, j::2])
    assert not s[0, 8:].any()  # the channels past 4 * C are zeros


@pytest.mark.parametrize("conv", [nn.Conv2d(3, 8, 7, stride=1, padding=3), nn.Conv2d(3, 8, 7, stride=2, padding=2),
                                  nn.Conv2d(8, 8, 7, stride=2, padding=3), nn.Conv2d(3, 8, 4, stride=2, padding=2),
                                  nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.Conv2d(4, 8, 7, 2, 3, groups=2)])
def test_only_strided_stems_of_few_channels_are_rewritten(conv):
    assert not SpaceToDepthConv.fits(conv)


def small_resnet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).train()


def test_a_resnet_is_rewritten_sharing_everything_but_its_stem(monkeypatch):
    monkeypatch.delenv(rewrites.REWRITES_ENV, raising=False)
    model = small_resnet()
    fast, found = rewrites.rewritten(model)
    assert found == ["conv1"]
    assert type(model.conv1) is nn.Conv2d  # the model itself is unchanged
    assert list(map(id, fast.parameters())) == list(map(id, model.parameters()))
    assert all(a is b for a, b in zip(fast.buffers(), model.buffers()))
    assert fast.layer1 is model.layer1 and fast.conv1.conv is model.conv1
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        model.eval(), fast.eval()
        assert relative(fast(x), model(x)) < 1e-5


def test_which_rewrites_run_is_an_internal_setting(monkeypatch):
    model = small_resnet()
    monkeypatch.setenv(rewrites.REWRITES_ENV, "none")
    assert rewrites.rewritten(model) == (model, [])
    monkeypatch.setenv(rewrites.REWRITES_ENV, "stem")
    assert rewrites.rewritten(model)[1] == ["conv1"]
    monkeypatch.setenv(rewrites.REWRITES_ENV, "stem,fast")
    with pytest.raises(UserError, match="unknown rewrite fast"):
        rewrites.rewritten(model)


def test_a_compiled_training_step_of_the_rewritten_model_matches_eager(monkeypatch):
    """Through dynamo and AOTAutograd (the aot_eager backend: inductor takes minutes on 2 CPU
    cores), forward and backward. In
    float64: batch norm in training mode turns float32's rounding differences into gradients ~1 %
    apart (docs/journal.md, 2026-11-22), which would hide a wrong gradient."""
    monkeypatch.delenv(rewrites.REWRITES_ENV, raising=False)
    torch._dynamo.reset()
    model = small_resnet().double().to(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 64, 64, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (4,))
    reference = [p.detach().clone() for p in model.parameters()]

    def grads(run) -> list[torch.Tensor]:
        with torch.no_grad():
            for p, r in zip(model.parameters(), reference):
                p.copy_(r)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(run(x), y).backward()
        return [p.grad.clone() for p in model.parameters()]

    want = grads(model)
    got = grads(torch.compile(rewrites.rewritten(model)[0], backend="aot_eager"))
    assert relative(torch.cat([g.flatten() for g in got]), torch.cat([g.flatten() for g in want])) < 1e-9
    torch._dynamo.reset()


def test_max_rewrites_training_steps_only_and_records_what(monkeypatch, tmp_path):
    monkeypatch.delenv(rewrites.REWRITES_ENV, raising=False)
    monkeypatch.setenv(optimize.BACKEND_ENV, "aot_eager")
    monkeypatch.setenv("DLBENCH_CACHE", str(tmp_path / "cache"))
    torch._dynamo.reset()
    model = small_resnet()
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
    spec = types.SimpleNamespace(optimize="max", precision="fp32", workload="train", model="resnet18")
    optimized, metrics = optimize.prepare(spec, model, x, loss=lambda out: F.cross_entropy(out, y))
    assert metrics["rewrites"] == ["conv1"]  # and the check against eager passed
    assert type(optimized.fast.compiled._orig_mod.conv1) is SpaceToDepthConv
    _, metrics = optimize.prepare(spec, model.eval(), x)
    assert "rewrites" not in metrics
    torch._dynamo.reset()
