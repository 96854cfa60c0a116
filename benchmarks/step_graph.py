"""One CUDA graph of the whole training step, written by hand: what it gives over the plain
loops before dlbench's `--optimize graphs` and `max` capture it.

ResNet-50, bf16 autocast, channels-last, SGD with momentum (fused where torch has it):
  plain eager        forward, loss, backward, optimizer step, gradients reset
  plain compile      the same with torch.compile(model)
  graph eager        the whole step (forward, backward, optimizer) captured as one CUDA graph
  graph compile      torch.compile(model) (default mode: no graphs of its own) inside one graph
and the cnn-benchmarks step (forward and backward from a random upstream gradient, batch 16).

  python benchmarks/step_graph.py [--steps 50] [--modes 'plain compile,graph compile']
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from plain import mean_seconds, resnet50_training, train_step


def graphed(step, warmup: int = 3):
    """`step` captured as one CUDA graph after `warmup` runs on a side stream; returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def training(batch: int, mode: str):
    model, x, y = resnet50_training(batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, fused=True)
    run = torch.compile(model) if "compile" in mode else model
    step = train_step(run, optimizer, F.cross_entropy, x, y, torch.bfloat16)
    return graphed(step) if mode.startswith("graph") else step


def fwdbwd(batch: int, mode: str):
    model, x, _ = resnet50_training(batch)
    run = torch.compile(model) if "compile" in mode else model
    grad = torch.randn(batch, 1000, device="cuda")

    def step() -> None:
        for p in model.parameters():
            p.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = run(x)
        out.backward(grad)

    return graphed(step) if mode.startswith("graph") else step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--modes", default="plain eager,plain compile,graph eager,graph compile")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| step | batch | mode | ms | img/s |")
    print("|---|---:|---|---:|---:|")
    for kind, make, batch in (("train", training, 256), ("fwd+bwd", fwdbwd, 16)):
        for mode in args.modes.split(","):
            seconds = mean_seconds(make(batch, mode), warmup=10, steps=args.steps)
            print(f"| {kind} | {batch} | {mode} | {seconds * 1e3:.2f} | {batch / seconds:,.0f} |", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
