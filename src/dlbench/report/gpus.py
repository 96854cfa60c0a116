"""Seed 004's GPU table for the GPUs in the results: datasheet figures beside measured ceilings.

`|GPU|Memory|Architecture|CUDA Cores|FP32 TFLOPS|Release Date|`, fastest first, plus one
column per ceiling that `dlbench system` measured on a machine with that GPU.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dlbench.report.tables import Table
from dlbench.figures import fixed
from dlbench.results.record import Result
from dlbench.system.records import is_survey

HEADER = ["GPU", "Memory", "Architecture", "CUDA Cores", "FP32 TFLOPS", "Release Date"]
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


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
    return None if value is None else fixed(value, digits)


def ceilings(r: Result) -> dict[str, float]:
    """Measured ceilings of a `dlbench system` record, named by column; {} for other results."""
    if r.workload != "system" or r.status != "ok":
        return {}
    found: dict[str, float] = {}
    for p in PRECISIONS:
        value = _value(r, f"matmul_{p}_tflops")
        if value is not None:
            found[f"Measured {p.upper()} TFLOPS"] = value
    copy = _value(r, "copy_gbs")
    if copy is not None:
        found["Measured copy GB/s"] = copy
    return found


def _value(r: Result, name: str) -> float | None:
    # System records hold each ceiling flat in metrics, and with its method under "ceilings".
    value: Any = r.metrics.get(name)
    if value is None and isinstance(r.metrics.get("ceilings"), dict):
        entry = r.metrics["ceilings"].get(name)
        value = entry.get("value") if isinstance(entry, dict) else entry
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def measured_by_gpu(results: list[Result]) -> dict[str, dict[str, float]]:
    """Latest measured ceilings for each GPU name."""
    out: dict[str, dict[str, float]] = {}
    for r in sorted(results, key=lambda r: (is_survey(r), r.started)):  # a `dlbench system` survey wins
        found = ceilings(r)
        if found and str(r.metrics.get("device", "")).startswith("cuda"):  # CPU ceilings are no GPU's
            out.setdefault(r.system_label, {}).update(found)
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
