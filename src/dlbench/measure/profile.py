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
import re
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch

from dlbench.measure.intervals import exclusive_time, union_length

# Ranked: where streams overlap, the instant goes to the first.
CLASSES = ("tensor_core", "matmul", "elementwise", "reduction", "other", "d2d", "h2d", "d2h", "communication", "idle")
LABELS = {
    "tensor_core": "tensor-core conv/matmul", "matmul": "other conv/matmul",
    "elementwise": "elementwise/normalisation/activation", "reduction": "reductions/pooling",
    "other": "other kernels", "d2d": "device copies and fills", "h2d": "host-to-device copies",
    "d2h": "device-to-host copies", "communication": "communication (NCCL)", "idle": "GPU idle",
}
CPU_IDLE_LABEL = "outside operators (Python, dispatch, views)"
TOP_KERNELS = 10
NAME_CHARS = 160
ADDS_UP = 0.05  # the profiled step within this of the measured one
PAUSE_S = 0.005  # either side of the mark between the warm step and the profiled ones

_TENSOR_CORE = re.compile(r"h884|h1688|h16816|s1688|s16816|i8816|hmma|wgmma|gmma|tensorop|tf32|bf16|f16|fp16|"
                          r"_16x8x16|e4m3|e5m2")
_PLAIN_MATMUL = re.compile(r"sgemm|dgemm|simt|winograd|fft|f32f32_f32f32|ffma")
_MATMUL = re.compile(r"gemm|conv(?!ert)|winograd|fft|xmma|cutlass|cublas|cudnn_infer|wgrad|dgrad|fprop|implicit|"
                     r"matmul|splitk|triton_tem|_mm_|_bmm_|\bmm\b|addmm|linear|gemv")
_NORMALISE = re.compile(r"norm|bn_|welford")
_REDUCE = re.compile(r"reduce|pool|softmax|argmax|argmin|cub::|scan|sort|topk|bincount|histogram|triton_red|"
                     r"triton_per|\bsum\b|\bmean\b|\bmax\b|\bmin\b|nll_loss|cross_entropy")
# Host operators that only make views or allocate: on a CPU their time is framework overhead.
_NO_WORK = re.compile(r"^aten::(view|_?reshape|_unsafe_view|empty.*|as_strided_?|t|transpose|expand|detach|"
                      r"resize_|flatten|unsqueeze|squeeze|permute|select|slice|alias|lift_fresh|to|"
                      r"contiguous|set_|result_type|item|_local_scalar_dense|zeros?_?like|ones_like)$|^detach")


def classify_kernel(name: str, tensor_cores_likely: bool = False) -> str:
    """A GPU kernel's class from its name. A matmul kernel whose name says neither way is taken as
    tensor-core when the precision makes that likely (autocast to a half type, TF32 on)."""
    lower = name.lower()
    if "nccl" in lower:
        return "communication"
    # Inductor's and ATen's own kinds first: their names also list the operators fused in
    # (triton_poi_fused_convolution_relu is the convolution's bias and ReLU, not a convolution).
    if lower.startswith(("triton_poi", "triton_red", "triton_per")):
        return "elementwise" if lower.startswith("triton_poi") else "reduction"
    if "elementwise_kernel" in lower:
        return "elementwise"
    if _MATMUL.search(lower) and not _NORMALISE.search(lower):
        if _TENSOR_CORE.search(lower):
            return "tensor_core"
        if _PLAIN_MATMUL.search(lower):
            return "matmul"
        return "tensor_core" if tensor_cores_likely else "matmul"
    if _NORMALISE.search(lower):
        return "elementwise"
    if _REDUCE.search(lower):
        return "reduction"
    return "elementwise"


def classify_copy(name: str) -> str:
    """A memcpy or memset on the device timeline (Kineto names: 'Memcpy HtoD (Pinned -> Device)')."""
    if "HtoD" in name:
        return "h2d"
    if "DtoH" in name:
        return "d2h"
    return "d2d"


def classify_operator(name: str) -> str:
    """A host operator's class, for runs on the CPU (no kernels there; the innermost operator works)."""
    lower = name.lower()
    if re.search(r"gloo|nccl|c10d|all_?reduce|allgather|broadcast", lower):
        return "communication"
    if _NO_WORK.search(lower):
        return "idle"
    if re.search(r"copy|clone", lower):
        return "d2d"
    if re.search(r"conv|mm\b|addmm|bmm|matmul|linear|baddbmm|mkldnn", lower):
        return "matmul"
    if _NORMALISE.search(lower):
        return "elementwise"
    if _REDUCE.search(lower) or "pool" in lower:
        return "reduction"
    return "elementwise"


# ---- reading a Chrome trace ------------------------------------------------------------

