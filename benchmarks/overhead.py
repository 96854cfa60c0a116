"""dlbench's fwdbwd against a plain hand-written PyTorch loop, side by side in one process.

    PYTHONPATH=src python benchmarks/overhead.py [--models resnet50] [--batches 16,256] [--precisions fp32,bf16] [--dlbench-first]

Both time the same model, batch and precision with CUDA events around forward and backward;
the runs alternate (plain, dlbench, plain, ...) so clock drift hits both alike. Ratio is
plain total / dlbench total: 1.0 means dlbench adds nothing; the target is >= 0.98.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from dlbench.launch.environment import prepare
from dlbench.models import registry
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.launch.execute import execute

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def plain_loop(name: str, batch: int, precision: str, warmup: int, steps: int) -> tuple[float, float]:
    """The 20-line loop a user would write. Returns (median forward+backward ms, img/s)."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    model = registry.build(name).cuda().train()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    autocast = torch.autocast("cuda", dtype=DTYPES.get(precision, torch.float32), enabled=precision in DTYPES)
    with autocast:
        grad = torch.randn_like(model(x))
        for _ in range(warmup):
            model(x).backward(grad)
            model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        events = []
        for _ in range(steps):
            start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            start.record()
            out = model(x)
            mid.record()
            out.backward(grad)
            end.record()
            model.zero_grad(set_to_none=True)
            events.append((start, mid, end))
        last = torch.cuda.Event(enable_timing=True)
        last.record()
        torch.cuda.synchronize()
    total = statistics.median(s.elapsed_time(m) + m.elapsed_time(e) for s, m, e in events)
    window_s = events[0][0].elapsed_time(last) / 1e3
    return total, batch * steps / window_s


def dlbench_run(name: str, batch: int, precision: str, warmup: int, steps: int) -> tuple[float, float]:
    spec = BenchmarkSpec(workload="fwdbwd", model=name, batch=batch, input_shape=(3, 224, 224), precision=precision,
                         device="cuda", warmup=warmup, warmup_seconds=0, steps=steps, min_seconds=0)
    result = execute(spec, fingerprint())
    assert result.status == "ok", result.error
    return result.metrics["total_ms"], result.metrics["images_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--batches", default="16,256")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dlbench-first", action="store_true", help="Run dlbench before the plain loop in each pair.")
    args = parser.parse_args()
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    rows = []
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for precision in args.precisions.split(","):
                plain, ours = [], []
                for _ in range(args.repeats):
                    if args.dlbench_first:
                        ours.append(dlbench_run(name, batch, precision, args.warmup, args.steps))
                    plain.append(plain_loop(name, batch, precision, args.warmup, args.steps))
                    if not args.dlbench_first:
                        ours.append(dlbench_run(name, batch, precision, args.warmup, args.steps))
                p_ms = statistics.median(t for t, _ in plain)
                d_ms = statistics.median(t for t, _ in ours)
                p_ips = statistics.median(r for _, r in plain)
                d_ips = statistics.median(r for _, r in ours)
                rows.append((name, batch, precision, p_ms, d_ms, p_ms / d_ms, p_ips, d_ips, d_ips / p_ips))
    print("| model | batch | precision | plain ms | dlbench ms | ratio (ms) | plain img/s | dlbench img/s | ratio (img/s) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.3f} | {r[6]:.0f} | {r[7]:.0f} | {r[8]:.3f} |")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
