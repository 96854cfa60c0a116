"""Fused convolution epilogues: which layers are fused, and the Triton kernel itself, run on the
CPU by Triton's interpreter in a subprocess (TRITON_INTERPRET must be set before triton loads).
The CPU's convolutions add their bias inside, so here results agree within rounding; on a GPU
they are the same to the bit (benchmarks/volume_kernels.py measures it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from dlbench.models import epilogues, registry


def test_fuse_replaces_each_convolution_and_relu_and_shares_the_weights():
    model = registry.build("unet3d:f=2,d=2")
    fused, count = epilogues.fuse(model)
    assert count == 6  # two convolutions, each with its ReLU, in each of 2 encoder blocks and 1 decoder block
    first = fused.encoders[0][0]
    assert isinstance(first, epilogues.ConvBiasReLU) and first.conv is model.encoders[0][0]
    assert isinstance(model.encoders[0][1], nn.ReLU)  # the model itself is unchanged
    assert isinstance(fused.head[1], nn.Sigmoid) and fused.upsamplers[0] is model.upsamplers[0]
    assert {id(p) for p in fused.parameters()} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("layers", [
    [nn.Conv3d(1, 2, 3, bias=False), nn.ReLU()],  # no bias to fuse
    [nn.Conv3d(1, 2, 3), nn.Tanh()],  # another activation
    [nn.Conv3d(1, 2, 3, padding=1, padding_mode="reflect"), nn.ReLU()],  # padding not done by the convolution
    [nn.Conv3d(1, 2, 3)],  # nothing after it
])
def test_fuse_leaves_what_it_cannot_fuse(layers):
    _, count = epilogues.fuse(nn.Sequential(*layers))
    assert count == 0


def test_only_the_two_layouts_the_kernel_indexes_go_to_it():
    x = torch.randn(2, 3, 4, 5, 6)
    assert epilogues._dense(x) and epilogues._dense(x.contiguous(memory_format=torch.channels_last_3d))
    assert not epilogues._dense(x.transpose(2, 4)) and not epilogues._dense(x[:, :, ::2])


KERNEL_CHECK = textwrap.dedent("""
    import torch
    from torch import nn
    from dlbench.models import epilogues, registry

    torch.manual_seed(0)
    model = registry.build("unet3d:f=4,d=2").eval()
    fused, count = epilogues.fuse(model)
    assert count == 6
    for layout in (torch.contiguous_format, torch.channels_last_3d):
        model.to(memory_format=layout)
        x = torch.rand(1, 1, 6, 12, 10).contiguous(memory_format=layout)
        with torch.no_grad():  # the CPU's convolutions add their bias inside: rounding differs
            assert torch.allclose(model(x), fused(x), rtol=1e-5, atol=1e-6), layout
            with torch.autocast("cpu", dtype=torch.bfloat16):
                want, got = model(x), fused(x)
            assert got.dtype == want.dtype == torch.bfloat16
            assert torch.allclose(want.float(), got.float(), rtol=2e-2, atol=1e-2), layout
    conv = nn.Conv2d(3, 5, 3, padding=1)
    x = torch.randn(2, 3, 7, 9)
    x[0, 0, 0, 0] = float("nan")
    with torch.no_grad():
        want, got = torch.relu(conv(x)), epilogues.ConvBiasReLU(conv)(x)
    assert torch.equal(want.isnan(), got.isnan()) and got.isnan().any()
    assert torch.allclose(want.nan_to_num(), got.nan_to_num(), rtol=1e-5, atol=1e-6)
    print("ok")
""")


def test_the_triton_kernel_computes_bias_and_relu():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", KERNEL_CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
