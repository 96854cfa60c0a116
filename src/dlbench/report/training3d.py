"""Seeds 000/001 ("GPU Benchmarks") for each 3D U-Net, as two tables, training and prediction
(seed 001 prints them apart too; one table of both was 13 columns wide):

  training:   | System | GPUs | Precision | Training [s] | Iters / Min | Iteration vs 1 GPU |
              | 100k Iters [d] | Software | Data |
  prediction: | System | GPUs | Precision | Inference [s] | Megavox / s | Speed-up vs 1 GPU |
              | Wall time to result [s] | Platynereis, 8.1 Tvox [h] | Software |

one row per system, GPU count, precision and variant. Training comes from `train` of the model
on a volume: 1001 iterations at the measured mean iteration time, its iterations per minute and
days to 100k iterations; on N GPUs each iteration trains N patches and lasts longer, which
"Iteration vs 1 GPU" shows (the seeds' x2 and x4 rows). Prediction comes from `volume`: the time
for the whole volume, its Megavox/s, its speed-up over one GPU, the wall time from the command's
start to the result, and the hours for the extrapolated volume at that rate. With `published`,
the seeds' rows join the tables of `unet3d-aniso`, the seeds' network, with their arithmetic
checked (their Platynereis hours are ten times too small; one Iters / Min figure does not follow
from its time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlbench.report import derived
from dlbench.report import rows as rowinfo
from dlbench.report.tables import Table, model_title
from dlbench.figures import DASH, fixed, short
from dlbench.results.record import Result

SELECTS = ("train", "volume")  # of 3D U-Nets: 3D training and blockwise prediction
ITERATIONS = 1001  # the seeds time 1001 training iterations
TARGET = 100_000  # "roughly the number of iterations after which most networks have converged"
PLATYNEREIS = 8.1e12
CREMI_SHAPE = (200, 3072, 3072)  # the publications' padded CREMI volume, 1.887 gigavoxel
SEED_MODEL = "unet3d-aniso"  # the seeds' CREMI network
HEAD = ["System", "GPUs", "Precision"]
TRAINING = [*HEAD, "Training [s]", "Iters / Min", "Iteration vs 1 GPU", "100k Iters [d]", "Software", "Data"]
PREDICTION = [*HEAD, "Inference [s]", "Megavox / s", "Speed-up vs 1 GPU", "Wall time to result [s]", "Software"]
PUBLISHED = ("Rows from GPU Benchmarks and its Summary are their published figures (PyTorch 0.4, Inferno, CUDA 9.1, "
             "fp32; CREMI); 000 times 1001 iterations, 001 says 1000. Their System is where the GPU ran, as they "
             "label it (VM: a virtual machine; Cluster: nodes of EMBL's compute cluster, GPUs on PCIe; SMC: a "
             "Supermicro test system whose P100s or V100s are joined by NVLink).")


def is_3d(r: Result) -> bool:
    """Training or prediction of a 3D U-Net (its variants `unet3d-aniso:f=8` are other networks)."""
    return r.model.startswith("unet3d") and r.workload in ("train", "volume")


def _mean_step(r: Result) -> float | None:
    """Mean seconds per iteration: the workload's figure (under DDP an iteration lasts as long as
    its slowest process), else the mean of the stored step samples."""
    mean = r.measured.training.iteration_mean_s
    if mean:
        return float(mean)
    steps = r.samples.get("step")
    return float(np.mean(steps)) if steps else None


def _patch(r: Result) -> str:
    m = r.measured
    shape = m.training.patch or (m.data.input_shape or [])[2:] or r.setup.input_shape or []
    return "x".join(map(str, shape))


def _volume(r: Result) -> str:
    shape = r.measured.volume.volume_shape
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
    """A row: model, workload, system with its variant (channels-last), GPUs, precision, tag."""
    return (r.model, r.workload, rowinfo.system(r, gpus=False, precision=False), rowinfo.processes(r),
            r.setup.precision, r.tag or "")


def _base(r: Result) -> tuple:
    """What a row's 1-GPU counterpart shares with it (the tag may differ)."""
    return r.model, r.workload, rowinfo.system(r, gpus=False, precision=False), r.setup.precision


