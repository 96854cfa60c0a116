"""Where a step's time goes: a few extra steps under torch.profiler, after the measured window.

Two passes keep the profiler's own cost out of the split. The timing pass records only device
activity (kernels, copies) for `steps` steps, so the host launches kernels almost as fast as in
the measured window; the detail pass records one step with host operators and their input
shapes, which give the bytes the elementwise and reduction kernels move. On a CPU one pass of
host operators does both.

The split is made on the device timeline: each instant of the profiled steps goes to one class
(when streams overlap, to the one that ranks first in CLASSES: compute hides the copies and the
communication it overlaps), and the instants with nothing running are idle. The classes thus add
up to the profiled step exactly; `coverage` says how that step compares with the measured one.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Callable

import torch

from dlbench.measure.kernels import CLASSES, CPU_IDLE_LABEL, LABELS
from dlbench.measure.trace import annotation_span, kernel_bytes, operator_moves, split_device, split_host

ADDS_UP = 0.05  # the profiled step within this of the measured one
PAUSE_S = 0.005  # either side of the mark between the warm step and the profiled ones


# ---- the summary ------------------------------------------------------------------------

def summarise(step_s: float, classes: dict[str, dict], top: list[dict], *, steps: int, measured_step_s: float | None,
              flops_per_step: float | None, moved: dict[str, dict[str, float]], on_gpu: bool) -> dict[str, Any]:
    """The compact record: each class's seconds per step and share, its FLOP/s or bytes/s where
    known, the ten costliest kernels, and whether the classes add up to the measured step."""
    profiled = {"step_s": step_s, "idle_s": classes["idle"]["seconds"]}
    if on_gpu:
        step_s, classes = launch_cost_removed(step_s, measured_step_s, classes)
    matmul_s = classes["tensor_core"]["kernel_seconds"] + classes["matmul"]["kernel_seconds"]
    out_classes = {}
    for cls in CLASSES:
        c = classes[cls]
        if cls != "idle" and not c["seconds"] and not c["kernel_seconds"]:
            continue
        entry: dict[str, Any] = {"seconds": c["seconds"], "share": c["seconds"] / step_s if step_s else 0.0,
                                 "kernel_seconds": c["kernel_seconds"]}
        if cls in ("tensor_core", "matmul") and flops_per_step and matmul_s:
            entry["flops"] = flops_per_step * (c["kernel_seconds"] / matmul_s)  # one class alone keeps the count exact
            entry["flop_s"] = entry["flops"] / c["kernel_seconds"] if c["kernel_seconds"] else None
        known = moved.get(cls)
        if known and known["bytes"] and known["bytes_coverage"] >= 0.5 and c["kernel_seconds"]:
            entry["bytes"] = known["bytes"] / known["bytes_coverage"]
            entry["bytes_s"] = entry["bytes"] / c["kernel_seconds"]
            entry["bytes_coverage"] = known["bytes_coverage"]
        out_classes[cls] = entry
    for k in top:
        k["share"] = k["seconds"] / step_s if step_s else 0.0
    summary: dict[str, Any] = {"steps": steps, "step_s": step_s, "measured_step_s": measured_step_s,
                               "device": "cuda" if on_gpu else "cpu", "classes": out_classes, "top_kernels": top,
                               "flops_per_step": flops_per_step}
    summary.update(coverage(step_s, measured_step_s, classes))
    if step_s != profiled["step_s"]:
        summary["profiled"] = profiled
        summary["note"] = (f"under the profiler the step took {profiled['step_s'] * 1e3:.2f} ms, idle "
                           f"{profiled['idle_s'] * 1e3:.2f} ms of it: the profiler's cost per kernel launch; the "
                           f"kernels' own times are not affected, so idle is the measured step less the time "
                           f"kernels ran")
    return summary


def launch_cost_removed(step_s: float, measured_step_s: float | None, classes: dict[str, dict]):
    """The step and classes with idle as the measured step less the device's busy time, where the
    profiled step is the longer one and its busy time alone fits the measured step: the profiler
    adds a few microseconds to every launch (in a launch-bound step a large share, all of it
    idle), while the kernels' durations, read from the device, stay true."""
    if not measured_step_s or step_s <= measured_step_s * (1 + ADDS_UP):
        return step_s, classes
    busy = step_s - classes["idle"]["seconds"]
    if busy > measured_step_s * (1 + ADDS_UP):
        return step_s, classes  # the kernels themselves ran longer: coverage says so
    idle = max(0.0, measured_step_s - busy)
    return busy + idle, {**classes, "idle": {**classes["idle"], "seconds": idle}}


def coverage(step_s: float, measured_step_s: float | None, classes: dict[str, dict]) -> dict[str, Any]:
    """How the classes (which add up to the profiled step) compare with the measured step, and why
    where they differ by more than ADDS_UP."""
    if not step_s:
        return {"coverage": None, "adds_up": False, "note": "nothing ran on the device during the profiled steps"}
    if not measured_step_s:
        return {"coverage": None, "adds_up": True, "note": "no measured step to compare with"}
    ratio = step_s / measured_step_s
    if abs(ratio - 1) <= ADDS_UP:
        return {"coverage": ratio, "adds_up": True, "note": ""}
    idle = classes["idle"]["seconds"] / step_s
    if ratio > 1:
        why = (f"profiled steps took {ratio - 1:.0%} longer than measured ones: the profiler's own cost, or other "
               f"work on the machine, made them slower (idle {idle:.0%} of the profiled step); shares are of the "
               f"profiled step")
    else:
        why = (f"profiled steps took {1 - ratio:.0%} less than measured ones: the measured steps waited for something "
               f"the profiled ones did not (data, other processes, clocks)")
    return {"coverage": ratio, "adds_up": False, "note": why}


