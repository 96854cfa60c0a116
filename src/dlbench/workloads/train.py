"""train: real training steps (seed 002's train.py, seed 003's training benchmark).

Each step: wait for a batch (`data`), copy it to the device (`h2d`), forward and loss
(`forward`), backward (`backward`), optimizer step (`optimizer`). SGD with momentum by
default for classifiers, Adam for the volumetric models (tasks affinities and mask), AdamW
selectable. The loss follows the model entry's task. With `epochs` the
measured window is that many whole passes over the dataset; otherwise it is at least
`steps` steps and `min_seconds`. Under torchrun the model is wrapped in DDP and every
rank's steps are gathered into one result.

With a volume (`--data PATH[:KEY]`, seed 000/001) every step trains on random `patch`-sized
patches (one per process by default, `--batch` per process otherwise); the metrics add the
time per iteration (mean, std, min, max), iterations per minute and days to
`extrapolate_iters` iterations. An iteration ends when the slowest process ends it.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from dlbench import data
from dlbench.errors import UserError
from dlbench.measure.loop import Progress
from dlbench.measure.stats import summarize
from dlbench.models import registry
from dlbench.report.derived import days_to, iters_per_min
from dlbench.spec import parse_shape
from dlbench.workloads import distributed, losses, optimize
from dlbench.workloads.fwdbwd import primary_output
from dlbench.workloads.pipeline import Feeder, data_metrics, metrics_from_ranks, rank_payload
from dlbench.workloads.runtime import memory_format, random_input

OPTIONS = {
    **data.OPTIONS,
    "optimizer": None,  # None: sgd for classifiers, adam for 3D models | sgd (momentum 0.9, wd 1e-4) | adam | adamw
    "lr": None,  # None: 0.01 for SGD, 0.001 for Adam and AdamW
    "patch": None,  # volume training patch ZxYxX (None: the model's input shape)
    "augment": "auto",  # volume patches: auto (gpu on a GPU, else cpu) | cpu (workers) | gpu (grid_sample) | none
    "extrapolate_iters": 100_000,  # volume training: days to this many iterations
    "epochs": 0,  # > 0: measure that many whole epochs of the dataset instead of `steps`
}
PHASES = ("data", "h2d", "forward", "backward", "optimizer")


# What a model's output means decides the loss; a new task is one entry here and one in make_targets.
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "classify": F.cross_entropy,
    "segment": F.cross_entropy,  # per-pixel classes: (N, C, ...) logits, (N, ...) targets
    # The models with these tasks (3D U-Nets) end in a sigmoid: the losses take probabilities.
    "mask": losses.binary_cross_entropy,
    "affinities": losses.sorensen_dice,
}
VOLUME_TASKS = ("affinities", "mask")


def make_targets(task: str, out: torch.Tensor, seed: int) -> torch.Tensor:
    """Random targets shaped for `out`, for sources that bring none (synthetic)."""
    generator = torch.Generator(device=out.device).manual_seed(seed)
    if task in ("classify", "segment"):
        shape = (out.shape[0],) if task == "classify" else (out.shape[0], *out.shape[2:])
        return torch.randint(0, out.shape[1], shape, device=out.device, generator=generator)
    return (torch.rand(out.shape, device=out.device, generator=generator) > 0.5).float()


def optimizer_name(spec, task: str = "classify") -> str:
    """The spec's optimizer; by default Adam for the volumetric models (the seed's choice), else SGD."""
    return spec.options.get("optimizer") or ("adam" if task in VOLUME_TASKS else "sgd")


def make_optimizer(spec, params, task: str = "classify") -> torch.optim.Optimizer:
    name, lr = optimizer_name(spec, task), spec.options.get("lr")
    params = list(params)
    fused = optimize.optimizer_kwargs(spec, params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr or 0.01, momentum=0.9, weight_decay=1e-4, **fused)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr or 0.001, **fused)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr or 0.001, **fused)
    raise UserError(f"unknown optimizer {name!r}: use sgd, adam or adamw")


def input_shape(spec, entry) -> tuple[int, ...]:
    """The model input without the batch: `patch` (ZxYxX) after the model's channels, or the spec's."""
    shape = tuple(spec.input_shape or entry.input_shape)
    patch = spec.options.get("patch")
    if patch is None:
        return shape
    patch = parse_shape(patch)
    if len(patch) != 3 or len(entry.input_shape) != 4:
        raise UserError(f"--patch is ZxYxX for 3D models (unet3d, unet3d-aniso); got {'x'.join(map(str, patch))} "
                        f"for {spec.model!r}")
    return (entry.input_shape[0], *patch)


def iteration_metrics(ranks: list[dict], target: int) -> dict:
    """Seed 000/001's figures: one iteration is one step of every process, as long as the slowest."""
    steps = [max(values) for values in zip(*(p["samples"]["step"] for p in ranks))]
    s = summarize(steps)
    per_min = iters_per_min(len(steps), sum(steps))
    return {"iteration_mean_s": s["mean"], "iteration_std_s": s["std"], "iteration_min_s": s["min"],
            "iteration_max_s": s["max"], "iters_per_min": per_min, "extrapolate_iters": target,
            "days_to_extrapolate": days_to(target, per_min)}


