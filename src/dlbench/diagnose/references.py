"""What a run should do where the machine's own history cannot say: the nearest reference result
(same workload, model, precision, GPU count, batch and, where published, shape) scaled by the ratio of
the compute ceilings for that precision: measured ceilings when both machines have them, datasheet
peaks otherwise (like is compared with like). The references are the seeds' published figures (3D
training in iterations per minute, prediction in Mvox/s) and the dlbench reference runs. A reference
whose batch size is not published, or differs from the run's, is "not comparable", never a verdict;
so is any GPU figure for a run on a CPU.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dlbench.diagnose.inputs import reads_storage
from dlbench.figures import fixed, sig
from dlbench.report import profile
from dlbench.report.parts import on_gpu
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result
from dlbench.workloads import declared
from dlbench.system.datasheet import lookup
from dlbench.system.records import ceiling_name, ceilings_for, is_system_record, machine_key

_UNITS = {("iters/min", "iter/s"): 1 / 60, ("iter/s", "iters/min"): 60.0,
          ("iters/min", "it/s"): 1 / 60, ("it/s", "iters/min"): 60.0}


@dataclass
class Reference:
    source: str
    gpu: str
    workload: str
    model: str
    precision: str
    metric: str  # 'throughput' (higher is better) or 'step_s' (lower is better)
    value: float
    unit: str
    gpus: int = 1
    batch: int | None = None
    input_shape: list[int] | None = None
    note: str = ""
    ceilings: Result | None = None  # system record of a reference run, if any
    extra: dict[str, Any] = field(default_factory=dict)




def load_references() -> list[Reference]:
    """The seeds' published figures (report/published.py) plus the reference runs shipped with
    the package."""
    from dlbench.report.published import references

    known = set(Reference.__dataclass_fields__)
    refs = [Reference(**{k: v for k, v in entry.items() if k in known},
                      extra={k: v for k, v in entry.items() if k not in known})
            for entry in references()]
    runs = resources.files("dlbench.system").joinpath("reference_runs.jsonl")
    if runs.is_file():
        records = [Result.from_dict(json.loads(line)) for line in runs.read_text(encoding="utf-8").splitlines()
                   if line.strip()]
        refs += references_from_runs(records, "dlbench reference run")
    return refs


def references_from_runs(records: list[Result], source: str) -> list[Reference]:
    """dlbench results (with their machines' system records) as references."""
    surveys = [r for r in records if is_system_record(r)]  # looked up once per result below
    refs = []
    for r in records:
        if is_system_record(r) or r.status != "ok":
            continue
        m = r.measured
        if m.throughput.value is None:
            continue
        if not str(m.device or "").startswith("cuda"):
            continue  # a CPU run is never a reference for anything
        refs.append(Reference(
            source=f"{source} {r.id[:8]} ({r.started[:10]})", gpu=machine_key(r)[1], workload=r.workload,
            model=r.model, precision=r.setup.precision, metric="throughput",
            value=float(m.throughput.value), unit=m.throughput.unit or "",
            gpus=r.setup.gpus, batch=r.setup.batch, input_shape=r.setup.input_shape,
            ceilings=ceilings_for(r, surveys)))
    return refs


def _convert(value: float, unit: str, to: str) -> float | None:
    if unit == to:
        return value
    factor = _UNITS.get((unit, to))
    return value * factor if factor else None


def _same_benchmark(ref: Reference, r: Result) -> bool:
    """Same workload, model, precision, GPU count and (where both say) input shape."""
    setup = r.setup
    if (ref.workload, ref.model, ref.precision, ref.gpus) != (r.workload, r.model, setup.precision, setup.gpus):
        return False
    shape = setup.input_shape
    return ref.input_shape is None or shape is None or list(ref.input_shape) == list(shape)


def _batch_problem(ref: Reference, r: Result) -> str | None:
    """Why `ref` cannot judge `r` for its batch size, or None when the batches agree."""
    if declared(r.workload).batch_free:
        return None
    batch = r.setup.batch
    if ref.batch is None:
        return f"its batch size is not published (this run: batch {batch})"
    if ref.batch != batch:
        return f"it ran batch {ref.batch} (this run: batch {batch})"
    return None


# ---- expectation -------------------------------------------------------------------------

@dataclass
class Expectation:
    """A run's figure and what it should be here: the nearest comparable reference scaled to this
    machine, or why there is none."""
    actual: float | None
    unit: str
    expected: float | None = None
    reference: Reference | None = None
    scaling: str = ""
    not_comparable: str = ""  # why the references that exist for this benchmark cannot judge it
    reason: str = ""  # why there is no expectation otherwise

    @property
    def ratio(self) -> float | None:
        """Actual over expected performance (>1 is faster than expected)."""
        if not self.expected or not self.actual:
            return None
        if self.reference and self.reference.metric == "step_s":
            return self.expected / self.actual
        return self.actual / self.expected


def datasheet_peak(gpu_name: str, precision: str) -> float | None:
    spec = lookup(gpu_name)
    return spec.peak_tflops(precision) if spec else None


def _ceilings(ref: Reference, r: Result, mine_measured: float | None) -> tuple[float, float, str] | None:
    """(this machine's ceiling, the reference's, how) for the precision; like with like."""
    precision = r.setup.precision
    name = ceiling_name(precision)
    ref_measured = profile.measured_ceiling(ref.ceilings, name)
    if mine_measured and ref_measured:
        return mine_measured, ref_measured, f"measured {precision} matmul"
    mine_sheet, ref_sheet = datasheet_peak(machine_key(r)[1], precision), datasheet_peak(ref.gpu, precision)
    if mine_sheet and ref_sheet:
        return mine_sheet, ref_sheet, f"datasheet {precision} peak"
    if mine_measured and ref_sheet:
        return mine_measured, ref_sheet, f"measured {precision} matmul here vs datasheet there"
    return None


@dataclass(frozen=True)
class Scaled:
    """A comparable reference scaled to this machine: its figure as expected here, and how near its
    machine's ceiling is to this one's (the nearest wins)."""
    distance: float  # |log| of the ceilings' ratio, less small bonuses for dlbench runs and alike data
    reference: Reference
    expected: float
    how: str  # the scaling, in words
    actual: float  # this run's figure in the reference's terms
    unit: str


def _actual(r: Result, m: Measurement, ref: Reference) -> tuple[float | None, str]:
    """This run's figure (`m`: its measurement) in the reference's terms: seconds per step,
    iterations per minute (3D training: seed 000/001's unit), Mvox/s, or its throughput."""
    if ref.metric == "step_s":
        steps = r.samples.get("step") or []
        return (statistics.median(steps) if steps else None), "s/step"
    training = m.training
    if ref.unit == "iters/min" and (training.iters_per_min or training.iteration_mean_s):
        return float(training.iters_per_min or 60.0 / training.iteration_mean_s), "iters/min"
    if ref.unit == "Mvox/s" and m.volume.mvox_per_s:
        return float(m.volume.mvox_per_s), "Mvox/s"
    value = m.throughput.value
    return (float(value) if value else None), m.throughput.unit or ""


def _same_data(ref: Reference, r: Result) -> bool:
    kind = ref.extra.get("dataset")
    return kind is not None and (kind == "dummy") == (reads_storage(r) is None)


def expectation(r: Result, refs: list[Reference], measured: float | None) -> Expectation:
    """Scale the nearest comparable reference to this machine (`measured`: its matmul ceiling for the
    run's precision, where one was measured); say why where none is."""
    m = r.measured
    value = m.throughput.value
    plain = Expectation(float(value) if value else None, m.throughput.unit or "")
    if not on_gpu(r):
        return _on_a_cpu(r, refs, plain)
    same = [ref for ref in refs if _same_benchmark(ref, r)]
    if not same:
        plain.reason = "no published or reference figure for this workload, model, precision and GPU count"
        return plain
    comparable = [ref for ref in same if _batch_problem(ref, r) is None]
    if not comparable:
        return _other_batch(r, same[0], plain)
    best = _nearest(r, comparable, measured)
    if best is None:
        plain.reason = (f"published figures exist ({comparable[0].source}, {comparable[0].gpu}) but cannot be scaled to "
                        f"{machine_key(r)[1]}: no datasheet entry for it and no `dlbench system` record of this machine. "
                        f"Run `dlbench system` here, then `dlbench doctor` again")
        return plain
    if best.unit == "s/step":  # steps are read in milliseconds everywhere
        return Expectation(best.actual * 1e3, "ms/step", best.expected * 1e3, best.reference, best.how)
    return Expectation(best.actual, best.unit, best.expected, best.reference, best.how)


def _on_a_cpu(r: Result, refs: list[Reference], plain: Expectation) -> Expectation:
    """A CPU is never judged against a GPU's figure: said where references for the model exist."""
    alike = [ref for ref in refs if (ref.workload, ref.model) == (r.workload, r.model)]
    if alike:
        plain.not_comparable = (f"this ran on a CPU ({machine_key(r)[1]}); the references for it are GPU runs "
                                f"(e.g. {alike[0].gpu}, {alike[0].source}), and a CPU is not judged against a GPU")
    else:
        plain.reason = "no published or reference figure for this workload and model"
    return plain


def _other_batch(r: Result, ref: Reference, plain: Expectation) -> Expectation:
    """Why `ref` cannot judge the run for its batch size, with the run's figure in its terms."""
    plain.not_comparable = f"{ref.source} ({ref.gpu}): {_batch_problem(ref, r)}"
    actual, unit = _actual(r, r.measured, ref)
    plain.actual, plain.unit = (actual, unit) if actual is not None else (plain.actual, plain.unit)
    if plain.unit == "s/step" and plain.actual is not None:
        plain.actual, plain.unit = plain.actual * 1e3, "ms/step"
    return plain


def _nearest(r: Result, refs: list[Reference], measured: float | None) -> Scaled | None:
    """Of the references that scale to this machine, the one whose ceiling is nearest (the first on a tie)."""
    best: Scaled | None = None
    for ref in refs:
        scaled = _scaled(r, ref, measured)
        if scaled is not None and (best is None or scaled.distance < best.distance):
            best = scaled
    return best


def _scaled(r: Result, ref: Reference, measured: float | None) -> Scaled | None:
    scale = _ceilings(ref, r, measured)
    actual, unit_here = _actual(r, r.measured, ref)
    figure = ref.value if ref.metric == "step_s" else _convert(ref.value, ref.unit, unit_here)
    if scale is None or figure is None or actual is None:
        return None
    mine, theirs, how = scale
    ratio = mine / theirs
    # nearest ceiling first; on ties prefer dlbench runs, then the same kind of data
    distance = abs(math.log(mine / theirs)) - (0.01 if ref.ceilings else 0.0) - (0.001 if _same_data(ref, r) else 0.0)
    expected = figure / ratio if ref.metric == "step_s" else figure * ratio
    how = f"{how} {sig(mine, grouping=True)} vs {sig(theirs, grouping=True)} TFLOP/s (x{fixed(ratio, 2)})"
    return Scaled(distance, ref, expected, how, actual, unit_here)
