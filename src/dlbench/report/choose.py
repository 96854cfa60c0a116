"""Which records `report` and `compare` read from a large store, chosen from its summaries
(results/summaries.py): a store of 100,000 results is never parsed whole (half a millisecond a
record in Python), only the runs a table shows and the runs they are set against. The doctor
chooses its runs from the same summaries (diagnose/choose.py).

The choices are those the readers make from every record (the report's newest run of each row,
compare's sides), figured from each run's headline figures, and the same on any store: a test holds
them equal on small ones.
"""

from __future__ import annotations

import json
import math
from typing import Callable, Sequence

from dlbench.report.compare import _HEX, ComparedRun, Side, benchmark_key
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.results.summaries import Summary
from dlbench.system.records import SYSTEM_WORKLOAD

Figure = Callable[[Summary], "float | None"]


def speed(s: Summary) -> float | None:
    """spread.speed of the summarised run: its throughput, else its steps per second."""
    value = s.throughput
    if value is not None and math.isfinite(value) and value > 0:
        return float(value)
    return step_rate(s)


def step_rate(s: Summary) -> float | None:
    """spread.step_rate of the summarised run."""
    middle = s.step_median
    return 1.0 / middle if middle and middle > 0 and math.isfinite(1.0 / middle) else None


class Keys:
    """Each spec's benchmark key (report/compare.py), figured once per distinct spec."""

    def __init__(self) -> None:
        self._found: dict[str, tuple] = {}

    def __call__(self, spec: str) -> tuple:
        key = self._found.get(spec)
        if key is None:
            key = self._found[spec] = benchmark_key(Result(spec=json.loads(spec), system={}))
        return key


def configurations(rows: Sequence[Summary], keys: Keys) -> dict[tuple, list[Summary]]:
    """diagnose/history.py's `groups` of the summarised runs: the ok benchmark runs of each configuration, oldest first."""
    found: dict[tuple, list[Summary]] = {}
    for s in rows:  # the store's order: oldest first
        if s.status == "ok" and s.workload != SYSTEM_WORKLOAD:
            found.setdefault((s.host, s.device, keys(s.spec)), []).append(s)
    return found


# ---- the report --------------------------------------------------------------------------

REPORT_ROWS = 1000  # settings a report reads on a large store: the newest; every section shows at most these


def for_report(store: Store, suite: str | None, systems: Sequence[str] = (), rows_at_most: int | None = None,
               lean: bool = False) -> tuple[list[Result], int, int] | None:
    """The runs a report reads: of each setting (configuration, machine, tag and status: a row's
    identity in every section) its newest run, the newest `rows_at_most` settings, and every ok run of
    a repeat set (its figure is its median run); in the store's order. With the number of settings
    shown and stored. None where the store has no summaries (read it whole)."""
    rows = store.summaries(suite=suite)
    if rows is None:
        return None
    if systems:  # report.filter_systems's choice, made before the newest are counted
        wanted = {name.lower() for name in systems}
        rows = [s for s in rows if s.device.lower() in wanted or str(s.host or "").lower() in wanted]
    newest: dict[tuple, str] = {}
    for s in rows:
        key = (s.spec, s.host, s.device, s.tag, s.status)
        newest.pop(key, None)  # moved to the end: the dict's order is that of each setting's newest run
        newest[key] = s.id
    settings, rows_at_most = len(newest), REPORT_ROWS if rows_at_most is None else rows_at_most
    keep = set(list(newest.values())[-rows_at_most:])
    sets = {s.repeat_set for s in rows if s.id in keep and s.repeat_set}
    keep |= {s.id for s in rows if s.repeat_set in sets and s.status == "ok"}
    found = store.records([s.id for s in rows if s.id in keep], lean=lean)
    if lean:  # the learning curves are samples of their own
        whole = {r.id: r for r in store.complete([r for r in found if r.workload == "converge"])}
        found = [whole.get(r.id, r) for r in found]
    return found, min(settings, rows_at_most), settings


# ---- compare ---------------------------------------------------------------------------


def _select(rows: Sequence[Summary], selector: str) -> list[Summary] | None:
    """compare.select's hits among the summaries: an id prefix, else a tag, else a system label or host;
    None where it would refuse the selector (the whole read then says why)."""
    s = selector.strip()
    if not s:
        return None
    if _HEX.match(s.lower()):
        hits = [r for r in rows if r.id.startswith(s.lower())]
        if hits:
            return hits
    for hits in ([r for r in rows if r.tag == s], [r for r in rows if r.device.lower() == s.lower() or r.host == s]):
        if hits:
            return hits
    labels = {r.device for r in rows if s.lower() in r.device.lower()}
    return [r for r in rows if r.device == labels.pop()] if len(labels) == 1 else None


def for_compare(store: Store, suite: str | None, selectors: Sequence[str]) -> \
        tuple[list[Side], dict[tuple, list[ComparedRun]]] | None:
    """compare.compare_sides's sides and stored runs, from the summaries: each side's runs as their median
    steps (the figure a comparison between runs reads), and read whole, lean, only each side's newest
    run of each benchmark (its name, its steps, its odd values); of the other runs, only those of a
    configuration a side ran once, on its machine (their spread is the noise). None where the store has
    no summaries or a side names nothing: read it whole (which says why)."""
    rows = store.summaries(suite=suite)
    if rows is None:
        return None
    keys, chosen = Keys(), []
    for selector in selectors:
        hits = _select(rows, selector)
        if not hits:
            return None
        chosen.append((selector, *_side(hits, keys)))
    whole = {r.id: r for r in store.records([s.id for _, latest, _ in chosen for s in latest.values()], lean=True)}
    if any(s.id not in whole for _, latest, _ in chosen for s in latest.values()):
        return None  # a record no longer readable as its summary says: the whole read decides
    sides = [Side(label, {key: whole[s.id] for key, s in latest.items()}, runs) for label, latest, runs in chosen]
    alone = {(runs[0].key, runs[0].machine) for side in sides for runs in side.runs.values() if len(runs) == 1}
    machines, everything = {machine for _, machine in alone}, {}
    for s in rows:  # oldest first, as compare._runs orders them
        if (s.host, s.device) in machines and _compared(s):
            key = keys(s.spec)
            if (key, (s.host, s.device)) in alone:
                everything.setdefault(key, []).append(_run_of(s, key))
    return sides, everything


def _compared(s: Summary) -> bool:
    """compare._runs's test: an ok benchmark run with a median step."""
    return s.status == "ok" and s.workload != SYSTEM_WORKLOAD and step_rate(s) is not None


def _run_of(s: Summary, key: tuple) -> ComparedRun:
    return ComparedRun(s.id, s.workload, {"step": [s.step_median]}, key, (s.host, s.device))


def _side(hits: Sequence[Summary], keys: Keys) -> tuple[dict[tuple, Summary], dict[tuple, list[ComparedRun]]]:
    """compare._latest and compare._runs of a side's runs: its newest ok or oom run of each benchmark,
    and every ok run with a median step, oldest first."""
    latest: dict[tuple, Summary] = {}
    runs: dict[tuple, list[ComparedRun]] = {}
    for s in hits:  # the store's order: oldest first
        if s.workload == SYSTEM_WORKLOAD or s.status not in ("ok", "oom"):
            continue
        key = keys(s.spec)
        latest[key] = s
        if _compared(s):
            runs.setdefault(key, []).append(_run_of(s, key))
    return latest, runs
