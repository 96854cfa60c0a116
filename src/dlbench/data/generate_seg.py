"""A synthetic EM-membrane-like 2D segmentation set (the seed's ISBI-style task).

Each image is a tiling of irregular cells (a Voronoi diagram of random points, warped by a
smooth displacement field) separated by dark membranes of varying width. Cells carry their
own grey level, a fine texture and dark organelle-like blobs that are *not* membranes, so
a network must learn shape and context, not a threshold. The image is blurred and noisy.
Masks follow the ISBI 2012 convention: 255 inside cells, 0 on membranes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from dlbench.errors import UserError

FORMATS = {"tif": ".tif", "png": ".png"}


def _smooth_noise(size: int, scale: float, generator: torch.Generator, channels: int = 1) -> torch.Tensor:
    """Noise with features about `scale` pixels wide, unit standard deviation, (channels, size, size)."""
    low = max(2, math.ceil(size / scale) + 1)
    coarse = torch.randn(1, channels, low, low, generator=generator)
    fine = F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)[0]
    return fine / fine.std().clamp_min(1e-6)


def _blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur with reflected borders."""
    radius = math.ceil(3 * sigma)
    taps = torch.exp(-0.5 * (torch.arange(-radius, radius + 1, dtype=torch.float32) / sigma) ** 2)
    taps = taps / taps.sum()
    x = F.pad(image[None, None], (radius, radius, radius, radius), mode="reflect")
    x = F.conv2d(x, taps.view(1, 1, 1, -1))
    return F.conv2d(x, taps.view(1, 1, -1, 1))[0, 0]


def _two_nearest(points: torch.Tensor, coords: torch.Tensor, device: torch.device | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distances to the nearest and second-nearest point, and the nearest point's index.

    Only this search runs on `device`; the random numbers come from the CPU generator, so
    a set is the same wherever it is made.
    """
    nearest, second, owner = [], [], []
    points = points.to(device)
    for chunk in coords.split(65536):
        values, index = torch.cdist(chunk.to(device), points).topk(2, dim=1, largest=False)
        values, index = values.cpu(), index.cpu()
        nearest.append(values[:, 0])
        second.append(values[:, 1])
        owner.append(index[:, 0])
    return torch.cat(nearest), torch.cat(second), torch.cat(owner)


def sample(size: int, seed: int, cell: float | None = None, device: torch.device | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """One (image uint8, mask uint8 with 0 = membrane / 255 = cell) pair of `size` x `size`."""
    g = torch.Generator().manual_seed(seed)
    cell = cell or max(12.0, size / 10)
    n_cells = max(4, round((size / cell) ** 2 * 1.3))
    points = torch.rand(n_cells, 2, generator=g) * (size + 2 * cell) - cell
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    warp = _smooth_noise(size, cell * 1.5, g, channels=2) * (cell * 0.12)
    coords = torch.stack([ys + warp[0], xs + warp[1]], dim=-1).reshape(-1, 2)
    d1, d2, owner = _two_nearest(points, coords, device)
    width = 1.2 + 2.2 * torch.rand((), generator=g).item() * (size / 512) ** 0.25
    local = width * (1 + 0.35 * _smooth_noise(size, cell, g)[0].reshape(-1))
    membrane = ((d2 - d1) < local).reshape(size, size)

    shade = 0.55 + 0.25 * torch.rand(n_cells, generator=g)
    image = shade[owner].reshape(size, size)
    image = image + 0.06 * _smooth_noise(size, 3.0, g)[0]
    image = image - 0.28 * (_smooth_noise(size, cell / 3, g)[0] > 1.6).float()  # organelles: dark, not membrane
    image = torch.where(membrane, 0.12 + 0.1 * torch.rand((), generator=g) + 0.05 * _smooth_noise(size, 4.0, g)[0], image)
    image = _blur(image, 0.6 + 0.6 * torch.rand((), generator=g).item())
    image = image + (0.03 + 0.04 * torch.rand((), generator=g)) * torch.randn(size, size, generator=g)
    pixels = (image.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    mask = np.where(membrane.numpy(), 0, 255).astype(np.uint8)
    return pixels, mask


def arrays(n: int, size: int, seed: int = 0, cell: float | None = None, device: torch.device | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """`n` pairs in memory: images (n, size, size) uint8 and masks (n, size, size) uint8."""
    pairs = [sample(size, seed * 100_003 + i, cell, device) for i in range(n)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def check(root: str | Path, n: int, size: int, format: str, overwrite: bool = False) -> None:
    """Every reason `write` would refuse, before anything is written."""
    if n < 1:
        raise UserError(f"--n must be at least 1, got {n}")
    if size < 16:
        raise UserError(f"--size must be at least 16 pixels, got {size}")
    if format not in FORMATS:
        raise UserError(f"unknown image format {format!r}; choose tif or png")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} exists and is not a folder")
    for sub in ("images", "masks"):
        folder = root / sub
        if folder.is_dir() and any(folder.iterdir()) and not overwrite:
            raise UserError(f"{folder} is not empty; give --overwrite to replace the set, or another path")


def write(root: str | Path, n: int = 30, size: int = 512, format: str = "tif", seed: int = 0,
          cell: float | None = None, overwrite: bool = False,
          progress: Callable[[int, int], None] = lambda done, total: None, device: torch.device | None = None) -> Path:
    """Write `root/images/seg_NNN.EXT` and `root/masks/seg_NNN.EXT`; refuses to mix with an existing set.

    `device` only speeds up the nearest-point search; the set is the same on any device.
    """
    from PIL import Image

    check(root, n, size, format, overwrite)
    root = Path(root)
    suffix = FORMATS[format]
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        if overwrite:
            for old in (root / sub).iterdir():
                if old.is_file() and old.suffix.lower() in (".tif", ".tiff", ".png"):
                    old.unlink()
    for i in range(n):
        image, mask = sample(size, seed * 100_003 + i, cell, device)
        name = f"seg_{i:03d}{suffix}"
        Image.fromarray(image).save(root / "images" / name)
        Image.fromarray(mask).save(root / "masks" / name)
        progress(i + 1, n)
    return root
