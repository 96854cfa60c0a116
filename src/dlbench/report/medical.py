"""Seed 003's accuracy and time to train from `converge` results, one pair of tables per model,
DICE target and folds, one row per system, GPU count, batch and precision:

  accuracy:      | System | GPUs | Batch size / GPU | Precision | Accuracy (mean DICE) | DICE per fold | Data |
  time to train: | System | GPUs | Batch size / GPU | Precision | Time to train, as published [min] |
                 | 40,000 iterations | Time to DICE t | Mixed-precision speed-up |
(dlbench's times carry their unit, ms, s, min or h, as figures.duration picks it)

The publication's "time to train" and dlbench's are different measures, so each has its own
column: the publication's minutes per fold (the iterations behind them are not published: its
22 min on one A100 is about 6,700 iterations at its own throughput), dlbench's the seed's 40,000
iterations at the measured time per training step (evaluations excluded), and dlbench's mean
minutes per fold to reach the DICE target (evaluations and warm-up included; * where a fold
missed it and its whole budget counts). The speed-up divides the full-precision row's time by
the mixed-precision row's, in the publication's column for its rows and the 40,000-iteration
column for dlbench's. With `published`, the seed's DGX A100 and DGX-1 rows join the tables.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from dlbench.report import curves, rows as rowinfo
from dlbench.report.tables import Table, model_title
from dlbench.figures import DASH, duration, fixed
from dlbench.results.measurement import Convergence
from dlbench.results.record import Result
from dlbench.units import SEED003_ITERATIONS

SELECTS = ("converge",)  # the publication's accuracy and time to train
ORDER = ("fp32", "tf32", "fp16", "bf16")
FULL, MIXED = ("fp32", "tf32"), ("fp16", "bf16")
HEAD = ["System", "GPUs", "Batch size / GPU", "Precision"]
PUBLISHED_TIME = "Time to train, as published [min]"
FIXED_TIME = f"{SEED003_ITERATIONS:,} iterations"
SPEEDUP = "Mixed-precision speed-up"
GENERATED = ("The data is generated, not the ISBI 2012 set: dlbench's rows train on EM-membrane-like images it "
             "makes (`dlbench data seg`; Data says how many and of what size), so their DICE is not the "
             "publication's, and its times are times to that DICE on that data. Give the ISBI set with "
             "`data: PATH` on the converge entries to compare accuracy.")
PUBLISHED_NOTE = ("Rows from NVIDIA UNet_Medical are its published figures (TF1 20.06, ISBI 2012 data, mixed precision "
                  "= TF-AMP fp16; one fold's time).")
PUBLISHED_MEANING = (f"{PUBLISHED_TIME}: the publication's minutes for one fold; the iterations behind them are not "
                     f"published (22 min on 1 A100 in TF32 at its own 40.50 img/s is about 6,700 iterations of batch "
                     f"8; {SEED003_ITERATIONS:,} would take 132 min). ")
FIXED_MEANING = (f"{FIXED_TIME}: the {SEED003_ITERATIONS:,} iterations the publication names, at the measured time per "
                 "training step, evaluations excluded, marked extrapolated where the folds trained fewer. ")


@dataclass
class _Row:
    cells: dict[str, object]  # by column name
    extra: dict[str, object] = field(default_factory=dict)
    source: str = "dlbench"
    check: str | None = None
    folds: list[float] = field(default_factory=list)  # DICE per fold run (dlbench rows)


def _group_key(r: Result) -> tuple:
    c, options = r.measured.convergence, r.setup.options
    return (r.model, options.get("target_dice") if c.target_dice is None else c.target_dice,
            options.get("folds") if c.folds is None else c.folds)


def _row_key(r: Result) -> tuple:
    m = r.measured
    return (rowinfo.system(r, gpus=False, precision=False), r.tag or "", str(m.data.source),
            int(m.run.processes or r.setup.gpus), r.setup.batch or 0)


def tables(results: list[Result], published: bool = False) -> list[Table]:
    chosen = sorted((r for r in results if r.workload in SELECTS and r.status in ("ok", "oom")), key=lambda r: r.started)
    groups: "OrderedDict[tuple, dict[tuple, dict[str, Result]]]" = OrderedDict()
    for r in chosen:  # later results replace earlier ones of the same setting
        groups.setdefault(_group_key(r), {}).setdefault(_row_key(r), {})[r.setup.precision] = r
    return [t for key, rows in groups.items() for t in _tables(key, rows, published)]


def _target_text(target) -> str:
    return "the target" if target is None else f"DICE {target:g}"


def _tables(key: tuple, setups: dict[tuple, dict[str, Result]], published: bool) -> list[Table]:
    model, target, folds = key
    rows = [row for k, by_precision in sorted(setups.items(), key=lambda kv: kv[0])
            for row in _rows(k, by_precision, target)]
    seeds = _published(model) if published else []
    rows += seeds
    first = next(r for by_precision in setups.values() for r in by_precision.values())
    title = model_title(first)
    return [_accuracy_table(title, rows, target, folds, published), _time_table(title, rows, target, published, seeds)]


def _accuracy_table(title: str, rows: list[_Row], target, folds, published: bool) -> Table:
    header = [*HEAD, "Accuracy (mean DICE)", "DICE per fold", "Data"]
    notes = [f"How accurate the trained network is: DICE, the overlap of its output with the true membranes (1 is "
             f"perfect), {folds}-fold cross-validation, target {_target_text(target)}.",
             "Accuracy: the mean final DICE over the folds run; DICE per fold: each fold's."]
    if any(r.source == "dlbench" and "generated" in str(r.extra.get("Data")) for r in rows):
        notes.append(GENERATED)
    if any(r.source == "dlbench" and len(r.folds) < (folds or 0) for r in rows):
        notes.append(f"A dlbench row with fewer DICE figures than {folds} ran only the first folds (fold_limit).")
    return _finish(f"{title}: accuracy", header, rows, notes, published, checks=False)


def _time_table(title: str, rows: list[_Row], target, published: bool, seeds: list[_Row]) -> Table:
    to_target = f"Time to {_target_text(target)}"
    header = [*HEAD, PUBLISHED_TIME, FIXED_TIME, to_target, SPEEDUP]
    notes = ["How long training one fold takes; the publication's minutes and dlbench's measure different "
             "things, so each has its own column.",
             (PUBLISHED_MEANING if seeds else "") + FIXED_MEANING + f"{to_target}: dlbench's mean time per fold "
             "to reach it, evaluations and warm-up included, * where a fold missed it and its whole budget counts. "
             f"{SPEEDUP}: the full-precision row's time over this mixed-precision row's, in "
             f"{'the publication' + chr(39) + 's column for its rows and ' if seeds else ''}the {FIXED_TIME} "
             "column for dlbench's."]
    for row in rows:
        row.cells.setdefault(to_target, row.cells.pop("to_target", None))
        notes += row.extra.pop("first_evaluation", [])
    return _finish(f"{title}: time to train", header, rows, notes, published, checks=True)


def _finish(title: str, header: list[str], rows: list[_Row], notes: list[str], published: bool, checks: bool) -> Table:
    body = [[r.cells.get(c, r.extra.get(c)) for c in header] for r in rows]
    align = "lrrl" + "".join("l" if c in ("DICE per fold", "Data") else "r" for c in header[4:])
    tags = [r.extra.get("Tag") for r in rows]
    mine = [r.extra.get("Tag") for r in rows if r.source == "dlbench"]
    if rowinfo.tag_column(mine):
        header, align, body = header + ["Tag"], align + "l", [b + [t] for b, t in zip(body, tags)]
    notes = notes + rowinfo.tag_note(mine)
    if published:
        header, align, body = header + [rowinfo.SOURCE], align + "l", [b + [r.source] for b, r in zip(body, rows)]
        if any(r.source != "dlbench" for r in rows):
            notes.append(PUBLISHED_NOTE)
    if checks:
        notes += rowinfo.check_notes([(f"{r.cells['System']}, {r.cells['GPUs']} GPU(s), {r.cells['Precision']}", r.check)
                                      for r in rows if r.source != "dlbench"])
    return rowinfo.prune(Table(title, header, align, body, notes=notes), len(HEAD))


def _rows(key: tuple, by_precision: dict[str, Result], target) -> list[_Row]:
    system, tag, data, gpus, batch = key
    out = {p: _row(system, gpus, batch, p, r, tag) for p, r in sorted(by_precision.items(), key=lambda kv: ORDER.index(kv[0])
                                                                       if kv[0] in ORDER else len(ORDER))}
    for mixed in MIXED:
        full = next((f for f in ("tf32", "fp32") if f in out and out[f].extra.get("minutes")), None)
        if mixed in out and full and out[mixed].extra.get("minutes"):
            out[mixed].cells[SPEEDUP] = fixed(out[full].extra["minutes"] / out[mixed].extra["minutes"], 2) + \
                f" (from {NAMES_SHORT[full]})"
    return list(out.values())


NAMES_SHORT = {"fp32": "FP32", "tf32": "TF32"}


def _row(system: str, gpus: int, batch: int, precision: str, r: Result, tag: str) -> _Row:
    cells: dict[str, object] = {"System": system, "GPUs": gpus, "Batch size / GPU": batch, "Precision": precision}
    m = r.measured
    extra: dict[str, object] = {"Data": rowinfo.plain_source(m.data.source), "Tag": tag or None,
                                "first_evaluation": curves.first_evaluation_note(
                                    f"{system}, {gpus} GPU{'s' if gpus != 1 else ''}, {precision}", r)}
    if r.status == "oom":
        cells.update({"Accuracy (mean DICE)": "OOM", FIXED_TIME: "OOM", "to_target": "OOM"})
        return _Row(cells, extra)
    c = m.convergence
    cells["Accuracy (mean DICE)"] = fixed(c.mean_dice, 4)
    cells["DICE per fold"] = ", ".join(fixed(d, 4) for d in c.dice_per_fold or []) or DASH
    step_s = _step_seconds(c)
    if step_s is not None:
        extra["minutes"] = SEED003_ITERATIONS * step_s / 60  # time per fold
        steps = max((f.get("steps") or 0 for f in c.per_fold or []), default=0)
        cells[FIXED_TIME] = duration(extra["minutes"] * 60) + (
            "" if steps >= SEED003_ITERATIONS else f" (extrapolated from {steps:,} steps)")
    to_target = c.time_to_train_s
    cells["to_target"] = DASH if to_target is None else duration(to_target) + ("" if c.target_reached else " *")
    return _Row(cells, extra, folds=list(c.dice_per_fold or []))


def _step_seconds(convergence: Convergence) -> float | None:
    """Mean seconds per training step over the folds (training time only)."""
    folds = [f for f in convergence.per_fold or [] if f.get("steps")]
    if not folds:
        return None
    return sum(f["train_s"] / f["steps"] for f in folds) / len(folds)


def _published(model: str) -> list[_Row]:
    from dlbench.report import published

    rows = published.seed003_accuracy() if published.measured_with("seed003", model) else []
    return [r for row in rows for r in _published_rows(row)]


def _published_rows(row) -> list[_Row]:
    """A published row of both precisions as two rows: full precision, then mixed with the speed-up."""
    c, full = row.cells, row.extra["full"]
    head = {"System": c["system"], "GPUs": int(c["gpus"]), "Batch size / GPU": int(c["batch"])}
    extra = {"Data": "ISBI 2012 (5 folds)", "Tag": None}
    out = []
    for precision in (full, "fp16"):
        cells = {**head, "Precision": precision, "Accuracy (mean DICE)": c[f"accuracy_{precision}"],
                 PUBLISHED_TIME: c[f"minutes_{precision}"]}
        if precision == "fp16":
            cells[SPEEDUP] = f"{row.mark('Time to train speedup', c['speedup'])} (from {NAMES_SHORT[full]})"
        out.append(_Row(cells, extra, "NVIDIA UNet_Medical", row.check_text() if precision == "fp16" else "ok"))
    return out
