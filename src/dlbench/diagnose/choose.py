"""Which records the doctor reads from a large store, chosen from its summaries (results/summaries.py,
as report/choose.py chooses the report's): the runs it judges by default, each other run read whole
only where it is the median run a verdict names, the system records of the judged runs' machines.
The choices are those diagnose/history.py makes from every record (to_judge, typical), figured from
each run's headline figures: a test holds them equal on small stores.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Sequence

from dlbench.diagnose import history
from dlbench.diagnose.history import Against
from dlbench.report.choose import Figure, Keys, configurations, speed, step_rate
from dlbench.report.compare import timed
from dlbench.results import spread as spreads
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.results.summaries import Summary
from dlbench.system.records import SYSTEM_WORKLOAD


def _figure(kind: str) -> Figure:
    return step_rate if kind == "one GPU" else speed


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
    """judge.diagnose's `compared`: a run against its machine's history, one GPU and synthetic data
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
