"""Learning curves of `converge` runs (NVIDIA UNet_Medical's loss against iteration, with DICE
beside it): per run, a table of the training loss and validation DICE at every evaluation of
every fold, and for the HTML page one figure of both against the step.

The figures are what the workload records at each evaluation (samples `curve_fold`,
`curve_step`, `curve_loss`, `curve_dice`): the loss is the mean over the steps since the
previous evaluation, the DICE that of the whole validation images at that step.
"""

from __future__ import annotations

from collections import OrderedDict

from dlbench.figures import fixed
from dlbench.report import rows as rowinfo
from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result

MAX_RUNS = 6  # learning-curve figures drawn (the newest runs)
CURVE = ("curve_fold", "curve_step", "curve_loss", "curve_dice")


def has_curve(r: Result) -> bool:
    return r.workload == "converge" and r.status == "ok" and all(r.samples.get(k) for k in CURVE)


def folds(r: Result) -> "OrderedDict[int, list[tuple[int, float, float]]]":
    """Per fold, its evaluations in order: (step, mean loss since the last one, DICE)."""
    s = r.samples
    out: OrderedDict[int, list[tuple[int, float, float]]] = OrderedDict()
    for fold, step, loss, dice in zip(*(s[k] for k in CURVE)):
        out.setdefault(int(fold), []).append((int(step), float(loss), float(dice)))
    return out


def reached_at_first(r: Result) -> int | None:
    """The step of the first evaluation where every fold reached the target there, else None:
    such a time to the target is one evaluation interval, an upper bound, not a crossing."""
    c = r.measured.convergence
    per_fold = c.per_fold or []
    if not has_curve(r) or not per_fold or not c.target_reached:
        return None
    firsts = {fold: points[0][0] for fold, points in folds(r).items()}
    if all(f.get("reached") and f.get("steps_to_target") == firsts.get(f.get("fold")) for f in per_fold):
        return max(firsts.values())
    return None


def first_evaluation_note(label: str, r: Result) -> list[str]:
    """The sentence the time-to-train table prints for a row whose folds all reached the target at
    their first evaluation."""
    step = reached_at_first(r)
    if step is None:
        return []
    return [f"{label}: every fold reached the target at its first evaluation (step {step:,}), so its time to the "
            f"target is that of {step:,} steps, an upper bound: the crossing came earlier and was not timed "
            "(evaluate more often near the target: `eval_every`, `eval_near`)."]


def evaluation_text(r: Result) -> str:
    options = r.setup.options
    every = options.get("eval_every", 100)
    near = options.get("eval_near")
    text = f"evaluated every {every} steps"
    if near:
        text += f", every {options.get('eval_near_every', 2)} once the DICE was within {near:g} of the target"
    return text


def run_label(r: Result) -> str:
    gpus = rowinfo.processes(r)
    return (f"{rowinfo.system(r, gpus=False, precision=False)}, {gpus} GPU{'s' if gpus != 1 else ''}, "
            f"batch {r.setup.batch}, {r.setup.precision}")


def latest(results: list[Result]) -> list[Result]:
    """The newest run of each setting with a curve (a later run of one setting replaces it)."""
    chosen: dict[tuple, Result] = {}
    for r in sorted((r for r in results if has_curve(r)), key=lambda r: r.started):
        key = (r.model, run_label(r), r.tag or "", str(r.measured.data.source),
               r.measured.convergence.target_dice, r.measured.convergence.folds)
        chosen[key] = r
    return list(chosen.values())


def tables(results: list[Result]) -> list[Table]:
    return [_table(r) for r in latest(results)]


def _table(r: Result) -> Table:
    by_fold = folds(r)
    steps = sorted({step for points in by_fold.values() for step, _, _ in points})
    at = {(fold, step): (loss, dice) for fold, points in by_fold.items() for step, loss, dice in points}
    header = ["Step", *[f"Fold {fold + 1}: loss / DICE" for fold in by_fold]]
    body = [[f"{step:,}", *[_cell(at.get((fold, step))) for fold in by_fold]] for step in steps]
    c = r.measured.convergence
    target = c.target_dice
    notes = [f"How the training loss falls and the validation DICE rises with the iterations, fold by fold "
             f"({run_label(r)}; {evaluation_text(r)}; a fold stops at DICE {target:g}).",
             "Loss: the mean training loss (cross-entropy + soft DICE) over the steps since the previous evaluation; "
             "DICE: the validation DICE at that step; a blank cell: that fold did not evaluate at that step.",
             f"Data: {rowinfo.plain_source(r.measured.data.source)}."]
    notes += first_evaluation_note("This run", r)
    if r.tag:
        notes.append(f"Tag: `{r.tag}`.")
    title = f"{model_title(r)}: learning curve, {run_label(r)}"
    return Table(title, header, "r" * len(header), body, notes=notes)


def _cell(point: tuple[float, float] | None) -> str:
    return "" if point is None else f"{fixed(point[0], 4)} / {fixed(point[1], 4)}"
