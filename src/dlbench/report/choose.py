"""Which records `doctor` and `report` read from a large store, chosen from its summaries
(results/summaries.py): a store of 100,000 results is never parsed whole (half a millisecond a
record in Python), only the runs a verdict or a table shows and the runs they are set against.

The choices are those the readers make from every record (history.to_judge, history.typical,
the report's newest run of each row), figured from each run's headline figures, and the same on
any store: a test holds them equal on small ones.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Callable, Sequence

from dlbench.report import history
from dlbench.report.compare import _HEX, ComparedRun, Side, benchmark_key, timed
from dlbench.report.history import Against
from dlbench.results import spread as spreads
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


def _figure(kind: str) -> Figure:
    return step_rate if kind == "one GPU" else speed


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
    """history.groups of the summarised runs: the ok benchmark runs of each configuration, oldest first."""
    found: dict[tuple, list[Summary]] = {}
    for s in rows:  # the store's order: oldest first
        if s.status == "ok" and s.workload != SYSTEM_WORKLOAD:
            found.setdefault((s.host, s.device, keys(s.spec)), []).append(s)
    return found


# ---- the doctor --------------------------------------------------------------------------


def to_judge(group: Sequence[Summary]) -> list[Summary]:
    """history.to_judge of a configuration's runs, in O(n log n): each older run against the median of
    the others and the interval of it against them all (spread.ratio_of_logs, the others' logarithms
    found by taking its own from the sums of all), instead of going over the others again for each run."""
    newest = group[-1]
    if newest.step_median is None:
        return [newest]
    runs = [s for s in group if s.timed]
    count = len(runs)
    order = sorted(range(count), key=lambda i: speed(runs[i]) or 0.0)  # median_run's order (a stable sort)
    position = {index: p for p, index in enumerate(order)}
    rates = [step_rate(s) for s in runs]
    logs = [math.log(f) for f in rates if f is not None]
    centre = math.fsum(logs) / len(logs) if logs else 0.0  # sums about the centre keep their digits
    sums = (math.fsum(v - centre for v in logs), math.fsum((v - centre) ** 2 for v in logs))
    judged = []
    for i, r in enumerate(runs):
        mine = speed(r)
        if r is newest or mine is None or count - 1 < 2 or len(logs) != count:
            continue  # no between-run interval to judge by: history.typical's Against never `differs`
        k, p = (count - 2) // 2, position[i]
        theirs = speed(runs[order[k] if k < p else order[k + 1]])
        if not theirs or not math.isfinite(mine / theirs):
            continue
        sets = spreads.ratio_of_logs(spreads.Logs(1, logs[i]), _others(logs[i] - centre, sums, count - 1, centre))
        if sets is not None and sets.place() != 0 and abs(1.0 - mine / theirs) > history.SAME:
            judged.append(r)
    return judged + [newest]


def _others(mine: float, sums: tuple[float, float], n: int, centre: float) -> spreads.Logs:
    """The logarithms of every run but one (`mine`, about `centre`) from the sums of all of them."""
    total, squares = sums[0] - mine, sums[1] - mine * mine
    mean = total / n
    return spreads.Logs(n, centre + mean, max(0.0, (squares - n * mean * mean) / (n - 1)))


def _light(s: Summary) -> SimpleNamespace:
    """What Spread.of reads of a run (spread.speed and step_rate): its throughput and its median step."""
    # step_median is the median of spread.step_samples: both names, so it is found whatever the workload
    steps = {"step": [s.step_median], "total": [s.step_median]} if s.step_median is not None else {}
    return SimpleNamespace(id=s.id, workload=s.workload, samples=steps,
                           measured=SimpleNamespace(throughput=SimpleNamespace(value=s.throughput, unit=s.unit)))


class Comparisons:
    """doctor.diagnose's `compared`: a run against its machine's history, one GPU and synthetic data
    (history.typical, one_gpu, synthetic), each other run read whole only where it is the median run
    a verdict names; the spread of the rest figured from their summaries."""

    def __init__(self, store: Store, groups: dict[tuple, list[Summary]]) -> None:
        self.store, self.groups = store, groups
        self._works: list[tuple[tuple, list[Summary]]] | None = None

    def __call__(self, r: Result) -> tuple[Against | None, Against | None, Against | None]:
        mine = self.typical(r, self.groups.get(history.configuration(r), []), "history")
        one = None
        if r.setup.gpus > 1:
            one = self.typical(r, self.groups.get(history.configuration(history._like(r, gpus=1))) or [], "one GPU")
        return mine, one, self.synthetic(r)

    def typical(self, r: Result, group: Sequence[Summary], kind: str) -> Against | None:
        others = [o for o in group if o.id != r.id and o.timed]
        if not others or not timed(r.samples.get("step")):
            return None
        figure = _figure(kind)
        other = sorted(others, key=lambda o: figure(o) or 0.0)[(len(others) - 1) // 2]
        found = self.store.records([other.id])
        if not found:
            return None
        return history.against(r, found[0], kind, [_light(o) for o in others])  # type: ignore[misc]

    def synthetic(self, r: Result) -> Against | None:
        if history._on_synthetic(r) or not r.samples.get("step"):
            return None
        work = history._work(r)
        found = [o for first, group in self._synthetic_works() if first == work for o in group]
        return self.typical(r, found, "synthetic data")

    def _synthetic_works(self) -> list[tuple[tuple, list[Summary]]]:
        """(work, runs) of each configuration on synthetic data, its first run read once to tell."""
        if self._works is None:
            firsts = self.store.records([group[0].id for group in self.groups.values()], lean=True)
            by_id = {r.id: r for r in firsts}
            self._works = [(history._work(first), group) for group in self.groups.values()
                           if (first := by_id.get(group[0].id)) is not None and history._on_synthetic(first)]
        return self._works


SURVEYS_KEPT = 3  # of a machine's system records of one kind, where it has more than SURVEYS_WHOLE in all
SURVEYS_WHOLE = 200


def _newest_surveys(rows: list[Summary]) -> list[str]:
    """The ids of the system records the doctor reads: all of them, or from a large store the newest few ok
    ones of each machine and kind (the doctor takes the newest that has the ceiling it needs)."""
    if len(rows) <= SURVEYS_WHOLE:
        return [s.id for s in rows]
    kept: dict[tuple, list[str]] = {}
    for s in rows:  # oldest first
        if s.status == "ok":
            kept.setdefault((s.host, s.device, s.spec), []).append(s.id)
    chosen = {key for ids in kept.values() for key in ids[-SURVEYS_KEPT:]}
    return [s.id for s in rows if s.id in chosen]


def for_doctor(store: Store, workload: str | None,
               newest: int | None = None) -> tuple[list[Result], list[Result], Comparisons, int] | None:
    """(the runs the doctor judges by default, the system records, the comparisons, how many runs were
    chosen), from the store's summaries; `newest`: only the newest so many of the chosen are read and
    judged (in the order the doctor shows them). None where the store has no summaries (an archive made
    before they were kept): read it whole."""
    rows = store.summaries()
    if rows is None:
        return None
    if workload:
        rows = [s for s in rows if s.workload in (workload, SYSTEM_WORKLOAD)]
    groups = configurations(rows, Keys())
    chosen = [s for group in groups.values() for s in to_judge(group)]
    if newest is not None and len(chosen) > newest:
        kept = {s.id for s in sorted(chosen, key=lambda s: s.started)[-newest:]}
        chosen_ids = [s.id for s in chosen if s.id in kept]
    else:
        chosen_ids = [s.id for s in chosen]
    judged = set(chosen_ids)
    machines = {(s.host, s.device) for s in chosen if s.id in judged}
    # the system records of the judged runs' machines: the only ones the doctor looks up (records.py)
    surveys = store.records(_newest_surveys([s for s in rows if s.workload == SYSTEM_WORKLOAD
                                             and (s.host, s.device) in machines]))
    return store.records(chosen_ids), surveys, Comparisons(store, groups), len(chosen)


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
