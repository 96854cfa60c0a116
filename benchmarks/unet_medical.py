"""Seed 003's accuracy / time-to-train setting on one GPU: dlbench's `converge` at fp32, tf32, bf16
and fp16 (AMP), next to a plain hand-written PyTorch training loop's throughput in the same process.

    PYTHONPATH=src python benchmarks/unet_medical.py [--precisions fp32,tf32,bf16,fp16] [--budget 60]
        [--target-dice 0.89] [--folds 5] [--fold-limit 1] [--eval-every 50] [--max-steps 3000]
        [--batch 8] [--images 30] [--size 512] [--plain-steps 40] [--no-plain]

The data set (30 generated EM-membrane images of 512x512, like the seed's ISBI set) is written
once to a temporary folder and read by every run. Each precision trains the original U-Net
(unet2d-medical, 572x572 in, 388x388 out, batch 8) on the first fold of a 5-fold split until
the DICE target, the step budget or `--budget` seconds (checked at each evaluation), so the
whole script stays under 6 minutes on an H200. The plain loop trains the same network on a
fixed batch with Adam for `--plain-steps` steps after 10 warm-up steps; ratio = dlbench img/s /
plain img/s (dlbench's includes random crops and augmentation; evaluations are excluded from both).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from dlbench.data import generate_seg
from dlbench.launch.environment import prepare
from dlbench.models import registry
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.launch.execute import execute
from dlbench.workloads.losses import loss_for

AMP = {"fp16", "bf16"}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_loop(precision: str, batch: int, steps: int, device: torch.device, features: int | None) -> float:
    """The loop a user would write: img/s of Adam training steps on one fixed batch."""
    torch.manual_seed(0)
    model = registry.resolve("unet2d-medical").build(**({"base": features} if features else {})).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    x = torch.randn(batch, 1, 572, 572, device=device)
    y = torch.randint(0, 2, (batch, 388, 388), device=device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=precision in AMP):
            loss = loss_for("segment-dice")(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return batch * steps / (time.perf_counter() - start)


def converge(args, data: str, precision: str) -> dict:
    spec = BenchmarkSpec(workload="converge", model="unet2d-medical", batch=args.batch, precision=precision, device=args.device,
                         options={"data": data, "target_dice": args.target_dice, "folds": args.folds,
                                  "fold_limit": args.fold_limit, "eval_every": args.eval_every,
                                  "max_steps": args.max_steps, "max_seconds": args.budget, "features": args.features})
    result = execute(spec, fingerprint())
    if result.status != "ok":
        raise SystemExit(f"{precision}: {result.status}: {result.error}")
    return result.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    parser.add_argument("--budget", type=float, default=60.0, help="Seconds per precision and fold (checked at evaluations).")
    parser.add_argument("--target-dice", type=float, default=0.89)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--fold-limit", type=int, default=1, help="Folds run per precision (0: all).")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--images", type=int, default=30)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--plain-steps", type=int, default=40)
    parser.add_argument("--no-plain", action="store_true", help="Skip the plain-loop throughput comparison.")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, for a smoke test with --features.")
    parser.add_argument("--features", type=int, default=None, help="U-Net first-level filters (default 64, the seed's).")
    args = parser.parse_args()
    args.fold_limit = args.fold_limit or None
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (or --device cpu for a smoke test)")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}  torch {torch.__version__}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlbench-seg-") as folder:
        start = time.perf_counter()
        generate_seg.write(folder, n=args.images, size=args.size, device=device)
        print(f"generated {args.images} images of {args.size}x{args.size} in {time.perf_counter() - start:.1f} s", flush=True)
        for precision in args.precisions.split(","):
            m = converge(args, folder, precision)
            plain = None if args.no_plain else plain_loop(precision, args.batch, args.plain_steps, device, args.features)
            fold = m["per_fold"][0]
            rows.append((precision, f"{m['folds_reached']}/{m['folds_run']}", fold["steps_to_target"] or "-",
                         f"{m['time_to_train_s']:.1f}" + ("" if m["target_reached"] else "*"), f"{m['mean_dice']:.4f}",
                         f"{m['throughput']:.1f}", f"{plain:.1f}" if plain else "-",
                         f"{m['throughput'] / plain:.3f}" if plain else "-"))
            print(f"{precision}: {rows[-1]}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    header = ("precision", "folds reached", "steps to target", "time to train [s]", "mean DICE",
              "dlbench img/s", "plain img/s", "ratio")
    print("\n|" + "|".join(header) + "|\n|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("|" + "|".join(map(str, row)) + "|")
    print("\n* target not reached within the budget: time is the budget spent. "
          f"Target DICE {args.target_dice}, batch {args.batch}, unet2d-medical 572 -> 388.")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
