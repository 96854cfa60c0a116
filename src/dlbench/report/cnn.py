"""Seed 004's tables: one per model, `|GPU|cuDNN|Forward (ms)|Backward (ms)|Total (ms)|`, fastest first."""

from __future__ import annotations

from collections import OrderedDict

from dlbench.models import registry
from dlbench.report.markdown import ms, table
from dlbench.results.record import Result

HEADER = ("GPU", "cuDNN", "Forward (ms)", "Backward (ms)", "Total (ms)")


def _row_key(r: Result) -> tuple:
    precision = r.spec.get("precision", "fp32")
    label = r.system_label + ("" if precision == "fp32" else f" ({precision})")
    cudnn = r.system.get("cudnn") if str(r.metrics.get("device", "")).startswith("cuda") else None
    return label, cudnn or "None"


def _title(model: str) -> str:
    try:
        return registry.resolve(model).title
    except Exception:  # a model this install does not know, from an imported result
        return model


def render(results: list[Result]) -> str:
    """Latest result per (model, input, system); OOM rows say so; sorted by total time."""
    groups: "OrderedDict[tuple, dict[tuple, Result]]" = OrderedDict()
    order = {name: i for i, name in enumerate(registry.names())}
    chosen = [r for r in results if r.workload == "fwdbwd" and r.status in ("ok", "oom")]
    chosen.sort(key=lambda r: (order.get(r.model, len(order)), r.model, r.started))
    for r in chosen:
        shape = r.metrics.get("input_shape") or [r.spec["batch"], *(r.spec.get("input_shape") or [])]
        groups.setdefault((r.model, tuple(shape)), {})[_row_key(r)] = r
    sections = []
    for (model, shape), by_system in groups.items():
        rows = sorted(by_system.items(), key=lambda kv: (kv[1].status != "ok", kv[1].metrics.get("total_ms", 0)))
        body = [[label, cudnn, *_cells(r)] for (label, cudnn), r in rows]
        sections.append(f"## {_title(model)}\n(input {' x '.join(map(str, shape))})\n\n"
                        + table(HEADER, "llrrr", body))
    return "\n\n".join(sections) if sections else "No fwdbwd results in the store yet: run `dlbench suite cnn-benchmarks`."


def _cells(r: Result) -> list[str]:
    if r.status == "oom":
        return ["OOM", "OOM", "OOM"]
    return [ms(r.metrics.get(k)) for k in ("forward_ms", "backward_ms", "total_ms")]
