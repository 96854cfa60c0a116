"""Where each profiled run's step goes (`--profile`): one row per run, its share per class and
whether the classes add up to the measured step. The doctor says what would help; this table
puts the runs side by side (eager beside CUDA graphs, PyTorch's kernels beside fused ones)."""

from __future__ import annotations

from dlbench.figures import ms, percent
from dlbench.report import profile
from dlbench.report.plots import latest_ok, profile_label
from dlbench.report.tables import Table
from dlbench.results.record import Result

TITLE = "Where the step's time goes"
NOTES = ["Which kinds of GPU work fill each profiled step, to see what an optimisation could shorten.",
         "(`--profile`: share of the profiled step per class of kernels, GPU idle included; 'adds up' compares "
         "the profiled step with the mean measured one, within 5%)"]


def tables(results: list[Result]) -> list[Table]:
    runs = [r for r in latest_ok(results) if profile.profile_of(r)]
    if not runs:
        return []
    present = [c for c in profile.CLASS_LABELS if any(profile.profile_of(r).share(c) is not None for r in runs)]
    header = ["Run", "System", "Step (ms)", "Adds up", *(profile.CLASS_LABELS[c] for c in present)]
    rows = [_row(r, runs, present) for r in runs]
    return [Table(TITLE, header, "llrl" + "r" * len(present), rows, notes=list(NOTES))]


def _row(r: Result, runs: list[Result], present: list[str]) -> list[object]:
    p = profile.profile_of(r)
    adds_up = ("yes" if p.adds_up else "no") + (f" ({percent(p.coverage)})" if p.coverage is not None else "")
    shares = [p.share(c) for c in present]
    return [f"{r.workload} {profile_label(r, runs)}", r.system_label, ms((p.step_s or 0.0) * 1e3), adds_up,
            *(None if s is None else percent(s) for s in shares)]
