"""BenchmarkJade's phase table (train, inference, smooth inference), one pair per model:

`|Run|Data Loading Time [ms]|Data Processing Time [ms]|Forward Time [ms]|Backward Time [ms]|
Optimizer Time [ms]|Other Time [ms]|Total [ms]|Median Batch [ms]|` and each run's setup
(`|Run|Cluster|Dataset|Benchmark|Device Name|# Devices|Num Workers|`) in a table of its own,
joined by the Run label: one table of both was 16 columns wide.

The publication prints per-batch averages over an epoch, so the phases here are means too, in
milliseconds like every time per batch in the report (its seconds are converted digit for
digit): means add up, so the phases and `Other` (the wall time per batch that falls in no
phase, never below zero) add up to Total, the wall time per batch, and a data stall shows where
it happens. A median of each phase would hide the stalls, which are what the table is for; the
median whole batch stands apart. Where a record holds no per-phase means (written before they
were stored), its medians stand in and its Total says `(medians)`.
"""

from __future__ import annotations

from decimal import Decimal

from dlbench.report import rows as rowinfo
from dlbench.report.tables import model_title
from dlbench.figures import DASH, add, fixed
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result

BENCHMARK = {"infer": "Inference", "train": "Train", "smooth": "Smooth Inference"}
PHASES = ("Data Loading Time [ms]", "Data Processing Time [ms]", "Forward Time [ms]", "Backward Time [ms]",
          "Optimizer Time [ms]", "Other Time [ms]", "Total [ms]", "Median Batch [ms]")
RUN = "Run"  # the label that joins a row of the phase table to its row of the setup table
SETUP = ["Cluster", "Dataset", "Benchmark", "Device Name", "# Devices", "Num Workers"]
SOURCE = "BenchmarkJade"
ABOUT = ("Where each batch's time goes (data loading, forward, backward, optimizer), to see whether the data or "
         "the model holds a run back; milliseconds per batch, the runs' setup in the table after it.")
NOTE = ("Means over the measured batches (the publication's figures are per-batch averages over an epoch). Data "
        "Loading includes the copy to the device; Other Time: wall time per batch in no phase; Total: the wall "
        "time per batch (measured window / batches), the sum of the columns before it, the figure the throughput "
        "is made of (images per batch on all devices / Total); Median Batch: the median whole batch of one "
        "process, below Total where some batches stall.")
SEVERAL = ("On several devices the phases are one process's means and the window runs from the first process's "
           "first measured batch to the last one's last: Other Time holds the processes' offset too.")
CLAMPED = " (clamped)"
CLAMP_NOTE = ("Other Time 0 (clamped): the phases, timed on the device, overlap the host's clock by a few "
              "microseconds, so Total less the phases came out just below zero; shown as 0, the row adds up "
              "to within that.")
SETUP_ABOUT = "The setup of each run of the phase table above: where it ran, on what data, with how many loaders."
PUBLISHED_NOTE = ("Rows from BenchmarkJade are its published seconds as printed, converted to milliseconds digit for "
                  "digit (ResNet-50, fp32; batch size not published); their Total is the sum of their phases, as "
                  "the publication prints no wall time.")


def cluster(r: Result) -> str | None:
    """The cluster the user named (`DLBENCH_CLUSTER`, or SLURM's cluster name); a host name is no cluster."""
    return r.machine.cluster or None


def workers(r: Result) -> object:
    """Data loader processes as a number: the resolved count the run stored, else the spec's;
    0 where the data is made on the device (synthetic: no loader)."""
    options = r.setup.options
    if str(options.get("data", "synthetic")) == "synthetic":
        return 0
    found = r.measured.data.workers
    found = options.get("workers") if found is None else found
    return int(found) if isinstance(found, (int, float)) else DASH


def _mean_s(m: Measurement, phase: str) -> float | None:
    stats = m.stats.get(phase)
    if stats is not None and stats.mean is not None:
        return float(stats.mean)
    median = m.phase_ms(phase)
    return None if median is None else median / 1e3


def has_means(m: Measurement) -> bool:
    return bool(m.step and m.step.mean)


