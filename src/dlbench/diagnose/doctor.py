"""`dlbench doctor`: how each result compares with what it should do, and why it falls short.

A run is judged against the machine's own history first: the fastest other run of the same
configuration on the same machine (diagnose/history.py), and on several GPUs the same per-GPU work
on one GPU (weak scaling). Where neither exists, against the published figures:
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
from dlbench.diagnose import causes as parts_of, history, host as host_causes, ranks as rank_causes
from dlbench.diagnose.causes import Cause
from dlbench.diagnose.history import Against
from dlbench.report import profile
from dlbench.report.compare import MIN_STEPS, timed
from dlbench.report.parts import LAUNCH_BOUND_IDLE, mean_step, on_gpu, parts
from dlbench.report.markdown import line
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result
from dlbench.system.datasheet import lookup
from dlbench.system.records import (ceiling_name, ceilings_for, is_system_record, machine_key, matmul_ceiling,
                                    utilisation, utilisation_text)

AS_EXPECTED = 0.8  # at or above this share of the expected figure a result is fine
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
    history: Against | None = None  # against the fastest other run of this configuration here
    one_gpu: Against | None = None  # a multi-GPU run against the same per-GPU work on one GPU
    synthetic: Against | None = None  # a run on real images against the same work on synthetic data
    baseline: Against | None = None  # the comparison the causes are measured against
    breakdown: list[tuple[str, str]] = field(default_factory=list)  # the profile's classes
    machine: list[Cause] = field(default_factory=list)  # conditions of the machine, with no share measured

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
    if r.workload in BATCH_FREE:
        return None
    batch = r.setup.batch
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
    precision = r.setup.precision
    name = ceiling_name(precision)
    ref_measured = profile.measured_ceiling(ref.ceilings, name)
    if mine_measured and ref_measured:
        return mine_measured, ref_measured, f"measured {precision} matmul"
    mine_sheet, ref_sheet = _peak(machine_key(r)[1], precision), _peak(ref.gpu, precision)
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
    return kind is not None and (kind == "dummy") == (parts_of._reads_storage(r) is None)


def expectation(r: Result, refs: list[Reference], measured: float | None) -> Diagnosis:
    """Scale the nearest comparable reference to this machine (`measured`: its matmul ceiling for the
    run's precision, where one was measured); say why where none is."""
    m = r.measured
    value = m.throughput.value
    plain = Diagnosis(r, float(value) if value else None, m.throughput.unit or "")
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
        actual, unit = _actual(r, m, ref)
        plain.actual, plain.unit = (actual, unit) if actual is not None else (plain.actual, plain.unit)
        if plain.unit == "s/step" and plain.actual is not None:
            plain.actual, plain.unit = plain.actual * 1e3, "ms/step"
        return plain
    best: Scaled | None = None
    for ref in comparable:
        scale = _ceilings(ref, r, measured)
        actual, unit_here = _actual(r, m, ref)
        figure = ref.value if ref.metric == "step_s" else _convert(ref.value, ref.unit, unit_here)
        if scale is None or figure is None or actual is None:
            continue
        mine, theirs, how = scale
        # nearest ceiling first; on ties prefer dlbench runs, then the same kind of data
        distance = abs(math.log(mine / theirs)) - (0.01 if ref.ceilings else 0.0) - (0.001 if _same_data(ref, r) else 0.0)
        if best is None or distance < best.distance:
            ratio = mine / theirs
            expected = figure / ratio if ref.metric == "step_s" else figure * ratio
            how = f"{how} {sig(mine, grouping=True)} vs {sig(theirs, grouping=True)} TFLOP/s (x{fixed(ratio, 2)})"
            best = Scaled(distance, ref, expected, how, actual, unit_here)
    if best is None:
        plain.reason = (f"published figures exist ({comparable[0].source}, {comparable[0].gpu}) but cannot be scaled to "
                        f"{machine_key(r)[1]}: no datasheet entry for it and no `dlbench system` record of this machine. "
                        f"Run `dlbench system` here, then `dlbench doctor` again")
        return plain
    if best.unit == "s/step":  # steps are read in milliseconds everywhere
        return Diagnosis(r, best.actual * 1e3, "ms/step", best.expected * 1e3, best.reference, best.how)
    return Diagnosis(r, best.actual, best.unit, best.expected, best.reference, best.how)


# ---- causes --------------------------------------------------------------------------------

SCALING_OK = 0.9  # weak-scaling efficiency below this is a loss to explain
MIN_CAUSE_SHARE = 0.03  # a part of the step smaller than this (of the step and of the loss) is no cause
# causes that account for the idle a profile sees (the loader, other processes): no launch-bound advice then
IDLE_EXPLAINED = frozenset({"CPU contention", "host overhead of several processes", "input-bound",
                            "CPU contention starving the input pipeline", "too few loader workers",
                            "JPEG decoding on the CPU", "slow storage", "another process on the GPU",
                            rank_causes.STRAGGLING,  # the other ranks' GPUs wait for it
                            *host_causes.NAMES})


def _facts(r: Result, record: Result | None) -> dict[str, Any]:
    if record is None:
        return {}
    index = int(str(r.measured.device or "cuda:0").partition(":")[2] or 0)
    facts = record.measured.system.gpu_facts or []
    return next((f for f in facts if f.get("index") == index), {})


# ---- the machine: conditions a survey finds, with no share of the step to measure -----------

def degraded_link(r: Result, record: Result | None) -> Cause | None:
    facts = _facts(r, record)
    problems = []
    system = record.measured.system if record else None
    copy = system.ceiling("h2d_pinned_gbs") if system else None
    busy = copy.details if copy else {}
    width, width_max = busy.get("pcie_width") or facts.get("pcie_width"), facts.get("pcie_width_max")
    gen_busy = busy.get("pcie_gen")
    if gen_busy and facts.get("pcie_gen_max") and gen_busy < facts["pcie_gen_max"]:
        problems.append(f"PCIe gen {gen_busy} while copying, the slot allows gen {facts['pcie_gen_max']}")
    if width and width_max and width < width_max:
        problems.append(f"PCIe link x{width} of x{width_max}")
    gen_max, gen_gpu = facts.get("pcie_gen_max"), facts.get("pcie_gen_gpu_max")
    if gen_max and gen_gpu and gen_max < gen_gpu:
        problems.append(f"slot allows PCIe gen {gen_max}, the GPU supports gen {gen_gpu}")
    h2d = system.h2d_pinned_gbs if system else None
    if h2d and gen_gpu and width_max:
        nominal = PCIE_LANE_GBS.get(gen_gpu, 0) * width_max
        if nominal and h2d < 0.5 * nominal:
            problems.append(f"host-to-device pinned {h2d:.1f} GB/s, under half of gen {gen_gpu} x{width_max} "
                            f"({nominal:.0f} GB/s)")
    return Cause("degraded link", "; ".join(problems)) if problems else None


def own_launcher(r: Result, record: Result | None) -> Cause | None:
    seen = r.measured.neighbours
    count, memory = seen.launcher_processes or 0, seen.launcher_memory_gb or 0.0
    if not count:
        return None
    # Results stored before the command was recorded only had dlbench's own launchers marked
    commands = "; ".join(seen.launcher_commands or ["a dlbench suite or torchrun"])
    return Cause("the run's launcher on the GPU", f"the process that started this run ({commands}) held {memory:.1f} GB "
                                                  f"of GPU memory during it, memory the run could not use")


def low_ceiling(r: Result, record: Result | None) -> Cause | None:
    if record is None:
        return None
    precision = r.setup.precision
    measured = profile.measured_ceiling(record, ceiling_name(precision))
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



MACHINE_CHECKS: list[Callable[[Result, Result | None], Cause | None]] = [degraded_link, own_launcher, low_ceiling]


def _baseline(d: Diagnosis) -> Against | None:
    """What the causes are measured against: a slower-than-history run's best other run, else a
    multi-GPU run's one-GPU run where it scales poorly."""
    if d.history is not None and d.history.behind:
        return d.history
    if d.one_gpu is not None and d.one_gpu.ratio < SCALING_OK:
        return d.one_gpu
    return None


def _lost(r: Result, base: Against | None) -> float | None:
    """Seconds a mean step lost against the baseline (on several GPUs, against one GPU's step)."""
    if base is None:
        return None
    return mean_step(r) - mean_step(base.other)


def measured_causes(r: Result, base: Against | None, record: Result | None) -> tuple[list[Cause], list[str]]:
    """The causes the record's figures account for, largest first, and notes of what was checked."""
    p = parts(r)
    theirs = parts(base.other) if base else None
    found: list[Cause] = []
    notes: list[str] = []

    def grew(mine: float | None, other: float | None) -> float | None:
        """The part of the step that grew as a share: a run slower all over keeps its shares."""
        return None if mine is None else mine - ((other or 0.0) * p.step / theirs.step if base else 0.0)

    data = grew(p.data, theirs.data if theirs else None)
    if data is not None and data > 0 and (base or p.data >= parts_of.INPUT_BOUND_SHARE * p.step):
        found.append(parts_of.input_cause(r, data, p, record))
    idle = grew(p.idle, theirs.idle if theirs else None)
    if idle is not None and idle > 0 and (base or p.idle >= LAUNCH_BOUND_IDLE * p.step):
        found.append(parts_of.host_gaps(r, idle, p, base))
    neighbours = grew(p.neighbours, theirs.neighbours if theirs else None)
    if neighbours is not None and neighbours > 0 and p.neighbours >= parts_of.NEIGHBOUR_SHARE * p.step:
        found.append(parts_of.neighbour_cause(r, neighbours))
    elif p.neighbours is None and (seen := r.measured.neighbours).other_processes:
        count, memory = seen.other_processes, seen.other_processes_memory_gb or 0.0
        found.append(Cause("other processes on the GPU", f"{count} other compute process(es) held {memory:.1f} GB of "
                           "GPU memory during the run; their share of the GPU's time was not recorded (stored by an "
                           "earlier dlbench)"))
    ranked, rank_notes = rank_causes.causes(r, p, base)  # the other GPUs and the ranks of a multi-GPU run
    found += ranked
    notes += rank_notes
    facts = _facts(r, record)
    clock = parts_of.clock_cause(r, p, base, facts) or parts_of.power_note(r, p, base, facts)
    if isinstance(clock, Cause):
        found.append(clock)
    elif clock:
        notes.append(clock)
    lost = _lost(r, base)
    explained = sum(c.seconds or 0.0 for c in found)
    if not on_gpu(r) and (contended := parts_of.contention(r)):  # the cores are the device
        found.append(Cause("CPU contention", f"{contended}: the benchmark runs on the cores they use",
                           max(0.0, lost - explained) if lost is not None else None))
    if lost is not None:
        comm = parts_of.communication_cause(r, lost - explained, record)
        if comm:
            found.append(comm)
    elif (path := parts_of.degraded_path(r)) is not None:
        found.append(Cause("degraded all-reduce path", f"{path}; unset them to let NCCL use the fast path"))
    notes += [note for note in (parts_of.communication_note(r, record), parts_of.nccl_profile_note(r)) if note]
    found, host_notes = host_causes.revise(r, p, base, lost, found)
    notes += host_notes
    for c in found:
        if c.seconds is not None:
            c.share = c.seconds / p.step
            c.explains = min(1.0, c.seconds / lost) if lost and lost > 0 else None
    found = [c for c in found if c.share is None or c.share >= MIN_CAUSE_SHARE or (c.explains or 0) >= MIN_CAUSE_SHARE]
    found.sort(key=lambda c: -(c.seconds or 0.0))
    return found, notes


def _unexplained(r: Result, base: Against, found: list[Cause]) -> Cause | None:
    """A loss against the machine's own runs that the causes leave mostly unaccounted for."""
    lost = _lost(r, base)
    if lost is None or lost <= 0:
        return None
    explained = sum(min(c.seconds or 0.0, lost) for c in found)
    if explained >= parts_of.UNEXPLAINED * lost:
        return None
    unaccounted = lost - explained
    changed = parts_of.environment_differences(r, base.other)
    if changed:  # a setting that changes how CUDA, NCCL or PyTorch run is the one recorded difference of its kind
        return Cause("changed environment", f"{'; '.join(changed)} ({_against_text(base)}); {ms(unaccounted * 1e3)} "
                                            f"of the {ms(lost * 1e3)} ms a step lost is accounted for by no other "
                                            f"figure: set them as in run {base.other.id[:8]}", unaccounted,
                     unaccounted / mean_step(r), unaccounted / lost)
    what = "; ".join(parts_of.differences(r, base.other)) or "none of the recorded figures"
    return Cause("unexplained", f"{_against_text(base)}; {ms((lost - explained) * 1e3)} of the {ms(lost * 1e3)} ms a "
                                f"step lost is not accounted for; what differed: {what}", lost - explained,
                 (lost - explained) / mean_step(r), (lost - explained) / lost)


def _against_text(a: Against) -> str:
    when = a.other.started[:16].replace("T", " ")
    if a.kind == "one GPU":  # judged by its efficiency, not by the one-GPU runs' spread: that is told only
        spread = a.spread
        told = (f"; the {spread.n} one-GPU runs spread {fixed(spread.low / spread.median, 2)}–"
                f"{fixed(spread.high / spread.median, 2)}x of their median (CV {percent(spread.cv or 0.0)}); "
                f"{_sets_text(a)}" if a.between_runs else _interval(a))
        return f"weak-scaling efficiency {fixed(a.ratio, 2)} against run {a.other.id[:8]} ({when}) on one GPU{told}"
    if a.between_runs:
        return (f"{fixed(a.ratio, 2)}x of run {a.other.id[:8]} ({when}), the median of {a.spread.n}; "
                f"{_sets_text(a)}; {spread_text(a)}")
    if a.kind == "history":
        return (f"{fixed(a.ratio, 2)}x of run {a.other.id[:8]} ({when}), the one other run: between-run noise "
                f"unknown (`--repeat 5` measures it)")
    noise = "" if a.differs else ", within noise" if not a.beyond_noise else ", alike"
    return f"{fixed(a.ratio, 2)}x of run {a.other.id[:8]} ({when}){_interval(a)}{noise}"


def _interval(a: Against) -> str:
    """The steps' bootstrap interval: a comparison of two runs with no between-run spread to go by,
    with the steps it stands on (`dlbench compare` gives the same interval for the same two runs)."""
    steps = f" ({a.steps[0]:,} and {a.steps[1]:,})" if a.steps else ""
    if a.low is None or a.high is None:
        return f", no interval from {a.steps[0]:,} and {a.steps[1]:,} steps (fewer than {MIN_STEPS} a side)" \
            if a.steps and min(a.steps) < MIN_STEPS else ""
    return f", {percent(0.95)} interval over both runs' steps{steps} {fixed(a.low, 2)}–{fixed(a.high, 2)}"


def _sets_text(a: Against) -> str:
    """This run against the runs it is judged by, by their steps per second: the figures and interval
    `dlbench compare` prints for the same two sets (spread.RunRatio.text)."""
    return f"this run against those {a.spread.n}: {a.sets.text()}"


def spread_text(a: Against) -> str:
    """'within this machine's run-to-run spread (6 runs, 1,735–3,195 img/s)', or beyond it."""
    spread = a.spread
    where = {-1: "slower than", 0: "within", 1: "faster than"}[a.place]
    unit = f" {spread.unit}" if spread.unit else ""
    figures = f"{_fmt(spread.low)}–{_fmt(spread.high)}{unit}"
    return f"{where} this machine's run-to-run spread ({spread.n} runs, {figures}, CV {percent(spread.cv or 0.0)})"


Compared = Callable[[Result], "tuple[Against | None, Against | None, Against | None]"]


def diagnose(results: list[Result], refs: list[Reference] | None = None,
             chosen: list[Result] | None = None, compared: Compared | None = None) -> list[Diagnosis]:
    """A diagnosis for each result in `chosen`; by default for the newest result of each
    configuration on each machine and every older one that differs from it beyond noise.
    `compared(r)`: r against its machine's history, one GPU and synthetic data, where the caller
    figures them without `results` holding every run (diagnose/choose.py); by default from `results`."""
    refs = load_references() if refs is None else refs
    by_configuration = history.groups(results)
    if chosen is None:
        chosen = [r for group in by_configuration.values() for r in history.to_judge(group)]
    surveys = [r for r in results if is_system_record(r)]  # looked up once per result below
    if compared is None:
        def compared(r: Result) -> tuple[Against | None, Against | None, Against | None]:
            return (history.typical(r, by_configuration.get(history.configuration(r), [])),
                    history.one_gpu(r, by_configuration), history.synthetic(r, by_configuration))
    return [_diagnose(r, refs, surveys, compared) for r in chosen if not is_system_record(r)]


def _diagnose(r: Result, refs: list[Reference], surveys: list[Result], compared: Compared) -> Diagnosis:
    record = ceilings_for(r, surveys)
    found = matmul_ceiling(r, surveys)
    ceiling, ceiling_record = found if found else (None, None)
    d = expectation(r, refs, ceiling)
    # what the run's own line said; figured from the store for results stored without it
    m = r.measured
    d.utilisation = utilisation_text(m.utilisation) or utilisation_text(utilisation(r, surveys))
    if r.status == "ok" and r.samples.get("step"):
        d.history, d.one_gpu, d.synthetic = compared(r)
    d.baseline = _baseline(d)
    d.causes, notes = measured_causes(r, d.baseline, record)
    if d.baseline is not None and (gap := _unexplained(r, d.baseline, d.causes)):
        d.causes.append(gap)
    d.hints += notes
    # the profile's classes say where the step goes (its matmul classes on the run's quick ceiling
    # where no survey was made); what makes the run slower than it was is said by the causes
    d.machine = [c for c in (check(r, record) for check in MACHINE_CHECKS) if c]
    d.breakdown = profile.causes(r, record or ceiling_record,
                                 idle_advice=not IDLE_EXPLAINED & {c.name for c in d.causes})
    d.hints += [note] if (note := profile.profile_note(r)) else []
    if d.history is not None and not any(c.name == "changed environment" for c in d.causes) and \
            (changed := parts_of.environment_differences(r, d.history.other)):
        d.hints.append(f"the environment differs from run {d.history.other.id[:8]}: {'; '.join(changed)}")
    if d.history is None and timed(r.samples.get("step")):
        d.hints.append("the first run of this configuration on this machine: the next one is judged against it")
    elif r.samples.get("step") and not timed(r.samples.get("step")):  # stored before imports refused such records
        d.hints.append("its per-step times have a median of 0 s, which no measurement gives: it is not compared "
                       "with other runs")
    if not r.samples.get("step") and r.status == "ok":
        d.hints.append("no per-step samples in this result (stored by an earlier dlbench or imported without them): "
                       "it is not compared with other runs")
    if record is None and on_gpu(r) and "dlbench system" not in d.reason:
        d.hints.append(_survey_hint(r, ceiling_record))
    if m.monitor.gpu_util_mean is None and on_gpu(r):
        d.hints.append("no GPU monitor readings in this result (NVML missing?)")
    elif on_gpu(r) and m.neighbours.gpu_neighbours_sm_share is None and r.samples.get("step"):
        d.hints.append("other processes' share of the GPU was not recorded (stored by an earlier dlbench)")
    return d


def _survey_hint(r: Result, quick: Result | None) -> str:
    """What a full `dlbench system` survey would add for `r`'s machine, given the quick record of
    one matmul ceiling its runs may have left."""
    if quick is None:
        return ("no `dlbench system` record for this machine: run `dlbench system` to measure its ceilings "
                "(expectations then compare measured with measured), then `dlbench doctor` again")
    return (f"only the {r.setup.precision} matmul ceiling the runs measured is stored for this machine: run "
            f"`dlbench system` to measure what the likely causes are checked against (the GPU's link, memory "
            f"copy, host to device, JPEG decoding, disk), then `dlbench doctor` again")


# ---- rendering -----------------------------------------------------------------------------

def _fmt(value: float) -> str:
    return sig(value, grouping=True)


def _figure(value: float, unit: str) -> str:
    return ms(value) if unit.startswith("ms") else _fmt(value)


def verdict(d: Diagnosis) -> str:
    """One word for what the diagnosis found: slower, poor scaling, below reference, as expected,
    faster, or not judged."""
    if d.history is not None and d.history.slower:
        return "slower than this machine's own runs"
    if d.one_gpu is not None and d.one_gpu.ratio < SCALING_OK:
        return "scales poorly"
    if d.ratio is not None and d.ratio < AS_EXPECTED:
        return "below the reference"
    if d.causes:
        return f"limited by {d.causes[0].name}"
    if d.history is not None and d.history.between_runs:
        return "within this machine's run-to-run spread" if d.history.place == 0 else "faster than this machine's own runs"
    # "as expected" only against something: a first run with no comparable reference is not judged,
    # and one other run of its configuration, whose between-run noise is unknown, judges nothing
    compared = any(c is not None for c in (d.ratio, d.one_gpu, d.synthetic))
    return "as expected" if compared else "not judged"


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
        judged = "as expected" if ratio <= 1.25 else f"{fixed(ratio, 2)}x faster than expected"
    else:
        judged = f"{fixed(1 / ratio, 1)}x slower than it should be ({percent(ratio)} of expected)"
    return f"{measured}, expected {_figure(d.expected, d.unit)} {d.unit}: {judged}"


def _history_line(d: Diagnosis) -> list[str]:
    lines = []
    if d.history is not None:
        lines.append(f"against this machine's other runs of this configuration: {_against_text(d.history)}")
    if d.one_gpu is not None:
        lines.append(f"against one GPU: {_against_text(d.one_gpu)}"
                     + (" (below " + fixed(SCALING_OK, 2) + ")" if d.one_gpu.ratio < SCALING_OK else ""))
    if d.synthetic is not None:
        lines.append(f"against synthetic data: {_against_text(d.synthetic)}{_input_cost(d.result, d.synthetic)}")
    return lines


def _input_cost(r: Result, a: Against) -> str:
    """Where a run on images loses to the same work on synthetic data: the steps' data wait, and the
    rest of the longer step (with --decode gpu, the decoding and crops on the model's GPU)."""
    longer = mean_step(r) - mean_step(a.other)
    if not a.slower or longer <= 0:
        return ""
    data = min(parts(r).data or 0.0, longer)
    text = f"; its step is {ms(longer * 1e3)} ms longer: {ms(data * 1e3)} ms waiting for data"
    rest = longer - data
    if rest <= 0.2 * longer:
        return text
    if not on_gpu(r):
        return text + f", {ms(rest * 1e3)} ms more in the step itself (the loader's workers share the cores)"
    where = (parts_of.decoding_on_the_gpu(r) + "; `--profile` shows it among the elementwise kernels"
             if r.setup.options.get("decode") in ("gpu", "hardware") else "each batch's copy and normalising")
    share = percent(rest / mean_step(r))
    return text + f", {ms(rest * 1e3)} ms ({share} of its step) more work on the GPU: {where}"


def _reference_value(ref: Reference) -> str:
    if ref.metric == "step_s":
        return f"{ms(ref.value * 1e3)} ms/step"
    return f"{_fmt(ref.value)} {ref.unit}"


def _cause_line(c: Cause) -> str:
    if c.share is None:
        return f"- {c.name}: {c.evidence}"
    took = f"{percent(c.share)} of the step"
    if c.explains is not None:
        took += f", {percent(c.explains)} of the time lost"
    return f"- {c.name} ({took}): {c.evidence}"


def _title(d: Diagnosis) -> str:
    r = d.result
    host, label = machine_key(r)
    setup = r.setup
    where = (f" x{setup.gpus} GPUs" if on_gpu(r) else f" x{setup.gpus} processes") if setup.gpus > 1 else ""
    level = f" {r.optimize}" if r.optimize != "eager" else ""
    tag = f", tag {r.tag}" if r.tag else ""
    batch = ODD if "spec.batch" in r.odd else setup.batch
    return (f"## {r.workload} {r.model} b{batch} {setup.precision}{level}{where} on {label} "
            f"({host}): run {r.id[:8]} ({r.started[:16].replace('T', ' ')}{tag})")


def render(diagnoses: list[Diagnosis]) -> str:
    blocks = []
    for d in diagnoses:
        r = d.result
        lines = [_title(d), f"{_headline(d)}; verdict: {verdict(d)}"]
        if r.odd:
            lines.append(f"note: {ODD_LEGEND}: {', '.join(r.odd)} of record {r.id[:8]}")
        lines += _history_line(d)
        if d.reference:
            ref = d.reference
            lines.append(f"reference: {ref.gpu}, {_reference_value(ref)} ({ref.source}); scaled by {d.scaling}")
        if d.utilisation:
            lines.append(f"FLOP utilisation: {sig(r.measured.utilisation.achieved_tflops)} TFLOP/s, {d.utilisation}")
        if d.causes:
            lines.append("causes, largest first (share of the step" +
                         ("; of the time lost against the comparison):" if d.baseline else "):"))
            lines += [_cause_line(c) for c in d.causes]
        elif verdict(d) in ("below the reference",):
            lines.append("no cause found in the recorded evidence")
        if d.machine:
            lines.append("about the machine (no share of the step measured):")
            lines += [_cause_line(c) for c in d.machine]
        if d.breakdown:
            beside = any(c.name == "another process on the GPU" for c in d.causes)
            lines.append("where the step goes (--profile" + ("; measured beside another process on the GPU, "
                         "so each class runs slower than alone):" if beside else "):"))
            lines += [f"- {name}: {evidence}" for name, evidence in d.breakdown]
        lines += [f"note: {h}" for h in d.hints]
        # Hosts, GPU names, paths and sources come from results (imported ones too): escaped like
        # the report's Markdown, so no line breaks apart or renders a link.
        blocks.append("\n".join(map(line, lines)))
    return "\n\n".join(blocks)


def _against_json(a: Against | None) -> dict[str, Any] | None:
    if a is None:
        return None
    spread = a.spread if a.between_runs else None
    return {"kind": a.kind, "run": a.other.id, "started": a.other.started, "tag": a.other.tag, "ratio": a.ratio,
            "low": a.low, "high": a.high, "beyond_noise": a.beyond_noise,
            "sets": None if spread is None or a.sets is None else {
                "ratio": a.sets.value, "low": a.sets.low, "high": a.sets.high, "runs": list(a.sets.runs),
                "level": a.sets.level},
            "between_runs": None if spread is None else {
                "runs": spread.n, "low": spread.low, "high": spread.high, "median": spread.median, "cv": spread.cv,
                "unit": spread.unit, "band": spread.band(), "place": a.place}}


def to_json(diagnoses: list[Diagnosis]) -> dict[str, Any]:
    """The diagnoses as data: what was judged, against what, and the causes in order."""
    out = []
    for d in diagnoses:
        r = d.result
        comparison = _against_json(d.baseline or d.history or d.one_gpu)
        if comparison is None and d.expected is not None and d.reference is not None:
            comparison = {"kind": "reference", "source": d.reference.source, "gpu": d.reference.gpu,
                          "expected": d.expected, "ratio": d.ratio, "scaled_by": d.scaling}
        out.append({
            "result": r.id, "tag": r.tag, "started": r.started, "workload": r.workload, "model": r.model,
            "host": machine_key(r)[0], "device": machine_key(r)[1], "gpus": r.setup.gpus,
            "figure": {"value": d.actual, "unit": d.unit}, "verdict": verdict(d), "comparison": comparison,
            "history": _against_json(d.history), "one_gpu": _against_json(d.one_gpu),
            "synthetic": _against_json(d.synthetic),
            "causes": [{"name": c.name, "share_of_step": c.share, "share_of_lost": c.explains,
                        "seconds_per_step": c.seconds, "evidence": c.evidence} for c in d.causes],
            "about_the_machine": [{"name": c.name, "evidence": c.evidence} for c in d.machine],
            "breakdown": [{"name": name, "evidence": evidence} for name, evidence in d.breakdown],
            "notes": d.hints,
        })
    return _plain({"format": "dlbench-doctor", "diagnoses": out})


def _plain(value: Any) -> Any:
    """JSON's own values: a figure that is no finite number (an odd stored value) becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


NOTHING_TO_DIAGNOSE = (
    "No benchmark results in the store yet. Run first:\n"
    "  dlbench system                            # measure this machine's ceilings\n"
    "  dlbench                                   # the quick suite (or: dlbench run fwdbwd --model resnet50)\n"
    "then `dlbench doctor` again."
)
