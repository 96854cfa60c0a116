"""Quantities people plan with, derived from measured times: the seeds' units.

Every helper takes plain numbers (seconds, counts) so any report section can call it, and
returns None when an input is missing, so a missing cell prints as `-`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dlbench.units import positive


def mvox_per_s(voxels: float | None, seconds: float | None) -> float | None:
    """Megavoxels per second: seed 000's 1.9 gigavoxel volume in 215.3 s -> 8.8 Mvox/s."""
    return voxels / seconds / 1e6 if positive(voxels, seconds) else None


def hours_for(voxels: float | None, mvox_s: float | None, gpus: int = 1) -> float | None:
    """Hours to predict `voxels` at `mvox_s` per GPU on `gpus` GPUs (prediction scales linearly)."""
    return voxels / (mvox_s * 1e6 * gpus) / 3600.0 if positive(voxels, mvox_s, gpus) else None


def per_second(items: float | None, seconds: float | None) -> float | None:
    """Images (or samples) per second."""
    return items / seconds if positive(items, seconds) else None


def img_per_s(batch: int | None, step_seconds: Sequence[float] | None) -> float | None:
    """Images per second over a measured window: all images over the total measured time."""
    if not batch or not step_seconds:
        return None
    return per_second(batch * len(step_seconds), float(np.sum(step_seconds)))


def latency_ms(step_seconds: Sequence[float] | None) -> dict[str, float] | None:
    """Seed 003's latency columns from per-step seconds: avg, p90, p95, p99 in milliseconds."""
    if not step_seconds:
        return None
    values = np.asarray(step_seconds, dtype=np.float64) * 1e3
    p90, p95, p99 = np.percentile(values, (90, 95, 99))
    return {"avg": float(values.mean()), "p50": float(np.median(values)),
            "p90": float(p90), "p95": float(p95), "p99": float(p99)}


def weak_scaling(throughput_n: float | None, throughput_1: float | None) -> float | None:
    """Seed 003: throughput on N GPUs (same batch per GPU) over throughput on one GPU."""
    return throughput_n / throughput_1 if positive(throughput_n, throughput_1) else None


def speedup(fast: float | None, slow: float | None) -> float | None:
    """Seed 003's 'Throughput speedup (TF32 - mixed precision)': how many times `fast` is `slow`."""
    return fast / slow if positive(fast, slow) else None


def fmt(value: float | None, digits: int = 1) -> str | None:
    """A figure rounded like the seeds, or None (rendered `-`)."""
    return None if value is None else f"{value:.{digits}f}"