def wall_s(m: Measurement) -> float | None:
    """The wall time per batch: the measured window over its batches, the window the throughput
    counts images in. On several processes it runs from the first one's first measured batch to the
    last one's last, so it holds their offset, which one process's mean step does not (2 GPUs:
    53.3 ms a batch each against 65.5 ms of window, the 1,955 img/s the throughput says)."""
    if m.window.window_s and m.window.steps:
        return m.window.window_s / m.window.steps
    if has_means(m):
        return float(m.step.mean)
    return None if m.window.step_ms is None else m.window.step_ms / 1e3


def _ms(seconds: float | None) -> str:
    return fixed(None if seconds is None else seconds * 1e3, 2)


def phase_cells(r: Result) -> list[str]:
    """The eight figures after the row's head; OOM where the run ran out of memory."""
    if r.status == "oom":
        return ["OOM"] * len(PHASES)
    m = r.measured
    loading = None
    if _mean_s(m, "data") is not None:
        loading = _mean_s(m, "data") + (_mean_s(m, "h2d") or 0.0)
    shown = [_ms(loading), _ms(_mean_s(m, "noise")), _ms(_mean_s(m, "forward")), _ms(_mean_s(m, "backward")),
             _ms(_mean_s(m, "optimizer"))]
    parts = [p for p in shown if p != DASH]
    total = _ms(wall_s(m))
    if not has_means(m):  # medians do not add up to the wall time: no Other, and the row says so
        total = (add(*parts) if total == DASH and parts else total) + " (medians)"
        return shown + [DASH, total, _ms(_median_s(m))]
    return shown + [rest(total, parts), total, _ms(_median_s(m))]


def _median_s(m: Measurement) -> float | None:
    if m.step is not None and m.step.median is not None:
        return float(m.step.median)
    return None if m.window.step_ms is None else m.window.step_ms / 1e3


def rest(total: str, parts: list[str]) -> str:
    """Total less the shown parts, so that the parts and this add up to the shown Total; never
    below zero: a few microseconds of overlap between device and host clocks show as 0 (clamped)."""
    left = Decimal(total) - sum((Decimal(p) for p in parts), Decimal(0))
    if left < 0:
        return "0" + CLAMPED
    return format(left.normalize(), "f") if left == 0 else format(left, "f")


def row_head(r: Result) -> list[object]:
    return [cluster(r), rowinfo.data_source(r), BENCHMARK[r.workload], rowinfo.system(r, gpus=False, precision=False),
            rowinfo.processes(r), workers(r)]


def published_row(row) -> list[object]:
    """A published row as printed, in milliseconds digit for digit: no optimizer or other time,
    Total the sum of its phases."""
    from dlbench.report.published import seconds_to_ms

    c = row.cells
    phases = [seconds_to_ms(c[k]) for k in ("data_s", "processing_s", "forward_s", "backward_s")]
    shown = [p for p in phases if p is not None]
    forward = row.mark("Forward Time", phases[2])
    return [c["cluster"], c["dataset"], c["benchmark"], c["device"], int(c["devices"]), int(c["workers"]),
            phases[0], phases[1], forward, phases[3], None, None, add(*shown), None]


def title(r: Result) -> str:
    """Not the model alone: the forward/backward table of the same model has that heading."""
    return f"{model_title(r)}: time per batch in each phase"


def run_label(head: list[object], precision: str | None = None) -> str:
    """'TN V100 x1, ImageNet, Train': the row's cluster, device, count, data and benchmark in one
    short label that both tables of a run carry (its precision where rows differ in it)."""
    cluster, data, benchmark, device, devices = head[:5]
    where = " ".join(str(p) for p in (cluster, device) if p not in (None, DASH, ""))
    return f"{where} x{devices}, {data}, {benchmark}" + (f", {precision}" if precision else "")


__all__ = ["ABOUT", "BENCHMARK", "CLAMPED", "CLAMP_NOTE", "NOTE", "PHASES", "PUBLISHED_NOTE", "RUN", "SETUP", "SEVERAL",
           "SETUP_ABOUT", "SOURCE", "cluster", "has_means", "phase_cells", "published_row", "row_head", "run_label",
           "title", "wall_s", "workers"]