def check_options(opts: dict) -> None:
    """Bad volume settings in a suite file fail when it loads, not hours into the suite."""
    if opts.get("patch") is not None and len(parse_shape(opts["patch"])) != 3:
        raise UserError(f"patch must be ZxYxX (3 sizes), got {opts['patch']!r}")
    if opts.get("augment", "auto") not in data.AUGMENT_MODES:
        raise UserError(f"unknown augment {opts['augment']!r}: use {', '.join(data.AUGMENT_MODES)}")
    value = opts.get("extrapolate_iters", OPTIONS["extrapolate_iters"])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"extrapolate_iters must be a positive integer, got {value!r}")


def _epochs(spec) -> int:
    epochs = spec.options.get("epochs", 0)
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise UserError(f"epochs must be an integer ≥ 0, got {epochs!r}")
    return epochs


def measured_steps(spec, loader) -> int | None:
    """Steps for `epochs` whole epochs, or None to measure by steps and seconds."""
    epochs = _epochs(spec)
    if not epochs:
        return None
    if not hasattr(loader, "__len__"):
        raise UserError("--epochs needs a dataset (dummy or folder:PATH); synthetic data has no epochs")
    return epochs * len(loader)


def run(spec, device: torch.device, progress: Progress):
    entry = registry.resolve(spec.model)
    if entry.task not in LOSSES:
        raise UserError(f"model {spec.model!r} has task {entry.task!r}, which train has no loss for")
    make_optimizer(spec, [torch.zeros(1, requires_grad=True)])  # bad optimizer names fail before any work
    shape = input_shape(spec, entry)
    target = spec.options.get("extrapolate_iters", OPTIONS["extrapolate_iters"])
    warnings = data.check(spec, device, shape)
    memory = memory_format(spec.channels_last, len(shape) + 1)
    with distributed.process_group(device) as group:
        device = group.device
        torch.manual_seed(spec.seed)
        model = entry.build().to(device).train().to(memory_format=memory)
        loss_fn = LOSSES[entry.task]
        model, optimized = optimize.prepare(
            spec, model, random_input(spec.batch, shape, device, spec.channels_last, spec.seed),
            loss=lambda out: loss_fn(primary_output(out), make_targets(entry.task, primary_output(out), spec.seed)))
        model = distributed.wrap(model, group)
        optimizer = make_optimizer(spec, model.parameters(), entry.task)
        scaler = torch.amp.GradScaler(device.type) if spec.precision == "fp16" and device.type == "cuda" else None
        loader = data.make_loader(spec, device, train=True, shape=shape, rank=group.rank, world=group.world,
                                  target=entry.task)
        feeder = Feeder(loader, device, spec.channels_last)
        fixed: dict[str, torch.Tensor] = {}

        def step(timer) -> None:
            x, y = feeder.next(timer)
            out = primary_output(model(x))
            if y is None:  # synthetic: one set of random targets, made once
                y = fixed.setdefault("targets", make_targets(entry.task, out, spec.seed))
            elif entry.task == "classify":  # more dataset classes than model outputs: labels wrap
                y = y.remainder(out.shape[1])
            loss = loss_fn(out, y)
            timer.mark("forward")
            (scaler.scale(loss) if scaler else loss).backward()
            timer.mark("backward")
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            timer.mark("optimizer")

        try:
            measured = distributed.measure(step, spec, group, progress, measured_steps(spec, loader))
        finally:
            feeder.close()
        ranks = distributed.gather(rank_payload(measured.samples, spec.batch, feeder.host_waits), group)
    metrics, samples = metrics_from_ranks(ranks, PHASES)
    volume = data.parse_source(spec.options.get("data", "synthetic"))[0] == "volume"
    unit = "patch" if volume else "img"
    metrics.update(data_metrics(loader, warnings))
    metrics.update({"input_shape": [spec.batch, *shape], "task": entry.task, "batch_per_process": spec.batch,
                    "warmup_steps": measured.warmup_steps, "warmup_s": measured.warmup_s,
                    "optimizer": optimizer_name(spec, entry.task), "epochs": _epochs(spec), **optimized})
    if volume or entry.task in VOLUME_TASKS:
        metrics.update(iteration_metrics(ranks, target))
    if volume:
        metrics.update({"throughput_unit": "patch/s", "patches_per_s": metrics["throughput"],
                        "augment": getattr(loader, "augment", None), "patch": list(shape[-3:])})
    metrics.update(measured.common_metrics(spec.batch, unit))  # rank 0's GPU under DDP
    return metrics, samples


def describe(metrics: dict) -> str:
    """3D training in the seeds' terms (iterations per minute, days); otherwise throughput and
    the phase medians with their sum, the median whole step apart (it is not that sum)."""
    from dlbench.report.units import add, fixed, ms, percent, sig

    wait = f"data wait {percent(metrics['data_share'])} of the time"
    if "iters_per_min" in metrics:
        return (f"iteration {ms(metrics['iteration_mean_s'] * 1e3)} ms mean (std {ms(metrics['iteration_std_s'] * 1e3)} "
                f"ms), {fixed(metrics['iters_per_min'], 1)} iters/min, {sig(metrics['days_to_extrapolate'])} days to "
                f"{metrics['extrapolate_iters']:,} iterations ({wait})")
    procs = f" on {metrics['processes']} processes" if metrics.get("processes", 1) > 1 else ""
    phases = [ms(metrics[f"{p}_ms"]) for p in PHASES]
    named = " + ".join(f"{p} {v}" for p, v in zip(PHASES, phases))
    return (f"{sig(metrics['throughput'])} {metrics.get('throughput_unit', 'img/s')}{procs}; {named} = "
            f"{add(*phases)} ms (phase medians; median step {ms(metrics['step_ms'])} ms; {wait})")

