"""The hand-written PyTorch loops the benchmarks compare dlbench with: one copy for all of them.

Nothing here goes through dlbench; it is the loop a user would write.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F
import torchvision

Step = Callable[[], None]


def resnet50_training(batch: int, device: str = "cuda") -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """ResNet-50 in training mode, channels-last, with one random batch and random labels."""
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(device).train().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    return model, x, y


def train_step(run: Callable, optimizer: torch.optim.Optimizer, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor,
               dtype: torch.dtype | None) -> Step:
    """Forward under autocast (`dtype` None: off), loss, backward, optimizer step, gradients reset."""

    def step() -> None:
        with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = loss_fn(run(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def resnet50_train_step(batch: int, dtype: torch.dtype = torch.bfloat16, compiled: bool = False,
                        device: str = "cuda") -> Step:
    """The plain ResNet-50 training step: SGD with momentum and weight decay, cross-entropy."""
    model, x, y = resnet50_training(batch, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return train_step(torch.compile(model) if compiled else model, optimizer, F.cross_entropy, x, y, dtype)


def mean_seconds(step: Step, warmup: int, steps: int) -> float:
    """Mean seconds per step over `steps` steps after `warmup` untimed ones, by the host clock."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps
