"""What train, infer and smooth share: taking a batch from the loader inside a timed step,
and turning per-rank samples into the metrics they store.

The `data` phase is the time the device waits for the next batch: its events are recorded
on the device's stream before and after the host takes the batch, so the phase lasts as long
as the host was blocked in `next()` beyond the work it had already queued. Phases add up to
the step, and a slow pipeline shows as a large `data` share (the rest of the step is the
model's), while a pipeline that keeps up costs nothing. The host does not wait for the device
between steps: the first kernels of each step would then wait for the host to launch them,
and anything else the host does at that moment (decoding JPEGs on the GPU from a thread
beside it, say) would add to every step. The time the host itself is blocked is recorded
too (`data_host`).
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterator

import numpy as np
import torch

from dlbench import data
from dlbench.data import prefetch
from dlbench.data.decoders import CPU as CPU_DECODER
from dlbench.data.images import DeviceDecoder, FolderImages, to_device
from dlbench.figures import phase_sum
from dlbench.measure.timer import NullTimer
from dlbench.results.measurement import Data, Latency, Measurement, Phase, Run, Stats, Throughput, Window
from dlbench.results.stats import latency_ms, summarize
from dlbench.workloads import optimize
from dlbench.workloads.runtime import built_model, memory_format, random_input

THROUGHPUT_METHOD = "images over total measured time"


class Feeder:
    """Pulls batches inside a step and marks the `data` (and optionally `h2d`) phases."""

    def __init__(self, loader, device: torch.device, channels_last: bool) -> None:
        self.loader, self.device, self.channels_last = loader, device, channels_last
        self.iterator: Iterator = iter(loader)
        self.host_waits: list[float] = []

    def next(self, timer, h2d_phase: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        start = time.perf_counter()
        inputs, targets = next(self.iterator)
        waited = time.perf_counter() - start
        if not isinstance(timer, NullTimer):
            self.host_waits.append(waited)
        if h2d_phase:
            timer.mark("data")
        x = to_device(inputs, self.device).contiguous(memory_format=memory_format(self.channels_last, inputs.dim()))
        y = targets.to(self.device, non_blocking=True) if targets is not None else None
        timer.mark("h2d" if h2d_phase else "data")
        return x, y

    def close(self) -> None:
        self.loader.close()


def rank_payload(samples: dict[str, list[float]], images_per_step: int, host_waits: list[float]) -> dict[str, Any]:
    return {"samples": samples, "images_per_step": images_per_step, "host_waits": host_waits}


def metrics_from_ranks(ranks: list[dict[str, Any]], phases: tuple[str, ...]) -> tuple[Measurement, dict]:
    """Global throughput (all ranks' images over the slowest rank's measured time), per-phase
    medians and shares over every rank's steps, and one line of figures per rank."""
    pooled: dict[str, list[float]] = {}
    for payload in ranks:
        for phase, values in payload["samples"].items():
            pooled.setdefault(phase, []).extend(values)
    pooled["data_host"] = [w for payload in ranks for w in payload["host_waits"]]
    images = sum(p["images_per_step"] * len(p["samples"]["step"]) for p in ranks)
    window = max(sum(p["samples"]["step"]) for p in ranks)
    stats = {phase: summarize(values) for phase, values in pooled.items() if values}
    total = sum(pooled["step"])
    data = Data(images_per_s=images / window, images=images,
                host_ms=stats["data_host"]["median"] * 1e3 if pooled["data_host"] else None,
                ranks=[_rank_line(i, p, phases) for i, p in enumerate(ranks)] if len(ranks) > 1 else None)
    measured = Measurement(
        throughput=Throughput(images / window, "img/s", THROUGHPUT_METHOD),
        window=Window(window_s=window, steps=len(ranks[0]["samples"]["step"]), step_ms=stats["step"]["median"] * 1e3),
        phases={phase: Phase(phase, stats[phase]["median"] * 1e3, sum(pooled[phase]) / total) for phase in phases},
        stats={name: Stats.read(s) for name, s in stats.items()}, data=data, run=Run(processes=len(ranks)))
    return measured, pooled


