"""Seeds 000/001 ("GPU Benchmarks") as one table per 3D U-Net, like the reports print it:

  | System | CUDA | pytorch | Training [s] | Inference [s] | Iters / Min | Megavox / s |
  | 100k Iters [d] | Platynereis, 8.1 Tvox [h] |

one row per system, GPU count and precision ("NVIDIA H200 (x2, bf16)"). Training comes from
`train` of the model on a volume: 1001 iterations at the measured mean iteration time, its
iterations per minute and days to 100k iterations. Inference comes from `volume`: the time
for the whole volume, its Megavox/s and the hours for the extrapolated volume at that rate
on the row's GPUs; that column is titled by the volume the runs extrapolate to (8.1 Tvox is
the seeds' Platynereis). With `published`, the seeds' rows join the table of `unet3d-aniso`,
the seeds' network, with their arithmetic checked (their Platynereis hours are ten times too
small; one Iters / Min figure does not follow from its time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlbench.report import derived
from dlbench.report import rows as rowinfo
from dlbench.report.tables import Table, model_title
from dlbench.figures import DASH, fixed, short
from dlbench.results.record import Result

ITERATIONS = 1001  # the seeds time 1001 training iterations
TARGET = 100_000  # "roughly the number of iterations after which most networks have converged"
PLATYNEREIS = 8.1e12
CREMI_SHAPE = (200, 3072, 3072)  # the publications' padded CREMI volume, 1.887 gigavoxel
SEED_MODEL = "unet3d-aniso"  # the seeds' CREMI network
HEADER = ["System", "CUDA", "pytorch", "Training [s]", "Inference [s]", "Iters / Min", "Megavox / s", "100k Iters [d]"]


def is_3d(r: Result) -> bool:
    """Training or prediction of a 3D U-Net (its variants `unet3d-aniso:f=8` are other networks)."""
    return r.model.startswith("unet3d") and r.workload in ("train", "volume")


def _mean_step(r: Result) -> float | None:
    """Mean seconds per iteration: the workload's figure (under DDP an iteration lasts as long as
    its slowest process), else the mean of the stored step samples."""
    if r.metrics.get("iteration_mean_s"):
        return float(r.metrics["iteration_mean_s"])
    steps = r.samples.get("step")
    return float(np.mean(steps)) if steps else None


def _patch(r: Result) -> str:
    shape = r.metrics.get("patch") or (r.metrics.get("input_shape") or [])[2:] or r.spec.get("input_shape") or []
    return "x".join(map(str, shape))


def _volume(r: Result) -> str:
    shape = r.metrics.get("volume_shape")
    if not shape:
        return DASH
    voxels = int(np.prod(shape))
    return f"{'x'.join(map(str, shape))} ({short(voxels / 1e9)} Gvox)"


def target_title(voxels: float) -> str:
    size = f"{short(voxels / 1e12)} Tvox" if voxels >= 1e12 else f"{short(voxels / 1e9)} Gvox"
    return f"Platynereis, {size} [h]" if voxels == PLATYNEREIS else f"{size} [h]"


@dataclass
class _Row:
    cells: list[object]
    extra: dict[str, object] = field(default_factory=dict)
    source: str = "dlbench"
    check: str | None = None


def _key(r: Result) -> tuple:
    return r.model, rowinfo.system(r), r.tag or ""


def tables(results: list[Result], published: bool = False) -> list[Table]:
    chosen: dict[tuple, dict[str, Result]] = {}
    for r in sorted(results, key=lambda r: r.started):
        if is_3d(r) and r.status in ("ok", "oom"):
            chosen.setdefault(_key(r), {})[r.workload] = r
    by_model: dict[str, list[dict[str, Result]]] = {}
    for (model, *_), pair in chosen.items():
        by_model.setdefault(model, []).append(pair)
    return [_table(model, pairs, published and model == SEED_MODEL) for model, pairs in by_model.items()]


def _table(model: str, pairs: list[dict[str, Result]], published: bool) -> Table:
    volumes = [p["volume"] for p in pairs if "volume" in p and p["volume"].status == "ok"]
    targets = [v.metrics.get("extrapolate_voxels") or PLATYNEREIS for v in volumes]
    target = max(set(targets), key=targets.count) if targets else PLATYNEREIS
    pairs.sort(key=lambda p: (next(iter(p.values())).system_label, rowinfo.processes(next(iter(p.values()))),
                              rowinfo.system(next(iter(p.values())))))
    rows = [_row(p, target) for p in pairs]
    notes = [_notes(pairs, target)]
    if published:
        found = _published(target)
        rows += found
        notes.append("Rows from GPU Benchmarks and its Summary are their published figures (PyTorch 0.4, Inferno, CUDA 9.1; CREMI; "
                     "inference of the padded CREMI volume, 200x3072x3072 = 1.89 Gvox); 000 times 1001 iterations, "
                     "001 says 1000. † marks a printed figure that the row's own columns do not give.")
    header, align = HEADER + [target_title(target)], "lll" + "r" * 6
    body = [r.cells for r in rows]
    mine = [r for r in rows if r.source == "dlbench"]
    for name in ("Patch", "Data", "Volume", "Tag"):
        values = [r.extra.get(name) for r in rows]
        compared = values if name in ("Data", "Volume") else [r.extra.get(name) for r in mine]
        if len({str(v) for v in compared if v not in (None, DASH)}) > 1 or (name == "Tag" and any(values)):
            header, align, body = header + [name], align + "l", [b + [v] for b, v in zip(body, values)]
    if published:
        header, align, body = header + [rowinfo.SOURCE], align + "l", [b + [r.source] for b, r in zip(body, rows)]
        if any(r.check not in (None, "ok") for r in rows):
            header, align, body = header + ["Check"], align + "l", [b + [r.check] for b, r in zip(body, rows)]
    first = next(r for pair in pairs for r in pair.values())
    return Table(f"{model_title(first)}: training and prediction", header, align, body, notes=notes)


def _row(pair: dict[str, Result], target: float) -> _Row:
    train, volume = pair.get("train"), pair.get("volume")
    any_result = train or volume
    cells: list[object] = [rowinfo.system(any_result), rowinfo.cuda(any_result), rowinfo.torch_version(any_result)]
    training = inference = per_min = mvox = days = hours = None
    if train is not None and train.status == "oom":
        training = per_min = days = "OOM"
    elif train is not None:
        step = _mean_step(train)
        rate = train.metrics.get("iters_per_min") or derived.iters_per_min(1, step)
        training = training_cell(train)
        per_min, days = fixed(rate, 1), fixed(derived.days_to(TARGET, rate), 1)
    if volume is not None and volume.status == "ok":
        m = volume.metrics
        inference, mvox = inference_cell(volume), fixed(m.get("mvox_per_s"), 1)
        hours = fixed(derived.hours_for(target, m.get("mvox_per_s")), 1)
    cells += [training, inference, per_min, mvox, days, hours]
    extra = {"Patch": _patch(train) if train is not None else None,
             "Data": rowinfo.data_source(train) if train is not None else None,
             "Volume": _volume(volume) if volume is not None else None, "Tag": any_result.tag}
    return _Row(cells, extra)


def iterations(r: Result) -> int:
    return int(r.metrics.get("steps") or len(r.samples.get("step") or []))


def training_cell(r: Result) -> str:
    """Seconds for the publications' 1001 iterations: measured where the run trained that many (the
    first 1001 iterations' times added; under several processes the window, each iteration as long
    as its slowest process), else the mean iteration times 1001, marked as extrapolated."""
    steps, samples = iterations(r), r.samples.get("step") or []
    if steps >= ITERATIONS and rowinfo.processes(r) == 1 and len(samples) >= ITERATIONS:
        return fixed(sum(samples[:ITERATIONS]), 1)
    step = _mean_step(r)
    if step is None:
        return DASH
    if steps >= ITERATIONS:
        return fixed(ITERATIONS * step, 1)
    return f"{fixed(ITERATIONS * step, 1)} (extrapolated from {steps:,})" if steps else f"{fixed(ITERATIONS * step, 1)} (extrapolated)"


def inference_cell(r: Result) -> str:
    """Seconds to predict the publications' padded CREMI volume (200x3072x3072): measured where the
    run predicted a volume of that size, else its rate over those voxels, marked as extrapolated."""
    m = r.metrics
    shape = m.get("volume_shape")
    if shape and tuple(shape) == CREMI_SHAPE:
        return fixed(m.get("total_s"), 1)
    if not m.get("mvox_per_s"):
        return DASH
    seconds = float(np.prod(CREMI_SHAPE)) / (m["mvox_per_s"] * 1e6)
    return f"{fixed(seconds, 1)} (extrapolated from {'x'.join(map(str, shape or []))})"


def _notes(pairs: list[dict[str, Result]], target: float) -> str:
    trains = [p["train"] for p in pairs if "train" in p]
    volumes = [p["volume"] for p in pairs if "volume" in p and p["volume"].status == "ok"]
    patches = ", ".join(dict.fromkeys(_patch(r) for r in trains if _patch(r))) or "the model's default"
    text = (f"Training [s]: the time of {ITERATIONS} training iterations (patch {patches}), measured where the run "
            f"trained {ITERATIONS}, else {ITERATIONS} x the measured mean iteration and marked extrapolated; "
            f"Iters / Min: 60 / the mean iteration; 100k Iters [d]: days to {TARGET:,} iterations.")
    if volumes:
        shapes = ", ".join(dict.fromkeys(_volume(v) for v in volumes))
        first = volumes[0].metrics
        text += (f" Inference [s]: prediction of the publications' 200x3072x3072 volume (1.89 Gvox), measured "
                 f"where the run predicted one that size, else extrapolated at the measured rate (volumes run: "
                 f"{shapes}; block "
                 f"{rowinfo.shape_text(first.get('block'))}, halo {rowinfo.shape_text(first.get('halo'))}); "
                 f"Megavox / s: the run's voxels over its time; {target_title(target)}: hours for "
                 f"{short(target / 1e12)} teravoxel at that rate on the row's GPUs (or CPU).")
    return text


def _published(target: float) -> list[_Row]:
    from dlbench.report import published

    out = []
    for row in published.seed000_001():
        c = row.cells
        hours = row.get("platynereis_h")
        if target != PLATYNEREIS:  # another volume: the seeds' rate, our arithmetic
            hours = fixed(derived.hours_for(target, row.number("mvox_per_s")), 1) if row.get("mvox_per_s") else None
        cells = [c["system"], c.get("cuda"), c.get("pytorch"), row.get("training_s"), row.get("inference_s"),
                 row.mark("Iters / Min", row.get("iters_per_min")), row.mark("Megavox / s", row.get("mvox_per_s")),
                 row.mark("100k Iters [d]", row.get("days_100k")), row.mark("Platynereis [h]", hours)]
        out.append(_Row(cells, {"Data": "CREMI", "Volume": "200x3072x3072 (1.89 Gvox)" if row.get("inference_s") else None},
                        published.publication(row.seed), row.check_text()))
    return out
