"""A machine's own history: the results of one configuration on one machine, and how one of them
compares with the best the machine has done, or, on several GPUs, with the same run on one GPU.

The doctor judges a run here first, before any published figure: the same machine with the same
settings is the fairest expectation there is. Ratios are of median step times with a bootstrap
interval over the per-step samples, as `dlbench compare` gives them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from dlbench.report.compare import benchmark_key, bootstrap_ratio
from dlbench.results.measurement import Measurement, Run
from dlbench.results.record import Result
from dlbench.system.records import is_system_record, machine_key


SAME = 0.03  # runs within this of each other are alike, however tight the interval
# The options of where a run's images come from (data.DataOptions' fields, which a test holds equal):
# two runs that differ only in these do the same work on other data.
INPUT_OPTIONS = frozenset({"data", "workers", "decode", "cpu_share", "prefetch", "max_corrupt", "dummy_images",
                           "epochs"})


@dataclass(frozen=True)
class Against:
    """`result` runs at `ratio` times the speed of `other` (below 1: slower), with its interval."""
    other: Result
    ratio: float
    low: float | None = None
    high: float | None = None
    kind: str = "history"  # 'history': the same configuration; 'one GPU': the same per-GPU work on one

    @property
    def beyond_noise(self) -> bool:
        return self.low is not None and self.high is not None and not self.low <= 1.0 <= self.high

    @property
    def differs(self) -> bool:
        """Beyond noise and by more than a few percent: a difference worth a reason."""
        return self.beyond_noise and abs(1.0 - self.ratio) > SAME

    @property
    def slower(self) -> bool:
        return self.differs and self.ratio < 1.0


def configuration(r: Result) -> tuple:
    """The machine and the benchmark settings (run length, seed and device index left out)."""
    return (*machine_key(r), benchmark_key(r))


def groups(results: Sequence[Result]) -> dict[tuple, list[Result]]:
    """The ok benchmark results of each configuration, oldest first."""
    found: dict[tuple, list[Result]] = {}
    for r in sorted(results, key=lambda r: r.started):
        if r.status == "ok" and not is_system_record(r):
            found.setdefault(configuration(r), []).append(r)
    return found


def mean_step(r: Result) -> float:
    """The mean step, stalls included: the measured time over the steps, as the run line reads it."""
    steps = r.samples["step"]
    return sum(steps) / len(steps)


def against(r: Result, other: Result, kind: str = "history") -> Against:
    """`r`'s speed as a share of `other`'s: other's median step over r's. On one GPU against
    several the per-GPU work is equal (the batch is per process), so this is the weak-scaling
    efficiency."""
    speed, low, high = bootstrap_ratio(r.samples["step"], other.samples["step"])
    return Against(other, speed, low, high, kind)


def best_other(r: Result, group: Sequence[Result]) -> Against | None:
    """`r` against the fastest other run of its configuration on its machine."""
    others = [o for o in group if o.id != r.id and o.samples.get("step")]
    return against(r, fastest(others)) if others and r.samples.get("step") else None


def fastest(group: Sequence[Result]) -> Result:
    return min(group, key=lambda o: statistics.median(o.samples["step"]))


def one_gpu(r: Result, results_by_configuration: dict[tuple, list[Result]]) -> Against | None:
    """A multi-GPU run against the fastest run of the same configuration on one GPU of its machine
    (weak scaling: the batch is per process, so the ideal step is the one-GPU step)."""
    gpus = r.setup.gpus
    if gpus <= 1:
        return None
    found = [o for o in results_by_configuration.get(configuration(_like(r, gpus=1))) or [] if o.samples.get("step")]
    return against(r, fastest(found), "one GPU") if found and r.samples.get("step") else None


def synthetic(r: Result, results_by_configuration: dict[tuple, list[Result]]) -> Against | None:
    """A run on images against the fastest run of the same work on synthetic data on its machine:
    what reading the images costs, the data wait and what the input takes of the GPU."""
    if _on_synthetic(r) or not r.samples.get("step"):
        return None
    work = _work(r)
    # a configuration's runs share their spec's work and data: each group is looked at once
    found = [o for group in results_by_configuration.values() if _on_synthetic(group[0]) and _work(group[0]) == work
             for o in group if o.samples.get("step")]
    return against(r, fastest(found), "synthetic data") if found else None


def _on_synthetic(r: Result) -> bool:
    return r.setup.options.get("data", "synthetic") == "synthetic"


def _work(r: Result) -> tuple:
    """`r`'s configuration without the options of where its images come from."""
    options = {k: v for k, v in r.setup.options.items() if k not in INPUT_OPTIONS}
    return configuration(_like(r, options=options))


def _like(r: Result, **spec: Any) -> Result:
    """A result of `r`'s machine and device with `spec`'s fields changed: its configuration is a key to look up."""
    return Result(spec={**r.spec, **spec}, system=r.system,
                  metrics=Measurement(run=Run(device=r.measured.device or "")).to_metrics())


def to_judge(group: Sequence[Result]) -> list[Result]:
    """The newest run of a configuration and every older one that differs from it beyond noise
    (and by more than a few percent)."""
    newest = group[-1]
    if not newest.samples.get("step"):
        return [newest]
    return [r for r in group[:-1] if r.samples.get("step") and against(r, newest).differs] + [newest]
