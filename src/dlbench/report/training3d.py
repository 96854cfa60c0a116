"""Seed 000/001's training tables for 3D U-Nets: time for 1001 iterations, iterations per
minute and days to 100k iterations, per system and GPU count ("1080Ti (x2)")."""

from __future__ import annotations

import numpy as np

from dlbench.report.markdown import fmt
from dlbench.report.tables import Table
from dlbench.results.record import Result
from dlbench.units import days_to, iters_per_min

ITERATIONS = 1001  # the seeds time 1001 training iterations
TARGET = 100_000  # "roughly the number of iterations after which most networks have converged"
HEADER = ["System", "CUDA", "pytorch", "Training [s]", "Iters / Min", "100k Iters [d]"]


def system_name(r: Result) -> str:
    gpus = int(r.spec.get("gpus", 1) or 1)
    precision = r.spec.get("precision", "fp32")
    return r.system_label + (f" (x{gpus})" if gpus > 1 else "") + ("" if precision == "fp32" else f" {precision}")


def _mean_step(r: Result) -> float | None:
    """Mean seconds per iteration: the workload's figure (under DDP an iteration lasts as long as
    its slowest process), else the mean of the stored step samples."""
    if r.metrics.get("iteration_mean_s"):
        return float(r.metrics["iteration_mean_s"])
    steps = r.samples.get("step")
    return float(np.mean(steps)) if steps else None


def _patch(r: Result) -> str:
    shape = r.metrics.get("patch") or (r.metrics.get("input_shape") or [])[2:] or r.spec.get("input_shape") or []
    return "x".join(map(str, shape))


def row(r: Result) -> list[object]:
    head: list[object] = [system_name(r), r.system.get("cuda"), r.system.get("torch")]
    if r.status == "oom":
        return head + ["OOM"] * 3
    step = _mean_step(r)
    per_min = iters_per_min(1, step)
    return head + [fmt(None if step is None else ITERATIONS * step), fmt(per_min),
                   fmt(days_to(TARGET, per_min))]


def tables(results: list[Result]) -> list[Table]:
    chosen: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        if r.workload == "train" and r.model.startswith("unet3d") and r.status in ("ok", "oom"):
            key = (r.model, system_name(r), r.spec.get("batch"))
            chosen[key] = r
    by_model: dict[str, list[Result]] = {}
    for (model, *_), r in chosen.items():
        by_model.setdefault(model, []).append(r)
    out = []
    for model, runs in by_model.items():
        runs.sort(key=lambda r: (r.system_label, r.spec.get("gpus", 1)))
        shape = ", ".join(dict.fromkeys(_patch(r) for r in runs if _patch(r))) or "the model's default"
        out.append(Table(f"{model} training", HEADER, "lrrrrr", [row(r) for r in runs],
                         notes=[f"Training [s]: {ITERATIONS} iterations at the measured mean step time "
                                f"(patch {shape}); 100k Iters [d]: days to {TARGET:,} iterations."]))
    return out
