"""Optimisation levels side by side: one row per benchmark (workload, model, input, precision,
machine), one column per level with its throughput and speed-up over eager, then the best
level's compile time and its utilisation against the measured ceiling where known.

Only benchmarks with at least one result above eager appear; the latest result per level wins.
"""

from __future__ import annotations

from dlbench.report.tables import Table, model_title
from dlbench.figures import fixed, percent
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result

LEVELS = ("eager", "compile", "graphs", "max")
HEADER = ("Benchmark", "System", *LEVELS, "Best", "Compile (s)", "TFLOP/s", "Of measured ceiling")
TITLE = "Optimisation levels"
NOTES = ["How much each optimisation level (compiled, CUDA graphs, fused kernels) speeds a model up over plain "
         "eager PyTorch.",
         "(throughput per level, speed-up over eager in brackets; each optimised level was checked against "
         "eager before timing; compile time is outside the measurement; the ceiling is the matmul ceiling measured "
         "on that machine for the row's precision)"]


def _benchmark(r: Result) -> tuple:
    shape = r.measured.data.input_shape or [r.setup.batch, *(r.setup.input_shape or [])]
    return r.workload, r.model, "x".join(map(str, shape)), r.setup.precision, r.setup.gpus, r.system_label


def _cell(r: Result | None, eager: Result | None) -> str:
    if r is None:
        return "-"
    if r.status == "oom":
        return "OOM"
    if r.status != "ok":
        return "mismatch" if "does not match eager" in (r.error or "") else r.status
    throughput = r.measured.throughput
    value = throughput.value
    if value is None:
        return "-"
    text = f"{fixed(value, 1, grouping=True)} {throughput.unit or ''}".strip()
    base = eager.measured.throughput.value if eager is not None and eager.status == "ok" else None
    if base and r.optimize != "eager":
        text += f" (x{value / base:.2f})"
    return text


def _best(by_level: dict[str, Result]) -> Result | None:
    ok = [(value, r) for r in by_level.values() if r.status == "ok" and (value := r.measured.throughput.value)]
    return max(ok, key=lambda found: found[0])[1] if ok else None


def _row(key: tuple, by_level: dict[str, Result]) -> list[str]:
    workload, _, shape, precision, gpus, system = key
    eager = by_level.get("eager")
    best = _best(by_level)
    m = best.measured if best else Measurement()
    compile_s, tflops, fraction = m.window.compile_s, m.utilisation.achieved_tflops, m.utilisation.ceiling_fraction
    label = f"{workload} {model_title(next(iter(by_level.values())))} {shape} {precision}"
    return [label, system + (f" (x{gpus})" if gpus > 1 else ""), *(_cell(by_level.get(lvl), eager) for lvl in LEVELS),
            best.optimize if best else "-", fixed(compile_s, 1),
            fixed(tflops, 1) if tflops else "-", percent(fraction)]


def tables(results: list[Result]) -> list[Table]:
    groups: dict[tuple, dict[str, Result]] = {}
    for r in sorted(results, key=lambda r: r.started):  # oldest first: the newest per level wins
        if r.status in ("ok", "oom", "error") and r.optimize in LEVELS and r.workload:
            groups.setdefault(_benchmark(r), {})[r.optimize] = r
    rows = [_row(key, by_level) for key, by_level in groups.items() if set(by_level) - {"eager"}]
    if not rows:
        return []
    return [Table(TITLE, list(HEADER), "ll" + "r" * (len(HEADER) - 2), rows, notes=list(NOTES))]
