"""Statistics of raw per-step samples."""

from __future__ import annotations

from typing import Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, mean, p50/p90/p95/p99, std, min, max and coefficient of variation of `samples`."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no samples to summarize")
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    summary = {
        "n": int(values.size),
        "mean": mean,
        "median": float(np.median(values)),
        "std": std,
        "min": float(values.min()),
        "max": float(values.max()),
        "cv": std / mean if mean else 0.0,
    }
    for p, value in zip(PERCENTILES, np.percentile(values, PERCENTILES)):
        summary[f"p{p}"] = float(value)
    return summary


def latency_ms(samples: Sequence[float]) -> dict[str, float]:
    """Seed 003's latency columns from per-step seconds, in milliseconds: avg, p50, p90, p95, p99."""
    summary = summarize(samples)
    return {"avg": summary["mean"] * 1e3, **{f"p{p}": summary[f"p{p}"] * 1e3 for p in PERCENTILES}}
