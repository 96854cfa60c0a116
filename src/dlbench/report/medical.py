"""Seed 003's accuracy table from `converge` results, one per model, DICE target and folds:

`|System|GPUs|Batch size / GPU|Accuracy - P|DICE per fold - P|Time to train - P [min]|
Time to DICE t - P [min]|Time to train speedup (TF32 to mixed precision)|`

with the columns of each precision present. Accuracy is the mean final DICE over the folds
run, and every fold's DICE is listed. Time to train is given both ways: as the seed defines
it, the minutes one fold takes for a fixed number of iterations (its 40,000, at the measured
time per training step, evaluations excluded), and as the mean minutes per fold to reach the
DICE target (evaluations and warm-up included; * where a fold missed it and its whole budget
counts). The speed-up divides the fixed-iteration times, like the seed's. With `published`,
the seed's DGX A100 and DGX-1 rows join the table.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from dlbench.report import rows as rowinfo
from dlbench.report.tables import Table, model_title
from dlbench.figures import DASH, fixed
from dlbench.results.record import Result
from dlbench.units import SEED003_ITERATIONS

ORDER = ("fp32", "tf32", "fp16", "bf16")
NAMES = {"fp32": "FP32", "tf32": "TF32", "fp16": "mixed precision", "bf16": "mixed precision (bf16)"}
FULL, MIXED = ("fp32", "tf32"), ("fp16", "bf16")
GENERATED = ("The data is generated, not the ISBI 2012 set: dlbench's rows train on EM-membrane-like images it "
             "makes (`dlbench data seg`; Data says how many and of what size), so their DICE is not the "
             "publication's, and its times are times to that DICE on that data. Give the ISBI set with "
             "`data: PATH` on the converge entries to compare accuracy.")


@dataclass
class _Row:
    cells: dict[str, object]  # by column name
    extra: dict[str, object] = field(default_factory=dict)
    source: str = "dlbench"
    check: str | None = None
    folds: list[float] = field(default_factory=list)  # DICE per fold run (dlbench rows)


def _group_key(r: Result) -> tuple:
    m, options = r.metrics, r.spec.get("options") or {}
    return r.model, m.get("target_dice", options.get("target_dice")), m.get("folds", options.get("folds"))


def _row_key(r: Result) -> tuple:
    return (rowinfo.system(r, gpus=False, precision=False), r.tag or "", str(r.metrics.get("data")),
            int(r.metrics.get("gpus") or r.spec.get("gpus") or 1), int(r.spec.get("batch", 0)))


def tables(results: list[Result], published: bool = False) -> list[Table]:
    chosen = sorted((r for r in results if r.workload == "converge" and r.status in ("ok", "oom")), key=lambda r: r.started)
    groups: "OrderedDict[tuple, dict[tuple, dict[str, Result]]]" = OrderedDict()
    for r in chosen:  # later results replace earlier ones of the same setting
        groups.setdefault(_group_key(r), {}).setdefault(_row_key(r), {})[r.spec.get("precision", "fp32")] = r
    return [_table(key, rows, published) for key, rows in groups.items()]


def _table(key: tuple, setups: dict[tuple, dict[str, Result]], published: bool) -> Table:
    model, target, folds = key
    rows = [_row(k, by_precision, target) for k, by_precision in sorted(setups.items(), key=lambda kv: kv[0])]
    seeds = _published(model) if published else []
    rows += seeds
    present = [p for p in ORDER if any(f"Accuracy - {NAMES[p]}" in r.cells for r in rows)]
    fulls, mixeds = [p for p in present if p in FULL], [p for p in present if p in MIXED]
    target_text = "the target" if target is None else f"DICE {target:g}"
    columns = ["System", "GPUs", "Batch size / GPU",
               *(f"Accuracy - {NAMES[p]}" for p in present), *(f"DICE per fold - {NAMES[p]}" for p in present),
               *(f"Time to train - {NAMES[p]} [min]" for p in present),
               *(f"Time to {target_text} - {NAMES[p]} [min]" for p in present),
               *(f"Time to train speedup ({NAMES[f]} to {NAMES[m]})" for f in fulls for m in mixeds)]
    body = [[r.cells.get(c, _speedup_for(r, c)) for c in columns] for r in rows]
    header, align = list(columns), "lrr" + "r" * (len(columns) - 3)
    for name in ("Data", "Tag"):
        values = [r.extra.get(name) for r in rows]
        if len({str(v) for v in values}) > 1 or (name == "Tag" and any(values)):
            header, align, body = header + [name], align + "l", [b + [v] for b, v in zip(body, values)]
    notes = [f"(DICE target {target}, {folds}-fold cross-validation; accuracy: mean final DICE over the folds run; "
             f"Time to train: minutes for one fold of {SEED003_ITERATIONS:,} iterations (the publication's definition) at the "
             f"measured time per training step, evaluations excluded, marked extrapolated where the folds trained fewer; Time to {target_text}: mean minutes per fold to reach it, "
             f"evaluations and warm-up included, * where a fold missed it and its whole budget counts; the speed-up "
             f"divides the Time to train figures)"]
    if any(r.source == "dlbench" and "generated" in str(r.extra.get("Data")) for r in rows):
        notes.append(GENERATED)
    if any(r.source == "dlbench" and len(r.folds) < (folds or 0) for r in rows):
        notes.append(f"A dlbench row with fewer DICE figures than {folds} ran only the first folds (fold_limit).")
    if published:
        header, align, body = header + [rowinfo.SOURCE], align + "l", [b + [r.source] for b, r in zip(body, rows)]
    if seeds:
        notes.append("Rows from NVIDIA UNet_Medical are its published figures (TF1 20.06, ISBI 2012 data, mixed precision = TF-AMP "
                     "fp16; one fold's time). Their speed-ups check out. Their times are not 40,000 iterations at the "
                     "publication's own throughputs: 22 min on 1 A100 in TF32 at its 40.50 img/s is about 6,700 iterations of "
                     "batch 8 (40,000 would take 132 min), so the iterations behind them are not published.")
        if any(r.check not in (None, "ok") for r in seeds):
            header, align, body = header + ["Check"], align + "l", [b + [r.check] for b, r in zip(body, rows)]
    first = next(r for by_precision in setups.values() for r in by_precision.values())
    table = Table(f"{model_title(first)}: accuracy and time to train", header, align, body, notes=notes)
    return rowinfo.prune(table, 3 + len(present))


def _row(key: tuple, by_precision: dict[str, Result], target) -> _Row:
    system, tag, data, gpus, batch = key
    cells: dict[str, object] = {"System": system, "GPUs": gpus, "Batch size / GPU": batch}
    target_text = "the target" if target is None else f"DICE {target:g}"
    minutes: dict[str, float] = {}
    for p, r in by_precision.items():
        name = NAMES.get(p, p)
        if r.status == "oom":
            for column in ("Accuracy", "DICE per fold", "Time to train", f"Time to {target_text}"):
                cells[f"{column} - {name}" + (" [min]" if column.startswith("Time") else "")] = "OOM"
            continue
        m = r.metrics
        cells[f"Accuracy - {name}"] = fixed(m.get("mean_dice"), 4)
        cells[f"DICE per fold - {name}"] = ", ".join(fixed(d, 4) for d in m.get("dice_per_fold") or []) or DASH
        step_s = _step_seconds(m)
        if step_s is not None:
            minutes[p] = SEED003_ITERATIONS * step_s / 60  # time per fold
            steps = max((f.get("steps") or 0 for f in m.get("per_fold") or []), default=0)
            cells[f"Time to train - {name} [min]"] = fixed(minutes[p], 1) + (
                "" if steps >= SEED003_ITERATIONS else f" (extrapolated from {steps:,} steps)")
        to_target = m.get("time_to_train_s")
        cells[f"Time to {target_text} - {name} [min]"] = (
            DASH if to_target is None else fixed(to_target / 60, 1) + ("" if m.get("target_reached") else "*"))
    for f in FULL:
        for mixed in MIXED:
            if f in minutes and mixed in minutes:
                cells[f"Time to train speedup ({NAMES[f]} to {NAMES[mixed]})"] = fixed(minutes[f] / minutes[mixed], 2)
    any_result = next(iter(by_precision.values()))
    run = min((r.metrics.get("dice_per_fold") or [] for r in by_precision.values()), key=len)
    return _Row(cells, {"Data": any_result.metrics.get("data"), "Tag": tag or None}, folds=list(run))


def _step_seconds(metrics: dict) -> float | None:
    """Mean seconds per training step over the folds (training time only)."""
    folds = [f for f in metrics.get("per_fold") or [] if f.get("steps")]
    if not folds:
        return None
    return sum(f["train_s"] / f["steps"] for f in folds) / len(folds)


def _speedup_for(row: _Row, column: str) -> object:
    return row.cells.get(column, DASH if row.source == "dlbench" else None)


def _published(model: str) -> list[_Row]:
    from dlbench.report import published

    rows = published.seed003_accuracy() if published.measured_with("seed003", model) else []
    return [_published_row(row) for row in rows]


def _published_row(row) -> _Row:
    c = row.cells
    full = row.extra["full"]
    cells: dict[str, object] = {"System": c["system"], "GPUs": int(c["gpus"]), "Batch size / GPU": int(c["batch"]),
                                f"Accuracy - {NAMES[full]}": c[f"accuracy_{full}"],
                                f"Accuracy - {NAMES['fp16']}": c["accuracy_fp16"],
                                f"Time to train - {NAMES[full]} [min]": c[f"minutes_{full}"],
                                f"Time to train - {NAMES['fp16']} [min]": c["minutes_fp16"],
                                f"Time to train speedup ({NAMES[full]} to {NAMES['fp16']})":
                                    row.mark("Time to train speedup", c["speedup"])}
    return _Row(cells, {"Data": "ISBI 2012 (5 folds)", "Tag": None}, "NVIDIA UNet_Medical", row.check_text())
