"""Why is training with `--decode gpu` slower than on synthetic data? One GPU, one process.

ResNet-50 `dlbench train` (bf16, channels-last) on synthetic data and on a JPEG folder with
`--decode gpu`, each run two ways:

  1. plain, --rounds times alternately: throughput and the data-wait share; then once with
     each of --shares as the share of the images the workers decode (`--cpu-share`);
  2. under torch.profiler (CUDA kernels only): kernel time per step on each CUDA stream, the
     gaps on the training stream, the share of the window with no kernel running, and the
     kernels that run beside the training stream;
  3. synthetic data while a background thread decodes JPEG batches for nothing (nvjpeg only,
     and nvjpeg with the crops): what the decoding work alone takes from training.

The decoding thread's own time per batch (wall and CPU) is recorded for nvjpeg and for the
rest (boxes, crops). Prints one table.

    PYTHONPATH=src python benchmarks/decode_profile.py [--images 8000] [--steps 40] [--workers 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from dlbench.data import images
from dlbench.launch.environment import prepare
from runs import gpu_decode_folder, resnet50_train as train

TIMES: dict[str, list[tuple[float, float]]] = {}


def timed(name: str, function):
    """Wrap a method so each call's wall and thread-CPU seconds land in TIMES[name]."""

    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            TIMES.setdefault(name, []).append((time.perf_counter() - wall, time.thread_time() - cpu))

    return wrapper


def streams(trace: Path, steps: int) -> dict:
    """Kernel ms per step on each stream, gaps on the busiest one, idle share of the window."""
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("cat") == "kernel" and "dur" in e]
    by_stream: dict[int, list[tuple[float, float]]] = {}
    names: dict[tuple[int, str], float] = {}
    for e in events:
        stream = e["args"].get("stream", -1)
        by_stream.setdefault(stream, []).append((e["ts"], e["ts"] + e["dur"]))
        names[stream, e["name"]] = names.get((stream, e["name"]), 0.0) + e["dur"]
    busiest = max(by_stream, key=lambda s: sum(b - a for a, b in by_stream[s]))
    others = sorted(((us, name) for (stream, name), us in names.items() if stream != busiest), reverse=True)
    spans = sorted(by_stream[busiest])
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:]) if b[0] > a[1]]
    every = sorted(x for v in by_stream.values() for x in v)
    busy, end = 0.0, every[0][0]
    for s, e in every:
        if e > end:
            busy += e - max(s, end)
            end = e
    window = every[-1][1] - every[0][0]
    return {"per_stream_ms": {s: sum(b - a for a, b in v) / steps / 1e3 for s, v in by_stream.items()},
            "training_stream": busiest,
            "gap_ms_per_step": sum(gaps) / steps / 1e3,
            "gaps_over_1ms": sum(1 for g in gaps if g > 1e3),
            "idle_share": 1 - busy / window,
            "other_kernels": [(us / steps / 1e3, name.replace("void at::native::", "")[:160]) for us, name in others[:10]]}


def background(steps: int, root: Path, workers: int, crops: bool) -> dict:
    """Train on synthetic data while a thread decodes batches (on a stream of its own) and drops them."""
    items, _ = images.scan_folder(root)
    config = images.ImageConfig(size=(224, 224), batch=256, train=True, workers=workers, prefetch=2, seed=0,
                                max_corrupt=0.05)
    device = torch.device("cuda")
    host = images.HostLoader(images.data_loader(images.FolderImages(items, config, decode=False), config, device,
                                                images.collate_bytes), None)
    decoder = images.DeviceDecoder(host, config, device)
    stop, batches = threading.Event(), [0]
    delivered = host.batches()
    next(delivered)  # the workers start here, in the main thread, not forked beside CUDA work

    def loop() -> None:
        with torch.cuda.stream(torch.cuda.Stream()):
            for encoded, _, _, paths in delivered:
                if stop.is_set():
                    return
                files = encoded.files()
                decoder.decode_batch(files, paths) if crops else decoder._decode(files, paths)
                batches[0] += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        metrics = train(steps, {})
    finally:
        stop.set()
        thread.join()
        host.close()
    return {**metrics, "decoded_per_s": batches[0] * 256 / (time.perf_counter() - start)}


