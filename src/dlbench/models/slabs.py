"""Depth slabs: convolutions past cuDNN's 32-bit indexing, run a slab of planes at a time.

cuDNN indexes a convolution's tensors with 32-bit integers: none may hold 2^31 elements or
more (past it a convolution fails, at worst with an illegal memory access that ends the
process). That bound, not the GPU's memory, would cap a tile at ~67 Mvox at 32 channels. But output
plane z of a convolution with kernel depth 2r + 1 ('same' padding r, stride 1) reads input
planes z - r .. z + r only, so the output can be made in slabs of planes along depth, each from
its own planes and r more on each side, and written into the whole output; a transposed
convolution whose depth stride equals its kernel depth makes planes s*z .. s*z + s - 1 from
input plane z alone. Every call then stays under the bound and a tile can be as large as memory
allows. The output is the one call's, up to cuDNN's choice of algorithm for a slab's shape
(within rounding). A convolution under the bound runs as one call.

Where dlbench's fused kernels run, a slab's bias + ReLU (or bias + concatenation) is written
straight into its slab of the whole output: for one sample in channels-last-3d a depth slab is
one dense stretch of memory, so slabs cost no copies. Other layouts copy each slab in.

`split(model)` returns the model with its splittable layers replaced (modules on the way
shallow-copied, parameters shared) and how many were.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.errors import UserError
from dlbench.models import fused
from dlbench.models.replace import replace
from dlbench.models.unet3d import UpJoin, fit

INDEX_LIMIT = 2**31  # elements: every tensor a convolution call reads or writes holds fewer
_active = 0  # > 0 while a slab layer runs (what block choice's bound looks past)


def active() -> bool:
    """Whether a slab layer is running: its convolutions keep under the bound by themselves."""
    return _active > 0


@contextlib.contextmanager
def _running() -> Iterator[None]:
    global _active
    _active += 1
    try:
        yield
    finally:
        _active -= 1


def ranges(size: int, most: int) -> list[tuple[int, int]]:
    """[start, stop) ranges covering `size` planes, at most `most` each, as equal as can be
    (fewer slab shapes for cuDNN to tune)."""
    count = -(-size // most)
    step = -(-size // count)
    return [(z, min(z + step, size)) for z in range(0, size, step)]


def _planes(input_plane: int, output_plane: int, extra_in: int, extra_out: int, limit: int) -> int:
    """Output planes a slab may hold: with `extra_in` more input planes and `extra_out` more
    output planes computed, its input and output stay under `limit` elements."""
    planes = min((limit - 1) // input_plane - extra_in, (limit - 1) // output_plane - extra_out)
    if planes < 1:
        least = max((1 + extra_in) * input_plane, (1 + extra_out) * output_plane)
        raise UserError(f"a convolution's slab of one plane holds {least:,} elements, past 32-bit indexing "
                        f"({limit:,}): give a smaller --block")
    return planes


def _channels_last(x: torch.Tensor) -> bool:
    return x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous()


def _empty(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    layout = torch.channels_last_3d if _channels_last(like) else torch.contiguous_format
    return torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=layout)


def _dense_pair(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Both one dense stretch in channels-last-3d: what the fused kernels index."""
    cl = torch.channels_last_3d
    return a.is_contiguous(memory_format=cl) and b.is_contiguous(memory_format=cl)


def _splittable(conv: nn.Module) -> bool:
    return (type(conv) is nn.Conv3d and conv.padding_mode == "zeros" and not isinstance(conv.padding, str)
            and conv.stride[0] == 1 and conv.dilation[0] == 1 and conv.kernel_size[0] == 2 * conv.padding[0] + 1)


def _transposable(conv: nn.Module) -> bool:
    return (type(conv) is nn.ConvTranspose3d and conv.kernel_size[0] == conv.stride[0] and conv.padding[0] == 0
            and conv.output_padding[0] == 0 and conv.dilation[0] == 1)


