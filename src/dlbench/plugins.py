"""Plug-ins: modules named in $DLBENCH_PLUGINS (comma-separated) are imported at start-up.

A plug-in adds models (`dlbench.models.registry.register(ModelEntry(...))`) or workloads
(`dlbench.workloads.register(Workload(...))`; see docs/architecture.md). The variable is inherited by
every process dlbench starts (isolated runs, torchrun ranks, SLURM jobs), so a suite
can use a plug-in's models anywhere.
"""

from __future__ import annotations

import importlib
import os

from dlbench.errors import UserError

ENV = "DLBENCH_PLUGINS"
_loaded: set[str] = set()


def names(value: str | None = None) -> list[str]:
    text = os.environ.get(ENV, "") if value is None else value
    return [name.strip() for name in text.split(",") if name.strip()]


def load(value: str | None = None) -> list[str]:
    """Import every plug-in once; a missing or broken one is a user error naming it."""
    loaded = []
    for name in names(value):
        if name not in _loaded:
            try:
                importlib.import_module(name)
            except Exception as error:  # noqa: BLE001 - any failure inside a plug-in is the user's to fix
                raise UserError(f"cannot load plug-in {name!r} from ${ENV}: {type(error).__name__}: {error}") from None
            _loaded.add(name)
        loaded.append(name)
    return loaded
