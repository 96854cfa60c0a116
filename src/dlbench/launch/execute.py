"""Run one spec in this process and turn whatever happens into a Result: an out-of-memory
error becomes status 'oom', any other failure 'error'. Only user errors propagate."""

from __future__ import annotations

import traceback

import torch

from dlbench import workloads
from dlbench.errors import BenchmarkFailed, UserError
from dlbench.figures import sig
from dlbench.measure import flops as flop_count
from dlbench.measure.loop import Progress, _no_progress
from dlbench.measure.profile import headline
from dlbench.models import registry
from dlbench.results.measurement import Measurement, Monitor, Run, Utilisation, combine
from dlbench.results.record import Result, now
from dlbench.spec import BenchmarkSpec
from dlbench.system.records import NEW_CEILING, annotate, utilisation_text
from dlbench.workloads import optimize, tuning
from dlbench.workloads.tuning import Tuned
from dlbench.workloads.runtime import is_oom, precision, release_memory, resolve_device


def execute(spec: BenchmarkSpec, system: dict, *, progress: Progress = _no_progress,
            suite: str | None = None, tag: str | None = None, tuned: Tuned | None = None,
            flops: int | None = None) -> Result:
    """`tuned`: what an earlier run tuned for this spec on this machine (launch/tuning.py), for the workload.
    `flops`: a step's FLOPs as an earlier run of the same work counted them (launch/flopcount.py)."""
    device = resolve_device(spec.device)
    optimize.check_level(spec.optimize, device)
    workload = spec.declared
    result = Result(spec=spec.to_dict(), system=system, suite=suite, tag=tag, title=registry.title(spec.model))
    result.add(Run(device=str(device)), Utilisation(parameters=parameter_count(spec.model)))
    if device.type == "cuda":
        torch.cuda.init()  # the memory statistics refuse a device before CUDA has started
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with precision(spec.precision, device), optimize.switches(spec.optimize, progress), tuning.given(tuned), \
                flop_count.given(flops):
            figures, samples = workload.run(optimize.effective_spec(spec), device, progress)
            measured = combine(workloads.measurement(figures), optimize.recorded_switches(spec.optimize))
        result.traces.update(measured.traces)
        _settle(result, measured.settled)
        result.add(measured)
        result.samples = samples
    except UserError:
        raise
    except BenchmarkFailed as error:
        result.status, result.error = "error", str(error)
    except Exception as error:  # noqa: BLE001 - every failure becomes a stored result
        if is_oom(error):
            result.status = "oom"
            result.add(Run(batch_tried=spec.batch))
            result.error = str(error).splitlines()[0][:500]
        else:
            result.status = "error"
            result.error = "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]
            result.traces["traceback"] = traceback.format_exc()[-8000:]
    finally:
        _tidy(result, device)
    result.finished = now()
    return result


def _tidy(result: Result, device: torch.device) -> None:
    """The peak memory, then memory given back. A run that broke the CUDA context (an illegal
    memory access) fails every later CUDA call: the run's own error stays its result."""
    try:
        result.add(peak_memory(device))
        release_memory(device)
    except Exception as error:  # noqa: BLE001 - the result is still stored
        if result.status == "ok":
            result.status = "error"
            result.error = "".join(traceback.format_exception_only(type(error), error)).strip()[:2000]


def with_utilisation(result: Result, known: list[Result], *, carry: bool = False) -> Result | None:
    """FLOP utilisation against the measured ceiling for the precision that ran, in the process that
    measured the run, after its timed window: a ceiling missing from `known` (system records) is
    measured here first. The new system record is returned, or with `carry` sent along in the
    result's traces for the launcher to store."""
    from dlbench.system.survey import quick_ceiling

    device = torch.device(str(result.measured.device or "cpu"))
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
        result.add(Run(asked=asked))


def parameter_count(model: str) -> int | None:
    """The model's parameters, counted on the meta device (no memory, no time); None for a model
    whose parameters exist only once it has seen an input (lazy modules) or a model file."""
    try:
        return sum(p.numel() for p in registry.build_on_meta(registry.resolve(model)).parameters())
    except Exception:  # noqa: BLE001 - a count is a courtesy; the run itself reports real errors
        return None


def peak_memory(device: torch.device) -> Monitor:
    """Peak device memory the run allocated (MiB), and this process's peak resident host memory."""
    import resource

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return Monitor(peak_memory_mb=gpu_mb, peak_host_rss_mb=rss_mb)


def _batch(result: Result, workload: workloads.Workload | None) -> str:
    """' batch N' where the workload takes a batch: the lines of a sweep differ only by it."""
    batch = result.setup.batch
    if batch is None or workload is None:
        return ""  # a failed run of a workload this process never loaded still gets its line
    return f" batch {batch}" if "batch" in workload.general else ""


def describe(result: Result) -> str:
    """One line about a result, for the terminal. A record names its workload, looked up here once:
    it may come from a child process or another machine, with no spec beside it."""
    known = result.status == "ok" or result.workload in workloads.names()
    workload = workloads.get(result.workload) if known else None
    if result.status == "ok":
        m = result.measured
        return f"ok {result.spec['workload']} {result.model}{_batch(result, workload)} on {result.system_label}: " \
            f"{workload.describe(m)}" + common_suffix(m)
    if result.status == "oom":
        return f"oom {result.workload} {result.model}: out of memory at batch {result.measured.run.batch_tried}"
    return f"{result.status} {result.workload} {result.model}{_batch(result, workload)}: {result.error or ''}"


ITEM_LABELS = {"mvox": "Mvox"}  # the unit as the run's throughput names it


def _energy_per_item(m: Measurement) -> str:
    """' (0.22 J/Mvox)': energy in the unit the user counts in (a volume's step is a tile)."""
    found = m.energy_per_item()
    return f" ({sig(found[1])} J/{ITEM_LABELS.get(found[0], found[0])})" if found else ""


def common_suffix(m: Measurement) -> str:
    """FLOP utilisation, energy and throttling, where measured: the same for every workload."""
    parts = []
    if m.window.compile_s is not None:
        warm = {True: " (cache warm)", False: " (cache cold)"}.get((m.run.compile_cache or {}).get("warm"), "")
        log = f", compiler output in {m.run.compile_log}" if m.run.compile_log else ""
        parts.append(f"--optimize {m.run.optimize}: compile {sig(m.window.compile_s)} s{warm}, matches eager{log}")
    if m.utilisation.achieved_tflops:
        share = utilisation_text(m.utilisation)
        parts.append(f"{sig(m.utilisation.achieved_tflops)} TFLOP/s" + (f", {share}" if share else ""))
    if m.monitor.energy_j_per_step is not None:
        parts.append(f"{sig(m.monitor.energy_j_per_step)} J/step" + _energy_per_item(m))
    if m.monitor.throttled:
        parts.append("THROTTLED: " + ", ".join(m.monitor.throttle_reasons or []))
    if m.profile:
        parts.append(headline(m.profile))
    if m.run.tuned_from and not m.volume.block_choice:  # volume's choice says it itself
        parts.append(f"batch {Tuned({}, **m.run.tuned_from).said('searches again')}")
    if m.window.wall_to_result_s is not None:
        parts.append(f"{sig(m.window.wall_to_result_s)} s from start to result")
    return "; " + "; ".join(parts) if parts else ""
