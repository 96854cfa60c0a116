"""dlbench's matmul ceiling against plain matmul loops, to find why they may differ.

    PYTHONPATH=src python benchmarks/matmul_ceiling.py

Prints, for bf16 and tf32 at n = 8192: the ceiling as `dlbench system` measures it, a plain
`a @ b` loop timed with CUDA events, and the same loop with `torch.mm(out=...)`, each after
a short and after a 2-second warm-up, so clock ramp-up and the output buffer can be told apart.
"""

from __future__ import annotations

import time

import torch

from dlbench.launch.environment import prepare
from dlbench.system.ceilings import matmul


def loop(precision: str, n: int, warm_s: float, use_out: bool, iters: int = 50) -> float:
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device="cuda", dtype=dtype)
    call = (lambda: torch.mm(a, b, out=out)) if use_out else (lambda: a @ b)
    start = time.perf_counter()
    while time.perf_counter() - start < warm_s:
        call()
        torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        call()
    end.record()
    end.synchronize()
    return 2 * n**3 * iters / (begin.elapsed_time(end) / 1e3) / 1e12


def main() -> None:
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print("| precision | dlbench ceiling | a @ b, 0.05 s warm-up | a @ b, 2 s warm-up | mm(out=), 2 s warm-up | dlbench ceiling again |")
    print("|---|---:|---:|---:|---:|---:|")
    device = torch.device("cuda")
    for precision in ("bf16", "tf32"):
        first = matmul(precision, device).value
        cells = [loop(precision, 8192, 0.05, False), loop(precision, 8192, 2.0, False), loop(precision, 8192, 2.0, True)]
        again = matmul(precision, device).value
        print(f"| {precision} | {first:.0f} | " + " | ".join(f"{c:.0f}" for c in cells) + f" | {again:.0f} |")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
