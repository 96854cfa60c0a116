"""Tables of the image workloads: seed 002's phase table (one per model and precision) and
seed 003's throughput (with weak scaling) and latency tables. The latest result per row wins."""

from __future__ import annotations

from pathlib import Path

from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result

WORKLOADS = ("train", "infer", "smooth")
BENCHMARK = {"infer": "Inference", "train": "Train", "smooth": "Smooth Inference"}
SEED002 = ("Cluster", "Dataset", "Benchmark", "Device Name", "# Devices", "Num Workers", "Data Loading Time",
           "Data Processing Time", "Forward Time", "Backward Time")
PRECISION = {"fp32": "FP32", "tf32": "TF32", "fp16": "mixed precision (fp16)", "bf16": "mixed precision (bf16)"}
FULL, MIXED = ("fp32", "tf32"), ("fp16", "bf16")
LATENCY = ("Batch size", "Resolution", "Throughput Avg [img/s]", "Latency Avg [ms]", "Latency 90% [ms]",
           "Latency 95% [ms]", "Latency 99% [ms]")


def dataset(r: Result) -> str:
    source = str(r.spec.get("options", {}).get("data", "synthetic"))
    if source.startswith("folder:"):
        name = Path(source[7:].rstrip("/")).name or source[7:]
        return name + (" (GPU decode)" if r.spec["options"].get("decode") == "gpu" else "")
    return source.capitalize()


def cluster(r: Result) -> str:
    return r.tag or r.system.get("host") or "-"


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1e3:.4f}"


def _latest(results: list[Result], key) -> dict:
    chosen: dict = {}
    for r in sorted(results, key=lambda r: r.started):
        chosen[key(r)] = r
    return chosen


def tables(results: list[Result]) -> list[Table]:
    mine = [r for r in results if r.workload in WORKLOADS and r.status in ("ok", "oom")]
    return phase_tables(mine) + throughput_tables(mine) + latency_tables(mine)


def phase_tables(results: list[Result]) -> list[Table]:
    """Seed 002: seconds per batch in each phase, per cluster, dataset, benchmark and device count."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        groups.setdefault((r.model, r.spec.get("precision", "fp32")), []).append(r)
    out = []
    for (_, precision), rs in groups.items():
        latest = _latest(rs, lambda r: (cluster(r), dataset(r), r.workload, r.system_label, r.spec.get("gpus", 1),
                                        r.spec.get("batch")))
        ordered = sorted(latest.values(), key=lambda r: (cluster(r), r.system_label, r.spec.get("gpus", 1),
                                                          dataset(r), r.workload, r.spec.get("batch")))
        rows = [_phase_row(r) for r in ordered]
        header, align = list(SEED002), "llllrrrrrr"
        batches = {r.spec.get("batch") for r in ordered}
        if len(batches) > 1:  # the seed's columns, plus the batch where it differs between rows
            header, align = header + ["Batch"], align + "r"
            rows = [row + [r.spec.get("batch")] for row, r in zip(rows, ordered)]
        note = "Seconds per batch (median); data loading includes the copy to the device."
        if len(batches) == 1:
            note += f" Batch {batches.pop()} per device."
        out.append(Table(f"{model_title(rs[0])} ({precision})", header, align, rows, notes=[note]))
    return out


def _phase_row(r: Result) -> list[object]:
    m = r.metrics
    workers = r.spec.get("options", {}).get("workers")
    source = str(r.spec.get("options", {}).get("data", "synthetic"))
    head = [cluster(r), dataset(r), BENCHMARK[r.workload], r.system_label, r.spec.get("gpus", 1),
            "-" if source == "synthetic" else (workers if workers is not None else "auto")]
    if r.status == "oom":
        return head + ["OOM"] * 4
    loading = (m.get("data_ms") or 0) + (m.get("h2d_ms") or 0) if "data_ms" in m else None
    return head + [_seconds(loading), _seconds(m.get("noise_ms")), _seconds(m.get("forward_ms")),
                   _seconds(m.get("backward_ms"))]


def throughput_tables(results: list[Result]) -> list[Table]:
    """Seed 003: img/s per GPU count and batch, per precision, the mixed-precision speedup and
    weak scaling (N-GPU throughput over N times the 1-GPU throughput at the same batch)."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.status == "ok" and r.workload in ("train", "infer"):
            groups.setdefault((r.workload, r.model, r.system_label, dataset(r)), []).append(r)
    out = []
    for (workload, _, system, data), rs in groups.items():
        latest = _latest(rs, lambda r: (r.spec.get("gpus", 1), r.spec["batch"], r.spec.get("precision", "fp32")))
        precisions = [p for p in PRECISION if any(k[2] == p for k in latest)]
        full = next((p for p in precisions if p in FULL), None)
        mixed = next((p for p in precisions if p in MIXED), None)
        unit = rs[0].metrics.get("throughput_unit", "img/s")  # patch/s for volumetric training
        header = ["GPUs", "Batch size / GPU"] + [f"Throughput - {PRECISION[p]} [{unit}]" for p in precisions]
        if full and mixed:
            header.append(f"Throughput speedup ({PRECISION[full]} - {PRECISION[mixed]})")
        header += [f"Weak scaling - {PRECISION[p]}" for p in precisions]
        rows = []
        for gpus, batch in sorted({(k[0], k[1]) for k in latest}):
            value = {p: latest[(gpus, batch, p)].metrics["throughput"] for p in precisions if (gpus, batch, p) in latest}
            row: list[object] = [gpus, batch] + [_num(value.get(p)) for p in precisions]
            if full and mixed:
                row.append(_num(value[mixed] / value[full]) if full in value and mixed in value else "-")
            for p in precisions:
                single = latest.get((1, batch, p))
                scaling = value[p] / (gpus * single.metrics["throughput"]) if gpus > 1 and single and p in value else None
                row.append(_num(scaling))
            rows.append(row)
        title = f"{model_title(rs[0])} {BENCHMARK[workload].lower()} throughput on {system} ({data} data)"
        out.append(Table(title, header, "r" * len(header), rows,
                         notes=[f"Throughput: {'patches' if unit.startswith('patch') else 'images'} over total "
                                "measured time, all processes together."]))
    return out


def latency_tables(results: list[Result]) -> list[Table]:
    """Seed 003: inference throughput and latency per batch size, one table per precision."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.status == "ok" and r.workload == "infer" and r.spec.get("gpus", 1) == 1:
            groups.setdefault((r.model, r.system_label, dataset(r), r.spec.get("precision", "fp32")), []).append(r)
    out = []
    for (_, system, data, precision), rs in groups.items():
        latest = _latest(rs, lambda r: r.spec["batch"])
        rows = []
        for batch in sorted(latest):
            m = latest[batch].metrics
            shape = m.get("input_shape", [batch])[1:]
            rows.append([batch, "x".join(map(str, shape[1:] + shape[:1])), _num(m["throughput"]),
                         *(f"{m[k]:.3f}" for k in ("latency_avg_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms"))])
        out.append(Table(f"{model_title(rs[0])} inference latency on {system}, {PRECISION[precision]} ({data} data)",
                         list(LATENCY), "rrrrrrr", rows, notes=["Latency is per batch, in milliseconds."]))
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
