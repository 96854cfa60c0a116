"""3D U-Nets for volumetric (EM) data: the seed's anisotropic CREMI net and the isotropic successor.

Both keep the input's spatial shape for any input size: a decoder level is resized to its
skip connection before concatenation, so odd sizes work (the seed's net needed multiples of
the pooling factors).

Registry names (registered by models/unet3d_config.py, which parses them without torch):
  unet3d-aniso                  seed 000/001: 12 features x5 per level, 3 xy-only poolings, ELU,
                                3 affinity outputs with a sigmoid (93.7 M parameters)
  unet3d                        depth 4, 32 features x2 per level, ReLU, MaxPool 2, transposed
                                convolutions, 1 output (foreground probability, sigmoid)
  unet3d:f=16,d=3,g=2,out=3     either family with its settings changed: f = initial features,
  unet3d-aniso:f=8,d=3          d = depth (levels, poolings = d - 1), g = feature growth per level,
                                out = output channels
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from dlbench.models.unet3d_config import ANISO, ISO, UNetConfig, entry_for, parse_name  # noqa: F401 - their old home


class _ConvBlock(nn.Sequential):
    """Two 3x3x3 convolutions with 'same' padding, each followed by the activation."""

    def __init__(self, cin: int, cout: int, act: Callable[[], nn.Module]) -> None:
        super().__init__(nn.Conv3d(cin, cout, 3, padding=1), act(), nn.Conv3d(cout, cout, 3, padding=1), act())


def fit(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Crop or zero-pad x's spatial dims to like's (transposed convolutions of odd sizes)."""
    diff = [b - a for a, b in zip(x.shape[2:], like.shape[2:])]
    if not any(diff):
        return x
    pad: list[int] = []
    for d in reversed(diff):
        pad += [0, d] if d > 0 else [0, 0]
    x = F.pad(x, pad) if any(pad) else x
    z, y, w = like.shape[2:]
    return x[:, :, :z, :y, :w]


class UpJoin(nn.Module):
    """Upsample with a transposed convolution, fit to the skip connection, concatenate: [up, skip]."""

    def __init__(self, below: int, here: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose3d(below, here, kernel_size=2, stride=2)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.cat([fit(self.conv(x), skip), skip], dim=1)


class NearestJoin(nn.Module):
    """Nearest-neighbour upsampling to the skip connection's size, then [up, skip]; no weights."""

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.interpolate(x, size=skip.shape[2:], mode="nearest"), skip], dim=1)


class UNet3D(nn.Module):
    def __init__(self, config: UNetConfig) -> None:
        super().__init__()
        self.config = c = config
        act: Callable[[], nn.Module] = (lambda: nn.ELU(inplace=True)) if c.anisotropic else (lambda: nn.ReLU(inplace=True))
        widths = [c.features * c.growth ** level for level in range(c.depth)]
        self.encoders = nn.ModuleList()
        cin = c.in_channels
        for width in widths:
            self.encoders.append(_ConvBlock(cin, width, act))
            cin = width
        if c.anisotropic:
            self.pool = nn.MaxPool3d(kernel_size=(1, 4, 4), stride=(1, 3, 3), padding=(0, 1, 1))
        else:
            self.pool = nn.MaxPool3d(2)
        self.joins = nn.ModuleList()
        self.decoders = nn.ModuleList()
        for level in reversed(range(c.depth - 1)):
            below, here = widths[level + 1], widths[level]
            if c.anisotropic:
                # Nearest-neighbour upsampling has no weights: the decoder convolution reduces the channels.
                self.joins.append(NearestJoin())
                self.decoders.append(_ConvBlock(below + here, here, act))
            else:
                self.joins.append(UpJoin(below, here))
                self.decoders.append(_ConvBlock(2 * here, here, act))
        if c.anisotropic:
            self.head = nn.Sequential(nn.Conv3d(widths[0], c.out_channels, 3, padding=1), nn.Sigmoid())
        else:
            self.head = nn.Sequential(nn.Conv3d(widths[0], c.out_channels, 1), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips: list[torch.Tensor] = []
        for i, encoder in enumerate(self.encoders):
            x = encoder(x)
            if i < len(self.encoders) - 1:
                skips.append(x)
                x = self.pool(x)
        for join, decoder in zip(self.joins, self.decoders):
            x = decoder(join(x, skips.pop()))
        return self.head(x)
