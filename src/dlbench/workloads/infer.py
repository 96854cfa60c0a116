"""infer: inference throughput and per-batch latency (seed 002's inference.py, seed 003's
inference benchmark).

Each step: wait for a batch (`data`), copy it to the device (`h2d`), forward under
`torch.inference_mode` (`forward`). Latency is the whole step per batch: avg, p50, p90,
p95, p99. A batch-size sweep is one result per batch (`--batch 1,2,4` or `--batch sweep`).
"""

from __future__ import annotations

import torch

from dlbench import data
from dlbench.figures import ms, percent, sig
from dlbench.measure.loop import Progress
from dlbench.models import registry
from dlbench.results.measurement import Data, Measurement, Window, combine
from dlbench.workloads import distributed
from dlbench.workloads.pipeline import (Feeder, data_metrics, inference_model, latency, measure_inference,
                                       metrics_from_ranks, phase_line, decoder_text)
from dlbench.workloads.train import measured_steps, preflight

PHASES = ("data", "h2d", "forward")


def run(spec, device: torch.device, progress: Progress):
    entry = registry.resolve(spec.model)
    warnings = preflight(spec, device)
    shape = spec.input_shape or entry.input_shape
    with distributed.process_group(device) as group:
        device = group.device
        model, optimized = inference_model(spec, entry, shape, device)
        loader = data.make_loader(spec, device, train=False, shape=shape, rank=group.rank, world=group.world)
        feeder = Feeder(loader, device, spec.channels_last)

        def step(timer) -> None:
            x, _ = feeder.next(timer)
            model(x)
            timer.mark("forward")

        measured, ranks = measure_inference(step, spec, group, progress, measured_steps(spec, loader), feeder, spec.batch)
    figures, samples = metrics_from_ranks(ranks, PHASES)
    own = Measurement(latency=latency(samples["step"]),
                      window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=Data(input_shape=[spec.batch, *shape], batch_per_process=spec.batch))
    return combine(figures, Measurement(data=data_metrics(loader, warnings, spec.opts.data)), own, Measurement.read(optimized),
                   measured.common_metrics(spec.batch, "img")), samples  # rank 0's GPU under DDP


def describe(m: Measurement) -> str:
    procs = f" on {m.run.processes} processes" if (m.run.processes or 1) > 1 else ""
    return (f"{sig(m.throughput.value)} img/s{procs}; latency per batch avg {ms(m.latency.avg_ms)} ms, "
            f"p99 {ms(m.latency.p99_ms)} ms; {phase_line(m, PHASES)}; data wait "
            f"{percent(m.phase_share('data'))}){decoder_text(m)}")
