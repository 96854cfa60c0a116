"""Why NVIDIA UNet_Medical's FP32 inference at batch 4 takes ~20x batch 2's time on an H200: the same
model timed at batch 1 to 16 in fp32 (TF32 off, as dlbench's fp32), with cuDNN choosing its
algorithms by heuristics (dlbench's default, eager) and by timing them (`cudnn.benchmark`).

    PYTHONPATH=src python3 benchmarks/unet_fp32_batches.py [--batches 1,2,4,8,16] [--steps 20]
"""

import argparse
import time

import torch

from dlbench.models import registry


def timed(model, x, steps: int) -> float:
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            model(x)
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,2,3,4,5,6,8,16")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    entry = registry.resolve("unet2d-medical")
    model = entry.build().cuda().eval()
    print("| batch | heuristics ms | timed search ms |\n| ---: | ---: | ---: |")
    for batch in map(int, args.batches.split(",")):
        x = torch.randn(batch, *entry.input_shape, device="cuda")
        torch.backends.cudnn.benchmark = False
        plain = timed(model, x, args.steps)
        torch.backends.cudnn.benchmark = True
        searched = timed(model, x, args.steps)
        print(f"| {batch} | {plain * 1e3:.1f} | {searched * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