# ---- recording ----------------------------------------------------------------------------

def tensor_cores_likely(device: torch.device) -> bool:
    """Autocast to a half type or TF32 on: matmul kernels whose names do not say run on tensor cores."""
    try:
        autocast = torch.is_autocast_enabled(device.type)
    except TypeError:  # older signature: CUDA only
        autocast = torch.is_autocast_enabled() if device.type == "cuda" else False
    return bool(autocast) or torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def record(step: Callable[[], None], steps: int, device: torch.device, *, host: bool, shapes: bool,
           path: str) -> dict:
    """Run `steps` steps under the profiler, write the Chrome trace to `path` and return it parsed."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = ([ProfilerActivity.CPU] if host else []) + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    _sync(device)
    with profile(activities=activities, record_shapes=shapes) as prof:
        # One step first, left out of the split: the profiler's start-up cost falls on it. The
        # mark sits in an idle pause after it, so clocks that disagree by milliseconds still agree
        # on which activity came after.
        step()
        _sync(device)
        time.sleep(PAUSE_S)
        mark = time.time()
        time.sleep(PAUSE_S)
        with record_function("dlbench.profile"):
            for _ in range(steps):
                step()
            _sync(device)
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    # Kineto's times are microseconds since its base time (since the epoch where it has none).
    trace["dlbench_start_us"] = mark * 1e6 - float(trace.get("baseTimeNanoseconds") or 0) / 1e3
    return trace


def profile_steps(step: Callable[[], None], device: torch.device, steps: int, *, measured_step_s: float | None,
                  flops_per_step: float | None, trace_path: str | None = None) -> dict[str, Any]:
    """Profile `steps` more steps and return the compact summary (never the trace itself);
    `trace_path` keeps the detailed trace (host operators with shapes and the kernels they
    launched) for Perfetto or TensorBoard."""
    start = time.perf_counter()
    try:
        summary = _profile(step, device, steps, measured_step_s, flops_per_step, trace_path)
    except Exception as error:  # noqa: BLE001 - the measurement before it stands; the record says why
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        summary = {"steps": steps, "error": f"{type(error).__name__}: {first}"}
    summary.update(wall_s=time.perf_counter() - start, trace=trace_path)
    return summary


def _profile(step: Callable[[], None], device: torch.device, steps: int, measured_step_s: float | None,
             flops_per_step: float | None, trace_path: str | None) -> dict[str, Any]:
    likely = tensor_cores_likely(device)
    on_gpu = device.type == "cuda"
    with tempfile.TemporaryDirectory(prefix="dlbench-profile-") as folder:
        timing_path = os.path.join(folder, "timing.json")
        if on_gpu:
            timing = record(step, steps, device, host=False, shapes=False, path=timing_path)
            detail_path = trace_path or os.path.join(folder, "detail.json")
            detail = record(step, 1, device, host=True, shapes=True, path=detail_path)
            step_s, classes, top = split_device(timing, steps, likely)
            moved = kernel_bytes(detail, likely)
        else:
            timing = record(step, steps, device, host=True, shapes=True, path=trace_path or timing_path)
            window = annotation_span(timing, "dlbench.profile") or (0.0, 0.0)
            step_s, classes, top = split_host(timing, steps, window)
            moved = operator_moves(timing, window)
    if not classes:
        classes = {cls: {"seconds": 0.0, "kernel_seconds": 0.0} for cls in CLASSES}
    return summarise(step_s, classes, top, steps=steps, measured_step_s=measured_step_s,
                     flops_per_step=flops_per_step, moved=moved, on_gpu=on_gpu)


def headline(summary: dict[str, Any], classes: int = 3) -> str:
    """The run's line for the terminal: the largest classes and the time profiling took."""
    if summary.get("error"):
        return f"profile failed ({summary['error']}); the measurement stands"
    ranked = sorted(summary.get("classes", {}).items(), key=lambda kv: -kv[1].get("share", 0.0))[:classes]
    idle = CPU_IDLE_LABEL if summary.get("device") == "cpu" else LABELS["idle"]
    names = {**LABELS, "idle": idle}
    parts = ", ".join(f"{names.get(cls, cls)} {c.get('share', 0.0):.0%}" for cls, c in ranked)
    check = "" if summary.get("adds_up") else " (profiled step off the measured one: see `dlbench doctor`)"
    return f"profile ({summary.get('steps')} steps, {summary.get('wall_s', 0.0):.1f} s): {parts}{check}"


def compact(summary: dict[str, Any]) -> dict[str, Any]:
    """One rank's figures for the record of a run under torchrun: shares and the step only."""
    return {"step_s": summary.get("step_s"), "coverage": summary.get("coverage"),
            "shares": {cls: c["share"] for cls, c in summary.get("classes", {}).items()}}