def tables(results: list[Result], published: bool = False) -> list[Table]:
    chosen: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        earlier = chosen.get(_key(r))
        # A later run replaces an earlier one, except that an extrapolated training never hides a measured one.
        if is_3d(r) and r.status in ("ok", "oom") and not (earlier and _measured(earlier) and not _measured(r)):
            chosen[_key(r)] = r
    by_model: dict[str, list[Result]] = {}
    for r in chosen.values():
        by_model.setdefault(r.model, []).append(r)
    out = []
    for model, rs in by_model.items():
        seeds = published and model == SEED_MODEL
        trains = [r for r in rs if r.workload == "train"]
        volumes = [r for r in rs if r.workload == "volume"]
        out += [_training_table(trains, seeds)] if trains or seeds else []
        out += [_prediction_table(volumes, seeds)] if volumes or seeds else []
    return out


def _order(r: Result) -> tuple:
    return r.system_label, rowinfo.system(r, gpus=False, precision=False), r.setup.precision, \
        rowinfo.processes(r)


def _one_gpu(rs: list[Result]) -> dict[tuple, list[Result]]:
    """Every finished 1-GPU row of each base: a table may hold several (runs under other tags)."""
    found: dict[tuple, list[Result]] = {}
    for r in sorted(rs, key=lambda r: r.started):
        if rowinfo.processes(r) == 1 and r.status == "ok":
            found.setdefault(_base(r), []).append(r)
    return found


def base_figure(rows: list[Result] | None, figure) -> float | None:
    """What a row on several GPUs is set against: the median of `figure` over the 1-GPU rows of its
    base (the mean of two), so that no one of them is picked silently."""
    values = [v for r in rows or () if (v := figure(r))]
    return float(np.median(values)) if values else None


def _base_note(single: dict[tuple, list[Result]], what: str) -> str:
    """Said where some base has several 1-GPU rows: which statistic of them is the base."""
    counts = sorted({len(rows) for rows in single.values() if len(rows) > 1})
    if not counts:
        return ""
    return (f" Where a system and precision have {' or '.join(map(str, counts))} 1-GPU rows, the base is the "
            f"median of their {what} (of two, their mean).")


def _software(r: Result) -> str:
    parts = [f"CUDA {rowinfo.cuda(r)}" if rowinfo.cuda(r) else None,
             f"PyTorch {rowinfo.torch_version(r)}" if rowinfo.torch_version(r) else None]
    return ", ".join(p for p in parts if p) or DASH


def _finish(title: str, header: list[str], rows: list[_Row], notes: list[str], published: bool) -> Table:
    """Tag (a column only where dlbench's rows differ in it), Source, and the Check lines."""
    body, align = [r.cells for r in rows], "lrl" + "r" * (len(header) - 3)
    if any(r.extra.get("cpu") for r in rows):  # several processes share a CPU: there are no GPUs to count
        header = [header[0], "GPUs or CPU processes", *header[2:]]
    align = "".join("l" if h in ("Software", "Data") else a for h, a in zip(header, align))
    tags = [r.extra.get("Tag") for r in rows]
    mine = [r.extra.get("Tag") for r in rows if r.source == "dlbench"]
    if rowinfo.tag_column(mine):
        header, align, body = header + ["Tag"], align + "l", [b + [t] for b, t in zip(body, tags)]
    notes = notes + rowinfo.tag_note(mine)
    if published:
        header, align, body = header + [rowinfo.SOURCE], align + "l", [b + [r.source] for b, r in zip(body, rows)]
        notes = notes + rowinfo.check_notes([(f"{r.cells[0]} on {r.cells[1]} GPU{'s' if r.cells[1] != 1 else ''}", r.check) for r in rows])
    return Table(title, header, align, body, notes=notes)


def _training_table(trains: list[Result], published: bool) -> Table:
    single = _one_gpu(trains)
    rows = [_training_row(r, single.get(_base(r))) for r in sorted(trains, key=_order)]
    notes = [f"How long the publications' {ITERATIONS} training iterations take, on one GPU and on several; with several, "
             "each iteration trains one patch per GPU and takes longer (Iteration vs 1 GPU), so the time grows "
             "while the patches per minute rise.", _training_notes(trains) + _base_note(single, "mean iterations")]
    if published:
        rows += _published_training()
        notes.append(PUBLISHED)
    return _finish(f"{_title(trains)}: training", list(TRAINING), rows, notes, published)


