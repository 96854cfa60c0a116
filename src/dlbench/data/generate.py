"""A synthetic ImageNet-like JPEG dataset, so the real input pipeline can be benchmarked anywhere.

Images are photo-like rather than noise: a sky/ground gradient, soft low-frequency colour
fields, a few blurred shapes and fine grain. At quality 90 that gives ImageNet's typical
~500x375 pixels and ~80-140 KB per file, so decoding costs what real photos cost.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from dlbench.errors import UserError

# Landscape-heavy mix of ImageNet's common sizes (width, height).
SIZES = ((500, 375), (500, 333), (500, 400), (375, 500), (500, 500), (640, 480), (333, 500))


def _field(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """A smooth random field in [0, 1]: coarse noise upsampled bilinearly."""
    coarse = rng.random((cells + 1, cells + 1, 3)).astype(np.float32)
    image = Image.fromarray((coarse * 255).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    return np.asarray(image, dtype=np.float32) / 255.0


def photo(rng: np.random.Generator, size: tuple[int, int] | None = None) -> Image.Image:
    """A photo-like image of `size` (width, height), or of one of ImageNet's common sizes."""
    width, height = size or SIZES[rng.integers(len(SIZES))]
    top, bottom = rng.random(3) * 255, rng.random(3) * 255
    ramp = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    base = top * (1 - ramp) + bottom * ramp
    base = base * 0.6 + _field(rng, height, width, int(rng.integers(2, 8))) * 255 * 0.4
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 9))):  # objects: blurred ellipses and polygons
        x, y = rng.integers(0, width), rng.integers(0, height)
        rx, ry = rng.integers(width // 16, width // 3), rng.integers(height // 16, height // 3)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((x - rx, y - ry, x + rx, y + ry), fill=colour)
        else:
            points = [(int(x + rx * np.cos(a)), int(y + ry * np.sin(a)))
                      for a in np.sort(rng.random(int(rng.integers(3, 7))) * 2 * np.pi)]
            draw.polygon(points, fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.0))))
    # Texture and sensor grain: what makes real photos cost ~100 KB rather than 20 KB.
    detail = _field(rng, height, width, int(rng.integers(40, 90))) - 0.5
    grain = rng.normal(0.0, float(rng.uniform(8, 13)), (height, width, 1)).astype(np.float32)
    pixels = np.asarray(image, dtype=np.float32) + detail * 70 + grain
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _write_one(args: tuple[str, int, tuple[int, int] | None]) -> int:
    path, seed, size = args
    photo(np.random.default_rng(seed), size).save(path, "JPEG", quality=90)
    return os.path.getsize(path)


_CLASS = re.compile(r"class\d{4}")


def check(root: Path, overwrite: bool = False) -> list[Path]:
    """The class folders of an earlier set in `root` (replaced with `overwrite`); a UserError
    for a root that holds anything else, so that a mistyped path (`.`, a home folder) never
    gets a thousand JPEGs mixed into it."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} exists and is not a folder")
    entries = list(root.iterdir()) if root.is_dir() else []
    earlier = [e for e in entries if e.is_dir() and _CLASS.fullmatch(e.name)]
    if len(earlier) < len(entries):
        raise UserError(f"{root} holds other files: write the images into a new or empty folder")
    if earlier and not overwrite:
        raise UserError(f"{root} already holds a generated set: pass --overwrite to replace it")
    return earlier


MAX_SIDE = 65_500  # the largest side a JPEG holds


def check_size(size: tuple[int, ...] | None) -> tuple[int, int] | None:
    if size is None:
        return None
    if len(size) != 2:
        raise UserError(f"--size must be WIDTHxHEIGHT (e.g. 2048x1536), got {'x'.join(map(str, size))}")
    if min(size) < 16 or max(size) > MAX_SIDE:
        raise UserError(f"--size {size[0]}x{size[1]}: each side must be 16 to {MAX_SIDE:,} pixels")
    return size[0], size[1]


def generate(root: Path, n: int, classes: int = 10, seed: int = 0, workers: int | None = None,
             progress: Callable[[int, int], None] | None = None, overwrite: bool = False,
             size: tuple[int, ...] | None = None) -> dict:
    """Write `n` JPEGs into `classes` class folders under `root`, all of `size` (width, height)
    if given; returns a summary."""
    if n < 1:
        raise UserError(f"--n must be at least 1, got {n}")
    if classes < 1:
        raise UserError(f"--classes must be at least 1, got {classes}")
    size = check_size(size)
    root = Path(root)
    for folder in check(root, overwrite):
        shutil.rmtree(folder)
    jobs = []
    for i in range(n):
        folder = root / f"class{i % classes:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        jobs.append((str(folder / f"img{i:07d}.jpg"), seed * 1_000_003 + i, size))
    workers = workers or min(8, os.cpu_count() or 1)
    total = 0
    if workers == 1 or n < 64:
        sizes = map(_write_one, jobs)
        for done, size in enumerate(sizes, 1):
            total += size
            if progress:
                progress(done, n)
    else:
        with ProcessPoolExecutor(workers) as pool:
            for done, size in enumerate(pool.map(_write_one, jobs, chunksize=16), 1):
                total += size
                if progress:
                    progress(done, n)
    return {"root": str(root), "images": n, "classes": min(classes, n), "bytes": total,
            "mean_kb": total / n / 1024}
