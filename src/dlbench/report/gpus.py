"""Seed 004's GPU table for the GPUs in the results: datasheet figures beside measured ceilings.

`|GPU|Memory|Architecture|CUDA Cores|FP32 TFLOPS|Release Date|`, fastest first, plus one
column per ceiling that `dlbench system` measured on a machine with that GPU.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from dlbench.report.tables import Table
from dlbench.results.record import Result

HEADER = ["GPU", "Memory", "Architecture", "CUDA Cores", "FP32 TFLOPS", "Release Date"]
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
_BANDWIDTH = re.compile(r"(copy|memory|device|d2d).*(gb_?s|tb_?s)$")


def _datasheet():
    try:
        from dlbench.system import datasheet
    except ImportError:  # an install without the datasheet module: no GPU table
        return None
    return datasheet


def gpu_names(results: list[Result]) -> list[str]:
    names: dict[str, None] = {}
    for r in results:
        for gpu in r.system.get("gpus") or []:
            if gpu.get("name"):
                names[str(gpu["name"])] = None
    return list(names)


def release(text: str | None) -> str | None:
    """'2016-10' -> 'Oct 2016', as the seed writes it."""
    try:
        return dt.datetime.strptime(str(text), "%Y-%m").strftime("%b %Y")
    except ValueError:
        return text


def _number(value: float | None, digits: int = 2) -> str | None:
    return None if value is None else f"{value:.{digits}f}"


def ceilings(r: Result) -> dict[str, float]:
    """Measured ceilings held by a result, named by column: matmul TFLOP/s per precision, copy GB/s.

    Accepts `metrics["ceilings"]` (a dict) or ceiling metrics at the top level of a `system` record.
    """
    raw: Any = r.metrics.get("ceilings")
    if not isinstance(raw, dict):
        raw = r.metrics if r.workload == "system" or r.spec.get("kind") == "system" else {}
    found: dict[str, float] = {}
    for key, value in _flatten(raw):
        name = key.lower()
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        for p in PRECISIONS:
            if p in name and "tflops" in name:
                found.setdefault(f"Measured {p.upper()} TFLOPS", float(value))
        if _BANDWIDTH.search(name) and "h2d" not in name and "d2h" not in name and "host" not in name:
            scale = 1000.0 if re.search(r"tb_?s$", name) else 1.0
            found.setdefault("Measured copy GB/s", float(value) * scale)
    return found


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        return [item for k, v in data.items() for item in _flatten(v, f"{prefix}_{k}" if prefix else str(k))]
    return [(prefix, data)]


def measured_by_gpu(results: list[Result]) -> dict[str, dict[str, float]]:
    """Latest measured ceilings for each GPU name."""
    out: dict[str, dict[str, float]] = {}
    for r in sorted(results, key=lambda r: r.started):
        found = ceilings(r)
        for name in gpu_names([r]) if found else []:
            out[name] = found
    return out


def tables(results: list[Result]) -> list[Table]:
    datasheet = _datasheet()
    names = gpu_names(results)
    if datasheet is None or not names:
        return []
    measured = measured_by_gpu(results)
    extra = sorted({c for m in measured.values() for c in m}, key=_column_order)
    rows = []
    for name in names:
        spec = datasheet.lookup(name)
        cells: list[object] = [name]
        if spec is None:
            cells += [None] * (len(HEADER) - 1)
        else:
            cells += [f"{spec.memory_gb:g}GB {spec.memory_type}", spec.architecture, spec.cuda_cores,
                      _number(spec.fp32_tflops), release(spec.release)]
        cells += [_number(measured.get(name, {}).get(c), 1) for c in extra]
        rows.append((spec.fp32_tflops if spec else -1.0, cells))
    rows.sort(key=lambda item: -item[0])
    notes = [] if not extra else ["Datasheet figures; Measured columns come from `dlbench system` on a machine with that GPU."]
    return [Table("GPUs", HEADER + extra, "lllrrl" + "r" * len(extra), [cells for _, cells in rows], notes=notes)]


def _column_order(column: str) -> tuple[int, str]:
    for i, p in enumerate(PRECISIONS):
        if p.upper() in column:
            return i, column
    return len(PRECISIONS), column