def _prediction_table(volumes: list[Result], published: bool) -> Table:
    ok = [v for v in volumes if v.status == "ok"]
    targets = [v.measured.volume.extrapolate_voxels or PLATYNEREIS for v in ok]
    target = max(set(targets), key=targets.count) if targets else PLATYNEREIS
    single = _one_gpu(volumes)
    rows = [_prediction_row(v, single.get(_base(v)), target) for v in sorted(volumes, key=_order)]
    notes = ["How long predicting the publications' 1.89 gigavoxel volume (200x3072x3072) takes, and how that rate scales from one GPU to "
             "several; Wall time to result is what a user waits, from the command's start.",
             _prediction_notes(ok, target) + _base_note(single, "rates")]
    if published:
        rows += _published_prediction(target)
        notes.append(PUBLISHED + " Their inference is of the padded CREMI volume, 200x3072x3072 = 1.89 Gvox.")
    header = PREDICTION[:-1] + [target_title(target), PREDICTION[-1]]
    return _finish(f"{_title(volumes)}: prediction", header, rows, notes, published)


def _title(rs: list[Result]) -> str:
    """The model's title; where it names no variant ('3D U-Net'), its name too, so that its heading
    and the anisotropic network's ('3D U-Net (aniso): prediction') differ in more than a bracket."""
    if not rs:
        return "3D U-Net (aniso)"
    title = model_title(rs[0])
    return title if "(" in title or rs[0].model == SEED_MODEL else f"{title} ({rs[0].model})"


def _training_row(train: Result, single: list[Result] | None) -> _Row:
    head = [rowinfo.system(train, gpus=False, precision=False), rowinfo.processes(train), train.setup.precision]
    extra = {"Tag": train.tag, "cpu": not rowinfo.on_gpu(train)}
    if train.status == "oom":
        return _Row(head + ["OOM", "OOM", DASH, "OOM", _software(train), rowinfo.data_source(train)], extra)
    step = _mean_step(train)
    rate = train.measured.training.iters_per_min or derived.iters_per_min(1, step)
    base = base_figure(single, _mean_step) if rowinfo.processes(train) > 1 else None
    growth = f"{fixed(step / base, 2)}x" if step and base else DASH
    return _Row(head + [training_cell(train), fixed(rate, 1), growth, fixed(derived.days_to(TARGET, rate), 1),
                        _software(train), rowinfo.data_source(train)], extra)


def _prediction_row(volume: Result, single: list[Result] | None, target: float) -> _Row:
    head = [rowinfo.system(volume, gpus=False, precision=False), rowinfo.processes(volume),
            volume.setup.precision]
    extra = {"Tag": volume.tag, "cpu": not rowinfo.on_gpu(volume)}
    if volume.status != "ok":
        return _Row(head + ["OOM", DASH, DASH, DASH, DASH, _software(volume)], extra)
    m = volume.measured
    rate = m.volume.mvox_per_s
    several = rowinfo.processes(volume) > 1  # a 1-GPU row is the base, whatever its tag
    base = base_figure(single, lambda r: r.measured.volume.mvox_per_s) if several else None
    speedup = f"{fixed(rate / base, 2)}x" if base and rate else DASH
    return _Row(head + [inference_cell(volume), fixed(rate, 1), speedup, wall_cell(volume),
                        target_cell(volume, target), _software(volume)], extra)


TINY = 0.01  # a run of less than this share of the publications' volume says how small it was


def target_cell(r: Result, target: float) -> str:
    """Hours for the target volume at the run's rate; a tiny run's (a CPU check of 24x128x128 scaled
    a million times) says what it was scaled from, so it never reads as a measured figure."""
    hours = fixed(derived.hours_for(target, r.measured.volume.mvox_per_s), 1, grouping=True)
    shape = r.measured.volume.volume_shape
    if not shape or np.prod(shape) >= TINY * np.prod(CREMI_SHAPE):
        return hours
    where = "" if rowinfo.on_gpu(r) else " on a CPU"
    return f"{hours} (extrapolated from a {'x'.join(map(str, shape))} run{where})"


def _measured(r: Result) -> bool:
    """A training that ran the publications' iterations: its Training cell is measured, not extrapolated."""
    return r.workload == "train" and r.status == "ok" and iterations(r) >= ITERATIONS


def iterations(r: Result) -> int:
    return int(r.measured.window.steps or len(r.samples.get("step") or []))


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
    m = r.measured
    shape = m.volume.volume_shape
    if shape and tuple(shape) == CREMI_SHAPE:
        return fixed(m.window.total_s, 1)
    if not m.volume.mvox_per_s:
        return DASH
    seconds = float(np.prod(CREMI_SHAPE)) / (m.volume.mvox_per_s * 1e6)
    return f"{fixed(seconds, 1)} (extrapolated from {'x'.join(map(str, shape or []))})"


