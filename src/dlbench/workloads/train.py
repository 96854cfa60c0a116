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

import dataclasses
from typing import Callable

import torch

from dlbench import data
from dlbench.errors import UserError
from dlbench.figures import fixed, ms, percent, sig
from dlbench.measure.loop import Progress
from dlbench.models import registry
from dlbench.results.measurement import Data, Measurement, Throughput, Training, Window, combine
from dlbench.results.stats import summarize
from dlbench.units import days_to, iters_per_min, parse_zyx
from dlbench.workloads import distributed, losses, optimize
from dlbench.workloads.fwdbwd import primary_output
from dlbench.workloads.pipeline import (Feeder, data_metrics, decoder_text, metrics_from_ranks, phase_line,
                                       rank_payload)
from dlbench.workloads.runtime import backward_and_step, built_model, grad_scaler, random_input, resolve_device


PHASES = ("data", "h2d", "forward", "backward", "optimizer")


VOLUME_TASKS = ("affinities", "mask")


def make_targets(task: str, out: torch.Tensor, seed: int) -> torch.Tensor:
    """Random targets shaped for `out`, for sources that bring none (synthetic)."""
    generator = torch.Generator(device=out.device).manual_seed(seed)
    if task in ("classify", "segment"):
        shape = (out.shape[0],) if task == "classify" else (out.shape[0], *out.shape[2:])
        return torch.randint(0, out.shape[1], shape, device=out.device, generator=generator)
    return (torch.rand(out.shape, device=out.device, generator=generator) > 0.5).float()