def profiled(steps: int, options: dict, work: Path, label: str) -> dict:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        metrics = train(steps, options)
    path = work / f"{label}.json"
    prof.export_chrome_trace(str(path))
    # The trace spans warm-up steps too; count them so the per-step figures are per step.
    return {"throughput": metrics["throughput"], **streams(path, steps + 10)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=8000)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="synthetic / --decode gpu (default share) pairs")
    p.add_argument("--shares", type=lambda t: [float(x) for x in t.split(",")], default=[0.25, 0.5],
                   help="other --cpu-share values to run once each (default 0.25,0.5)")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    root, folder = gpu_decode_folder(args.images, args.workers)
    images.DeviceDecoder._decode = timed("nvjpeg", images.DeviceDecoder._decode)
    images.DeviceDecoder.decode_batch = timed("decode_batch", images.DeviceDecoder.decode_batch)

    rows, ratios = [], []
    for number in range(1, args.rounds + 1):  # alternated, so drift hits both alike
        synthetic = train(args.steps, {})
        TIMES.clear()
        gpu = train(args.steps, folder)
        ratios.append(gpu["throughput"] / synthetic["throughput"])
        rows.append((f"round {number}, --decode gpu", synthetic["throughput"], gpu["throughput"],
                     f"{gpu['data_share']:.1%}"))
    thread = {k: (statistics.median(w for w, _ in v) * 1e3, statistics.median(c for _, c in v) * 1e3)
              for k, v in TIMES.items()}
    phases = {"synthetic": synthetic, "--decode gpu": gpu}
    for share in args.shares:
        run = train(args.steps, {**folder, "cpu_share": share})
        rows.append((f"--decode gpu --cpu-share {share}", synthetic["throughput"], run["throughput"],
                     f"{run['data_share']:.1%}"))
        ratios.append(run["throughput"] / synthetic["throughput"])
    for crops in (False, True):
        name = f"synthetic + background {'nvjpeg and crops' if crops else 'nvjpeg only'}"
        phases[name] = background(args.steps, root, args.workers, crops)
        rows.append((name, synthetic["throughput"], phases[name]["throughput"],
                     f"decoding {phases[name]['decoded_per_s']:,.0f} img/s"))
        ratios.append(phases[name]["throughput"] / synthetic["throughput"])
    prof_synthetic = profiled(args.steps, {}, root.parent, "synthetic")
    prof_gpu = profiled(args.steps, folder, root.parent, "gpu")

    print(f"\nResNet-50 train, bf16, channels-last, batch 256, {args.workers} workers, {torch.cuda.get_device_name()}")
    print("| run | synthetic img/s | this run img/s | ratio | data wait / decoding |\n|---|---:|---:|---:|---:|")
    for (name, synthetic_ips, gpu_ips, share), ratio in zip(rows, ratios):
        print(f"| {name} | {synthetic_ips:,.0f} | {gpu_ips:,.0f} | {ratio:.3f} | {share} |")
    print(f"median ratio {statistics.median(ratios[:args.rounds]):.3f} (target >= 0.90)")
    print("\n| run | data | h2d | forward | backward | optimizer | step (ms, median) |\n|---|---:|---:|---:|---:|---:|---:|")
    for name, m in phases.items():
        print(f"| {name} | " + " | ".join(f"{m[f'{k}_ms']:.1f}" for k in ("data", "h2d", "forward", "backward", "optimizer"))
              + f" | {m['step_ms']:.1f} |")
    print("\ndecoding thread per batch (median): " + ", ".join(
        f"{k} {w:.1f} ms wall / {c:.1f} ms CPU" for k, (w, c) in thread.items()))
    print("\n| profiled run | img/s | kernel ms/step by stream | training-stream gaps ms/step | gaps > 1 ms | idle |")
    print("|---|---:|---|---:|---:|---:|")
    for name, r in (("synthetic", prof_synthetic), ("--decode gpu", prof_gpu)):
        by = ", ".join(f"{s}{'*' if s == r['training_stream'] else ''}: {ms:.1f}" for s, ms in r["per_stream_ms"].items())
        print(f"| {name} | {r['throughput']:,.0f} | {by} | {r['gap_ms_per_step']:.2f} | {r['gaps_over_1ms']} | "
              f"{r['idle_share']:.1%} |")
    print("\nkernels beside the training stream, --decode gpu (ms/step):")
    for ms, name in prof_gpu["other_kernels"]:
        print(f"  {ms:6.2f}  {name}")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