def wall_cell(r: Result) -> str:
    """Seconds from the command's start to the result, of the volume the run predicted: where that is
    not the publications' (whose Inference is then extrapolated), the cell names it, as no wall time
    of the larger volume was measured."""
    wall = r.measured.window.wall_to_result_s
    if wall is None:
        return DASH
    shape = r.measured.volume.volume_shape
    if shape and tuple(shape) != CREMI_SHAPE:
        return f"{fixed(wall, 1)} (of {'x'.join(map(str, shape))})"
    return fixed(wall, 1)


def _training_notes(trains: list[Result]) -> str:
    patches = ", ".join(dict.fromkeys(_patch(r) for r in trains if _patch(r))) or "the model's default"
    return (f"Training [s]: the time of {ITERATIONS} training iterations (patch {patches}, one per GPU), measured "
            f"where the run trained {ITERATIONS}, else {ITERATIONS} x the measured mean iteration and marked "
            f"extrapolated; Iters / Min: 60 / the mean iteration; Iteration vs 1 GPU: the mean iteration on this "
            f"row's GPUs over that on one GPU of the same system and precision; 100k Iters [d]: days to "
            f"{TARGET:,} iterations.")


def _prediction_notes(volumes: list[Result], target: float) -> str:
    text = ("Inference [s]: prediction of the publications' 200x3072x3072 volume (1.89 Gvox), measured where the run "
            "predicted one that size, else extrapolated at the measured rate")
    if volumes:
        first = volumes[0].measured.volume
        text += (f" (volumes run: {', '.join(dict.fromkeys(_volume(v) for v in volumes))}; block "
                 f"{rowinfo.shape_text(first.block)}, halo {rowinfo.shape_text(first.halo)})")
    return (text + "; Megavox / s: the run's voxels over its time, all GPUs together; Speed-up vs 1 GPU: that rate "
            "over the rate of one GPU of the same system and precision (perfect: the GPU count); Wall time to "
            "result [s]: from the command's start (Python, CUDA and the model loading included"
            f"{_generation(volumes)}) to the stored result; {target_title(target)}: hours for "
            f"{short(target / 1e12)} teravoxel at that rate.")


def _generation(volumes: list[Result]) -> str:
    """A run given no input generates one before it predicts, and its wall time holds that."""
    if all(v.setup.options.get("input") for v in volumes):
        return ""
    return "; a run given no input file generates its volume first, and that is included too"


def _published_rows():
    from dlbench.report import published

    return published.seed000_001()


def _published_head(row) -> list[object]:
    return [row.cells["system"].split(" (x")[0], row.gpus, "fp32"]


def _published_software(row) -> str:
    return f"CUDA {row.cells.get('cuda')}, PyTorch {row.cells.get('pytorch')}"


def _published_training() -> list[_Row]:
    from dlbench.report.published import publication

    rows = [r for r in _published_rows() if r.get("training_s")]
    single = {r.cells["system"]: r.number("training_s") for r in rows if r.gpus == 1}
    out = []
    for row in rows:
        base = single.get(row.cells["system"].split(" (x")[0])
        growth = f"{fixed(row.number('training_s') / base, 2)}x" if base and row.gpus > 1 else DASH
        cells = _published_head(row) + [row.get("training_s"), row.mark("Iters / Min", row.get("iters_per_min")),
                                        growth, row.mark("100k Iters [d]", row.get("days_100k")),
                                        _published_software(row), "CREMI"]
        out.append(_Row(cells, {}, publication(row.seed), _check(row, ("Iters / Min", "100k Iters [d]"))))
    return out


def _published_prediction(target: float) -> list[_Row]:
    from dlbench.report.published import publication

    out = []
    for row in _published_rows():
        if not row.get("inference_s") and not row.get("mvox_per_s"):
            continue
        hours = row.mark("Platynereis [h]", row.get("platynereis_h"))
        if target != PLATYNEREIS:  # another volume: the seeds' rate, our arithmetic
            hours = fixed(derived.hours_for(target, row.number("mvox_per_s")), 1) if row.get("mvox_per_s") else None
        cells = _published_head(row) + [row.get("inference_s"), row.mark("Megavox / s", row.get("mvox_per_s")), DASH,
                                        DASH, hours, _published_software(row)]
        out.append(_Row(cells, {}, publication(row.seed), _check(row, ("Megavox / s", "Platynereis [h]"))))
    return out


def _check(row, columns: tuple[str, ...]) -> str:
    """The Check text of the row's slips in these columns only (each table checks its own)."""
    found = [s for s in row.slips if s.column in columns]
    return "; ".join(f"† {s.text()}" for s in found) if found else "ok"
