"""converge: time to a DICE target with k-fold cross-validation (seed 003's accuracy table).

For each fold a fresh U-Net trains (Adam; cross-entropy + soft DICE loss) on random crops of
the training images, flipped and rotated, and is evaluated on the whole validation images
every `eval_every` steps (every `eval_near_every` once the DICE is within `eval_near` of the
target, so the time to it is not rounded up to a whole interval). A fold stops when the DICE reaches `target_dice` or at its step
(or time) budget. DICE is the mean over the two classes (cell, membrane) of 2|P n T| / (|P| + |T|),
pooled over all validation pixels.

Timing: the host clock, read after a synchronize at each evaluation. Time to target is a
fold's wall time from its first step to the end of the evaluation that reached the target,
evaluations and the first steps' compilation/autotuning included (what a user waits for).
Throughput is training images / training time: evaluations excluded, every step included.

The images live on the device for the whole run, so the figures measure training, not disk
reads. With several processes (torchrun, `gpus` > 1) each trains on its own batches through
DistributedDataParallel (batch is per GPU) and evaluates a share of the validation images.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from dlbench.data import segmentation
from dlbench.errors import UserError
from dlbench.figures import duration, fixed, ms, sig
from dlbench.measure.loop import Progress, synchronize
from dlbench.results.measurement import with_nulls
from dlbench.measure.profile import compact, profile_steps
from dlbench.models import registry
from dlbench.results.measurement import Convergence, Data, Measurement, Run, Throughput, Window
from dlbench.units import SEED003_ITERATIONS
from dlbench.workloads import Planned, distributed, losses, optimize
from dlbench.workloads.builtin import ConvergeOptions
from dlbench.workloads.runtime import resolve_device

LOSS = losses.loss_for("segment-dice")
THROUGHPUT_METHOD = ("training images (batch x steps x GPUs) / training seconds; evaluations excluded; "
                     "host clock after a synchronize at each evaluation")


def preflight(spec) -> list[str]:
    """Read the whole set once so every problem with it stops here, before anything runs; images the
    model cannot take stop here too, before the estimate is said."""
    if spec.opts.data is not None:
        segmentation.load(spec.opts.data)
    _planned_geometry(spec)
    return []


# A generated image costs about this many pixels a second on a CPU (generate_seg.arrays: 4 images of
# 256x256 in 2.2 s on 2 EPYC cores beside a training run, 2026-11-28).
GENERATED_PIXELS_PER_S = 1.2e5


def planned(spec) -> Planned:
    """What a run computes, for its estimate. How many steps reach --target-dice is not known before it
    runs: every fold is taken to run its --max-steps (the bound the estimate says), evaluated every
    --eval-every steps, each evaluation one forward pass of the fold's validation images (counted as
    training steps of as many pixels, a third of the cost: a step is a forward and a backward at twice
    its cost). No warm-up and no FLOP count; the generated set is made first. The model's FLOPs are
    counted at its default filters: --features scales them by its square."""
    opts = spec.opts
    (n, size), geo = _planned_geometry(spec)
    folds = segmentation.kfold(n, opts.folds, spec.seed)[: opts.fold_limit or opts.folds]
    train_input = [c + 2 * geo.margin for c in geo.crop]
    eval_area = (geo.eval_size[0] + 2 * geo.margin) * (geo.eval_size[1] + 2 * geo.margin)
    evals = -(-opts.max_steps // opts.eval_every)
    eval_steps = sum(evals * len(val) * eval_area / (spec.batch * train_input[0] * train_input[1] * 3)
                     for _, val in folds)
    made = () if opts.data else (("generating the images", n * size[0] * size[1] / GENERATED_PIXELS_PER_S),)
    budget = f" or --max-seconds {opts.max_seconds:g} a fold" if opts.max_seconds else ""
    bound = (f"the bound: {len(folds)} fold{'s' if len(folds) > 1 else ''} of --max-steps {opts.max_steps}{budget}, "
             f"sooner where --target-dice {opts.target_dice:g} is reached")
    return Planned((spec.batch, 1, *train_input), math.ceil(len(folds) * opts.max_steps + eval_steps), 0,
                   spec.precision, passes=3.0 * (opts.features or DEFAULT_FEATURES) ** 2 / DEFAULT_FEATURES ** 2,
                   counted_free=True, efficiency=CPU_EFFICIENCY if resolve_device(spec.device).type == "cpu" else None,
                   prepare=made, bound=bound)


DEFAULT_FEATURES = 64  # the U-Nets' first level (models/unet2d.py), what --features replaces
# On a CPU the U-Net's convolutions on whole crops run at about a matmul's rate, as the 3D U-Net's do
# (workloads/volume.py): unet2d-medical with 16 filters on 268x268 crops, batch 2, 54 GFLOP/s on 2 EPYC
# cores (load 2.1, 2026-11-28), the measured fp32 ceiling.
CPU_EFFICIENCY = 1.0


def _planned_geometry(spec) -> tuple[tuple[int, tuple[int, int]], Geometry]:
    """(images, their size) and the crops a run will take, from the model on the meta device and the
    first image's size; the UserError a run would stop with where the images are too small."""
    opts = spec.opts
    if opts.data:
        found = segmentation.pairs(opts.data)
        n, size = len(found), segmentation.image_size(found[0][1])
    else:
        n, size = opts.synthetic_n, (opts.synthetic_size, opts.synthetic_size)
    entry, _ = model_builder(spec)
    model = registry.build_on_meta(entry)
    margin = int(getattr(model, "margin", 0))
    if margin and margin >= min(size):
        raise UserError(f"images of {size[1]}x{size[0]} are too small for this unpadded U-Net ({spec.model}), which "
                        f"needs {margin} pixels of context on each side: give images of at least {margin + 1}x{margin + 1}")
    return (n, size), geometry(model, entry, spec, size)


