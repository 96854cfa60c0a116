"""Training targets from a label volume: nearest-neighbour affinities or a foreground mask.

Label 0 is background (membrane): it has no affinity to anything and is not foreground.
"""

from __future__ import annotations

import numpy as np

OFFSETS: tuple[tuple[int, int, int], ...] = ((-1, 0, 0), (0, -1, 0), (0, 0, -1))
TARGETS = ("affinities", "mask")


def affinities(labels: np.ndarray, offsets=OFFSETS) -> np.ndarray:
    """float32 [len(offsets), Z, Y, X]: 1 where a voxel and its neighbour at `offset` share a non-zero label.

    Voxels whose neighbour lies outside the volume get 0.
    """
    out = np.zeros((len(offsets), *labels.shape), dtype=np.float32)
    for channel, offset in enumerate(offsets):
        here = tuple(slice(max(-o, 0), s - max(o, 0)) for o, s in zip(offset, labels.shape))
        there = tuple(slice(max(o, 0), s - max(-o, 0)) for o, s in zip(offset, labels.shape))
        same = (labels[here] == labels[there]) & (labels[here] != 0)
        out[(channel, *here)] = same
    return out


def foreground(labels: np.ndarray) -> np.ndarray:
    """float32 [1, Z, Y, X]: 1 inside cells."""
    return (labels != 0).astype(np.float32)[None]


def make_target(labels: np.ndarray, target: str) -> np.ndarray:
    if target == "affinities":
        return affinities(labels)
    if target == "mask":
        return foreground(labels)
    raise ValueError(f"unknown target {target!r}")
