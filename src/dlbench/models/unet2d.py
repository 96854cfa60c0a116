"""2D U-Nets for segmentation (seed 003).

`unet2d-medical` is the original U-Net (Ronneberger et al. 2015): one input channel,
64 -> 1024 filters over five levels, two unpadded 3x3 convolutions + ReLU per level, 2x2
max-pooling, 2x2 up-convolutions, crop-and-concatenate skips; 572x572 in, 388x388x2 out.
`unet2d` is the same network with padded convolutions: the output has the input's size,
for any input size (the input is reflect-padded to a multiple of 2**(levels-1) inside).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F



def _double_conv(cin: int, cout: int, padding: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=padding), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=padding), nn.ReLU(inplace=True),
    )


def _center_crop(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    top, left = (x.shape[-2] - height) // 2, (x.shape[-1] - width) // 2
    return x[..., top:top + height, left:left + width]


class UNet2D(nn.Module):
    def __init__(self, in_channels: int = 1, classes: int = 2, base: int = 64, levels: int = 5,
                 padded: bool = True) -> None:
        super().__init__()
        if base < 1 or levels < 2:
            raise ValueError("a U-Net needs base >= 1 filters and levels >= 2")
        self.padded, self.levels = padded, levels
        widths = [base * 2**i for i in range(levels)]
        pad = 1 if padded else 0
        self.down = nn.ModuleList(_double_conv(c_in, c_out, pad) for c_in, c_out in zip([in_channels, *widths], widths))
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList(nn.ConvTranspose2d(w, w // 2, 2, stride=2) for w in reversed(widths[1:]))
        self.decode = nn.ModuleList(_double_conv(w, w // 2, pad) for w in reversed(widths[1:]))
        self.head = nn.Conv2d(base, classes, 1)
        self._init_weights()

    def _init_weights(self) -> None:
        # No normalisation layers (as in the paper), so He initialisation keeps the
        # activations' scale through the depth; PyTorch's default init lets it shrink.
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    @property
    def margin(self) -> int:
        """Pixels the output loses on each side against the input (0 when padded)."""
        if self.padded:
            return 0
        out = self.output_size_at_most(1000)
        return (self.input_size(out) - out) // 2

    def output_size(self, size: int) -> int | None:
        """Output size for an input size, or None when the unpadded net cannot take it."""
        if self.padded:
            return size
        for _ in range(self.levels - 1):
            size -= 4
            if size <= 0 or size % 2:
                return None
            size //= 2
        size -= 4
        if size <= 0:
            return None
        for _ in range(self.levels - 1):
            size = size * 2 - 4
        return size

    def input_size(self, output: int) -> int:
        """The input size that gives exactly `output` (unpadded: output must be a valid size)."""
        if self.padded:
            return output
        size = output
        for _ in range(self.levels - 1):
            size = (size + 4) // 2
        size += 4
        for _ in range(self.levels - 1):
            size = size * 2 + 4
        if self.output_size(size) != output:
            raise ValueError(f"no input gives an output of {output}")
        return size

    def output_size_at_most(self, size: int) -> int:
        """The largest output size <= `size` that the network can produce."""
        if self.padded:
            return size
        step = 2 ** (self.levels - 1)
        bottom = (size + 4 * (step - 1)) // step  # output = step * bottom - 4 * (step - 1)
        return step * bottom - 4 * (step - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        if self.padded:
            x = self._pad_to_multiple(x)
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        x = skips.pop()
        for up, decode in zip(self.up, self.decode):
            x = up(x)
            skip = skips.pop()
            x = decode(torch.cat([_center_crop(skip, x.shape[-2], x.shape[-1]), x], dim=1))
        out = self.head(x)
        return out[..., :height, :width] if self.padded else out

    def _pad_to_multiple(self, x: torch.Tensor) -> torch.Tensor:
        step = 2 ** (self.levels - 1)
        pad_h, pad_w = -x.shape[-2] % step, -x.shape[-1] % step
        if not pad_h and not pad_w:
            return x
        mode = "reflect" if pad_h < x.shape[-2] and pad_w < x.shape[-1] else "replicate"
        return F.pad(x, (0, pad_w, 0, pad_h), mode=mode)


def unet2d_medical(base: int = 64, levels: int = 5, in_channels: int = 1, classes: int = 2) -> UNet2D:
    return UNet2D(in_channels, classes, base, levels, padded=False)


def unet2d(base: int = 64, levels: int = 5, in_channels: int = 1, classes: int = 2) -> UNet2D:
    return UNet2D(in_channels, classes, base, levels, padded=True)