class SlabConv(nn.Module):
    """A 3D convolution with 'same' depth padding, or dlbench's fused convolution + bias + ReLU,
    run in depth slabs where one call would reach `limit` elements."""

    def __init__(self, layer: nn.Conv3d | fused.ConvBiasReLU, limit: int) -> None:
        super().__init__()
        self.layer, self.limit = layer, limit
        self.relu = isinstance(layer, fused.ConvBiasReLU)
        self.conv: nn.Conv3d = layer.conv if self.relu else layer

    def _shape(self, x: torch.Tensor) -> tuple[int, ...]:
        c = self.conv
        hw = [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in
              zip(x.shape[3:], c.padding[1:], c.dilation[1:], c.kernel_size[1:], c.stride[1:])]
        return (x.shape[0], c.out_channels, x.shape[2], *hw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with _running():
            shape = self._shape(x)
            if max(x.numel(), math.prod(shape)) < self.limit:
                return self.layer(x)
            return self._slabs(x, shape)

    def _slabs(self, x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        c, r, depth = self.conv, self.conv.padding[0], x.shape[2]
        plane_in, plane_out = math.prod(x.shape) // depth, math.prod(shape) // depth
        out = None
        for z0, z1 in ranges(depth, _planes(plane_in, plane_out, 2 * r, r, self.limit)):
            lo, hi = max(z0 - r, 0), min(z1 + r, depth)
            # Inside the volume the context planes are read; at its faces the convolution pads them.
            pad = r if (z0 - lo < r or hi - z1 < r) else 0
            y = F.conv3d(x[:, :, lo:hi], c.weight, None if self.relu else c.bias, c.stride,
                         (pad, *c.padding[1:]), c.dilation, c.groups)
            first = z0 - lo - r + pad  # the conv's plane for z0
            y = y[:, :, first:first + z1 - z0]
            out = _empty(y, shape) if out is None else out
            self._write(y, out[:, :, z0:z1])
        return out

    def _write(self, y: torch.Tensor, into: torch.Tensor) -> None:
        if not self.relu:
            into.copy_(y)
        elif _dense_pair(y, into):
            torch.ops.dlbench.bias_relu_into(y, self.conv.bias, into)
        else:
            into.copy_(torch.relu(y + self.conv.bias.to(y.dtype).view(1, -1, 1, 1, 1)))


class SlabUpJoin(nn.Module):
    """The 3D U-Net's join (UpJoin or its fused form): the transposed convolution run in depth
    slabs and each slab written into the concatenation, where one call would reach `limit`."""

    def __init__(self, join: UpJoin | fused.FusedUpJoin, limit: int) -> None:
        super().__init__()
        self.join, self.limit = join, limit
        self.fused = isinstance(join, fused.FusedUpJoin)
        self.conv: nn.ConvTranspose3d = join.join.conv if self.fused else join.conv

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        with _running():
            shape = (skip.shape[0], self.conv.out_channels + skip.shape[1], *skip.shape[2:])
            if max(x.numel(), math.prod(shape)) < self.limit:
                return self.join(x, skip)
            return self._slabs(x, skip, shape)

    def _slabs(self, x: torch.Tensor, skip: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        c, s, depth = self.conv, self.conv.stride[0], skip.shape[2]
        up_channels = c.out_channels
        plane_in, plane_out = math.prod(x.shape) // x.shape[2], math.prod(shape) // depth * s
        out = None
        for i0, i1 in ranges(x.shape[2], _planes(plane_in, plane_out, 0, 0, self.limit)):
            z0, z1 = s * i0, min(s * i1, depth)
            if z0 >= depth:
                break
            up = F.conv_transpose3d(x[:, :, i0:i1], c.weight, None if self.fused else c.bias, c.stride, c.padding,
                                    c.output_padding, c.groups, c.dilation)
            part = skip[:, :, z0:z1]
            out = _empty(up, shape) if out is None else out
            into = out[:, :, z0:z1]
            if self.fused and fused.joinable(up, part) and _dense_pair(up, into):
                torch.ops.dlbench.bias_cat_into(up, c.bias, part, into)
                continue
            if self.fused:
                up = up + c.bias.to(up.dtype).view(1, -1, 1, 1, 1)
            into[:, :up_channels].copy_(fit(up, part))
            into[:, up_channels:].copy_(part)
        covered = s * x.shape[2]
        if covered < depth:  # the transposed convolution is shorter than the skip connection: zeros, as fit pads
            out[:, :up_channels, covered:].zero_()
            out[:, up_channels:, covered:].copy_(skip[:, :, covered:])
        return out


def _slabbed(layer: nn.Module, limit: int) -> tuple[nn.Module, int] | None:
    if isinstance(layer, fused.ConvBiasReLU) and _splittable(layer.conv) or _splittable(layer):
        return SlabConv(layer, limit), 1
    if type(layer) is fused.FusedUpJoin and _transposable(layer.join.conv) or \
            type(layer) is UpJoin and _transposable(layer.conv):
        return SlabUpJoin(layer, limit), 1
    return None


def split(model: nn.Module, limit: int | None = None) -> tuple[nn.Module, int]:
    """`model` with its 3D convolutions and U-Net joins run in depth slabs past `limit` elements
    (INDEX_LIMIT), and how many layers were replaced: a shallow copy of each module on the way
    (parameters shared)."""
    limit = limit or INDEX_LIMIT
    return replace(model, lambda layer: _slabbed(layer, limit))
