"""`dlbench models`: the registered models, one line each."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.launch.view import Terminal
from dlbench.options import Options


@dataclass(frozen=True, kw_only=True)
class ModelsRequest(Options):
    """List the registered models (any torchvision classifier and timm:<name> work too)."""


def models(request: ModelsRequest, view: Terminal) -> None:
    from dlbench.models import registry

    for name in registry.names():
        entry = registry.MODELS[name]
        view.text(f"{name:12s} {entry.title:14s} input {'x'.join(map(str, entry.input_shape))}")
