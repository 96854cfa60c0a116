"""Layers of a built model swapped for others that compute the same thing (fused kernels, depth slabs)."""

from __future__ import annotations

import copy
from typing import Callable

from torch import nn

Replacement = Callable[[nn.Module], "tuple[nn.Module, int] | None"]


def replace(model: nn.Module, replacement: Replacement) -> tuple[nn.Module, int]:
    """`model` with each layer that `replacement` maps to (new layer, layers replaced in it)
    swapped, the layers it maps to None searched below; and how many were replaced. Modules on
    the way are shallow copies (parameters, buffers and every other module shared)."""
    found = replacement(model)
    if found is not None:
        return found
    changed, count = {}, 0
    for name, child in model.named_children():
        new, n = replace(child, replacement)
        if n:
            changed[name], count = new, count + n
    if not count:
        return model, 0
    copied = copy.copy(model)
    copied._modules = {**model._modules, **changed}
    return copied, count
