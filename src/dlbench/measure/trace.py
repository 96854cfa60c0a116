"""Reading a Chrome trace of profiled steps (what torch.profiler exports, Kineto's format) and
splitting its timeline into the classes of measure/kernels.py: each instant of the device timeline
goes to one class, nested host operators each keep their own time, and the bytes an operator
moves come from its recorded input shapes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from dlbench.measure.intervals import exclusive_time, union_length
from dlbench.measure.kernels import CLASSES, classify_copy, classify_kernel, classify_operator

TOP_KERNELS = 10
NAME_CHARS = 160

_DTYPE_BYTES = {"float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "long int": 8, "int": 4,
                "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::float8_e4m3fn": 1,
                "c10::float8_e5m2": 1, "c10::complex<float>": 8}


def operator_bytes(args: dict, name: str = "") -> int | None:
    """Bytes an operator moves, estimated from its recorded inputs: every tensor input read once
    and one output as large as the largest input written; an operator that writes into its last
    argument instead (dlbench's `..._into`) writes that and makes no output. None without tensor
    shapes."""
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
    if not sizes:
        return None
    return sum(sizes) if name.endswith("_into") else sum(sizes) + max(sizes)


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
        moved = operator_bytes(ops[op_id]["args"], ops[op_id]["name"])
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
        moved = operator_bytes(op["args"], op["name"])
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
