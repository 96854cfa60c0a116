"""Does dlbench's harness cost a host-bound step anything? dlbench against a plain loop,
interleaved, every run a fresh process.

Each pair runs the hand-written loop (benchmarks/plain.py) in a process of its own and
`dlbench run` as a user types it (the monitor on, as by default), the order alternating from pair
to pair, and reads each side's img/s over the same measured length (at least --steps steps and
--seconds seconds after a warm-up of at least 10 steps and 1 s). Three configurations, the first
two bound by the host on an H100, the third by the GPU:

  train     ResNet-50 training, batch 64, bf16, channels-last, synthetic data (SGD, cross-entropy)
  fwdbwd    ResNet-50 forward and backward, batch 16, fp32 (the cnn-benchmarks setting)
  train256  ResNet-50 training as `train`, batch 256

--old SRC adds a third side to every pair: `dlbench run` from another version's src folder (e.g.
`git archive main src | tar -x -C /tmp/old`), so that a change is measured against the version
before it and the plain loop in the same pairs.

Prints every pair's ratio (dlbench over plain), each configuration's geometric mean with the
spread of both sides, and writes them to --json. Target: geometric mean >= 0.98. Both sides do the
same arithmetic: TF32 off (dlbench's fp32 and bf16 leave it off; PyTorch's default uses it for
convolutions) and cuDNN's heuristics, not its timed search (dlbench's eager level).

    python benchmarks/pairs.py [--pairs 10] [--configs train,fwdbwd] [--old SRC] [--db pairs.db] [--json pairs.json]
    python benchmarks/pairs.py --plain train     # one plain run: prints its img/s
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DLBENCH = {
    "train": ["train", "--model", "resnet50", "--batch", "64", "--precision", "bf16", "--channels-last"],
    "fwdbwd": ["fwdbwd", "--model", "resnet50", "--batch", "16", "--precision", "fp32"],
    "train256": ["train", "--model", "resnet50", "--batch", "256", "--precision", "bf16", "--channels-last"],
}
BATCH = {"train": 64, "fwdbwd": 16, "train256": 256}


def plain(config: str, steps: int, seconds: float) -> float:
    """The plain loop's img/s: the mean step over at least `steps` steps and `seconds` seconds."""
    import torch

    sys.path.insert(0, str(HERE))
    from plain import resnet50_train_step, resnet50_training

    batch = BATCH[config]
    # the same arithmetic as dlbench at these precisions: TF32 off (PyTorch leaves it on for
    # convolutions), and cuDNN choosing its algorithms by heuristics, as at --optimize eager
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    if config.startswith("train"):
        step = resnet50_train_step(batch)
    else:
        torch.manual_seed(0)
        import torchvision

        model = torchvision.models.resnet50().cuda().train()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        grad = torch.randn(batch, 1000, device="cuda")

        def step() -> None:
            model(x).backward(grad)
            model.zero_grad(set_to_none=True)
    timed(step, 10, 1.0)
    count, took = timed(step, steps, seconds)
    return batch * count / took


def timed(step, steps: int, seconds: float) -> tuple[int, float]:
    """(steps run, seconds): at least `steps` and `seconds`, by the host clock after a synchronize."""
    import torch

    torch.cuda.synchronize()
    start, count = time.perf_counter(), 0
    while count < steps or time.perf_counter() - start < seconds:
        step()
        count += 1
        if count % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return count, time.perf_counter() - start


def plain_run(config: str, steps: int, seconds: float) -> float:
    out = subprocess.run([sys.executable, __file__, "--plain", config, "--steps", str(steps),
                          "--seconds", str(seconds)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def dlbench_run(config: str, steps: int, seconds: float, db: str, src: str | None = None) -> float:
    """`dlbench run` as typed, from this environment's dlbench or, with `src`, from that src folder."""
    env = dict(os.environ, PYTHONPATH=src) if src else None
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "r.json"
        subprocess.run([sys.executable, "-m", "dlbench", "run", *DLBENCH[config], "--steps", str(steps),
                        "--min-seconds", str(seconds), "--db", db, "--tag", f"pairs-{config}",
                        "--results-file", str(results)], capture_output=True, text=True, check=True, env=env)
        return float(json.loads(results.read_text())["throughput"])


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--configs", default="train,fwdbwd")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--db", default=str(Path(tempfile.gettempdir()) / "pairs.db"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--old", help="src folder of another dlbench version: a third side in every pair")
    parser.add_argument("--plain", choices=sorted(DLBENCH), help="one plain run, its img/s printed")
    args = parser.parse_args()
    if args.plain:
        print(plain(args.plain, args.steps, args.seconds))
        return
    rows = []
    for i in range(args.pairs):
        for config in args.configs.split(","):
            sides = {"plain": lambda: plain_run(config, args.steps, args.seconds),
                     "dlbench": lambda: dlbench_run(config, args.steps, args.seconds, args.db)}
            if args.old:
                sides["old"] = lambda: dlbench_run(config, args.steps, args.seconds, args.db, args.old)
            order = list(sides)[i % len(sides):] + list(sides)[:i % len(sides)]
            figures = {side: sides[side]() for side in order}
            rows.append({"pair": i + 1, "config": config, "first": order[0], **figures,
                         **{f"{side} ratio": figures[side] / figures["plain"] for side in sides if side != "plain"}})
            ratios = "  ".join(f"{side} {figures[side]:8,.0f} img/s" for side in sides)
            print(f"pair {i + 1:2d} {config:8s} {ratios}  dlbench/plain {rows[-1]['dlbench ratio']:.3f}"
                  + (f"  old/plain {rows[-1]['old ratio']:.3f}" if args.old else "") + f" ({order[0]} first)", flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    sides = ["dlbench", "old"] if args.old else ["dlbench"]
    print("\n| configuration | side | pairs | img/s (min–max) | over plain, geomean (min–max) |")
    print("| --- | --- | ---: | --- | --- |")
    for config in args.configs.split(","):
        mine = [r for r in rows if r["config"] == config]
        for side in ["plain", *sides]:
            ratios = [r[f"{side} ratio"] for r in mine] if side != "plain" else [1.0]
            print(f"| {config} | {side} | {len(mine)} | {min(r[side] for r in mine):,.0f}–{max(r[side] for r in mine):,.0f} | "
                  f"{geomean(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
