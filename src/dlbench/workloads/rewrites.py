"""Layers a training step at `--optimize max` runs in another form that computes the same thing
faster once compiled.

- `stem`: a convolution of a few channels with a large odd kernel at stride 2 (ResNet's 7x7
  stem on a 3-channel image). cuDNN pads the input to 8 channels and runs an Ampere-generation
  kernel on it, slow for the few FLOPs it does (in ResNet-50, 2 % of the step's). The same
  convolution is a (k+1)/2 square stride-1 convolution of the input's 2x2 space-to-depth (each
  2x2 block of pixels becomes 4 channels per input channel, 12 padded to 16) with the weight
  zero-padded to (k+1)x(k+1) and rearranged to match: the same products, summed in another
  order, which cuDNN runs with a Hopper kernel, in less than half the time (docs/journal.md,
  2026-11-24 (night)).
  The weight stays the model's parameter; its rearranged copy is made in each forward.

Left out: ResNet's 3x3 stride-2 max pooling through PyTorch's own kernels as opaque operators
instead of Inductor's kernels: PyTorch's channels-last kernels are slower than Inductor's, forward
and backward.

`rewritten(model)` returns the model with these layers replaced (modules on the way
shallow-copied: parameters, buffers and every other module shared) and the paths of the layers
replaced. The optimised step is checked against the eager model as every level is. Which
rewrites run is an internal setting for measuring them (`REWRITES_ENV`); not a user option.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.errors import UserError
from dlbench.models.replace import replace

REWRITES = ("stem",)
REWRITES_ENV = "DLBENCH_REWRITES"  # "none" or a comma list of REWRITES; unset: all


def chosen() -> tuple[str, ...]:
    """The rewrites this process applies."""
    value = os.environ.get(REWRITES_ENV)
    if value is None:
        return REWRITES
    names = tuple(n.strip() for n in value.split(",") if n.strip() and n.strip() != "none")
    unknown = sorted(set(names) - set(REWRITES))
    if unknown:
        raise UserError(f"{REWRITES_ENV}: unknown rewrite {', '.join(unknown)}; known: {', '.join(REWRITES)} or none")
    return names


def rewritten(model: nn.Module, names: tuple[str, ...] | None = None) -> tuple[nn.Module, list[str]]:
    """`model` with the layers the rewrites `names` (default: `chosen()`) fit replaced, and the
    paths of the layers replaced."""
    paths = found(model, names)
    if not paths:
        return model, []
    return replace(model, lambda m: (SpaceToDepthConv(m), 1) if m is not model and SpaceToDepthConv.fits(m)
                   else None)[0], paths


def found(model: nn.Module, names: tuple[str, ...] | None = None) -> list[str]:
    """The paths of the layers below `model` that the rewrites `names` (default: `chosen()`) replace."""
    names = chosen() if names is None else names
    return [path for path, m in model.named_modules() if path and "stem" in names and SpaceToDepthConv.fits(m)]


# ---------------------------------------------------------------- the stem convolution


class SpaceToDepthConv(nn.Module):
    """A k x k stride-2 convolution (k odd, padding k // 2) of a few channels, computed as a
    (k+1)/2 square stride-1 convolution of the zero-padded input's 2x2 space-to-depth."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv = conv  # the model's own layer: its parameters are the ones trained
        self.half = (conv.kernel_size[0] + 1) // 2
        self.channels = -(-4 * conv.in_channels // 8) * 8  # 12 -> 16: the vector width cuDNN wants

    @staticmethod
    def fits(m: nn.Module) -> bool:
        if type(m) is not nn.Conv2d:
            return False
        k = m.kernel_size[0]
        return (m.in_channels <= 4 and m.groups == 1 and m.kernel_size == (k, k) and k % 2 == 1 and k >= 5
                and m.stride == (2, 2) and m.dilation == (1, 1) and m.padding == (k // 2, k // 2)
                and m.padding_mode == "zeros")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            return self.conv(x)
        conv, m = self.conv, self.half
        pad = conv.padding[0]
        h, w = x.shape[-2:]
        # the padded input spans every window of the (2m)x(2m) kernel: 2 * (out + m - 1) rows
        rows, cols = 2 * ((h + 2 * pad - (2 * m - 1)) // 2 + m), 2 * ((w + 2 * pad - (2 * m - 1)) // 2 + m)
        x = F.pad(x, (pad, cols - w - pad, pad, rows - h - pad))
        weight = F.pad(conv.weight, (0, 2 * m - conv.kernel_size[1], 0, 2 * m - conv.kernel_size[0]))
        x = space_to_depth(x, self.channels)
        if x.is_cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        return F.conv2d(x, space_to_depth(weight, self.channels), conv.bias)


def space_to_depth(t: torch.Tensor, channels: int) -> torch.Tensor:
    """(N, C, H, W) with H and W even -> (N, `channels`, H/2, W/2): channel c*4 + 2*i + j holds
    pixel (2*y + i, 2*x + j) of channel c; channels past 4*C are zeros."""
    n, c, h, w = t.shape
    t = t.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4).reshape(n, 4 * c, h // 2, w // 2)
    return F.pad(t, (0, 0, 0, 0, 0, channels - 4 * c)) if channels > 4 * c else t
