"""Depth slabs: the split model computes what the unsplit one does, on small shapes with the bound
lowered so that every convolution runs in several slabs; the fused kernels' slab writes run in
Triton's interpreter (a subprocess: TRITON_INTERPRET must be set before triton loads)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from conftest import in_triton_interpreter
from dlbench.data.blocking import Blocking
from dlbench.data.prediction_store import chunks_for
from dlbench.errors import UserError
from dlbench.models import registry, slabs
from dlbench.workloads import block_choice

# (model, bound): the bound lets one plane and its context through, and no layer at these shapes whole.
CASES = [("unet3d:f=4,d=3", 12_000), ("unet3d-aniso:f=4,d=2", 24_000)]
SHAPES = [(1, 1, 12, 16, 16), (1, 1, 13, 17, 15), (2, 1, 8, 12, 12)]  # odd sizes; two samples


@pytest.fixture
def slab_counts(monkeypatch):
    counts: list[int] = []
    ranges = slabs.ranges

    def counted(size: int, most: int):
        out = ranges(size, most)
        counts.append(len(out))
        return out

    monkeypatch.setattr(slabs, "ranges", counted)
    return counts


@pytest.mark.parametrize("name, limit", CASES)
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last_3d])
def test_split_model_computes_the_same(name, limit, layout, slab_counts):
    torch.manual_seed(0)
    model = registry.build(name).eval().to(memory_format=layout)
    split, replaced = slabs.split(model, limit)
    assert replaced == sum(isinstance(m, (torch.nn.Conv3d, torch.nn.ConvTranspose3d)) for m in model.modules())
    assert all(a is b for a, b in zip(model.parameters(), split.parameters()))  # shared, not copied
    for shape in SHAPES:
        slab_counts.clear()
        x = torch.rand(shape).contiguous(memory_format=layout)
        with torch.no_grad():
            want, got = model(x), split(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert max(slab_counts) > 1, slab_counts  # slabs ran


def test_under_the_bound_a_layer_is_one_call(slab_counts):
    model = registry.build("unet3d:f=4,d=3").eval()
    split, _ = slabs.split(model)
    x = torch.rand(1, 1, 8, 16, 16)
    with torch.no_grad():
        assert torch.equal(split(x), model(x))
    assert slab_counts == []


def test_ranges_cover_the_axis_in_near_equal_slabs():
    assert slabs.ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert slabs.ranges(232, 25) == [(z, min(z + 24, 232)) for z in range(0, 232, 24)]  # 10 slabs of 23-24
    assert slabs.ranges(5, 100) == [(0, 5)]


def test_a_plane_past_the_bound_is_a_user_error():
    model, _ = slabs.split(registry.build("unet3d:f=4,d=2").eval(), 2_000)
    with pytest.raises(UserError, match="a convolution's slab of one plane holds .* past 32-bit indexing.*"
                                        "give a smaller --block"):
        with torch.no_grad():
            model(torch.rand(1, 1, 8, 16, 16))


def test_block_choice_sees_no_index_bound_in_a_split_model():
    model = registry.build("unet3d:f=4,d=2").eval()
    assert block_choice.convolution_width(model, torch.device("cpu")) == 4.0  # 4 features at full resolution
    split, _ = slabs.split(model)
    assert block_choice.convolution_width(split, torch.device("cpu")) == 0.0
    assert block_choice.largest_tile(0.0) is None
    assert block_choice.largest_tile(32.0) == (2**31 - 1) // 32


def test_tiles_on_the_busiest_gpu_count():
    nine = Blocking((200, 3072, 3072), (200, 1024, 1024), (16, 64, 64))
    assert len(nine) == 9 and block_choice.rounds(nine, 2) == 5
    assert block_choice.computed(nine, 2) == 10 * int(np.prod(nine.tile))
    eight = Blocking((200, 3072, 3072), (200, 1536, 768), (16, 64, 64))
    assert block_choice.computed(eight, 2) == block_choice.computed(eight) == 8 * int(np.prod(eight.tile))


def test_output_chunks_tile_the_block():
    assert chunks_for((32, 384, 384)) == (32, 384, 384)  # small blocks: one chunk
    assert chunks_for((200, 1536, 768)) == (200, 192, 384)  # 14.7 Mvox, 64 chunks
    assert chunks_for((7, 4099, 4099)) == (7, 4099, 4099)  # no axis halves: one chunk
    for block in [(200, 1536, 768), (104, 616, 512), (64, 1000, 3000)]:
        chunk = chunks_for(block)
        assert all(b % c == 0 for b, c in zip(block, chunk)) and np.prod(chunk) <= 2**24


FUSED_CHECK = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    from dlbench.models import fused, registry, slabs

    cl = torch.channels_last_3d
    for name in ("conv3d", "conv_transpose3d"):  # channels-last out of channels-last in, as cuDNN gives it
        conv = getattr(F, name)
        setattr(F, name, lambda *a, conv=conv, **k: conv(*a, **k).contiguous(memory_format=cl))
    torch.manual_seed(0)
    model = registry.build("unet3d:f=4,d=3").eval().to(memory_format=cl)
    faster, _ = fused.fuse(model)
    split, count = slabs.split(faster, 12_000)
    assert count == 13, count
    writes = []
    for name in ("_bias_relu", "_bias_cat"):  # what the operators call; `out` is last
        kernel = getattr(fused, name)
        setattr(fused, name, lambda *a, k=kernel, name=name: (writes.append((name, a[0].data_ptr() != a[-1].data_ptr())), k(*a))[1])
    for shape in [(1, 1, 12, 16, 16), (1, 1, 13, 17, 15)]:
        x = torch.rand(shape).contiguous(memory_format=torch.channels_last_3d)
        with torch.no_grad():
            torch.testing.assert_close(split(x), faster(x), rtol=1e-5, atol=1e-6)
    assert {("_bias_relu", True), ("_bias_cat", True)} <= set(writes), set(writes)  # into slabs of the output
    print("ok")
""")


def test_fused_slabs_write_in_place_and_compute_the_same():
    in_triton_interpreter(FUSED_CHECK)
