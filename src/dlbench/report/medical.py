"""Seed 003's accuracy table from `converge` results: one per GPU, model and setting,

`|GPUs|Batch size / GPU|Accuracy - TF32|Accuracy - mixed precision|Time to train - TF32 [min]|
Time to train - mixed precision [min]|Time to train speedup (TF32 to mixed precision)|`

with a column pair for each precision present. Accuracy is the mean final DICE over the
folds; time to train is the mean wall time per fold to the target (the seed reports one
fold). The speed-up compares the mixed precisions with TF32 (or FP32 where TF32 was not run).
"""

from __future__ import annotations

from collections import OrderedDict

from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result

ORDER = ("fp32", "tf32", "fp16", "bf16")
NAMES = {"fp32": "FP32", "tf32": "TF32", "fp16": "mixed precision", "bf16": "mixed precision (bf16)"}
MIXED = ("fp16", "bf16")


def _group_key(r: Result) -> tuple:
    m, options = r.metrics, r.spec.get("options") or {}
    return (r.system_label, r.model, m.get("target_dice", options.get("target_dice")), m.get("data"),
            m.get("folds", options.get("folds")))


def _row_key(r: Result) -> tuple[int, int]:
    return int(r.metrics.get("gpus") or r.spec.get("gpus") or 1), int(r.spec.get("batch", 0))


def tables(results: list[Result]) -> list[Table]:
    chosen = sorted((r for r in results if r.workload == "converge" and r.status in ("ok", "oom")), key=lambda r: r.started)
    groups: "OrderedDict[tuple, dict[tuple, dict[str, Result]]]" = OrderedDict()
    for r in chosen:  # later results replace earlier ones of the same setting
        groups.setdefault(_group_key(r), {}).setdefault(_row_key(r), {})[r.spec.get("precision", "fp32")] = r
    return [_table(key, rows) for key, rows in groups.items()]


def _table(key: tuple, rows: dict[tuple, dict[str, Result]]) -> Table:
    system, _, target, data, folds = key
    any_result = next(r for by_precision in rows.values() for r in by_precision.values())
    present = [p for p in ORDER if any(p in by_precision for by_precision in rows.values())]
    base = next((p for p in ("tf32", "fp32") if p in present), None)
    mixed = [p for p in present if p in MIXED and base]
    header = ["GPUs", "Batch size / GPU", *(f"Accuracy - {NAMES[p]}" for p in present),
              *(f"Time to train - {NAMES[p]} [min]" for p in present),
              *(f"Time to train speedup ({NAMES[base]} to {NAMES[p]})" for p in mixed)]
    body = []
    for (gpus, batch), by_precision in sorted(rows.items()):
        body.append([gpus, batch, *(_accuracy(by_precision.get(p)) for p in present),
                     *(_minutes(by_precision.get(p)) for p in present),
                     *(_speedup(by_precision.get(base), by_precision.get(p)) for p in mixed)])
    notes = [f"(DICE target {target}, {folds}-fold cross-validation, data: {data}; accuracy: mean final DICE "
             f"over the folds; time to train: mean minutes per fold to the target, * where a fold missed it "
             f"and its whole budget counts)"]
    return Table(f"{model_title(any_result)} on {system}: accuracy and time to train", header, "rr" + "r" * (len(header) - 2),
                 body, notes=notes)


def _accuracy(r: Result | None) -> str:
    if r is None:
        return "-"
    if r.status == "oom":
        return "OOM"
    return f"{r.metrics['mean_dice']:.4f}"


def _minutes(r: Result | None) -> str:
    if r is None:
        return "-"
    if r.status == "oom":
        return "OOM"
    return f"{r.metrics['time_to_train_s'] / 60:.1f}" + ("" if r.metrics.get("target_reached") else "*")


def _speedup(base: Result | None, other: Result | None) -> str:
    if not base or not other or base.status != "ok" or other.status != "ok":
        return "-"
    missed = not (base.metrics.get("target_reached") and other.metrics.get("target_reached"))
    return f"{base.metrics['time_to_train_s'] / other.metrics['time_to_train_s']:.2f}" + ("*" if missed else "")
