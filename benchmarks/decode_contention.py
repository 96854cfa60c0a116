"""Why does nvjpeg beside training slow down, and what keeps it fast? One GPU, one process.

`--decode gpu` runs nvjpeg in a thread beside the training loop. Each time that thread comes
back from C++ (nvjpeg, a copy, the loader's queue) it needs Python's global lock, which the
training thread holds while it launches kernels, and which it hands over only every
`sys.getswitchinterval()` (5 ms by default). A training loop that never waits for the device
also blocks inside kernel launches, with the lock held, once the launch queue is full.

ResNet-50 `dlbench train` (bf16, channels-last, batch 256) on synthetic data, then on a JPEG
folder with `--decode gpu` under each variant, alternated round by round:

  - as shipped;
  - switch interval 0.5 ms (the lock changes hands ten times sooner);
  - bounded run-ahead: before taking a batch the host waits until the device has begun the
    previous step (so it waits outside the lock, and one step stays queued);
  - both; and both with --cpu-share 0;
  - a deeper queue of decoded batches (4 and 8 instead of 2), to ride out nvjpeg's slow calls;
    the deepest also with --cpu-share 0.1 and 0.

  - --cpu-share 0.25: a quarter of each batch decoded by the workers.

Then nvjpeg alone (no training) on the same batches, for its time per call undisturbed.

What it found: none of the above but CUDA's hardware queues. Streams share
CUDA_DEVICE_MAX_CONNECTIONS queues (8 by default), and nvjpeg's stream waits behind training
kernels when it shares one. dlbench sets 32 unless the environment says otherwise; run
`CUDA_DEVICE_MAX_CONNECTIONS=8 python benchmarks/decode_contention.py` to see the default.

Per variant: img/s, ratio to synthetic, data-wait share, and the decoding thread's time per
batch (median and p90): one cycle, nvjpeg, crops and joins, blocked on a full queue.

    PYTHONPATH=src python benchmarks/decode_contention.py [--images 8000] [--steps 40] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from dlbench.data import images, prefetch
from dlbench.launch.environment import prepare
from dlbench.workloads import pipeline
from runs import gpu_decode_folder, resnet50_train as train

TIMES: dict[str, list[float]] = {}
VARIANTS = {  # name: (switch interval, bounded run-ahead, queue depth, options)
    "as shipped": (None, False, None, {}),
    "switch 0.5 ms": (5e-4, False, None, {}),
    "bounded run-ahead": (None, True, None, {}),
    "both": (5e-4, True, None, {}),
    "both + cpu-share 0": (5e-4, True, None, {"cpu_share": 0.0}),
    "cpu-share 0.25": (None, False, None, {"cpu_share": 0.25}),
    "queue 4": (None, False, 4, {}),
    "queue 8": (None, False, 8, {}),
    "queue 8 + cpu-share 0.1": (None, False, 8, {"cpu_share": 0.1}),
    "queue 8 + cpu-share 0": (None, False, 8, {"cpu_share": 0.0}),
}


def timed(name: str, function):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            TIMES.setdefault(name, []).append(time.perf_counter() - start)

    return wrapper


def cycles(function):
    """Time between consecutive puts: one whole turn of the decoding thread."""
    last = [None]

    def wrapper(*args, **kwargs):
        now = time.perf_counter()
        if last[0] is not None:
            TIMES.setdefault("cycle", []).append(now - last[0])
        try:
            return function(*args, **kwargs)
        finally:
            last[0] = time.perf_counter()

    return wrapper


def deeper(depth: int):
    class Deeper(prefetch.DevicePrefetch):
        def __init__(self, make, device, _depth, name):
            super().__init__(make, device, depth, name)

    return Deeper


def bounded(next_batch):
    """Feeder.next that first waits (outside the interpreter lock) for the previous step to start on the device."""

    def wrapper(self, timer, h2d_phase=True):
        mark = getattr(self, "_started", None)
        if mark is not None:
            mark.synchronize()
        out = next_batch(self, timer, h2d_phase)
        self._started = torch.cuda.Event()
        self._started.record()
        return out

    return wrapper


@contextlib.contextmanager
def variant(switch: float | None, bound: bool, depth: int | None):
    old_switch, old_next, old_prefetch = sys.getswitchinterval(), pipeline.Feeder.next, images.DevicePrefetch
    if switch:
        sys.setswitchinterval(switch)
    if bound:
        pipeline.Feeder.next = bounded(old_next)
    if depth:
        images.DevicePrefetch = deeper(depth)
    try:
        yield
    finally:
        sys.setswitchinterval(old_switch)
        pipeline.Feeder.next = old_next
        images.DevicePrefetch = old_prefetch


def quantiles(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    ordered = sorted(values)
    return f"{statistics.median(ordered) * 1e3:.1f} / {ordered[int(0.9 * (len(ordered) - 1))] * 1e3:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=8000)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", type=lambda t: t.split(","), default=list(VARIANTS),
                   help="comma-separated, of: " + ", ".join(VARIANTS))
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    root, folder = gpu_decode_folder(args.images, args.workers)
    images.DeviceDecoder._decode = timed("nvjpeg", images.DeviceDecoder._decode)
    images.DeviceDecoder.decode_batch = timed("decode_batch", images.DeviceDecoder.decode_batch)
    prefetch.DevicePrefetch._put = cycles(timed("put", prefetch.DevicePrefetch._put))

    variants = {name: VARIANTS[name] for name in args.variants}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    threads: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    for _ in range(args.rounds):
        for name, (switch, bound, depth, extra) in variants.items():
            with variant(switch, bound, depth):
                synthetic = train(args.steps, {})["throughput"]
                TIMES.clear()
                run = train(args.steps, {**folder, **extra})
            results[name].append((synthetic, run["throughput"], run["data_share"]))
            for key, values in TIMES.items():
                threads[name].setdefault(key, []).extend(values)
            print(f"{name}: synthetic {synthetic:,.0f}, --decode gpu {run['throughput']:,.0f} img/s", file=sys.stderr, flush=True)

    print(f"\nResNet-50 train, bf16, channels-last, batch 256, {args.workers} workers, {torch.cuda.get_device_name()}, "
          f"{args.rounds} rounds, CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}")
    print("| variant | synthetic img/s | --decode gpu img/s | ratio (median) | data wait | "
          "thread ms per batch, median / p90: cycle | nvjpeg | crops | blocked on full queue |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        synthetic = statistics.median(r[0] for r in runs)
        gpu = statistics.median(r[1] for r in runs)
        ratio = statistics.median(r[1] / r[0] for r in runs)
        wait = statistics.median(r[2] for r in runs)
        t = threads[name]
        crops = [b - n for b, n in zip(t.get("decode_batch", []), t.get("nvjpeg", []))]
        print(f"| {name} | {synthetic:,.0f} | {gpu:,.0f} | {ratio:.3f} | {wait:.1%} | {quantiles(t.get('cycle', []))} | "
              f"{quantiles(t.get('nvjpeg', []))} | {quantiles(crops)} | {quantiles(t.get('put', []))} |")
    alone = nvjpeg_alone(root, args.workers, batches=60)
    print(f"\nnvjpeg alone, no training, 256 images a call: {quantiles(alone)} ms (median / p90), "
          f"{256 / statistics.median(alone):,.0f} img/s at the median")


def nvjpeg_alone(root: Path, workers: int, batches: int) -> list[float]:
    """Seconds per 256-image decode_jpeg call, nothing else on the GPU."""
    items, _ = images.scan_folder(root)
    config = images.ImageConfig(size=(224, 224), batch=256, train=True, workers=workers, prefetch=2, seed=0,
                                max_corrupt=0.05, cpu_share=0.0)
    device = torch.device("cuda")
    host = images.HostLoader(images.data_loader(images.FolderImages(items, config, decode=False), config, device,
                                                images.collate_bytes), None)
    decoder = images.DeviceDecoder(host, config, device)
    delivered, times = host.batches(), []
    try:
        for _ in range(batches):
            encoded, _, _, paths = next(delivered)
            files = encoded.files()
            start = time.perf_counter()
            decoder._decode(files, paths)
            times.append(time.perf_counter() - start)
    finally:
        host.close()
    return times[5:]


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