_DTYPE_BYTES = {"float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "long int": 8, "int": 4,
                "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::float8_e4m3fn": 1,
                "c10::float8_e5m2": 1, "c10::complex<float>": 8}


def operator_bytes(args: dict) -> int | None:
    """Bytes an operator moves, estimated from its recorded inputs: every tensor input read once
    and one output as large as the largest input written. None without tensor shapes."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    sizes = []
    for shape, kind in zip(dims, types):
        size = _DTYPE_BYTES.get(str(kind).lower())
        if size and isinstance(shape, list) and shape and all(isinstance(n, int) for n in shape):
            numel = 1
            for n in shape:
                numel *= n
            sizes.append(numel * size)
    return sum(sizes) + max(sizes) if sizes else None


def device_events(trace: dict) -> tuple[list[dict], int]:
    """Kernels, copies and fills on the device timeline after the profiled steps began, each
    {name, kind, start, end, args}, and how many warm steps they include: 0, or 1 where the
    mark falls outside the device's activity (a profiler whose clock dlbench does not know)."""
    events = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            start = float(e["ts"])
            events.append({"name": str(e.get("name", "")), "kind": e["cat"], "start": start,
                           "end": start + float(e.get("dur", 0)), "args": e.get("args") or {}})
    begin = trace.get("dlbench_start_us")
    if begin is None:
        return events, 0
    after = [e for e in events if e["start"] >= begin]
    return (after, 0) if after and len(after) < len(events) else (events, 1)


def host_operators(trace: dict) -> list[dict]:
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            start = float(e["ts"])
            out.append({"name": str(e.get("name", "")), "start": start, "end": start + float(e.get("dur", 0)),
                        "args": e.get("args") or {}})
    return out


def annotation_span(trace: dict, name: str) -> tuple[float, float] | None:
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in trace.get("traceEvents", [])
             if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == name]
    return (min(s for s, _ in spans), max(t for _, t in spans)) if spans else None


def _class_of(event: dict, tensor_cores_likely: bool) -> str:
    if event["kind"] == "kernel":
        return classify_kernel(event["name"], tensor_cores_likely)
    return classify_copy(event["name"])


def kernel_bytes(detail: dict, tensor_cores_likely: bool) -> dict[str, dict[str, float]]:
    """Per class: bytes the launching operators move (each operator once, split among its kernels
    of that class) and the share of the class's kernel time whose operator had shapes."""
    ops = {op["args"]["External id"]: op for op in host_operators(detail) if op["args"].get("External id") is not None}
    launches = {}
    for e in detail.get("traceEvents", []):
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and (e.get("args") or {}).get("correlation") is not None:
            launches[e["args"]["correlation"]] = e["args"].get("External id")
    by_op: dict[Any, list[dict]] = defaultdict(list)
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"bytes": 0.0, "known_s": 0.0, "total_s": 0.0})
    events, warm = device_events(detail)
    for event in events:
        cls = _class_of(event, tensor_cores_likely)
        seconds = (event["end"] - event["start"]) / 1e6
        out[cls]["total_s"] += seconds
        if event["kind"] == "gpu_memcpy" and event["args"].get("bytes"):
            out[cls]["bytes"] += float(event["args"]["bytes"])
            out[cls]["known_s"] += seconds
            continue
        op_id = event["args"].get("External id")
        if op_id not in ops:  # Kineto links the kernel to its launch, the launch to the operator
            op_id = launches.get(event["args"].get("correlation"))
        if op_id in ops:
            event["cls"], event["seconds"] = cls, seconds
            by_op[op_id].append(event)
    for op_id, kernels in by_op.items():
        moved = operator_bytes(ops[op_id]["args"])
        if moved is None:
            continue
        for k in kernels:
            out[k["cls"]]["bytes"] += moved / len(kernels)
            out[k["cls"]]["known_s"] += k["seconds"]
    return {cls: {"bytes": v["bytes"] / (1 + warm), "bytes_coverage": _ratio(v["known_s"], v["total_s"])}
            for cls, v in out.items()}


def split_device(trace: dict, steps: int, tensor_cores_likely: bool) -> tuple[float, dict[str, dict], list[dict]]:
    """(seconds per step, per-class {seconds, kernel_seconds}, kernels by total time) from a
    timing pass: the window runs from the first device activity to the last."""
    events, warm = device_events(trace)
    steps += warm
    if not events:
        return 0.0, {}, []
    for e in events:
        e["cls"] = _class_of(e, tensor_cores_likely)
    start, end = min(e["start"] for e in events), max(e["end"] for e in events)
    rank = {cls: -i for i, cls in enumerate(CLASSES)}
    exposed = exclusive_time([(e["start"], e["end"], rank[e["cls"]], e["cls"]) for e in events])
    busy = union_length([(e["start"], e["end"]) for e in events])
    classes = {cls: {"seconds": exposed.get(cls, 0.0) / 1e6 / steps, "kernel_seconds": 0.0} for cls in CLASSES}
    classes["idle"]["seconds"] = max(0.0, (end - start) - busy) / 1e6 / steps
    for e in events:
        classes[e["cls"]]["kernel_seconds"] += (e["end"] - e["start"]) / 1e6 / steps
    return (end - start) / 1e6 / steps, classes, _top(events, steps)


