"""`dlbench doctor`: how far below expectation each result is, and the likely causes.

Expected performance comes from the nearest reference result (same workload, model,
precision, GPU count, batch and, where published, shape) scaled by the ratio of the
compute ceilings for that precision: measured ceilings when both machines have them,
datasheet peaks otherwise (like is compared with like). The references are the seeds'
published figures (3D training in iterations per minute, prediction in Mvox/s) and the
dlbench reference runs. A reference whose batch size is not published, or differs from the
run's, is "not comparable", never a verdict; so is any GPU figure for a run on a CPU. Causes are only named with the
evidence that points to them: phase times, the GPU monitor, `dlbench system` records.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable

from dlbench.figures import ODD, ODD_LEGEND, fixed, ms, percent, sig
from dlbench.report import profile
from dlbench.report.markdown import line
from dlbench.results.record import Result
from dlbench.system.datasheet import lookup
from dlbench.system.records import (ceiling_name, ceilings_for, is_system_record, machine_key, matmul_ceiling,
                                    precision_of, utilisation, utilisation_text)

AS_EXPECTED = 0.8  # at or above this share of the expected figure a result is fine
DATA_PHASES = ("data", "data_wait", "load", "loading", "input", "h2d")
INPUT_BOUND_SHARE = 0.15
LAUNCH_BOUND_UTIL = 60.0
MIN_UTIL_READINGS = 10  # a second of the monitor's readings before its utilisation is read as the window's
SLOW_DISK_GBS = 1.0
LOW_CEILING_SHARE = 0.7
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
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


@dataclass
class Cause:
    name: str
    evidence: str


@dataclass
class Diagnosis:
    result: Result
    actual: float | None
    unit: str
    expected: float | None = None
    reference: Reference | None = None
    scaling: str = ""
    causes: list[Cause] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    not_comparable: str = ""  # why the references that exist for this benchmark cannot judge it
    reason: str = ""  # why there is no expectation otherwise
    utilisation: str | None = None  # "16% of the measured bf16 matmul ceiling (703 TFLOP/s)"

    @property
    def ratio(self) -> float | None:
        """Actual over expected performance (>1 is faster than expected)."""
        if not self.expected or not self.actual:
            return None
        if self.reference and self.reference.metric == "step_s":
            return self.expected / self.actual
        return self.actual / self.expected


# ---- reference set ---------------------------------------------------------------------

BATCH_FREE = ("volume",)  # workloads whose figure does not depend on a batch size (blocks of a volume)


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
        if is_system_record(r) or r.status != "ok" or "throughput" not in r.metrics:
            continue
        if not str(r.metrics.get("device", "")).startswith("cuda"):
            continue  # a CPU run is never a reference for anything
        refs.append(Reference(
            source=f"{source} {r.id[:8]} ({r.started[:10]})", gpu=machine_key(r)[1], workload=r.workload,
            model=r.model, precision=r.spec.get("precision", "fp32"), metric="throughput",
            value=float(r.metrics["throughput"]), unit=r.metrics.get("throughput_unit", ""),
            gpus=r.spec.get("gpus") or 1, batch=r.spec.get("batch"), input_shape=r.spec.get("input_shape"),
            ceilings=ceilings_for(r, surveys)))
    return refs


def _convert(value: float, unit: str, to: str) -> float | None:
    if unit == to:
        return value
    factor = _UNITS.get((unit, to))
    return value * factor if factor else None


def on_gpu(r: Result) -> bool:
    return str(r.metrics.get("device", r.spec.get("device", ""))).startswith("cuda")


def _same_benchmark(ref: Reference, r: Result) -> bool:
    """Same workload, model, precision, GPU count and (where both say) input shape."""
    spec = r.spec
    if (ref.workload, ref.model, ref.precision) != (r.workload, r.model, spec.get("precision", "fp32")):
        return False
    if ref.gpus != (spec.get("gpus") or 1):
        return False
    shape = spec.get("input_shape")
    return ref.input_shape is None or shape is None or list(ref.input_shape) == list(shape)


def _batch_problem(ref: Reference, r: Result) -> str | None:
    """Why `ref` cannot judge `r` for its batch size, or None when the batches agree."""
    if r.workload in BATCH_FREE:
        return None
    batch = r.spec.get("batch")
    if ref.batch is None:
        return f"its batch size is not published (this run: batch {batch})"
    if ref.batch != batch:
        return f"it ran batch {ref.batch} (this run: batch {batch})"
    return None


# ---- expectation -------------------------------------------------------------------------

def _peak(gpu_name: str, precision: str) -> float | None:
    spec = lookup(gpu_name)
    return spec.peak_tflops(precision) if spec else None


def _ceilings(ref: Reference, r: Result, mine_measured: float | None) -> tuple[float, float, str] | None:
    """(this machine's ceiling, the reference's, how) for the precision; like with like."""
    precision = r.spec.get("precision", "fp32")
    name = ceiling_name(precision)
    ref_measured = ref.ceilings.metrics.get(name) if ref.ceilings else None
    if mine_measured and ref_measured:
        return mine_measured, ref_measured, f"measured {precision} matmul"
    mine_sheet, ref_sheet = _peak(machine_key(r)[1], precision), _peak(ref.gpu, precision)
    if mine_sheet and ref_sheet:
        return mine_sheet, ref_sheet, f"datasheet {precision} peak"
    if mine_measured and ref_sheet:
        return mine_measured, ref_sheet, f"measured {precision} matmul here vs datasheet there"
    return None


def _actual(r: Result, ref: Reference) -> tuple[float | None, str]:
    """This run's figure in the reference's terms: seconds per step, iterations per minute
    (3D training: seed 000/001's unit), Mvox/s, or its throughput."""
    m = r.metrics
    if ref.metric == "step_s":
        steps = r.samples.get("step") or []
        return (statistics.median(steps) if steps else None), "s/step"
    if ref.unit == "iters/min" and (m.get("iters_per_min") or m.get("iteration_mean_s")):
        return float(m.get("iters_per_min") or 60.0 / m["iteration_mean_s"]), "iters/min"
    if ref.unit == "Mvox/s" and m.get("mvox_per_s"):
        return float(m["mvox_per_s"]), "Mvox/s"
    value = m.get("throughput")
    return (float(value) if value else None), m.get("throughput_unit", "")


def _same_data(ref: Reference, r: Result) -> bool:
    kind = ref.extra.get("dataset")
    return kind is not None and (kind == "dummy") == (_reads_storage(r) is None)


def expectation(r: Result, refs: list[Reference], measured: float | None) -> Diagnosis:
    """Scale the nearest comparable reference to this machine (`measured`: its matmul ceiling for the
    run's precision, where one was measured); say why where none is."""
    value = r.metrics.get("throughput")
    plain = Diagnosis(r, float(value) if value else None, r.metrics.get("throughput_unit", ""))
    if not on_gpu(r):
        alike = [ref for ref in refs if (ref.workload, ref.model) == (r.workload, r.model)]
        if alike:
            plain.not_comparable = (f"this ran on a CPU ({machine_key(r)[1]}); the references for it are GPU runs "
                                    f"(e.g. {alike[0].gpu}, {alike[0].source}), and a CPU is not judged against a GPU")
        else:
            plain.reason = "no published or reference figure for this workload and model"
        return plain
    same = [ref for ref in refs if _same_benchmark(ref, r)]
    if not same:
        plain.reason = "no published or reference figure for this workload, model, precision and GPU count"
        return plain
    comparable = [ref for ref in same if _batch_problem(ref, r) is None]
    if not comparable:
        ref = same[0]
        plain.not_comparable = f"{ref.source} ({ref.gpu}): {_batch_problem(ref, r)}"
        actual, unit = _actual(r, ref)
        plain.actual, plain.unit = (actual, unit) if actual is not None else (plain.actual, plain.unit)
        if plain.unit == "s/step" and plain.actual is not None:
            plain.actual, plain.unit = plain.actual * 1e3, "ms/step"
        return plain
    best: tuple[float, Reference, float, str, float, str] | None = None
    for ref in comparable:
        scale = _ceilings(ref, r, measured)
        actual, unit_here = _actual(r, ref)
        figure = ref.value if ref.metric == "step_s" else _convert(ref.value, ref.unit, unit_here)
        if scale is None or figure is None or actual is None:
            continue
        mine, theirs, how = scale
        # nearest ceiling first; on ties prefer dlbench runs, then the same kind of data
        distance = abs(math.log(mine / theirs)) - (0.01 if ref.ceilings else 0.0) - (0.001 if _same_data(ref, r) else 0.0)
        if best is None or distance < best[0]:
            ratio = mine / theirs
            expected = figure / ratio if ref.metric == "step_s" else figure * ratio
            how = f"{how} {sig(mine, grouping=True)} vs {sig(theirs, grouping=True)} TFLOP/s (x{fixed(ratio, 2)})"
            best = (distance, ref, expected, how, actual, unit_here)
    if best is None:
        plain.reason = (f"published figures exist ({comparable[0].source}, {comparable[0].gpu}) but cannot be scaled to "
                        f"{machine_key(r)[1]}: no datasheet entry for it and no `dlbench system` record of this machine. "
                        f"Run `dlbench system` here, then `dlbench doctor` again")
        return plain
    _, ref, expected, how, actual, unit = best
    if unit == "s/step":  # steps are read in milliseconds everywhere
        return Diagnosis(r, actual * 1e3, "ms/step", expected * 1e3, ref, how)
    return Diagnosis(r, actual, unit, expected, ref, how)


# ---- causes --------------------------------------------------------------------------------

def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def data_wait_share(r: Result) -> tuple[float, float, float] | None:
    """(share, data-wait seconds, step seconds) per step, from the phase samples."""
    step = _median(r.samples.get("step"))
    waits = [_median(r.samples.get(p)) for p in DATA_PHASES if r.samples.get(p)]
    if not step or not waits:
        return None
    wait = sum(w for w in waits if w)
    return wait / step, wait, step


def _facts(r: Result, record: Result | None) -> dict[str, Any]:
    if record is None:
        return {}
    index = int(str(r.metrics.get("device", "cuda:0")).partition(":")[2] or 0)
    facts = record.metrics.get("gpu_facts") or []
    return next((f for f in facts if f.get("index") == index), {})


def input_bound(r: Result, record: Result | None) -> Cause | None:
    found = data_wait_share(r)
    if not found or found[0] < INPUT_BOUND_SHARE:
        return None
    share, wait, step = found
    cores = (r.system.get("cpu") or {}).get("cores")
    gpus = max(1, r.system.get("gpu_count") or 1)
    options = r.spec.get("options") or {}
    workers = options.get("workers", options.get("num_workers"))
    text = f"waiting for data {percent(share)} of each step ({ms(wait * 1e3)} of {ms(step * 1e3)} ms)"
    if cores:
        text += f"; {cores} CPU cores for {gpus} GPU(s) ({cores / gpus:.1f} per GPU)"
    if workers is not None:
        text += f"; {workers} loader workers"
    decode = record.metrics.get("jpeg_decode_cpu_img_s_per_core") if record else None
    if decode and cores and r.metrics.get("throughput_unit") == "img/s":
        text += f"; JPEG decode measured {decode:,.0f} img/s per core, {decode * cores:,.0f} img/s on all cores"
    return Cause("input-bound", text)


def _reads_storage(r: Result) -> str | None:
    options = r.spec.get("options") or {}
    for key in ("data", "dataset", "path", "root", "folder", "images", "volume"):
        value = options.get(key)
        if isinstance(value, str) and value and value not in ("synthetic", "dummy", "random"):
            return value
    return None


def slow_storage(r: Result, record: Result | None) -> Cause | None:
    path = _reads_storage(r)
    share = data_wait_share(r)
    if not path or not share or share[0] < INPUT_BOUND_SHARE or record is None:
        return None
    disk = record.metrics.get("disk_read_gbs")
    if disk is None or disk >= SLOW_DISK_GBS:
        return None
    where = record.metrics.get("ceilings", {}).get("disk_read_gbs", {}).get("details", {}).get("path", "?")
    return Cause("slow storage", f"data read from {path}; `dlbench system --disk` measured {disk:.2f} GB/s "
                                 f"on {where} (below {SLOW_DISK_GBS:g} GB/s)")


def launch_bound(r: Result, record: Result | None) -> Cause | None:
    """From NVML's utilisation, where nothing better is known: a profile measures the GPU's idle
    time itself (profile.causes names it), and a window of a few readings is shorter than the
    period NVML averages its utilisation over (up to a second), so its figure says nothing."""
    util, readings = r.metrics.get("gpu_util_mean"), r.metrics.get("monitor_readings")
    share = data_wait_share(r)
    if util is None or util >= LAUNCH_BOUND_UTIL or (share and share[0] >= INPUT_BOUND_SHARE):
        return None
    if profile.profile_of(r) or (readings is not None and readings < MIN_UTIL_READINGS):
        return None
    step = _median(r.samples.get("step"))
    at, larger = (("one tile a step", "larger blocks (`--block`)") if r.workload == "volume" else
                  (f"batch {r.spec.get('batch')}", "a larger batch"))
    return Cause("launch-bound", f"GPU busy only {percent(util / 100)} of the measured window at {at} with no "
                                 f"data wait (median step {ms((step or 0) * 1e3)} ms): kernels too small or too "
                                 f"few to fill it; try {larger}, CUDA graphs or torch.compile")


def throttled(r: Result, record: Result | None) -> Cause | None:
    reasons = r.metrics.get("throttle_reasons") or []
    if not r.metrics.get("throttled") and not reasons:
        return None
    parts = [f"throttle reasons {', '.join(reasons) or 'reported'} in "
             f"{percent(r.metrics.get('throttled_share', 0))} of the monitor readings"]
    clock, top = r.metrics.get("sm_clock_mean_mhz"), _facts(r, record).get("sm_clock_max_mhz")
    if clock:
        parts.append(f"SM clock {clock:.0f} MHz" + (f" of {top} MHz max" if top else ""))
    if r.metrics.get("temperature_max_c") is not None:
        parts.append(f"up to {r.metrics['temperature_max_c']:.0f} °C")
    power, limit = r.metrics.get("power_mean_w"), _facts(r, record).get("power_limit_w")
    if power:
        parts.append(f"{power:.0f} W mean" + (f" against a {limit:.0f} W limit" if limit else ""))
    return Cause("throttled", "; ".join(parts))


def degraded_link(r: Result, record: Result | None) -> Cause | None:
    facts = _facts(r, record)
    problems = []
    busy = (record.metrics.get("ceilings", {}).get("h2d_pinned_gbs", {}).get("details", {}) if record else {})
    width, width_max = busy.get("pcie_width") or facts.get("pcie_width"), facts.get("pcie_width_max")
    gen_busy = busy.get("pcie_gen")
    if gen_busy and facts.get("pcie_gen_max") and gen_busy < facts["pcie_gen_max"]:
        problems.append(f"PCIe gen {gen_busy} while copying, the slot allows gen {facts['pcie_gen_max']}")
    if width and width_max and width < width_max:
        problems.append(f"PCIe link x{width} of x{width_max}")
    gen_max, gen_gpu = facts.get("pcie_gen_max"), facts.get("pcie_gen_gpu_max")
    if gen_max and gen_gpu and gen_max < gen_gpu:
        problems.append(f"slot allows PCIe gen {gen_max}, the GPU supports gen {gen_gpu}")
    h2d = record.metrics.get("h2d_pinned_gbs") if record else None
    if h2d and gen_gpu and width_max:
        nominal = PCIE_LANE_GBS.get(gen_gpu, 0) * width_max
        if nominal and h2d < 0.5 * nominal:
            problems.append(f"host-to-device pinned {h2d:.1f} GB/s, under half of gen {gen_gpu} x{width_max} "
                            f"({nominal:.0f} GB/s)")
    return Cause("degraded link", "; ".join(problems)) if problems else None


def _holders(r: Result, count_key: str, memory_key: str) -> tuple[int, float]:
    """How many processes the monitor saw on the GPU under `count_key`, and the GB they held."""
    return r.metrics.get(count_key) or 0, r.metrics.get(memory_key) or 0.0


def other_processes(r: Result, record: Result | None) -> Cause | None:
    count, memory = _holders(r, "other_processes", "other_processes_memory_gb")
    return Cause("other processes on the GPU", f"{count} other compute process(es) held {memory:.1f} GB "
                                               f"of GPU memory during the run") if count else None


def own_launcher(r: Result, record: Result | None) -> Cause | None:
    count, memory = _holders(r, "launcher_processes", "launcher_memory_gb")
    if not count:
        return None
    # Results stored before the command was recorded only had dlbench's own launchers marked
    commands = "; ".join(r.metrics.get("launcher_commands") or ["a dlbench suite or torchrun"])
    return Cause("the run's launcher on the GPU", f"the process that started this run ({commands}) held {memory:.1f} GB "
                                                  f"of GPU memory during it, memory the run could not use")


def low_ceiling(r: Result, record: Result | None) -> Cause | None:
    if record is None:
        return None
    precision = r.spec.get("precision", "fp32")
    measured = record.metrics.get(ceiling_name(precision))
    peak = _peak(machine_key(r)[1], precision)
    if not measured or not peak or measured >= LOW_CEILING_SHARE * peak:
        return None
    facts = _facts(r, record)
    text = (f"a plain {precision} matmul reaches only {sig(measured, grouping=True)} TFLOP/s, "
            f"{percent(measured / peak)} of the datasheet's {sig(peak, grouping=True)}")
    if facts.get("power_limit_w") and facts.get("power_limit_default_w") and \
            facts["power_limit_w"] < facts["power_limit_default_w"]:
        text += f"; power limit lowered to {facts['power_limit_w']:.0f} of {facts['power_limit_default_w']:.0f} W"
    return Cause("GPU below its datasheet", text + " (clocks, power limit, or a virtual/MIG slice)")


CAUSES: list[Callable[[Result, Result | None], Cause | None]] = [
    input_bound, slow_storage, launch_bound, throttled, degraded_link, other_processes, own_launcher,
    low_ceiling,
]


def diagnose(results: list[Result], refs: list[Reference] | None = None) -> list[Diagnosis]:
    """One diagnosis per benchmark configuration and machine (its newest ok result)."""
    refs = load_references() if refs is None else refs
    newest: dict[tuple, Result] = {}
    for r in results:
        if is_system_record(r) or r.status != "ok":
            continue
        spec = r.spec
        key = (*machine_key(r), r.workload, r.model, spec.get("batch"), spec.get("precision"), spec.get("optimize"),
               spec.get("gpus"), str(spec.get("input_shape")), json.dumps(spec.get("options"), sort_keys=True))
        if key not in newest or r.started >= newest[key].started:
            newest[key] = r
    surveys = [r for r in results if is_system_record(r)]  # looked up once per result below
    out = []
    for r in newest.values():
        record = ceilings_for(r, surveys)
        found = matmul_ceiling(r, surveys)
        ceiling, ceiling_record = found if found else (None, None)
        d = expectation(r, refs, ceiling)
        # what the run's own line said; figured from the store for results stored without it
        d.utilisation = utilisation_text(r.metrics) or utilisation_text(utilisation(r, surveys))
        # the profile's matmul classes read the run's own quick ceiling where no survey was made
        d.causes = [Cause(*cause) for cause in profile.causes(r, record or ceiling_record)]
        d.causes += [c for c in (check(r, record) for check in CAUSES) if c]
        d.hints += [note] if (note := profile.profile_note(r)) else []
        if record is None and on_gpu(r) and "dlbench system" not in d.reason:
            d.hints.append(_survey_hint(r, ceiling_record))
        if r.metrics.get("gpu_util_mean") is None and on_gpu(r):
            d.hints.append("no GPU monitor readings in this result (NVML missing?)")
        out.append(d)
    return out


def _survey_hint(r: Result, quick: Result | None) -> str:
    """What a full `dlbench system` survey would add for `r`'s machine, given the quick record of
    one matmul ceiling its runs may have left."""
    if quick is None:
        return ("no `dlbench system` record for this machine: run `dlbench system` to measure its ceilings "
                "(expectations then compare measured with measured), then `dlbench doctor` again")
    return (f"only the {precision_of(r)} matmul ceiling the runs measured is stored for this machine: run "
            f"`dlbench system` to measure what the likely causes are checked against (the GPU's link, memory "
            f"copy, host to device, JPEG decoding, disk), then `dlbench doctor` again")


# ---- rendering -----------------------------------------------------------------------------

def _fmt(value: float) -> str:
    return sig(value, grouping=True)


def _figure(value: float, unit: str) -> str:
    return ms(value) if unit.startswith("ms") else _fmt(value)


def _headline(d: Diagnosis) -> str:
    if d.actual is None:
        return "no throughput recorded"
    measured = f"measured {_figure(d.actual, d.unit)} {d.unit}"
    if d.expected is None:
        if d.not_comparable:
            return f"{measured}; not comparable with the published figures: {d.not_comparable}"
        return f"{measured}; {d.reason or 'no reference'}"
    ratio = d.ratio or 0.0
    if ratio >= AS_EXPECTED:
        verdict = "as expected" if ratio <= 1.25 else f"{fixed(ratio, 2)}x faster than expected"
    else:
        verdict = f"{fixed(1 / ratio, 1)}x slower than it should be ({percent(ratio)} of expected)"
    return f"{measured}, expected {_figure(d.expected, d.unit)} {d.unit}: {verdict}"


def _reference_value(ref: Reference) -> str:
    if ref.metric == "step_s":
        return f"{ms(ref.value * 1e3)} ms/step"
    return f"{_fmt(ref.value)} {ref.unit}"


def render(diagnoses: list[Diagnosis]) -> str:
    blocks = []
    for d in diagnoses:
        r = d.result
        host, label = machine_key(r)
        gpus = r.spec.get("gpus") or 1
        where = (f" x{gpus} GPUs" if on_gpu(r) else f" x{gpus} processes") if gpus > 1 else ""
        level = f" {r.spec['optimize']}" if r.spec.get("optimize", "eager") != "eager" else ""
        batch = ODD if "spec.batch" in r.odd else r.spec.get("batch")
        title = f"## {r.workload} {r.model} b{batch} {r.spec.get('precision')}{level}{where} on {label} ({host})"
        lines = [title, _headline(d)]
        if r.odd:
            lines.append(f"note: {ODD_LEGEND}: {', '.join(r.odd)} of record {r.id[:8]}")
        if d.reference:
            ref = d.reference
            lines.append(f"reference: {ref.gpu}, {_reference_value(ref)} ({ref.source}); scaled by {d.scaling}")
        if d.utilisation:
            lines.append(f"FLOP utilisation: {sig(r.metrics['achieved_tflops'])} TFLOP/s, {d.utilisation}")
        if d.causes:
            lines.append("likely causes:")
            lines += [f"- {c.name}: {c.evidence}" for c in d.causes]
        elif d.ratio is not None and d.ratio < AS_EXPECTED:
            lines.append("no cause found in the recorded evidence")
        lines += [f"note: {h}" for h in d.hints]
        # Hosts, GPU names, paths and sources come from results (imported ones too): escaped like
        # the report's Markdown, so no line breaks apart or renders a link.
        blocks.append("\n".join(map(line, lines)))
    return "\n\n".join(blocks)


NOTHING_TO_DIAGNOSE = (
    "No benchmark results in the store yet. Run first:\n"
    "  dlbench system                            # measure this machine's ceilings\n"
    "  dlbench                                   # the quick suite (or: dlbench run fwdbwd --model resnet50)\n"
    "then `dlbench doctor` again."
)
