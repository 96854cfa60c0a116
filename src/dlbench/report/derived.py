"""Quantities people plan with, derived from measured times: the seeds' units.

Every helper takes plain numbers (seconds, counts) so any report section can call it, and
returns None when an input is missing, so a missing cell prints as `-`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dlbench.report.units import fixed

SECONDS_PER_DAY = 86_400.0


def _ok(*values: float | None) -> bool:
    return all(v is not None and v > 0 for v in values)


def iters_per_min(iterations: float | None, seconds: float | None) -> float | None:
    """Seed 000/001: 1001 iterations in 1754.2 s -> 34.2 iterations per minute."""
    return 60.0 * iterations / seconds if _ok(iterations, seconds) else None


def days_to(iterations: float | None, per_min: float | None) -> float | None:
    """Days to reach `iterations` at `per_min` iterations per minute (seed 001: 100k iterations)."""
    return iterations / per_min * 60.0 / SECONDS_PER_DAY if _ok(iterations, per_min) else None


def mvox_per_s(voxels: float | None, seconds: float | None) -> float | None:
    """Megavoxels per second: seed 000's 1.9 gigavoxel volume in 215.3 s -> 8.8 Mvox/s."""
    return voxels / seconds / 1e6 if _ok(voxels, seconds) else None


def hours_for(voxels: float | None, mvox_s: float | None, gpus: int = 1) -> float | None:
    """Hours to predict `voxels` at `mvox_s` per GPU on `gpus` GPUs (prediction scales linearly)."""
    return voxels / (mvox_s * 1e6 * gpus) / 3600.0 if _ok(voxels, mvox_s, gpus) else None


def per_second(items: float | None, seconds: float | None) -> float | None:
    """Images (or samples) per second."""
    return items / seconds if _ok(items, seconds) else None


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
    """Seed 003's "Weak scaling": throughput on N GPUs (same batch per GPU) over throughput on
    one GPU (A100 TF32, batch 1: 169.62 / 29.81 = 5.69 on 8 GPUs; perfect would be 8)."""
    return throughput_n / throughput_1 if _ok(throughput_n, throughput_1) else None


def scaling_efficiency(throughput_n: float | None, throughput_1: float | None, gpus: int | None) -> float | None:
    """Weak scaling divided by the GPU count: 1.0 is perfect (5.69 on 8 GPUs -> 0.71)."""
    scaling = weak_scaling(throughput_n, throughput_1)
    return scaling / gpus if scaling is not None and gpus else None


def speedup(fast: float | None, slow: float | None) -> float | None:
    """Seed 003's 'Throughput speedup (TF32 - mixed precision)': how many times `fast` is `slow`."""
    return fast / slow if _ok(fast, slow) else None


def fmt(value: float | None, digits: int = 1) -> str | None:
    """A figure rounded like the seeds, or None (rendered `-`); a nonzero value that would
    round to 0 gets the places it needs (units.fixed)."""
    return None if value is None else fixed(value, digits)


def parse_count(text: str | float | int) -> float:
    """'8.1T' -> 8.1e12 voxels; also k, M, G; plain numbers pass through."""
    if isinstance(text, (int, float)):
        return float(text)
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    raw = str(text).strip()
    factor = scale.get(raw[-1:].lower(), 1.0)
    number = raw[:-1] if factor != 1.0 else raw
    return float(number) * factor
