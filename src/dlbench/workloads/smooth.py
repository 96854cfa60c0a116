"""smooth: randomized-smoothing inference (seed 002's smooth_inference.py).

Each step takes one input from the loader (`data`, the copy to the device included),
repeats it `--batch` times with Gaussian noise of standard deviation `sigma` (`noise`, the
data-processing phase) and classifies all copies in one forward pass, counting the votes
(`forward`). Throughput counts inputs, not noisy copies; `noisy_per_s` counts those.
"""

from __future__ import annotations

import torch

from dlbench import data
from dlbench.figures import sig
from dlbench.measure.loop import Progress
from dlbench.models import registry
from dlbench.results.measurement import Data, Measurement, Smoothing, Window, combine
from dlbench.workloads import distributed
from dlbench.workloads.fwdbwd import primary_output
from dlbench.workloads.pipeline import (Feeder, data_metrics, inference_model, latency, measure_inference,
                                       metrics_from_ranks, phase_line)
from dlbench.workloads.train import measured_steps, preflight
from dlbench.workloads.runtime import memory_format

PHASES = ("data", "noise", "forward")


def run(spec, device: torch.device, progress: Progress):
    entry = registry.resolve(spec.model)
    sigma = spec.opts.sigma
    warnings = preflight(spec, device)
    shape = spec.input_shape or entry.input_shape
    with distributed.process_group(device) as group:
        device = group.device
        model, optimized = inference_model(spec, entry, shape, device)
        loader = data.make_loader(spec, device, train=False, batch=1, shape=shape, rank=group.rank, world=group.world)
        feeder = Feeder(loader, device, spec.channels_last)
        generator = torch.Generator(device=device).manual_seed(spec.seed + group.rank)
        memory = memory_format(spec.channels_last, len(shape) + 1)

        def step(timer) -> None:
            x, _ = feeder.next(timer, h2d_phase=False)
            copies = x.expand(spec.batch, *x.shape[1:])
            noise = torch.randn(copies.shape, device=device, generator=generator)
            noisy = torch.add(copies, noise, alpha=sigma).contiguous(memory_format=memory)
            timer.mark("noise")
            logits = primary_output(model(noisy))
            torch.bincount(logits.argmax(1), minlength=logits.shape[1])  # the smoothed prediction's votes
            timer.mark("forward")

        measured, ranks = measure_inference(step, spec, group, progress, measured_steps(spec, loader), feeder, 1)
    figures, samples = metrics_from_ranks(ranks, PHASES)
    own = Measurement(latency=latency(samples["step"]),
                      window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=Data(input_shape=[1, *shape]),
                      smoothing=Smoothing(sigma=sigma, noise_copies=spec.batch,
                                          noisy_per_s=figures.throughput.value * spec.batch))
    return combine(figures, Measurement(data=data_metrics(loader, warnings, spec.opts.data)), own, Measurement.read(optimized),
                   measured.common_metrics(1, "img")), samples  # rank 0's GPU under DDP


def describe(m: Measurement) -> str:
    return (f"{sig(m.throughput.value)} inputs/s ({sig(m.smoothing.noisy_per_s)} noisy copies/s); "
            f"{phase_line(m, PHASES)})")