# ---------------------------------------------------------------- data on the device


@dataclass
class Geometry:
    margin: int  # context the network consumes on each side (0 for padded nets)
    crop: tuple[int, int]  # training crop, output pixels
    eval_size: tuple[int, int]  # evaluated window, output pixels (the image, or its centre)


@dataclass
class DeviceData:
    images: torch.Tensor  # (N, 1, H + 2m, W + 2m), reflect-padded by the margin
    masks: torch.Tensor  # (N, H, W) class indices
    margin: int
    source: str

    @property
    def size(self) -> tuple[int, int]:
        return tuple(self.masks.shape[-2:])


def load_data(opts: ConvergeOptions, seed: int, device: torch.device) -> segmentation.SegmentationSet:
    if opts.data:
        return segmentation.load(opts.data)
    from dlbench.data import generate_seg

    n, size = opts.synthetic_n, opts.synthetic_size
    images, masks = generate_seg.arrays(n, size, seed, device=device)
    return segmentation.from_arrays(images, masks, f"generated {n} x {size}x{size} (random seed {seed})")


def to_device(data: segmentation.SegmentationSet, margin: int, device: torch.device) -> DeviceData:
    images = torch.from_numpy(data.images)[:, None].to(device)
    if margin:
        if margin >= min(images.shape[-2:]):
            raise UserError(f"images of {data.images.shape[2]}x{data.images.shape[1]} are too small for this "
                            f"unpadded U-Net, which needs {margin} pixels of context on each side")
        images = F.pad(images, (margin,) * 4, mode="reflect")
    return DeviceData(images, torch.from_numpy(data.masks).to(device), margin, data.source)


def geometry(model: nn.Module, entry: registry.ModelEntry, spec, size: tuple[int, int]) -> Geometry:
    """Training crop and evaluated window, in output pixels, for this model and image size."""
    margin = int(getattr(model, "margin", 0))
    fit = getattr(model, "output_size_at_most", lambda s: s)
    eval_size = (fit(size[0]), fit(size[1]))
    if min(eval_size) <= 0:
        raise UserError(f"images of {size[1]}x{size[0]} are too small for {spec.model}")
    if spec.input_shape is not None:
        crop = tuple(_output_for_input(model, spec, s) for s in spec.input_shape[-2:])
    elif margin:  # unpadded: the model's own input size (572 -> 388), if the images are that large
        crop = tuple(min(_output_for_input(model, spec, s), e) for s, e in zip(entry.input_shape[-2:], eval_size))
    else:
        crop = size
    if crop[0] > size[0] or crop[1] > size[1]:
        raise UserError(f"training input {'x'.join(map(str, spec.input_shape or ()))} needs output crops of "
                        f"{crop[0]}x{crop[1]}, larger than the {size[0]}x{size[1]} images")
    return Geometry(margin, crop, eval_size)


def _output_for_input(model: nn.Module, spec, size: int) -> int:
    out = model.output_size(size) if hasattr(model, "output_size") else size
    if out is None:
        below = model.output_size_at_most(size - 2 * model.margin)
        above = below + 2 ** (model.levels - 1)
        raise UserError(f"input size {size} does not fit {spec.model} (unpadded convolutions and pooling); "
                        f"use {model.input_size(below)} (output {below}) or {model.input_size(above)} (output {above})")
    return out


