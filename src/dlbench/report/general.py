"""Results of workloads that no section of the publications' tables selects (a plug-in's, one added
since): a table per workload, headed and unit-labelled as its declaration says
(workloads/__init__.py), so a new workload's results appear in the report with no edit here.

A row is a benchmark (model, input, precision, optimisation level, GPUs, machine): its latest
run's throughput, step times and share of the measured ceiling, and how far its runs spread.
"""

from __future__ import annotations

import importlib
import statistics
from typing import Sequence

from dlbench.figures import DASH, fixed, ms, percent
from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result
from dlbench.results.spread import step_samples
from dlbench.workloads import declared

NOTES = ["Throughput and step times of the latest run of each benchmark; Step p50/p90/p99: percentiles of its "
         "measured steps; Of measured ceiling: its FLOP rate over the matmul ceiling measured on that machine for "
         "its precision; Runs: how many ran, and the spread of their throughputs (highest over lowest)."]


def selected(sections: Sequence[str]) -> set[str]:
    """The workloads the publications' sections select (their `SELECTS`)."""
    return {w for name in sections for w in getattr(importlib.import_module(name), "SELECTS", ())}


def tables(results: list[Result]) -> list[Table]:
    from dlbench.report import SECTIONS

    covered = selected(SECTIONS)
    by_workload: dict[str, dict[tuple, list[Result]]] = {}
    for r in sorted(results, key=lambda r: r.started):  # oldest first: the last of a group is its latest
        if r.workload and r.workload not in covered and r.status == "ok" and r.measured.throughput.value:
            by_workload.setdefault(r.workload, {}).setdefault(_benchmark(r), []).append(r)
    return [_table(name, groups) for name, groups in sorted(by_workload.items())]


def _benchmark(r: Result) -> tuple:
    shape = r.measured.data.input_shape or [r.setup.batch, *(r.setup.input_shape or [])]
    return r.model, "x".join(map(str, shape)), r.setup.precision, r.optimize, r.setup.gpus, r.system_label


def _table(name: str, groups: dict[tuple, list[Result]]) -> Table:
    workload = declared(name)
    units = {r.measured.throughput.unit for runs in groups.values() for r in runs}
    unit = workload.unit or (units.pop() if len(units) == 1 else "")
    header = ["Model", "Input", "Precision", "Optimize", "GPUs", "System", f"Throughput [{unit}]" if unit else
              "Throughput", "Step p50 [ms]", "Step p90 [ms]", "Step p99 [ms]", "Of measured ceiling", "Runs"]
    rows = [_row(runs, unit) for runs in groups.values()]
    return Table(f"{workload.title[0].upper()}{workload.title[1:]}", header, "llllrl" + "r" * 6, rows,
                 notes=list(NOTES))


def _row(runs: list[Result], unit: str) -> list[object]:
    latest = runs[-1]
    throughput = latest.measured.throughput
    value = fixed(throughput.value, 1, grouping=True) + ("" if unit or not throughput.unit else f" {throughput.unit}")
    p50, p90, p99 = _percentiles(step_samples(latest) or [])
    model, shape, precision, level, gpus, system = _benchmark(latest)
    return [model_title(latest), shape, precision, level, gpus, system, value, ms(p50), ms(p90), ms(p99),
            percent(latest.measured.utilisation.ceiling_fraction), _runs(runs)]


def _percentiles(steps: list[float]) -> tuple[float | None, ...]:
    if len(steps) < 2:
        return (steps[0] * 1e3 if steps else None, None, None)
    cuts = statistics.quantiles(steps, n=100, method="inclusive")
    return statistics.median(steps) * 1e3, cuts[89] * 1e3, cuts[98] * 1e3


def _runs(runs: list[Result]) -> str:
    values = [r.measured.throughput.value for r in runs]
    if len(values) < 2:
        return "1"
    return f"{len(values)} (spread {fixed(max(values) / min(values), 2)}x)" if min(values) else f"{len(values)} ({DASH})"
