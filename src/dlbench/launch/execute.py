"""Run one spec in this process and turn whatever happens into a Result: an out-of-memory
error becomes status 'oom', any other failure 'error'. Only user errors propagate."""

from __future__ import annotations

import traceback

import torch

from dlbench import workloads
from dlbench.errors import BenchmarkFailed, UserError
from dlbench.figures import sig
from dlbench.measure.loop import Progress, _no_progress, combine
from dlbench.measure.profile import headline
from dlbench.models import registry
from dlbench.results.record import Result, now
from dlbench.spec import BenchmarkSpec
from dlbench.system.records import NEW_CEILING, annotate, utilisation_text
from dlbench.workloads import optimize, tuning
from dlbench.workloads.tuning import Tuned
from dlbench.workloads.runtime import is_oom, precision, release_memory, resolve_device


def execute(spec: BenchmarkSpec, system: dict, *, progress: Progress = _no_progress,
            suite: str | None = None, tag: str | None = None, tuned: Tuned | None = None) -> Result:
    """`tuned`: what an earlier run tuned for this spec on this machine (launch/tuning.py), for the workload."""
    device = resolve_device(spec.device)
    optimize.check_level(spec.optimize, device)
    workload = workloads.get(spec.workload)
    result = Result(spec=spec.to_dict(), system=system, suite=suite, tag=tag, title=registry.title(spec.model))
    result.metrics.update(device=str(device), parameters=parameter_count(spec.model))
    if device.type == "cuda":
        torch.cuda.init()  # the memory statistics refuse a device before CUDA has started
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with precision(spec.precision, device), optimize.switches(spec.optimize, progress), tuning.given(tuned):
            figures, samples = workload.run(optimize.effective_spec(spec), device, progress)
            measured = combine(workloads.measurement(figures), optimize.recorded_switches(spec.optimize))
        result.traces.update(measured.traces)
        _settle(result, measured.settled)
        result.metrics.update(measured.to_metrics())
        result.samples = samples
    except UserError:
        raise
    except BenchmarkFailed as error:
        result.status, result.error = "error", str(error)
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
        result.metrics.update(peak_memory(device))
        release_memory(device)
    result.finished = now()
    return result


def with_utilisation(result: Result, known: list[Result], *, carry: bool = False) -> Result | None:
    """FLOP utilisation against the measured ceiling for the precision that ran, in the process that
    measured the run, after its timed window: a ceiling missing from `known` (system records) is
    measured here first. The new system record is returned, or with `carry` sent along in the
    result's traces for the launcher to store."""
    from dlbench.system.survey import quick_ceiling

    device = torch.device(str(result.metrics.get("device") or "cpu"))
    new = annotate(result, known, lambda precision: quick_ceiling(result.system, device, precision))
    if new is not None and carry:
        result.traces[NEW_CEILING] = new.to_dict()
    return new


def _settle(result: Result, chosen: dict) -> None:
    """Spec fields a workload chose itself (volume's --block auto: precision, layout) are what the
    record says ran; what was asked stays in the metrics."""
    asked = {k: result.spec.get(k) for k, v in chosen.items() if result.spec.get(k) != v}
    if asked:
        result.spec.update(chosen)
        result.metrics["asked"] = asked


def parameter_count(model: str) -> int | None:
    """The model's parameters, counted on the meta device (no memory, no time); None for a model
    whose parameters exist only once it has seen an input (lazy modules) or a model file."""
    try:
        with torch.device("meta"):
            return sum(p.numel() for p in registry.resolve(model).build().parameters())
    except Exception:  # noqa: BLE001 - a count is a courtesy; the run itself reports real errors
        return None


def peak_memory(device: torch.device) -> dict:
    """Peak device memory the run allocated (MiB), and this process's peak resident host memory."""
    import resource

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"peak_memory_mb": gpu_mb, "peak_host_rss_mb": rss_mb}


def _batch(result: Result) -> str:
    """' batch N' where the workload takes a batch: the lines of a sweep differ only by it."""
    batch = result.spec.get("batch")
    if batch is None or result.workload not in workloads.names():
        return ""  # a failed run of a workload this process never loaded still gets its line
    return f" batch {batch}" if "batch" in workloads.get(result.workload).general else ""


def describe(result: Result) -> str:
    """One line about a result, for the terminal."""
    if result.status == "ok":
        line = workloads.get(result.workload).describe(result.measured)
        return f"ok {result.spec['workload']} {result.model}{_batch(result)} on {result.system_label}: {line}" + \
            common_suffix(result.metrics)
    if result.status == "oom":
        return f"oom {result.workload} {result.model}: out of memory at batch {result.metrics.get('batch_tried')}"
    return f"{result.status} {result.workload} {result.model}{_batch(result)}: {result.error or ''}"


ITEM_LABELS = {"mvox": "Mvox"}  # the unit as the run's throughput names it


def _energy_per_item(metrics: dict) -> str:
    """' (0.22 J/Mvox)': energy in the unit the user counts in (a volume's step is a tile)."""
    for key, value in metrics.items():
        unit = key.removeprefix("energy_j_per_")
        if unit != key and unit != "step" and value is not None:
            return f" ({sig(value)} J/{ITEM_LABELS.get(unit, unit)})"
    return ""


def common_suffix(metrics: dict) -> str:
    """FLOP utilisation, energy and throttling, where measured: the same for every workload."""
    parts = []
    if metrics.get("compile_s") is not None:
        warm = {True: " (cache warm)", False: " (cache cold)"}.get((metrics.get("compile_cache") or {}).get("warm"), "")
        log = f", compiler output in {metrics['compile_log']}" if metrics.get("compile_log") else ""
        parts.append(f"--optimize {metrics.get('optimize')}: compile {sig(metrics['compile_s'])} s{warm}, matches eager{log}")
    if metrics.get("achieved_tflops"):
        share = utilisation_text(metrics)
        parts.append(f"{sig(metrics['achieved_tflops'])} TFLOP/s" + (f", {share}" if share else ""))
    if metrics.get("energy_j_per_step") is not None:
        parts.append(f"{sig(metrics['energy_j_per_step'])} J/step" + _energy_per_item(metrics))
    if metrics.get("throttled"):
        parts.append("THROTTLED: " + ", ".join(metrics.get("throttle_reasons") or []))
    if metrics.get("profile"):
        parts.append(headline(metrics["profile"]))
    if metrics.get("tuned_from") and not metrics.get("block_choice"):  # volume's choice says it itself
        parts.append(f"batch {Tuned({}, **metrics['tuned_from']).said('searches again')}")
    if metrics.get("wall_to_result_s") is not None:
        parts.append(f"{sig(metrics['wall_to_result_s'])} s from start to result")
    return "; " + "; ".join(parts) if parts else ""