def _rank_line(rank: int, payload: dict[str, Any], phases: tuple[str, ...]) -> dict[str, Any]:
    samples = payload["samples"]
    line = {"rank": rank, "steps": len(samples["step"]),
            "throughput": payload["images_per_step"] * len(samples["step"]) / sum(samples["step"]),
            "step_ms": summarize(samples["step"])["median"] * 1e3}
    for phase in phases:
        # the p10-p90 spread beside the median: the doctor names a rank slower beyond it (diagnose/ranks.py)
        p10, p90 = np.percentile(samples[phase], (10, 90)) * 1e3
        line.update({f"{phase}_ms": summarize(samples[phase])["median"] * 1e3, f"{phase}_p10_ms": float(p10),
                     f"{phase}_p90_ms": float(p90)})
    return line


def latency(samples: list[float]) -> Latency:
    """Per-batch latency in ms: avg, p50, p90, p95, p99 (seed 003's columns)."""
    return Latency(**{f"{name}_ms": value for name, value in latency_ms(samples).items()})


def data_metrics(loader, warnings: list[str], source: str | None = None) -> Data:
    """What the input pipeline was: the path read (`source` as given, environment variables
    expanded: reports tell datasets apart by it), images, workers, decoding, files skipped."""
    path = data.parse_source(source)[1] if source else None
    workers = loader_workers(loader)  # "auto" resolved: reports print the count
    decoder = {"decoder": CPU_DECODER} if isinstance(getattr(getattr(loader, "loader", None), "dataset", None),
                                                     FolderImages) else {}
    if isinstance(loader, DeviceDecoder):
        # nvjpeg on a side stream is only fast with enough hardware queues (see launch/environment.py)
        decoder = {"decoder": loader.decoder, "cpu_share": loader.config.cpu_share,
                   "cuda_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
                   "prefetch_priority": prefetch.priority()}
    corrupt = getattr(loader, "corrupt", None)
    return Data(dataset_images=getattr(loader, "images", 0), path=path or None, workers=workers,
                corrupt_files=len(corrupt.paths) if corrupt is not None else None,
                corrupt_examples=corrupt.paths[:10] if corrupt is not None else None,
                warnings=warnings or None, **decoder)


def loader_workers(loader, depth: int = 3) -> int | None:
    """The DataLoader's worker processes, through the wrappers around it (None: no DataLoader)."""
    if isinstance(getattr(loader, "num_workers", None), int):
        return loader.num_workers
    for name in ("host", "loader"):
        inner = getattr(loader, name, None)
        if depth and inner is not None and inner is not loader:
            found = loader_workers(inner, depth - 1)
            if found is not None:
                return found
    return None


def inference_model(spec, entry, shape, device: torch.device):
    """The model in eval mode, in the spec's memory format and optimisation level (checked
    against eager on a random batch): what infer and smooth run."""
    torch.manual_seed(spec.seed)
    model = built_model(entry, shape, device, spec.channels_last).eval()
    with torch.inference_mode():
        return optimize.prepare(spec, model, random_input(spec.batch, shape, device, spec.channels_last, spec.seed))


def measure_inference(step, spec, group, progress, steps: int | None, feeder: "Feeder", items_per_step: int):
    """Measure `step` under inference_mode on every rank, close the feeder whatever happens,
    and gather the ranks' figures: (measured, ranks) for infer and smooth."""
    from dlbench.workloads import distributed

    try:
        with torch.inference_mode():
            measured = distributed.measure(step, spec, group, progress, steps)
    finally:
        feeder.close()
    return measured, group.gather(rank_payload(measured.samples, items_per_step, feeder.host_waits))


def decoder_text(m: Measurement) -> str:
    """Which JPEG decoder ran, for the run line ('' where no JPEG was decoded)."""
    return f"; JPEGs decoded by {m.data.decoder}" if m.data.decoder else ""


def phase_line(m: Measurement, phases: tuple[str, ...]) -> str:
    """figures.phase_sum of the measured phases' medians and the median step, each phase named in
    plain words ('h2d' is the copy of the batch to the GPU; on a CPU, into the model's layout)."""
    words = {"h2d": "copy to GPU" if str(m.device or "").startswith("cuda") else "copy"}
    return phase_sum({words.get(phase, phase): m.phase_ms(phase) for phase in phases}, m.window.step_ms)
