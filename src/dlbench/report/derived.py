"""Quantities the reports derive from measured times, beside those the workloads also need
(`dlbench.units`: iterations per minute, days to a number of iterations, hours for a volume).

Every helper takes plain numbers so any report section can call it, and returns None when an
input is missing, so a missing cell prints as `-`.
"""

from __future__ import annotations

from dlbench.units import days_to, hours_for, iters_per_min, positive

__all__ = ["days_to", "hours_for", "iters_per_min", "mvox_per_s", "scaling_efficiency", "weak_scaling"]


def mvox_per_s(voxels: float | None, seconds: float | None) -> float | None:
    """Megavoxels per second: seed 000's 1.9 gigavoxel volume in 215.3 s -> 8.8 Mvox/s."""
    return voxels / seconds / 1e6 if positive(voxels, seconds) else None


def weak_scaling(throughput_n: float | None, throughput_1: float | None) -> float | None:
    """Seed 003's "Weak scaling": throughput on N GPUs (same batch per GPU) over throughput on
    one GPU (A100 TF32, batch 1: 169.62 / 29.81 = 5.69 on 8 GPUs; perfect would be 8)."""
    return throughput_n / throughput_1 if positive(throughput_n, throughput_1) else None


def scaling_efficiency(throughput_n: float | None, throughput_1: float | None, gpus: int | None) -> float | None:
    """Weak scaling divided by the GPU count: 1.0 is perfect (5.69 on 8 GPUs -> 0.71)."""
    scaling = weak_scaling(throughput_n, throughput_1)
    return scaling / gpus if scaling is not None and gpus else None
