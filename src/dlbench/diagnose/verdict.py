"""A diagnosis: a run's expectation (diagnose/references.py), its comparisons with the machine's own
runs (diagnose/history.py), the causes measured against the comparison that lost (diagnose/causes.py),
and the verdict all of them give.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlbench.diagnose.check import Cause
from dlbench.diagnose.history import Against
from dlbench.diagnose.inputs import InputCost
from dlbench.diagnose.references import Expectation
from dlbench.results.record import Result

AS_EXPECTED = 0.8  # at or above this share of the expected figure a result is fine
SCALING_OK = 0.9  # weak-scaling efficiency below this is a loss to explain


@dataclass(kw_only=True)
class Diagnosis(Expectation):
    result: Result
    causes: list[Cause] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    utilisation: str | None = None  # "16% of the measured bf16 matmul ceiling (703 TFLOP/s)"
    history: Against | None = None  # against the median other run of this configuration here
    one_gpu: Against | None = None  # a multi-GPU run against the same per-GPU work on one GPU
    synthetic: Against | None = None  # a run on real images against the same work on synthetic data
    input_cost: InputCost | None = None  # what reading the images costs, against `synthetic`
    baseline: Against | None = None  # the comparison the causes are measured against
    breakdown: list[tuple[str, str]] = field(default_factory=list)  # the profile's classes
    machine: list[Cause] = field(default_factory=list)  # conditions of the machine, with no share measured


def baseline(d: Diagnosis) -> Against | None:
    """What the causes are measured against: a slower-than-history run's median other run, else a
    multi-GPU run's one-GPU run where it scales poorly."""
    if d.history is not None and d.history.behind:
        return d.history
    if d.one_gpu is not None and d.one_gpu.ratio < SCALING_OK:
        return d.one_gpu
    return None


def verdict(d: Diagnosis) -> str:
    """One word for what the diagnosis found: slower, poor scaling, below reference, as expected,
    faster, or not judged."""
    if d.history is not None and d.history.slower:
        return "slower than this machine's own runs"
    if d.one_gpu is not None and d.one_gpu.ratio < SCALING_OK:
        return "scales poorly"
    if d.ratio is not None and d.ratio < AS_EXPECTED:
        return "below the reference"
    if d.causes:
        return f"limited by {d.causes[0].name}"
    if d.history is not None and d.history.between_runs:
        return "within this machine's run-to-run spread" if d.history.place == 0 else "faster than this machine's own runs"
    # "as expected" only against something: a first run with no comparable reference is not judged,
    # and one other run of its configuration, whose between-run noise is unknown, judges nothing
    compared = any(c is not None for c in (d.ratio, d.one_gpu, d.synthetic))
    return "as expected" if compared else "not judged"
