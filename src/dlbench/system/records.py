"""Finding a machine's ceilings among stored results, and FLOP utilisation against them."""

from __future__ import annotations

from typing import Any, Iterable

from dlbench.results.record import Result, system_label
from dlbench.system.datasheet import lookup

SYSTEM_WORKLOAD = "system"
_PRECISION_CEILING = {"fp32": "matmul_fp32_tflops", "tf32": "matmul_tf32_tflops",
                      "fp16": "matmul_fp16_tflops", "bf16": "matmul_bf16_tflops", "fp8": "matmul_fp8_tflops"}


def is_system_record(result: Result) -> bool:
    return result.workload == SYSTEM_WORKLOAD


def machine_key(result: Result) -> tuple[str, str]:
    """(host, device label): the machine and the GPU (or CPU) a result ran on."""
    device = str(result.metrics.get("device", result.spec.get("device", "")))
    return result.system.get("host", ""), system_label(result.system, device)


def ceilings_for(result: Result, candidates: Iterable[Result]) -> Result | None:
    """The newest system record measured on the same host and the same kind of device."""
    key = machine_key(result)
    matching = [r for r in candidates
                if is_system_record(r) and r.status == "ok" and machine_key(r) == key]
    return max(matching, key=lambda r: r.started) if matching else None


def ceiling_name(precision: str) -> str:
    return _PRECISION_CEILING.get(precision, "matmul_fp32_tflops")


def datasheet_tflops(result: Result) -> float | None:
    label = machine_key(result)[1]
    spec = lookup(label)
    return spec.peak_tflops(result.spec.get("precision", "fp32")) if spec else None


def utilisation(result: Result, record: Result | None) -> dict[str, Any]:
    """Achieved TFLOP/s as a fraction of the measured ceiling (and of the datasheet peak)
    for the precision the result used. Empty where a figure is missing."""
    achieved = result.metrics.get("achieved_tflops")
    if not achieved:
        return {}
    out: dict[str, Any] = {}
    if record is not None:
        name = ceiling_name(result.spec.get("precision", "fp32"))
        ceiling = record.metrics.get(name)
        if ceiling:
            out.update({"ceiling_tflops": ceiling, "ceiling_fraction": achieved / ceiling,
                        "ceiling_record": record.id})
    peak = datasheet_tflops(result)
    if peak:
        out.update({"datasheet_tflops": peak, "datasheet_fraction": achieved / peak})
    return out


def annotate(result: Result, candidates: Iterable[Result]) -> Result:
    """Add utilisation metrics to a workload result (in place) from the stored ceilings."""
    if result.status == "ok" and not is_system_record(result):
        result.metrics.update(utilisation(result, ceilings_for(result, candidates)))
    return result
