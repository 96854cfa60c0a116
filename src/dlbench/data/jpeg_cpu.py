"""One image file decoded, cropped and resized on the CPU, at reduced size where the crop allows.

libjpeg decodes at 1/2, 1/4 or 1/8 of a JPEG's size (DCT scaling) for a fraction of the
work. The crop box is drawn first, from the size in the file's header, and the file is
decoded at the smallest scale that still leaves the box at least as many pixels as the
output has: the resize that follows only ever shrinks, so the images stay what a full
decode gives, within JPEG's own tolerance. A 2048x1536 photo cropped to 224x224 decodes at
1/2 to 1/8 of its pixels; ImageNet's ~500x375 images mostly at full size.

Pillow (`Image.draft`) decodes here, not torchvision: its decoders are deprecated since
torchvision 0.29, and Pillow exposes the scaled decode.
"""

from __future__ import annotations

import io
import math

import numpy as np
import torch
from PIL import Image

SCALES = (8, 4, 2, 1)  # what libjpeg's DCT scaling offers, largest reduction first
EVAL_RESIZE = 0.875  # eval: resize to size / 0.875, then centre-crop (224 from 256)
Box = tuple[float, float, float, float]  # left, top, right, bottom in the file's pixels


def reduction(box: Box, size: tuple[int, int], limit: int | None = None) -> int:
    """The largest of 8, 4, 2, 1 that leaves the box at least `size` (height, width) pixels."""
    width, height = box[2] - box[0], box[3] - box[1]
    for scale in SCALES:
        if width / scale >= size[1] and height / scale >= size[0] and (limit is None or scale <= limit):
            return scale
    return 1


def train_box(image: Image.Image) -> Box:
    """RandomResizedCrop's box (torchvision's rule, from torch's random state, which the
    DataLoader seeds per worker), from the size in the file's header: nothing is decoded."""
    from torchvision.transforms import RandomResizedCrop

    top, left, h, w = RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3])
    return left, top, left + w, top + h


def eval_box(width: int, height: int, size: tuple[int, int]) -> Box:
    """The eval transform's box: the short side resized to min(size) / 0.875, `size` cut from the centre."""
    scale = int(min(size) / EVAL_RESIZE) / min(width, height)
    h, w = size[0] / scale, size[1] / scale
    top, left = (height - h) / 2, (width - w) / 2
    return left, top, left + w, top + h


def decode_crop(data: bytes, size: tuple[int, int], train: bool, limit: int | None = None) -> torch.Tensor:
    """The file's crop resized to `size` (height, width), flipped at random in training: a
    uint8 CHW tensor. `limit` caps the reduction (1: full-size decode, to compare against).

    At full size torch crops and resizes (its antialiased uint8 kernel is about twice as fast
    as Pillow's, benchmarks/jpeg_worker.py); at reduced size Pillow does, since the box then
    falls between the reduced pixels and only Pillow's resize takes a fractional box."""
    from torchvision.transforms.v2 import functional as F

    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        box = train_box(image) if train else eval_box(width, height, size)
        scale = reduction(box, size, limit)
        if scale > 1:
            drafted = image.draft("RGB", (math.ceil(width / scale), math.ceil(height / scale)))
            scale = width / drafted[1][2] if drafted else 1  # what the decoder settled on
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        if scale > 1:
            rgb = rgb.resize((size[1], size[0]), Image.BILINEAR, box=tuple(v / scale for v in box), reducing_gap=None)
        pixels = torch.from_numpy(np.array(rgb)).permute(2, 0, 1)  # a copy: Pillow's own pixels are read-only
    if scale == 1:
        left, top = round(box[0]), round(box[1])
        w, h = min(round(box[2] - box[0]), width - left), min(round(box[3] - box[1]), height - top)
        pixels = F.resized_crop(pixels, top, left, h, w, list(size), antialias=True)
    if train and torch.rand(1).item() < 0.5:
        pixels = pixels.flip(-1)
    return pixels
