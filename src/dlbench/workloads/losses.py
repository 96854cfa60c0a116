"""The one loss table: what a model's output means (its registry entry's `task`) decides the loss.

classify and segment take logits: cross-entropy, per image or per pixel. The volumetric tasks
(mask, affinities) take the probabilities of the 3D U-Nets, which end in a sigmoid: binary
cross-entropy and Sørensen–Dice. converge trains segment models towards a DICE target, so its
loss adds a soft DICE term to the cross-entropy (its own entry, `segment-dice`). Every loss
computes in fp32 whatever the precision (autocast runs cross-entropy in fp32, the others cast),
so half-precision training stays numerically safe.
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


def cross_entropy_dice(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy + (1 - soft DICE averaged over classes) of 2D logits (N, C, H, W), in fp32."""
    logits = logits.float()
    ce = F.cross_entropy(logits, target)
    prob = logits.softmax(1)
    onehot = F.one_hot(target, logits.shape[1]).permute(0, 3, 1, 2).to(prob.dtype)
    inter = (prob * onehot).sum((0, 2, 3))
    total = prob.sum((0, 2, 3)) + onehot.sum((0, 2, 3))
    return ce + 1 - ((2 * inter + 1) / (total + 1)).mean()


# A new task is one entry here and one in train.make_targets.
LOSSES: dict[str, Loss] = {
    "classify": F.cross_entropy,
    "segment": F.cross_entropy,  # per-pixel classes: (N, C, ...) logits, (N, ...) targets
    "segment-dice": cross_entropy_dice,
    "mask": binary_cross_entropy,
    "affinities": sorensen_dice,
}


def loss_for(task: str) -> Loss:
    """The loss for a model task (a registry entry's `task`) or a target name."""
    if task not in LOSSES:
        raise ValueError(f"no loss for task {task!r}; known: {', '.join(LOSSES)}")
    return LOSSES[task]
