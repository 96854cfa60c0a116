"""The tuning record: what `--block auto`, `--precision auto` (volume) and `--batch auto` found,
kept in the store so that the next run that would find the same need not measure again.

The key is everything the choice depends on: the machine (host, GPU models and count, driver),
the torch, CUDA and cuDNN versions, the spec's fields that shape the work, and what the
workload names beyond them (volume: the input's shape and type). Any of them changed, the key
differs, nothing matches and the run measures again by itself; `--retune` measures again and
replaces the record. The launcher looks the record up before a run and stores what the run
reports it tuned after its result is stored; a workload never touches the store.

A record is advice: one that does not validate (edited by hand, damaged, another program's table)
is ignored with a warning that names it, and the run measures again and replaces it; and what the
user gave (--block, --precision, --batch) always wins over a remembered choice.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from dlbench.errors import UserError
from dlbench.options import shown
from dlbench.results.record import Result
from dlbench.results.store import Store, run_named
from dlbench.workloads.tuning import Tuned

MACHINE = ("host", "gpu_count", "driver", "torch", "cuda", "cudnn")
# General fields that change how long a run measures, never what suits the machine best.
UNTUNED = ("batch", "warmup", "warmup_seconds", "steps", "min_seconds", "seed", "timeout", "profile", "profile_trace")


def machine(system: dict) -> dict[str, Any]:
    """The fingerprint's part that a tuning depends on (not the OS, RAM or Python)."""
    return {**{k: system.get(k) for k in MACHINE}, "gpus": [g.get("name") for g in system.get("gpus") or []]}


def _text(key: dict) -> str:
    return json.dumps(key, sort_keys=True, default=str)


# A remembered choice -> what makes it unusable for this run, or None where it is valid.
Check = Callable[[dict[str, Any]], "str | None"]


def for_workload(store: Store, spec, system: dict, retune: bool = False) -> "Tuning":
    """The tuning of what the workload itself tunes for `spec` (volume's block, precision, layout), keyed
    and checked by what the workload declares; one whose key is None where it tunes nothing."""
    facts = spec.declared.tuning
    found = facts(spec) if facts is not None else None
    if found is None:
        return Tuning(store, None)
    general = {k: v for k, v in spec.to_dict().items() if k not in UNTUNED and k != "options"}
    key = _text({"tunes": "workload", **general, "facts": found, "machine": machine(system)})
    check = spec.declared.tuned_check
    return Tuning(store, key, retune, partial(check, spec, found) if check is not None else None)


def batch_key(spec, system: dict, limit: int) -> str:
    """The key of `--batch auto` (the largest batch that fits, up to `limit`)."""
    asked = {k: v for k, v in spec.to_dict().items() if k not in UNTUNED}
    return _text({"tunes": "batch", **asked, "max_batch": limit, "machine": machine(system)})


def batch_check(limit: int) -> Check:
    """A remembered `--batch auto` is a whole number from 1 to the search's `limit`."""
    def check(choice: dict[str, Any]) -> str | None:
        batch = choice.get("batch")
        if type(batch) is not int or not 1 <= batch <= limit:
            return f"batch {shown(batch)} is not a whole number from 1 to {limit}"
        return None

    return check


@dataclass
class Tuning:
    """One run's tuning record: looked up before it (unless `retune`), kept after it."""
    store: Store
    key: str | None  # None: the run tunes nothing
    retune: bool = False
    check: Check | None = None  # what the workload requires of a choice beyond it being a mapping

    def lookup(self, warn: Callable[[str], None] = partial(print, file=sys.stderr)) -> Tuned | None:
        """The remembered choice, unless --retune. A row that does not validate is not taken: `warn`
        gets a line naming it, and the run measures again (and its choice replaces the row)."""
        if self.key is None or self.retune:
            return None
        try:
            return self._valid(self.store.tuned(self.key))
        except ValueError as error:
            warn(f"warning: the tuning remembered in {self.store.path} {error}: ignored; this run measures again")
            return None

    def _valid(self, found: dict | None) -> Tuned | None:
        if found is None:
            return None
        choice, run = found["choice"], run_named(found["result"])
        reason = (f"{shown(choice)} is no choice" if not isinstance(choice, dict) else
                  self.check(choice) if self.check is not None else None)
        if reason:
            raise ValueError(f"by run {run} is not valid ({reason})")
        return Tuned.from_dict(found)

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
