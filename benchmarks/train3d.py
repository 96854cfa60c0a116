"""Volumetric training on one GPU (seed 000/001): dlbench `train` on real augmented patches
beside a plain PyTorch loop on random on-GPU data, for both 3D U-Nets.

For each model (unet3d-aniso on 40x432x432 patches, unet3d on 48x384x384) and each
precision (fp32 with TF32 off, tf32, bf16 autocast), in one process:

  1. a plain hand-written loop: the model alone, batch 1, Adam, the model's loss (Dice on
     affinities / BCE on the mask), one random input and target already on the GPU
  2. dlbench `train` on a generated CREMI-style volume with the default settings: random
     patches read by DataLoader workers, elastic deformation and flips (on the GPU by
     default), affinity or mask targets

It prints seconds per iteration, iterations per minute, days to 100k iterations, the ratio
to the plain loop and the data-wait share (target < 5% of the step). With --cpu-augment it
adds one run of unet3d-aniso bf16 with the deformation in the CPU workers, to show what that
pipeline can feed. The volume is written to local disk first (--dir; default a temporary
directory) unless --volume names one.

    python benchmarks/train3d.py [--steps 40] [--warmup 5] [--volume-shape 64x1024x1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from plain import mean_seconds, train_step

from dlbench.launch.environment import prepare

MODELS = {"unet3d-aniso": "40x432x432", "unet3d": "48x384x384"}
PRECISIONS = ("fp32", "tf32", "bf16")
TARGET_ITERS = 100_000


def plain_loop(model_name: str, patch: str, precision: str, steps: int, warmup: int) -> float:
    """Mean seconds per step of the loop a user would write for the model alone."""
    from dlbench.models import registry
    from dlbench.workloads.losses import loss_for

    entry = registry.resolve(model_name)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = entry.build().to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = loss_for(entry.task)
    shape = (1, entry.input_shape[0], *map(int, patch.split("x")))
    x = torch.rand(shape, device=device)
    with torch.no_grad():
        y = (torch.rand_like(model(x)) > 0.5).float()

    step = train_step(model, optimizer, loss_fn, x, y, torch.bfloat16 if precision == "bf16" else None)
    seconds = mean_seconds(step, warmup, steps)
    del model, optimizer, x, y
    torch.cuda.empty_cache()
    return seconds


def dlbench_train(model: str, patch: str, precision: str, volume: Path, steps: int, warmup: int, **options) -> dict:
    from dlbench.spec import BenchmarkSpec
    from dlbench.system.info import fingerprint
    from dlbench.launch.execute import execute

    spec = BenchmarkSpec(workload="train", model=model, batch=1, precision=precision, device="cuda", warmup=warmup,
                         warmup_seconds=0.0, steps=steps, min_seconds=0.0,
                         options={"data": str(volume), "patch": patch, **options})
    result = execute(spec, fingerprint())
    if result.status != "ok":
        sys.exit(f"dlbench train {model} {precision} ended with {result.status}: {result.error}")
    return result.metrics


def write_volume(folder: Path, shape: str) -> Path:
    import os

    from dlbench.data.generate_volume import generate
    from dlbench.units import parse_shape

    path = folder / "cremi-train.h5"
    start = time.perf_counter()
    generate(path, parse_shape(shape), seed=0, workers=min(16, os.cpu_count() or 1))
    print(f"wrote a {shape} volume to {path} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return path


def _row(label: str, seconds: float, plain: float | None, share: float | None, augment: str = "") -> tuple:
    per_min = 60.0 / seconds
    days = TARGET_ITERS / per_min / 1440.0
    ratio = f"{plain / seconds:.3f}" if plain else "-"
    wait = "-" if share is None else f"{share:.1%}" + ("" if share < 0.05 else " (over 5%)")
    return (label, f"{seconds:.3f}", f"{per_min:.1f}", f"{days:.2f}", ratio, wait, augment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="timed iterations per run (default 40)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up iterations per run (default 5)")
    parser.add_argument("--volume-shape", default="64x1024x1024", help="generated volume ZxYxX")
    parser.add_argument("--volume", type=Path, help="use this volume (PATH[:KEY], CREMI layout) instead")
    parser.add_argument("--dir", type=Path, help="where to write the volume (default: a temporary directory)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: both)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated fp32,tf32,bf16")
    parser.add_argument("--cpu-augment", action=argparse.BooleanOptionalAction, default=True,
                        help="also run unet3d-aniso bf16 with --augment cpu (default on)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    models = [m for m in args.models.split(",") if m]
    precisions = [p for p in args.precisions.split(",") if p]

    rows = []
    with tempfile.TemporaryDirectory(prefix="dlbench-train3d-", dir=args.dir) as tmp:
        volume = args.volume or write_volume(Path(tmp), args.volume_shape)
        for model in models:
            patch = MODELS[model]
            for precision in precisions:
                plain = plain_loop(model, patch, precision, max(10, args.steps // 2), args.warmup)
                m = dlbench_train(model, patch, precision, volume, args.steps, args.warmup)
                rows.append(_row(f"{model} {precision} plain loop", plain, None, None))
                rows.append(_row(f"{model} {precision} dlbench train", m["iteration_mean_s"], plain,
                                 m["data_share"], m.get("augment", "")))
                print(f"{model} {precision}: plain {plain:.3f} s, dlbench {m['iteration_mean_s']:.3f} s/iter, "
                      f"data wait {m['data_share']:.1%}, {m.get('achieved_tflops') or 0:.1f} TFLOP/s",
                      file=sys.stderr)
        if args.cpu_augment and "unet3d-aniso" in models:
            m = dlbench_train("unet3d-aniso", MODELS["unet3d-aniso"], "bf16", volume, max(10, args.steps // 2),
                              args.warmup, augment="cpu")
            rows.append(_row("unet3d-aniso bf16 dlbench train", m["iteration_mean_s"], None, m["data_share"],
                             f"cpu ({_workers()} workers)"))

    print(f"\n3D U-Net training on {torch.cuda.get_device_name()}, batch 1, Adam; {args.steps} timed iterations "
          f"per dlbench run after {args.warmup} warm-up; patches {', '.join(f'{k} {v}' for k, v in MODELS.items())}")
    header = ("run", "s/iter", "iters/min", f"days to {TARGET_ITERS // 1000}k", "plain/dlbench", "data wait", "augment")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)))
    shares = [float(r[5].split("%")[0]) / 100 for r in rows if r[5] != "-" and "dlbench" in r[0] and r[6] == "gpu"]
    if shares:
        print(f"data wait with the defaults: median {statistics.median(shares):.1%}, worst {max(shares):.1%} "
              f"(target < 5%)")


def _workers() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
