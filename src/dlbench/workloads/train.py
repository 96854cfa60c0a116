"""train: real training steps (seed 002's train.py, seed 003's training benchmark).

Each step: wait for a batch (`data`), copy it to the device (`h2d`), forward and loss
(`forward`), backward (`backward`), optimizer step (`optimizer`). SGD with momentum by
default, AdamW selectable. The loss follows the model entry's task. With `epochs` the
measured window is that many whole passes over the dataset; otherwise it is at least
`steps` steps and `min_seconds`. Under torchrun the model is wrapped in DDP and every
rank's steps are gathered into one result.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from dlbench import data
from dlbench.errors import UserError
from dlbench.measure.loop import Progress
from dlbench.models import registry
from dlbench.workloads import distributed, optimize
from dlbench.workloads.fwdbwd import primary_output
from dlbench.workloads.pipeline import Feeder, data_metrics, metrics_from_ranks, rank_payload
from dlbench.workloads.runtime import random_input

OPTIONS = {
    **data.OPTIONS,
    "optimizer": "sgd",  # sgd (momentum 0.9, weight decay 1e-4) | adamw
    "lr": None,  # None: 0.01 for SGD, 0.001 for AdamW
    "epochs": 0,  # > 0: measure that many whole epochs of the dataset instead of `steps`
}
PHASES = ("data", "h2d", "forward", "backward", "optimizer")


def dice_loss(logits: torch.Tensor, targets: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """1 - Dice over the batch, on sigmoid probabilities (affinity maps)."""
    p = torch.sigmoid(logits.float())
    t = targets.float()
    return 1 - (2 * (p * t).sum() + eps) / (p.sum() + t.sum() + eps)


# What a model's output means decides the loss; a new task is one entry here and one in make_targets.
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "classify": F.cross_entropy,
    "segment": F.cross_entropy,  # per-pixel classes: (N, C, ...) logits, (N, ...) targets
    "mask": lambda out, t: F.binary_cross_entropy_with_logits(out, t.to(out.dtype)),
    "affinities": dice_loss,
}


def make_targets(task: str, out: torch.Tensor, seed: int) -> torch.Tensor:
    """Random targets shaped for `out`, for sources that bring none (synthetic)."""
    generator = torch.Generator(device=out.device).manual_seed(seed)
    if task in ("classify", "segment"):
        shape = (out.shape[0],) if task == "classify" else (out.shape[0], *out.shape[2:])
        return torch.randint(0, out.shape[1], shape, device=out.device, generator=generator)
    return (torch.rand(out.shape, device=out.device, generator=generator) > 0.5).float()


def make_optimizer(spec, params) -> torch.optim.Optimizer:
    name, lr = spec.options.get("optimizer", "sgd"), spec.options.get("lr")
    params = list(params)
    fused = optimize.optimizer_kwargs(spec, params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr or 0.01, momentum=0.9, weight_decay=1e-4, **fused)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr or 0.001, **fused)
    raise UserError(f"unknown optimizer {name!r}: use sgd or adamw")


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
    warnings = data.check(spec, device)
    shape = spec.input_shape or entry.input_shape
    with distributed.process_group(device) as group:
        device = group.device
        torch.manual_seed(spec.seed)
        model = entry.build().to(device).train()
        if spec.channels_last:
            model = model.to(memory_format=torch.channels_last)
        loss_fn = LOSSES[entry.task]
        model, optimized = optimize.prepare(
            spec, model, random_input(spec.batch, shape, device, spec.channels_last, spec.seed),
            loss=lambda out: loss_fn(primary_output(out), make_targets(entry.task, primary_output(out), spec.seed)))
        model = distributed.wrap(model, group)
        optimizer = make_optimizer(spec, model.parameters())
        scaler = torch.amp.GradScaler(device.type) if spec.precision == "fp16" and device.type == "cuda" else None
        loader = data.make_loader(spec, device, train=True, shape=shape, rank=group.rank, world=group.world)
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
    metrics.update(data_metrics(loader, warnings))
    metrics.update({"input_shape": [spec.batch, *shape], "task": entry.task, "batch_per_process": spec.batch,
                    "warmup_steps": measured.warmup_steps, "warmup_s": measured.warmup_s,
                    "optimizer": spec.options.get("optimizer", "sgd"), "epochs": _epochs(spec), **optimized})
    return metrics, samples


def describe(metrics: dict) -> str:
    procs = f" on {metrics['processes']} processes" if metrics.get("processes", 1) > 1 else ""
    return (f"{metrics['throughput']:.1f} img/s{procs}; step {metrics['step_ms']:.2f} ms = data "
            f"{metrics['data_ms']:.2f} + h2d {metrics['h2d_ms']:.2f} + forward {metrics['forward_ms']:.2f} + "
            f"backward {metrics['backward_ms']:.2f} + optimizer {metrics['optimizer_ms']:.2f} "
            f"(data wait {metrics['data_share']:.0%} of the time)")

