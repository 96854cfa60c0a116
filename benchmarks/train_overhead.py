"""How much does dlbench's `train` cost over a plain PyTorch loop, and how fast are its input pipelines?

Side by side, in one process on one GPU (ResNet-50, bf16 autocast, channels-last):

  1. a plain hand-written training loop on synthetic data (random tensors on the GPU)
  2. dlbench `train` on synthetic data                 target: >= 0.98 x (1)
  3. dlbench `train` on a JPEG folder, --decode gpu    target: >= 0.90 x (2)
  4. dlbench `train` on a JPEG folder, CPU decoding    shows the data-wait share when the CPU is the bottleneck

The JPEG folder (ImageNet-like, ~500x375, ~100 KB) is written to a temporary directory first
unless --data-dir names one. Runs in a few minutes on one H200; prints a table at the end.

    python benchmarks/train_overhead.py [--images 20000] [--batch 256] [--workers 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from runs import resnet50_train
from dlbench.data.generate import generate
from dlbench.launch.environment import prepare
from plain import mean_seconds, resnet50_train_step


def plain_loop(batch: int, steps: int, warmup: int, dtype: torch.dtype) -> float:
    """The loop a user would write: img/s over `steps` timed steps after `warmup` ones."""
    return batch / mean_seconds(resnet50_train_step(batch, dtype), warmup, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20_000, help="JPEGs to generate (default 20000)")
    parser.add_argument("--data-dir", type=Path, help="use this JPEG folder instead of generating one")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run (default 60)")
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--workers", type=int, default=8, help="DataLoader workers for the folder runs")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--rounds", type=int, default=2, help="plain/dlbench synthetic pairs, alternated (median)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]

    plain, ours = [], []
    for _ in range(args.rounds):  # alternate, so clock and thermal drift hit both alike
        plain.append(plain_loop(args.batch, args.steps, args.warmup, dtype))
        ours.append(resnet50_train(args.steps, {}, batch=args.batch, warmup=args.warmup, precision=args.precision)["throughput"])
    plain_ips, synthetic_ips = statistics.median(plain), statistics.median(ours)

    with tempfile.TemporaryDirectory(prefix="dlbench-jpegs-") as tmp:
        folder = args.data_dir
        if folder is None:
            folder = Path(tmp) / "images"
            start = time.perf_counter()
            summary = generate(folder, args.images, classes=100, workers=os.cpu_count())
            print(f"wrote {summary['images']} JPEGs ({summary['mean_kb']:.0f} KB on average) in "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
        common = dict(data=f"folder:{folder}", workers=args.workers)
        sizes = dict(batch=args.batch, warmup=args.warmup, precision=args.precision)
        gpu = resnet50_train(args.steps, {**common, "decode": "gpu"}, **sizes)
        cpu = resnet50_train(args.steps, {**common, "decode": "cpu"}, **sizes)

    rows = [
        ("plain loop, synthetic", plain_ips, "-", "-", ""),
        ("dlbench train, synthetic", synthetic_ips, f"{synthetic_ips / plain_ips:.3f} x plain", "-",
         _verdict(synthetic_ips / plain_ips >= 0.98, ">= 0.98 x plain")),
        ("dlbench train, folder, --decode gpu", gpu["throughput"], f"{gpu['throughput'] / synthetic_ips:.3f} x synthetic",
         f"{gpu['data_share']:.1%}", _verdict(gpu["throughput"] / synthetic_ips >= 0.9, ">= 0.90 x synthetic")),
        (f"dlbench train, folder, CPU decode ({args.workers} workers)", cpu["throughput"],
         f"{cpu['throughput'] / synthetic_ips:.3f} x synthetic", f"{cpu['data_share']:.1%}",
         "data wait = 1 - throughput ratio" if cpu["data_share"] > 0.05 else ""),
    ]
    print(f"\nResNet-50 training, {args.precision} autocast, channels-last, batch {args.batch}, "
          f"{torch.cuda.get_device_name()}; plain/synthetic runs: {', '.join(f'{v:.0f}' for v in plain)} / "
          f"{', '.join(f'{v:.0f}' for v in ours)} img/s")
    header = ("run", "img/s", "ratio", "data wait share", "target")
    widths = [max(len(str(r[i])) if i != 1 else 8 for r in rows + [header]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for name, ips, ratio, share, target in rows:
        cells = (name, f"{ips:8.0f}", ratio, share, target)
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    print(f"\nCPU decode phases (ms, median): data {cpu['data_ms']:.1f}, h2d {cpu['h2d_ms']:.1f}, forward "
          f"{cpu['forward_ms']:.1f}, backward {cpu['backward_ms']:.1f}, optimizer {cpu['optimizer_ms']:.1f}; "
          f"host blocked in next() {cpu.get('data_host_ms', 0):.1f}")


def _verdict(ok: bool, target: str) -> str:
    return f"{target}: {'met' if ok else 'MISSED'}"


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
