"""The 2D U-Nets: the original's 572 -> 388 geometry and widths, the padded one keeps any size."""

import pytest
import torch

from dlbench.models import registry
from dlbench.models.unet2d import UNet2D


def test_original_unet_maps_572_to_388x388x2():
    entry = registry.resolve("unet2d-medical")
    assert entry.input_shape == (1, 572, 572) and entry.task == "segment"
    model = entry.build(base=2)  # the geometry does not depend on the widths; small is fast
    with torch.no_grad():
        out = model(torch.randn(1, 1, 572, 572))
    assert out.shape == (1, 2, 388, 388)
    assert model.margin == 92 and model.input_size(388) == 572 and model.output_size(571) is None


def test_original_unet_has_the_papers_widths():
    model = registry.build("unet2d-medical")
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs[:10:2]] == [64, 128, 256, 512, 1024]
    assert all(c.padding == (0, 0) for c in convs) and convs[0].in_channels == 1
    assert sum(p.numel() for p in model.parameters()) == 31_030_658  # the paper's ~31 M


@pytest.mark.parametrize("size", [(64, 64), (37, 50), (16, 100)])
def test_padded_unet_keeps_the_size(size):
    model = registry.resolve("unet2d").build(base=2)
    with torch.no_grad():
        out = model(torch.randn(2, 1, *size))
    assert out.shape == (2, 2, *size)


def test_largest_valid_output_of_the_unpadded_net():
    model = UNet2D(base=1, padded=False)
    assert model.output_size_at_most(512) == 500 and model.output_size(model.input_size(500)) == 500
    assert model.output_size_at_most(388) == 388
