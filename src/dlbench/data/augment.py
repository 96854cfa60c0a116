"""Augmentation of raw/label patches that keeps them aligned: elastic deformation and flips.

Raw is resampled trilinearly and labels with nearest neighbour through the same
displacement field, so a label still covers the structure it labelled.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

ELASTIC_SPACING = (4, 32, 32)  # control-point spacing of the displacement field (z, y, x voxels)
ELASTIC_SIGMA = (1.0, 4.0, 4.0)  # displacement standard deviation in voxels; small in z like EM sections


def displacement(shape: tuple[int, int, int], rng: np.random.Generator, spacing=ELASTIC_SPACING,
                 sigma=ELASTIC_SIGMA) -> torch.Tensor:
    """A smooth random displacement field in voxels, [3, Z, Y, X] (z, y, x components)."""
    coarse = tuple(max(2, -(-s // step) + 1) for s, step in zip(shape, spacing))
    field = torch.from_numpy(rng.normal(0.0, 1.0, (1, 3, *coarse)).astype(np.float32))
    field *= torch.tensor(sigma, dtype=torch.float32).view(1, 3, 1, 1, 1)
    return F.interpolate(field, size=shape, mode="trilinear", align_corners=True)[0]


def _grid(shape: tuple[int, int, int], shift: torch.Tensor) -> torch.Tensor:
    """grid_sample's normalised (x, y, z) sampling grid for identity + shift (in voxels), built in place."""
    grid = torch.empty((1, *shape, 3), dtype=torch.float32)
    for channel, axis in ((0, 2), (1, 1), (2, 0)):  # grid_sample wants x, y, z order
        view = [1, 1, 1]
        view[axis] = -1
        scale = 2.0 / max(shape[axis] - 1, 1)
        out = grid[0, ..., channel]
        torch.add(shift[axis], torch.arange(shape[axis], dtype=torch.float32).view(view), out=out)
        out.mul_(scale).sub_(1.0)
    return grid


def elastic(raw: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Deform raw (float) and labels (integer) with one random field; borders reflect."""
    shape = raw.shape
    grid = _grid(shape, displacement(shape, rng))
    r = torch.from_numpy(np.ascontiguousarray(raw, dtype=np.float32))[None, None]
    out_raw = F.grid_sample(r, grid, mode="bilinear", padding_mode="reflection", align_corners=True)[0, 0]
    # Label ids must survive the float sampling exactly: float32 holds integers below 2**24.
    exact = torch.float32 if int(labels.max(initial=0)) < 2**24 else torch.float64
    lab = torch.from_numpy(labels.astype(np.float32 if exact == torch.float32 else np.float64))
    out_lab = F.grid_sample(lab[None, None], grid.to(exact), mode="nearest", padding_mode="reflection",
                            align_corners=True)[0, 0]
    return out_raw.numpy(), out_lab.numpy().astype(labels.dtype)


def flips(raw: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random flips along each axis and a random xy transpose, the same for raw and labels."""
    for axis in range(3):
        if rng.random() < 0.5:
            raw, labels = np.flip(raw, axis), np.flip(labels, axis)
    if raw.shape[1] == raw.shape[2] and rng.random() < 0.5:
        raw, labels = raw.transpose(0, 2, 1), labels.transpose(0, 2, 1)
    return np.ascontiguousarray(raw), np.ascontiguousarray(labels)


def augment(raw: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    raw, labels = elastic(raw, labels, rng)
    return flips(raw, labels, rng)
