"""Seed 004's tables: one per model, `|GPU|cuDNN|Forward (ms)|Backward (ms)|Total (ms)|`, fastest first."""

from __future__ import annotations

from collections import OrderedDict

from dlbench.report.markdown import ms
from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result
from dlbench.results.titles import TITLES

HEADER = ("GPU", "cuDNN", "Forward (ms)", "Backward (ms)", "Total (ms)")


def _row_key(r: Result) -> tuple:
    precision = r.spec.get("precision", "fp32")
    gpus = int(r.spec.get("gpus", 1) or 1)
    label = r.system_label + (f" (x{gpus})" if gpus > 1 else "") + ("" if precision == "fp32" else f" ({precision})")
    cudnn = r.system.get("cudnn") if str(r.metrics.get("device", "")).startswith("cuda") else None
    return label, cudnn or "None"


def tables(results: list[Result]) -> list[Table]:
    """Latest result per (model, input, system); OOM rows say so; sorted by total time. Models
    come in the order of the built-in registry (seed 004's), others after them by name."""
    groups: "OrderedDict[tuple, dict[tuple, Result]]" = OrderedDict()
    order = {name: i for i, name in enumerate(TITLES)}
    chosen = [r for r in results if r.workload == "fwdbwd" and r.status in ("ok", "oom")]
    chosen.sort(key=lambda r: (order.get(r.model, len(order)), r.model, r.started))
    for r in chosen:
        shape = r.metrics.get("input_shape") or [r.spec["batch"], *(r.spec.get("input_shape") or [])]
        groups.setdefault((r.model, tuple(shape)), {})[_row_key(r)] = r
    out = []
    for (_, shape), by_system in groups.items():
        rows = sorted(by_system.items(), key=lambda kv: (kv[1].status != "ok", kv[1].metrics.get("total_ms", 0)))
        out.append(Table(model_title(rows[0][1]), list(HEADER), "llrrr",
                         [[label, cudnn, *_cells(r)] for (label, cudnn), r in rows],
                         notes=[f"(input {' x '.join(map(str, shape))})"]))
    return out


def _cells(r: Result) -> list[str]:
    if r.status == "oom":
        return ["OOM", "OOM", "OOM"]
    return [ms(r.metrics.get(k)) for k in ("forward_ms", "backward_ms", "total_ms")]
