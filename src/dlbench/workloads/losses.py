"""Losses for the volumetric models: Sørensen–Dice for affinities, binary cross-entropy for masks.

Both take the model's probabilities (the 3D U-Nets end in a sigmoid) and compute in fp32
outside autocast, so half-precision training stays numerically safe.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def sorensen_dice(prediction: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """1 - mean over channels of 2·Σ(p·t) / (Σp² + Σt²), sums over batch and space per channel."""
    with torch.autocast(prediction.device.type, enabled=False):
        p, t = prediction.float(), target.float()
        dims = [0, *range(2, p.dim())]
        numerator = (p * t).sum(dims)
        denominator = (p * p).sum(dims) + (t * t).sum(dims)
        return 1.0 - (2.0 * numerator / denominator.clamp_min(eps)).mean()


def binary_cross_entropy(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    with torch.autocast(prediction.device.type, enabled=False):
        return F.binary_cross_entropy(prediction.float().clamp(1e-7, 1 - 1e-7), target.float())


LOSSES: dict[str, Loss] = {"affinities": sorensen_dice, "mask": binary_cross_entropy}


def loss_for(task: str) -> Loss:
    """The loss for a model task (a registry entry's `task`) or a target name."""
    if task not in LOSSES:
        raise ValueError(f"no volumetric loss for task {task!r}; known: {', '.join(LOSSES)}")
    return LOSSES[task]
