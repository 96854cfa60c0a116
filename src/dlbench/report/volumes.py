"""Seed 000/001's prediction tables: time for the volume, then Megavox/s and hours for Platynereis.

  | System | CUDA | pytorch | Prediction [s] |      (one table per model and volume)
  | System | Megavox / s | Platynereis [h] |

Platynereis is 8.1 teravoxel (or the run's `extrapolate` setting); its hours are
voxels / (Mvox/s x 10^6) / 3600 for the run's GPU count. (The seed's own column was 10x
too small: 8.1e12 voxels at 8.8 Mvox/s is 255.7 h, not 25.7.)
"""

from __future__ import annotations

from collections import OrderedDict

from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result

PLATYNEREIS = 8.1e12


def _label(r: Result) -> str:
    world = r.metrics.get("world_size", 1)
    precision = r.spec.get("precision", "fp32")
    extras = [f"x{world}"] if world > 1 else []
    extras += [] if precision == "fp32" else [precision]
    return r.system_label + (f" ({', '.join(extras)})" if extras else "")


def hours(r: Result) -> float | None:
    rate = r.metrics.get("mvox_per_s")
    voxels = r.metrics.get("extrapolate_voxels") or PLATYNEREIS
    return voxels / (rate * 1e6) / 3600 if rate else None


def _groups(results: list[Result]) -> "OrderedDict[tuple, dict[str, Result]]":
    """Latest ok result per (model, volume shape) and system label."""
    chosen = sorted((r for r in results if r.workload == "volume" and r.status == "ok"), key=lambda r: r.started)
    groups: "OrderedDict[tuple, dict[str, Result]]" = OrderedDict()
    for r in chosen:
        shape = tuple(r.metrics.get("volume_shape") or ())
        groups.setdefault((r.model, shape), {})[_label(r)] = r
    return groups


def tables(results: list[Result]) -> list[Table]:
    out = []
    for (model, shape), by_system in _groups(results).items():
        rows = sorted(by_system.items(), key=lambda kv: kv[1].metrics.get("total_s", 0))
        voxels = 1
        for s in shape:
            voxels *= s
        size = f"{' x '.join(map(str, shape))} = {voxels / 1e9:.2f} gigavoxel" if shape else "volume"
        any_result = rows[0][1] if rows else None
        title = model_title(any_result) if any_result else model
        block = any_result.metrics.get("block") if any_result else None
        halo = any_result.metrics.get("halo") if any_result else None
        note = f"(prediction of {size}; block {_shape(block)}, halo {_shape(halo)})"
        out.append(Table(f"{title} prediction", ["System", "CUDA", "pytorch", "Prediction [s]"], "lrrr",
                         [[label, r.system.get("cuda") or "-", (r.system.get("torch") or "-").split("+")[0],
                           f"{r.metrics['total_s']:.1f}"] for label, r in rows], notes=[note]))
        target = (any_result.metrics.get("extrapolate_voxels") if any_result else None) or PLATYNEREIS
        out.append(Table(f"{title} prediction: Megavox / s and Platynereis", ["System", "Megavox / s", "Platynereis [h]"],
                         "lrr", [[label, f"{r.metrics['mvox_per_s']:.1f}", _hours(hours(r))] for label, r in rows],
                         notes=[f"(Platynereis: {target / 1e12:.1f} teravoxel, on the GPUs of each row)"]))
    return out


def _shape(shape) -> str:
    return "x".join(map(str, shape)) if shape else "-"


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
