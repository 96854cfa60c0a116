"""The FLOP count of a step, remembered in the store so that it is counted once per configuration.

A step's FLOPs depend on the work (workload, model, input shape, batch, precision, the workload's
options, the --optimize level), never on the machine, so the key leaves the machine out and a count
made anywhere (an imported store too) serves every machine. Counting dispatches every op through
Python (measure/flops.py): minutes for a large batch on a CPU, which the next run of the same work
no longer spends. The launcher looks a count up before a run (`lookup`), hands it to the workload
(measure/flops.py `given`) and keeps what a run counted after its result is stored (`keep`).
A count is a saving only: a store that cannot give or keep one costs a count, never a run.
"""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache

from dlbench.errors import UserError
from dlbench.results.record import Result
from dlbench.results.store import Store

# Fields that change how long or where a run measures, never how much math a step does.
UNCOUNTED = ("warmup", "warmup_seconds", "steps", "min_seconds", "seed", "timeout", "profile", "profile_trace",
             "device", "channels_last")


def key(spec: dict) -> str:
    """What a step's FLOPs depend on, as text (`spec`: a spec's or a stored result's `to_dict()`)."""
    return json.dumps({k: v for k, v in spec.items() if k not in UNCOUNTED}, sort_keys=True, default=str)


def lookup(store: Store, spec: dict) -> int | None:
    """The count an earlier run of the same work made, on any machine; None where there is none."""
    found = store.flop_counts().get(key(spec))
    return int(found) if found else None


def keep(store: Store, spec: dict, result: Result, given: int | None) -> None:
    """Remember what `result`, a run of `spec` (as asked: a workload may settle fields itself), counted,
    unless the count was `given` to it (nothing new to keep)."""
    counted = result.measured.utilisation.flops_per_step
    if result.status != "ok" or given or not isinstance(counted, (int, float)) or counted <= 0:
        return
    try:
        store.keep_flops(key(spec), counted, result.id, result.finished or result.started)
    except (sqlite3.Error, UserError):
        pass  # the next run counts again: slower to start, never wrong


def forward_flops(spec) -> int:
    """One forward pass of `spec`'s model on its batch, counted on the meta device (no compute, no
    memory): what an estimate goes by where no count is remembered. 0 where it cannot be counted."""
    from dlbench.models import registry

    try:
        shape = spec.input_shape or registry.resolve(spec.model).input_shape
    except Exception:  # noqa: BLE001 - a model that cannot be looked up gets a rough estimate
        return 0
    return _forward_flops(spec.model, (spec.batch, *shape)) if shape else 0


@lru_cache(maxsize=None)
def _forward_flops(model: str, shape: tuple[int, ...]) -> int:
    """Only built-in models: a plug-in's or a file's may do anything when built (abort, hang), and
    an estimate must not."""
    import torch

    from dlbench.measure.flops import count_flops
    from dlbench.models import registry
    from dlbench.results.titles import TITLES

    if model.partition(":")[0] not in TITLES:
        return 0
    try:
        net = registry.build_on_meta(registry.resolve(model))
        with torch.device("meta"):
            return count_flops(lambda: net(torch.empty(shape)))
    except Exception:  # noqa: BLE001 - a model that cannot run on meta gets a rough estimate
        return 0