def labels(task: str, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A dataset's targets for the model's output `out`: with more dataset classes than outputs, labels wrap."""
    return y.remainder(out.shape[1]) if task == "classify" else y


def optimizer_name(spec, task: str = "classify") -> str:
    """The spec's optimizer; by default Adam for the volumetric models (the seed's choice), else SGD."""
    return spec.opts.optimizer or ("adam" if task in VOLUME_TASKS else "sgd")


def make_optimizer(spec, params, task: str = "classify", capturable: bool = False) -> torch.optim.Optimizer:
    """`capturable`: its step will be captured in a CUDA graph (Adam's step count stays on the GPU)."""
    name, lr = optimizer_name(spec, task), spec.opts.lr
    params = list(params)
    kwargs = optimize.optimizer_kwargs(spec, params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr or 0.01, momentum=0.9, weight_decay=1e-4, **kwargs)
    if capturable:
        kwargs["capturable"] = True
    if name == "adam":
        return torch.optim.Adam(params, lr=lr or 0.001, **kwargs)
    return torch.optim.AdamW(params, lr=lr or 0.001, **kwargs)


def input_shape(spec, entry) -> tuple[int, ...]:
    """The model input without the batch: `patch` (ZxYxX) after the model's channels, or the spec's."""
    shape = tuple(spec.input_shape or entry.input_shape)
    if spec.opts.patch is None:
        return shape
    patch = parse_zyx(spec.opts.patch, "--patch")
    if len(entry.input_shape) != 4:
        raise UserError(f"--patch is ZxYxX for 3D models (unet3d, unet3d-aniso); got {'x'.join(map(str, patch))} "
                        f"for {spec.model!r}")
    return (entry.input_shape[0], *patch)


def iteration_metrics(ranks: list[dict], target: int) -> Training:
    """Seed 000/001's figures: one iteration is one step of every process, as long as the slowest."""
    steps = [max(values) for values in zip(*(p["samples"]["step"] for p in ranks))]
    s = summarize(steps)
    per_min = iters_per_min(len(steps), sum(steps))
    return Training(iteration_mean_s=s["mean"], iteration_std_s=s["std"], iteration_min_s=s["min"],
                    iteration_max_s=s["max"], iters_per_min=per_min, extrapolate_iters=target,
                    days_to_extrapolate=days_to(target, per_min))


def preflight(spec, device: torch.device | None = None) -> list[str]:
    """The data options checked before anything runs (a volume must hold the training patch)."""
    device = device or resolve_device(spec.device)
    shape = input_shape(spec, registry.resolve(spec.model)) if spec.workload == "train" else None
    return data.check(spec, device, shape)


def measured_steps(spec, loader) -> int | None:
    """Steps for `epochs` whole epochs, or None to measure by steps and seconds."""
    epochs = spec.opts.epochs
    if not epochs:
        return None
    if not hasattr(loader, "__len__"):
        raise UserError("--epochs needs a dataset (dummy or folder:PATH); synthetic data has no epochs")
    return epochs * len(loader)


@dataclasses.dataclass
class Trainer:
    """One process's training as set up for the measured steps. `model` is the one stepped (under
    DDP with several processes); with the whole step captured, `graphs` replays it from the static
    `example` and `targets`, and `first` is the output those targets were shaped for."""
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    optimized: dict
    example: torch.Tensor
    scaler: torch.amp.GradScaler | None = None
    graphs: optimize.StepGraphs | None = None
    targets: torch.Tensor | None = None
    first: torch.Tensor | None = None


def build_trainer(spec, entry, shape: tuple[int, ...], group: distributed.Group) -> Trainer:
    """The model, its input and optimizer, checked (and captured where it can be) at the spec's level."""
    device = group.device
    torch.manual_seed(spec.seed)
    model = built_model(entry, shape, device, spec.channels_last).train()
    example = random_input(spec.batch, shape, device, spec.channels_last, spec.seed)
    scaler = grad_scaler(spec, device)
    # One process without loss scaling: the whole step is captured (DDP's all-reduce and the
    # scaler's check for infinities run on the host between kernels).
    if spec.optimize in optimize.STEP_LEVELS and group.world == 1 and scaler is None:
        return captured_trainer(spec, entry.task, model, example)
    loss_fn = losses.loss_for(entry.task)
    model, optimized = optimize.prepare(
        spec, model, example,
        loss=lambda out: loss_fn(primary_output(out), make_targets(entry.task, primary_output(out), spec.seed)))
    model = distributed.wrap(model, group)
    return Trainer(model, make_optimizer(spec, model.parameters(), entry.task), optimized, example, scaler)


def captured_trainer(spec, task: str, model: torch.nn.Module, example: torch.Tensor) -> Trainer:
    """The whole step in CUDA graphs, on static targets that the measured steps refill."""
    loss_fn = losses.loss_for(task)
    with torch.no_grad():
        first = primary_output(model(example))
    targets = make_targets(task, first, spec.seed)
    optimizer = make_optimizer(spec, model.parameters(), task, capturable=True)
    graphs, optimized = optimize.capture_step(
        spec, model, example, lambda out: loss_fn(primary_output(out), targets), optimizer)
    return Trainer(model, optimizer, optimized, example, graphs=graphs, targets=targets, first=first)


def eager_step(t: Trainer, feeder: Feeder, task: str, seed: int) -> Callable:
    loss_fn = losses.loss_for(task)
    synthetic: dict[str, torch.Tensor] = {}

    def step(timer) -> None:
        x, y = feeder.next(timer)
        out = primary_output(t.model(x))
        if y is None:  # synthetic: one set of random targets, made once
            y = synthetic.setdefault("targets", make_targets(task, out, seed))
        backward_and_step(loss_fn(out, labels(task, y, out)), t.optimizer, t.scaler, timer)

    return step


def captured_step(t: Trainer, feeder: Feeder, task: str) -> Callable:
    """The graphs read their input and targets from fixed tensors: each batch is copied into them."""
    def step(timer) -> None:
        x, y = feeder.next(timer)
        t.example.copy_(x)
        if y is not None:
            t.targets.copy_(labels(task, y, t.first))
        t.graphs.step(timer)

    return step


def measure_steps(spec, t: Trainer, task: str, loader, group: distributed.Group, progress: Progress):
    """Every process's measured steps, gathered: (this process's measurement, the ranks' payloads)."""
    feeder = Feeder(loader, group.device, spec.channels_last)
    step = captured_step(t, feeder, task) if t.graphs is not None else eager_step(t, feeder, task, spec.seed)
    try:
        measured = distributed.measure(step, spec, group, progress, measured_steps(spec, loader))
    finally:
        feeder.close()
    return measured, group.gather(rank_payload(measured.samples, spec.batch, feeder.host_waits))


def training_figures(spec, task: str, ranks: list[dict], volume: bool, communication) -> Training:
    """Volumes and the volumetric models are counted in the publications' iterations; others only say what trained."""
    iterations = iteration_metrics(ranks, spec.opts.extrapolate_iters) if volume or task in VOLUME_TASKS \
        else Training()
    return dataclasses.replace(iterations, task=task, optimizer=optimizer_name(spec, task), epochs=spec.opts.epochs,
                               communication=communication.stored() if communication else None)


def volume_figures(throughput: float, shape: tuple[int, ...], loader) -> Measurement:
    """Patches from a volume: the throughput is in patches, and the augmentation is the loader's."""
    return Measurement(throughput=Throughput(unit="patch/s"),
                       training=Training(patches_per_s=throughput, patch=list(shape[-3:])),
                       data=Data(augment=getattr(loader, "augment", None)))


def run(spec, device: torch.device, progress: Progress):
    entry = registry.resolve(spec.model)
    if entry.task not in losses.LOSSES:
        raise UserError(f"model {spec.model!r} has task {entry.task!r}, which train has no loss for")
    shape = input_shape(spec, entry)
    warnings = preflight(spec, device)
    with distributed.process_group(device) as group:
        t = build_trainer(spec, entry, shape, group)
        loader = data.make_loader(spec, group.device, train=True, shape=shape, rank=group.rank, world=group.world,
                                  target=entry.task)
        measured, ranks = measure_steps(spec, t, entry.task, loader, group, progress)
        communication = distributed.communication_facts(group, t.model)
    figures, samples = metrics_from_ranks(ranks, PHASES)
    volume = data.parse_source(spec.opts.data)[0] == "volume"
    own = Measurement(window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=Data(input_shape=[spec.batch, *shape], batch_per_process=spec.batch),
                      training=training_figures(spec, entry.task, ranks, volume, communication))
    if volume:
        own = combine(own, volume_figures(figures.throughput.value, shape, loader))
    found = combine(figures, Measurement(data=data_metrics(loader, warnings, spec.opts.data)), own,
                    Measurement.read(t.optimized),
                    measured.common_metrics(spec.batch, "patch" if volume else "img"))  # rank 0's GPU under DDP
    return found, samples


def describe(m: Measurement) -> str:
    """3D training in the seeds' terms (iterations per minute, days); otherwise throughput and
    the phase medians with their sum, the median whole step apart (it is not that sum)."""
    wait = f"data wait {percent(m.phase_share('data'))} of the time"
    t = m.training
    if t.iters_per_min is not None:
        return (f"iteration {ms(t.iteration_mean_s * 1e3)} ms mean (std {ms(t.iteration_std_s * 1e3)} "
                f"ms), {fixed(t.iters_per_min, 1)} iters/min, {sig(t.days_to_extrapolate)} days to "
                f"{t.extrapolate_iters:,} iterations ({wait})")
    procs = f" on {m.run.processes} processes" if (m.run.processes or 1) > 1 else ""
    return (f"{sig(m.throughput.value)} {m.throughput.unit or 'img/s'}{procs}; "
            f"{phase_line(m, PHASES)}; {wait}){decoder_text(m)}")
