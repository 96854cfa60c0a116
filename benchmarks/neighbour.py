"""A load beside a benchmark, for benchmarks/faults.sh: runs until it is killed.

    python3 benchmarks/neighbour.py gpu [INDEX]    # bf16 matrix products on one GPU, back to back
    python3 benchmarks/neighbour.py cpu N          # N processes spinning on the CPU
"""

import multiprocessing
import sys


def spin() -> None:
    while True:
        pass


def matmuls(index: int) -> None:
    import torch

    a = torch.randn(8192, 8192, device=f"cuda:{index}", dtype=torch.bfloat16)
    while True:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize(index)


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "gpu":
        matmuls(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        workers = [multiprocessing.Process(target=spin, daemon=True) for _ in range(int(sys.argv[2]))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