def batch_of(data: DeviceData, train: torch.Tensor, crop: tuple[int, int], count: int, augment: bool,
             g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` random crops (input with margin, target) from the training images."""
    (h, w), m = crop, data.margin
    picks = train[torch.randint(len(train), (count,), generator=g)].tolist()
    tops = torch.randint(data.size[0] - h + 1, (count,), generator=g).tolist()
    lefts = torch.randint(data.size[1] - w + 1, (count,), generator=g).tolist()
    x = torch.stack([data.images[i, :, t:t + h + 2 * m, s:s + w + 2 * m] for i, t, s in zip(picks, tops, lefts)])
    y = torch.stack([data.masks[i, t:t + h, s:s + w] for i, t, s in zip(picks, tops, lefts)])
    if augment:
        x, y = _augment(x, y, g)
    return x, y


def _augment(x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One random flip/rotation for the whole batch (EM images have no preferred orientation)."""
    flip, turns = torch.randint(2, (), generator=g).item(), torch.randint(4, (), generator=g).item()
    if flip:
        x, y = x.flip(-1), y.flip(-1)
    if turns and x.shape[-1] == x.shape[-2]:
        x, y = torch.rot90(x, turns, (-2, -1)), torch.rot90(y, turns, (-2, -1))
    return x.contiguous(), y.contiguous()


# ---------------------------------------------------------------- training


@torch.no_grad()
def evaluate(model: nn.Module, data: DeviceData, val: list[int], geo: Geometry, batch: int,
             group: distributed.Group) -> list[float]:
    """DICE per class over this process's share of the validation images, summed over processes."""
    model.eval()
    (h, w), m = geo.eval_size, data.margin
    top, left = (data.size[0] - h) // 2, (data.size[1] - w) // 2
    counts = torch.zeros(segmentation.CLASSES, 3, dtype=torch.float64, device=data.masks.device)
    mine = val[group.rank::group.world]
    for start in range(0, len(mine), batch):
        index = mine[start:start + batch]
        x = data.images[index, :, top:top + h + 2 * m, left:left + w + 2 * m]
        pred = model(x).argmax(1)
        counts += segmentation.confusion(pred, data.masks[index, top:top + h, left:left + w])
    model.train()
    return segmentation.dice_from_counts(group.all_sum(counts))


@dataclass
class FoldRun:
    fold: int
    n_train: int
    n_val: int
    steps: int = 0
    train_s: float = 0.0
    eval_s: float = 0.0
    wall_s: float = 0.0
    reached: bool = False
    steps_to_target: int | None = None
    time_to_target_s: float | None = None
    final_dice: float = 0.0
    final_dice_per_class: list[float] = field(default_factory=list)
    best_dice: float = 0.0
    curve: list[dict] = field(default_factory=list)  # one entry per evaluation
    optimize: dict = field(default_factory=dict)  # level, compile_s and the check against eager
    profile: dict | None = None  # measure/profile.py's summary, for the fold that was profiled

    def summary(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("curve", "profile")}

    def evaluated(self, per_class: list[float], loss: float, train_s: float, eval_s: float, wall_s: float,
                  target: float) -> float:
        """One evaluation after `train_s` of training since the last (`loss`: those steps' summed loss);
        its mean DICE."""
        steps_in_interval = self.steps - (self.curve[-1]["step"] if self.curve else 0)
        self.train_s += train_s
        self.eval_s += eval_s
        self.wall_s = wall_s
        score = sum(per_class) / len(per_class)
        self.curve.append({"step": self.steps, "dice": score, "wall_s": wall_s,
                           "loss": loss / steps_in_interval, "step_s": train_s / steps_in_interval})
        self.final_dice, self.final_dice_per_class, self.best_dice = score, per_class, max(self.best_dice, score)
        if score >= target and not self.reached:
            self.reached, self.steps_to_target, self.time_to_target_s = True, self.steps, wall_s
        return score


def _fold_model(spec, build, data: DeviceData, train: list[int], geo: Geometry, fold: int,
                group: distributed.Group) -> tuple[nn.Module, dict]:
    """The fold's fresh model, checked at the spec's level and wrapped for DDP; what optimize reports."""
    torch.manual_seed(spec.seed + fold)  # same initial weights on every process
    model = build().to(group.device).train()
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # The check's batch comes from its own generator: the training sequence stays the same at every level.
    check_x, check_y = batch_of(data, torch.tensor(train), geo.crop, spec.batch, False, torch.Generator().manual_seed(spec.seed))
    if spec.channels_last:
        check_x = check_x.contiguous(memory_format=torch.channels_last)
    model, optimized = optimize.prepare(spec, model, check_x, loss=lambda out: LOSS(out, check_y))
    return distributed.wrap(model, group), optimized


def _fold_step(spec, model: nn.Module, data: DeviceData, train: list[int], geo: Geometry, fold: int,
               group: distributed.Group) -> tuple[Callable[[], None], torch.Tensor]:
    """The training step and the sum of its losses, kept on the device so a step does not wait for
    the GPU; the evaluations read it."""
    opts, device = spec.opts, group.device
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=opts.lr, **optimize.optimizer_kwargs(spec, params))
    scaler = torch.amp.GradScaler(device.type, enabled=spec.precision == "fp16")
    g = torch.Generator().manual_seed(spec.seed * 1000 + fold * 10 + group.rank)
    train_index = torch.tensor(train)
    loss_sum = torch.zeros((), device=device)

    def step() -> None:
        x, y = batch_of(data, train_index, geo.crop, spec.batch, opts.augment, g)
        if spec.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        loss = LOSS(model(x), y)
        with torch.autocast(device.type, enabled=False):  # backward runs in the forward's dtypes
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        loss_sum.add_(loss.detach())

    return step, loss_sum


def train_fold(spec, build, data: DeviceData, split: tuple[list[int], list[int]], geo: Geometry, fold: int,
               group: distributed.Group, progress: Progress, profile: int = 0) -> FoldRun:
    opts = spec.opts
    train, val = split
    device = group.device
    model, optimized = _fold_model(spec, build, data, train, geo, fold, group)
    step, loss_sum = _fold_step(spec, model, data, train, geo, fold, group)
    run = FoldRun(fold, len(train), len(val), optimize=optimized)
    synchronize(device)
    start = interval = time.perf_counter()
    next_eval = opts.eval_every
    while True:
        step()
        run.steps += 1
        progress(f"fold {fold + 1}", run.steps, opts.max_steps)
        if run.steps < next_eval and run.steps < opts.max_steps:
            continue
        synchronize(device)
        now = time.perf_counter()
        per_class = evaluate(model, data, val, geo, spec.batch, group)
        after = time.perf_counter()
        score = run.evaluated(per_class, loss_sum.item(), now - interval, after - now, after - start, opts.target_dice)
        loss_sum.zero_()
        next_eval = run.steps + _eval_interval(opts, score)
        out_of_time = opts.max_seconds is not None and run.wall_s >= opts.max_seconds
        # Every process stops at the same step if any is out of time (DDP needs them all in step).
        if run.reached or run.steps >= opts.max_steps or group.agree(int(out_of_time)):
            run.profile = _profile(spec, step, run, group, profile) if profile else None
            return run
        interval = time.perf_counter()


def _eval_interval(opts: ConvergeOptions, score: float) -> int:
    """Steps to the next evaluation: --eval-near-every once the DICE is within --eval-near of the target."""
    near = opts.eval_near is not None and score >= opts.target_dice - opts.eval_near
    return min(opts.eval_near_every, opts.eval_every) if near else opts.eval_every


def _profile(spec, step, run: "FoldRun", group: distributed.Group, steps: int) -> dict:
    """--profile: that many more training steps after the fold, compared with its mean step."""
    trace = distributed.rank_path(spec.profile_trace, group.rank) if spec.profile_trace and group.distributed \
        else spec.profile_trace
    measured = run.train_s / run.steps if run.steps else None
    summary = profile_steps(step, group.device, steps, measured_step_s=measured, flops_per_step=None, trace_path=trace)
    ranks = group.gather(compact(summary))
    if group.distributed:
        summary["ranks"] = ranks
    return summary


# ---------------------------------------------------------------- the workload


def model_builder(spec) -> tuple[registry.ModelEntry, Any]:
    entry = registry.resolve(spec.model)
    if entry.task != "segment":
        raise UserError(f"converge trains segmentation models; {spec.model} is a '{entry.task}' model "
                        f"(use unet2d or unet2d-medical)")
    features = spec.opts.features
    kwargs = {"base": features} if features else {}

    def build() -> nn.Module:
        try:
            return entry.build(**kwargs)
        except TypeError:
            raise UserError(f"model {spec.model} has no 'features' setting") from None

    return entry, build


def run(spec, device: torch.device, progress: Progress):
    opts = spec.opts
    with distributed.process_group(device) as group:
        device = group.device
        entry, build = model_builder(spec)
        probe = build()
        raw = load_data(opts, spec.seed, device)
        geo = geometry(probe, entry, spec, tuple(raw.masks.shape[-2:]))
        del probe
        data = to_device(raw, geo.margin, device)
        splits = segmentation.kfold(len(raw), opts.folds, spec.seed)[: opts.fold_limit or opts.folds]
        last = len(splits) - 1  # the last fold is profiled: its steps are as warm as they get
        runs = [train_fold(spec, build, data, split, geo, i, group, progress, spec.profile if i == last else 0)
                for i, split in enumerate(splits)]
    measured = _metrics(spec, opts, runs, raw, geo, group.world)
    if runs and runs[-1].profile:
        measured = dataclasses.replace(measured, profile=runs[-1].profile)
    return with_nulls(measured, "convergence"), _samples(runs)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _metrics(spec, opts: ConvergeOptions, runs: list[FoldRun], raw, geo: Geometry, world: int) -> Measurement:
    reached = [r for r in runs if r.reached]
    train_s = sum(r.train_s for r in runs)
    images = spec.batch * world * sum(r.steps for r in runs)
    return Measurement(
        throughput=Throughput(images / train_s if train_s else 0.0, "img/s", THROUGHPUT_METHOD),
        window=Window(total_s=sum(r.wall_s for r in runs),
                      compile_s=sum(r.optimize.get("compile_s", 0.0) for r in runs) if spec.optimize != "eager" else None),
        run=Run(optimize=spec.optimize, processes=world),
        data=Data(source=raw.source, images=len(raw)),
        convergence=Convergence(
            image_size=list(raw.masks.shape[-2:]), train_input=[c + 2 * geo.margin for c in geo.crop],
            train_output=list(geo.crop), eval_size=list(geo.eval_size),
            target_dice=opts.target_dice, folds=opts.folds, folds_run=len(runs), global_batch=spec.batch * world,
            per_fold=[r.summary() for r in runs], dice_per_fold=[r.final_dice for r in runs],
            mean_dice=_mean([r.final_dice for r in runs]), target_reached=len(reached) == len(runs),
            folds_reached=len(reached),
            # A fold that missed the target counts its whole budget: the time spent, not a guess.
            time_to_train_s=_mean([r.time_to_target_s if r.reached else r.wall_s for r in runs]),
            steps_to_target=_mean([float(r.steps_to_target) for r in reached]),
            time_method="wall time per fold from its first step to the end of the evaluation that reached the "
                        "target (evaluations and warm-up included); mean over folds"))


def _samples(runs: list[FoldRun]) -> dict[str, list[float]]:
    """Per evaluation: fold, step, DICE, wall seconds, mean loss and seconds per step since the last one."""
    points = [(r.fold, p) for r in runs for p in r.curve]
    return {
        "step": [p["step_s"] for _, p in points],
        "curve_fold": [float(f) for f, _ in points],
        "curve_step": [float(p["step"]) for _, p in points],
        "curve_dice": [p["dice"] for _, p in points],
        "curve_wall_s": [p["wall_s"] for _, p in points],
        "curve_loss": [p["loss"] for _, p in points],
    }


def describe(m: Measurement) -> str:
    """DICE per fold and their mean; time to train both ways (to the target, and per 40,000
    iterations like NVIDIA UNet_Medical at the measured training step time); training throughput."""
    c = m.convergence
    folds = ", ".join(fixed(d, 4) for d in c.dice_per_fold or [])
    target = f"target {c.target_dice:g} reached in {c.folds_reached}/{c.folds_run} folds"
    runs = [f for f in c.per_fold or [] if f.get("steps")]
    step_s = sum(f["train_s"] / f["steps"] for f in runs) / len(runs) if runs else None
    fixed_time = (f", {duration(SEED003_ITERATIONS * step_s)} per {SEED003_ITERATIONS:,} iterations "
                  f"(step {ms(step_s * 1e3)} ms)"
                  if step_s else "")
    return (f"mean DICE {fixed(c.mean_dice, 4)} (per fold {folds or '-'}; {target}), time to target "
            f"{duration(c.time_to_train_s)} per fold{fixed_time}, "
            f"{sig(m.throughput.value)} img/s training")
