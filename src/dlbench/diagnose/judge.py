"""`dlbench doctor`: how each result compares with what it should do, and why it falls short.

A run is judged against the machine's own history first: the median of the other runs of the same
configuration on the same machine (diagnose/history.py), and on several GPUs the same per-GPU work
on one GPU (weak scaling). Where neither exists, against the published figures scaled to this
machine (diagnose/references.py). Causes are only named with the evidence that points to them:
phase times, the GPU monitor, `dlbench system` records (diagnose/causes.py).
"""

from __future__ import annotations

from typing import Callable

from dlbench.diagnose import breakdown, causes, history
from dlbench.diagnose.check import Context
from dlbench.diagnose.differences import environment_differences
from dlbench.diagnose.history import Against
from dlbench.diagnose.inputs import input_cost
from dlbench.diagnose.references import Reference, expectation, load_references
from dlbench.diagnose.verdict import Diagnosis, baseline
from dlbench.report.compare import timed
from dlbench.report.parts import on_gpu
from dlbench.results.record import Result
from dlbench.system.records import ceilings_for, is_system_record, matmul_ceiling, utilisation, utilisation_text

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
    ceiling, quick = matmul_ceiling(r, surveys) or (None, None)
    d = Diagnosis(result=r, **vars(expectation(r, refs, ceiling)))
    # what the run's own line said; figured from the store for results stored without it
    d.utilisation = utilisation_text(r.measured.utilisation) or utilisation_text(utilisation(r, surveys))
    if r.status == "ok" and r.samples.get("step"):
        d.history, d.one_gpu, d.synthetic = compared(r)
    d.input_cost = input_cost(r, d.synthetic) if d.synthetic is not None else None
    d.baseline = baseline(d)
    ctx = Context.of(r, d.baseline, record)
    d.causes, notes = causes.measured(ctx)
    d.causes += [gap] if (gap := causes.unexplained(ctx, d.causes)) else []
    d.machine = causes.about_the_machine(ctx)
    # the profile's classes say where the step goes (its matmul classes on the run's quick ceiling
    # where no survey was made); what makes the run slower than it was is said by the causes
    d.breakdown = breakdown.classes(r, record or quick, idle_advice=not causes.explain_idle(d.causes))
    d.hints += notes + _notes(d, record, quick)
    return d


def _notes(d: Diagnosis, record: Result | None, quick: Result | None) -> list[str]:
    """What the record lacks or holds apart from the causes: the profile, the environment, the steps,
    the survey, the GPU monitor."""
    r, m = d.result, d.result.measured
    notes = [note] if (note := breakdown.profile_note(r)) else []
    if d.history is not None and not any(c.kind is causes.CHANGED for c in d.causes) and \
            (changed := environment_differences(r, d.history.other)):
        notes.append(f"the environment differs from run {d.history.other.id[:8]}: {'; '.join(changed)}")
    notes += _step_notes(d)
    if record is None and on_gpu(r) and "dlbench system" not in d.reason:
        notes.append(_survey_hint(r, quick))
    if m.monitor.gpu_util_mean is None and on_gpu(r):
        notes.append("no GPU monitor readings in this result (NVML missing?)")
    elif on_gpu(r) and m.neighbours.gpu_neighbours_sm_share is None and r.samples.get("step"):
        notes.append("other processes' share of the GPU was not recorded (stored by an earlier dlbench)")
    return notes


def _step_notes(d: Diagnosis) -> list[str]:
    """Why a run's steps judge nothing: the first of its configuration, or steps that are no measurement."""
    r, steps = d.result, d.result.samples.get("step")
    notes = []
    if d.history is None and timed(steps):
        notes.append("the first run of this configuration on this machine: the next one is judged against it")
    elif steps and not timed(steps):  # stored before imports refused such records
        notes.append("its per-step times have a median of 0 s, which no measurement gives: it is not compared "
                     "with other runs")
    if not steps and r.status == "ok":
        notes.append("no per-step samples in this result (stored by an earlier dlbench or imported without them): "
                     "it is not compared with other runs")
    return notes


def _survey_hint(r: Result, quick: Result | None) -> str:
    """What a full `dlbench system` survey would add for `r`'s machine, given the quick record of
    one matmul ceiling its runs may have left."""
    if quick is None:
        return ("no `dlbench system` record for this machine: run `dlbench system` to measure its ceilings "
                "(expectations then compare measured with measured), then `dlbench doctor` again")
    return (f"only the {r.setup.precision} matmul ceiling the runs measured is stored for this machine: run "
            f"`dlbench system` to measure what the likely causes are checked against (the GPU's link, memory "
            f"copy, host to device, JPEG decoding, disk), then `dlbench doctor` again")