def split_host(trace: dict, steps: int, window: tuple[float, float]) -> tuple[float, dict[str, dict], list[dict]]:
    """The same split for a run on the CPU: each instant goes to the innermost operator running."""
    start, end = window
    ops = [op for op in host_operators(trace) if op["start"] >= start and op["end"] <= end]
    for op in ops:
        op["cls"] = classify_operator(op["name"])
    own = exclusive_time([(op["start"], op["end"], op["start"], i) for i, op in enumerate(ops)])
    classes = {cls: {"seconds": 0.0, "kernel_seconds": 0.0} for cls in CLASSES}
    leaves = []
    for i, op in enumerate(ops):
        seconds = own.get(i, 0.0) / 1e6 / steps
        classes[op["cls"]]["seconds"] += seconds
        classes[op["cls"]]["kernel_seconds"] += seconds
        leaves.append({"name": op["name"], "cls": op["cls"], "start": 0.0, "end": own.get(i, 0.0)})
    busy = union_length([(o["start"], o["end"]) for o in ops])
    classes["idle"]["seconds"] += max(0.0, (end - start) - busy) / 1e6 / steps
    return (end - start) / 1e6 / steps, classes, _top([l for l in leaves if l["cls"] != "idle"], steps)


def operator_moves(trace: dict, window: tuple[float, float]) -> dict[str, dict[str, float]]:
    """Per class on a CPU: bytes the innermost operators move (those with no operator inside them)
    and the share of the class's operator time they account for."""
    ops = sorted((op for op in host_operators(trace) if window[0] <= op["start"] and op["end"] <= window[1]),
                 key=lambda op: op["start"])
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"bytes": 0.0, "known_s": 0.0, "total_s": 0.0})
    for i, op in enumerate(ops):
        if i + 1 < len(ops) and ops[i + 1]["start"] < op["end"]:
            continue  # not innermost: its own time is small, its children move the bytes
        entry = out[classify_operator(op["name"])]
        seconds = op["end"] - op["start"]
        entry["total_s"] += seconds
        moved = operator_bytes(op["args"])
        if moved is not None:
            entry["bytes"] += moved
            entry["known_s"] += seconds
    return {cls: {"bytes": v["bytes"], "bytes_coverage": _ratio(v["known_s"], v["total_s"])} for cls, v in out.items()}


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _top(events: Iterable[dict], steps: int) -> list[dict]:
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        entry = totals[(e["name"], e["cls"])]
        entry[0] += (e["end"] - e["start"]) / 1e6
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
    return [{"name": name[:NAME_CHARS], "class": cls, "seconds": total / steps, "calls": count / steps}
            for (name, cls), (total, count) in ranked]


# ---- the summary ------------------------------------------------------------------------

def summarise(step_s: float, classes: dict[str, dict], top: list[dict], *, steps: int, measured_step_s: float | None,
              flops_per_step: float | None, moved: dict[str, dict[str, float]], on_gpu: bool) -> dict[str, Any]:
    """The compact record: each class's seconds per step and share, its FLOP/s or bytes/s where
    known, the ten costliest kernels, and whether the classes add up to the measured step."""
    matmul_s = classes["tensor_core"]["kernel_seconds"] + classes["matmul"]["kernel_seconds"]
    out_classes = {}
    for cls in CLASSES:
        c = classes[cls]
        if cls != "idle" and not c["seconds"] and not c["kernel_seconds"]:
            continue
        entry: dict[str, Any] = {"seconds": c["seconds"], "share": c["seconds"] / step_s if step_s else 0.0,
                                 "kernel_seconds": c["kernel_seconds"]}
        if cls in ("tensor_core", "matmul") and flops_per_step and matmul_s:
            entry["flops"] = flops_per_step * c["kernel_seconds"] / matmul_s
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
    return summary


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
    summary = summarise(step_s, classes, top, steps=steps, measured_step_s=measured_step_s,
                        flops_per_step=flops_per_step, moved=moved, on_gpu=on_gpu)
    summary.update(wall_s=time.perf_counter() - start, trace=trace_path)
    return summary


def headline(summary: dict[str, Any], classes: int = 3) -> str:
    """The run's line for the terminal: the largest classes and the time profiling took."""
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
