"""The tuning record: what `--block auto`, `--precision auto` (volume) and `--batch auto` found,
kept in the store so that the next run that would find the same need not measure again.

The key is everything the choice depends on: the machine (host, GPU models and count, driver),
the torch, CUDA and cuDNN versions, the spec's fields that shape the work, and what the
workload names beyond them (volume: the input's shape and type). Any of them changed, the key
differs, nothing matches and the run measures again by itself; `--retune` measures again and
replaces the record. The launcher looks the record up before a run and stores what the run
reports it tuned after its result is stored; a workload never touches the store.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from dlbench.errors import UserError
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.workloads.tuning import Tuned

MACHINE = ("host", "gpu_count", "driver", "torch", "cuda", "cudnn")
# General fields that change how long a run measures, never what suits the machine best.
UNTUNED = ("batch", "warmup", "warmup_seconds", "steps", "min_seconds", "seed", "timeout", "profile", "profile_trace")


def machine(system: dict) -> dict[str, Any]:
    """The fingerprint's part that a tuning depends on (not the OS, RAM or Python)."""
    return {**{k: system.get(k) for k in MACHINE}, "gpus": [g.get("name") for g in system.get("gpus") or []]}


def _text(key: dict) -> str:
    return json.dumps(key, sort_keys=True, default=str)


def workload_key(spec, system: dict) -> str | None:
    """The key of what the workload itself tunes for `spec` (volume's block, precision, layout); None
    where it tunes nothing."""
    facts = spec.declared.tuning
    found = facts(spec) if facts is not None else None
    if found is None:
        return None
    general = {k: v for k, v in spec.to_dict().items() if k not in UNTUNED and k != "options"}
    return _text({"tunes": "workload", **general, "facts": found, "machine": machine(system)})


def batch_key(spec, system: dict, limit: int) -> str:
    """The key of `--batch auto` (the largest batch that fits, up to `limit`)."""
    asked = {k: v for k, v in spec.to_dict().items() if k not in UNTUNED}
    return _text({"tunes": "batch", **asked, "max_batch": limit, "machine": machine(system)})


@dataclass
class Tuning:
    """One run's tuning record: looked up before it (unless `retune`), kept after it."""
    store: Store
    key: str | None  # None: the run tunes nothing
    retune: bool = False

    def lookup(self) -> Tuned | None:
        if self.key is None or self.retune:
            return None
        return Tuned.from_dict(self.store.tuned(self.key))

    def keep(self, result: Result, choice: dict | None = None) -> str | None:
        """Store what `result` tuned (`choice`, else what its run says it tuned); a line to show where it
        could not be kept. The result itself is stored already: failing here loses no measurement."""
        choice = choice or result.measured.run.tuned
        if self.key is None or result.status != "ok" or not choice:
            return None
        try:
            self.store.keep_tuning(self.key, choice, result.id, result.finished or result.started)
        except (sqlite3.Error, UserError) as error:
            return f"the tuning could not be kept in {self.store.path} ({error}); the next run measures again"
        return None
