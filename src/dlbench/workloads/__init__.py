"""Workloads: one module each, with `OPTIONS` (its settings beyond the general spec, with
defaults), `run(spec, device, progress) -> (metrics, samples)` and `describe(metrics) -> str`
(one line for the terminal). Every workload's metrics hold `throughput` and
`throughput_unit` (img/s, Mvox/s, …) and its samples hold `step` (seconds per step).
A workload adds `measured.common_metrics(items_per_step, unit)` (FLOPs, GPU monitor,
energy) to its metrics; the 'traces' entry in there goes to Result.traces.

`execute` wraps any of them into a Result: an out-of-memory error becomes a result with
status 'oom', any other failure one with status 'error'. Only user errors propagate.
"""

from __future__ import annotations

import importlib
import traceback
from typing import TYPE_CHECKING

from dlbench.errors import UserError
from dlbench.measure.loop import Progress, _no_progress
from dlbench.models.registry import title
from dlbench.results.record import Result, now
from dlbench.workloads.runtime import is_oom, precision, release_memory, resolve_device

if TYPE_CHECKING:
    from dlbench.spec import BenchmarkSpec

WORKLOADS = {
    "fwdbwd": "dlbench.workloads.fwdbwd",
    "train": "dlbench.workloads.train",
    "infer": "dlbench.workloads.infer",
    "smooth": "dlbench.workloads.smooth",
    "volume": "dlbench.workloads.volume",
    "converge": "dlbench.workloads.converge",
}


def execute(spec: "BenchmarkSpec", system: dict, *, progress: Progress = _no_progress,
            suite: str | None = None, tag: str | None = None) -> Result:
    from dlbench.workloads import optimize

    device = resolve_device(spec.device)
    optimize.check_level(spec.optimize, device)
    module = importlib.import_module(WORKLOADS[spec.workload])
    result = Result(spec=spec.to_dict(), system=system, suite=suite, tag=tag)
    result.title = title(spec.model)
    result.metrics["device"] = str(device)
    try:
        with precision(spec.precision, device), optimize.switches(spec.optimize):
            metrics, samples = module.run(optimize.effective_spec(spec), device, progress)
        result.traces.update(metrics.pop("traces", {}))
        result.metrics.update(metrics)
        result.samples = samples
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - every failure becomes a stored result
        if is_oom(error):
            result.status = "oom"
            result.metrics["batch_tried"] = spec.batch
            result.error = str(error).splitlines()[0][:500]
        else:
            result.status = "error"
            result.error = "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]
            result.traces["traceback"] = traceback.format_exc()[-8000:]
    finally:
        release_memory(device)
    result.finished = now()
    return result


def describe(result: Result) -> str:
    """One line about a result, for the terminal."""
    if result.status == "ok":
        module = importlib.import_module(WORKLOADS[result.workload])
        line = f"ok {result.spec['workload']} {result.model} on {result.system_label}: {module.describe(result.metrics)}"
        return line + common_suffix(result.metrics)
    if result.status == "oom":
        return f"oom {result.workload} {result.model}: out of memory at batch {result.metrics.get('batch_tried')}"
    return f"{result.status} {result.workload} {result.model}: {result.error or ''}"


def common_suffix(metrics: dict) -> str:
    """FLOP utilisation, energy and throttling, where measured: the same for every workload."""
    parts = []
    if metrics.get("compile_s") is not None:
        parts.append(f"--optimize {metrics.get('optimize')}: compile {metrics['compile_s']:.1f} s, matches eager")
    if metrics.get("achieved_tflops"):
        text = f"{metrics['achieved_tflops']:.2f} TFLOP/s"
        if metrics.get("ceiling_fraction") is not None:
            text += f" ({metrics['ceiling_fraction']:.0%} of the measured ceiling)"
        elif metrics.get("datasheet_fraction") is not None:
            text += f" ({metrics['datasheet_fraction']:.0%} of the datasheet peak)"
        parts.append(text)
    if metrics.get("energy_j_per_step") is not None:
        parts.append(f"{metrics['energy_j_per_step']:.1f} J/step")
    if metrics.get("throttled"):
        parts.append("THROTTLED: " + ", ".join(metrics.get("throttle_reasons") or []))
    return "; " + "; ".join(parts) if parts else ""
