"""Fused inference kernels: which layers are replaced, and the Triton kernels themselves, run on the
CPU by Triton's interpreter in a subprocess (TRITON_INTERPRET must be set before triton loads).
The CPU's convolutions add their bias inside, so here results agree within rounding; on a GPU
they are the same to the bit (benchmarks/volume_kernels.py measures it)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from conftest import in_triton_interpreter
from dlbench.models import fused, registry


def test_fuse_replaces_each_convolution_and_relu_and_shares_the_weights():
    model = registry.build("unet3d:f=2,d=2")
    faster, count = fused.fuse(model)
    # 2 convolutions + ReLU in each of 2 encoder blocks and 1 decoder block, the pooling, the join
    assert count == 8
    assert isinstance(faster.pool, fused.MaxPool2) and isinstance(model.pool, nn.MaxPool3d)
    assert isinstance(faster.joins[0], fused.FusedUpJoin) and faster.joins[0].join is model.joins[0]
    first = faster.encoders[0][0]
    assert isinstance(first, fused.ConvBiasReLU) and first.conv is model.encoders[0][0]
    assert isinstance(model.encoders[0][1], nn.ReLU)  # the model itself is unchanged
    assert faster.head is model.head  # nothing to replace there
    assert {id(p) for p in faster.parameters()} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("layers", [
    [nn.Conv3d(1, 2, 3, bias=False), nn.ReLU()],  # no bias to fuse
    [nn.Conv3d(1, 2, 3), nn.Tanh()],  # another activation
    [nn.Conv3d(1, 2, 3, padding=1, padding_mode="reflect"), nn.ReLU()],  # padding not done by the convolution
    [nn.Conv3d(1, 2, 3)],  # nothing after it
    [nn.MaxPool3d(3)], [nn.MaxPool3d(2, stride=1)], [nn.MaxPool3d(2, padding=1)], [nn.MaxPool3d(2, ceil_mode=True)],
    [nn.MaxPool2d(2)],  # other poolings than 2x2x2, stride 2
])
def test_fuse_leaves_what_it_cannot_fuse(layers):
    model = nn.Sequential(*layers)
    faster, count = fused.fuse(model)
    assert count == 0 and faster is model


def test_only_the_two_layouts_the_kernel_indexes_go_to_it():
    x = torch.randn(2, 3, 4, 5, 6)
    assert fused._dense(x) and fused._dense(x.contiguous(memory_format=torch.channels_last_3d))
    assert not fused._dense(x.transpose(2, 4)) and not fused._dense(x[:, :, ::2])


KERNEL_CHECK = textwrap.dedent("""
    import torch
    from torch import nn
    import torch.nn.functional as F
    from dlbench.models import fused, registry

    torch.manual_seed(0)
    model = registry.build("unet3d:f=4,d=2").eval()
    faster, count = fused.fuse(model)
    assert count == 8
    for layout in (torch.contiguous_format, torch.channels_last_3d):
        model.to(memory_format=layout)
        x = torch.rand(1, 1, 6, 12, 10).contiguous(memory_format=layout)
        with torch.no_grad():  # the CPU's convolutions add their bias inside: rounding differs
            assert torch.allclose(model(x), faster(x), rtol=1e-5, atol=1e-6), layout
            with torch.autocast("cpu", dtype=torch.bfloat16):
                want, got = model(x), faster(x)
            assert got.dtype == want.dtype == torch.bfloat16
            assert torch.allclose(want.float(), got.float(), rtol=2e-2, atol=1e-2), layout
    conv = nn.Conv2d(3, 5, 3, padding=1)
    x = torch.randn(2, 3, 7, 9)
    x[0, 0, 0, 0] = float("nan")
    with torch.no_grad():
        want, got = torch.relu(conv(x)), fused.ConvBiasReLU(conv)(x)
    assert torch.equal(want.isnan(), got.isnan()) and got.isnan().any()
    assert torch.allclose(want.nan_to_num(), got.nan_to_num(), rtol=1e-5, atol=1e-6)
    # a join whose upsampled size differs from the skip connection's (odd sizes) takes PyTorch's passes
    join = model.joins[0]
    x, skip = torch.randn(1, 8, 3, 4, 5), torch.randn(1, 4, 7, 8, 9)
    with torch.no_grad():
        assert torch.allclose(fused.FusedUpJoin(join)(x, skip), join(x, skip), rtol=1e-5, atol=1e-6)
    # max pooling: odd sizes floored, a NaN in a window gives NaN, the result is channels-last too
    x = torch.randn(2, 3, 5, 7, 6).contiguous(memory_format=torch.channels_last_3d)
    x[1, 2, 4, 6, 5] = float("nan")  # outside every window (floored away)
    x[0, 1, 1, 2, 3] = float("nan")
    got = fused.MaxPool2()(x)
    want = F.max_pool3d(x, 2)
    assert got.shape == want.shape == (2, 3, 2, 3, 3) and got.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().sum() == 1
    assert torch.equal(got.nan_to_num(), want.nan_to_num())
    # the operators' kernels are plain functions: running them imports no compiler, a wait at every start
    import sys
    assert "torch._dynamo" not in sys.modules
    # their fakes give the shapes on the meta device, where FLOPs are counted
    up, skip = (torch.empty(1, c, 4, 6, 8, device="meta").contiguous(memory_format=torch.channels_last_3d)
                for c in (8, 4))
    assert torch.ops.dlbench.bias_cat(up, torch.empty(8, device="meta"), skip).shape == (1, 12, 4, 6, 8)
    assert torch.ops.dlbench.max_pool2(up).shape == (1, 8, 2, 3, 4)
    print("ok")
""")


def test_the_triton_kernel_computes_bias_and_relu():
    in_triton_interpreter(KERNEL_CHECK)
