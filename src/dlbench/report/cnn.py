"""Seed 004's tables: one per model and input, fastest first,

`|GPU|cuDNN|Forward (ms)|Backward (ms)|Total (ms)|Median step (ms)|`

Forward and Backward are the medians of each phase and Total is their sum, as in the seed
(its Total is Forward + Backward in every row), so the shown figures add up. The median of
the per-step totals is not that sum (the two phases' slow steps need not coincide): it has
its own column. With `published`, the seed's rows for the model (16 x 3 x 224 x 224) join the
table, labelled with their source, with the seed's out-of-memory runs.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from dlbench.report import rows as rowinfo
from dlbench.report.parts import host_bound
from dlbench.report.tables import Table, model_title
from dlbench.figures import DASH, add, ms, percent
from dlbench.results.measurement import Measurement
from dlbench.results.record import Result
from dlbench.results.titles import TITLES

SELECTS = ("fwdbwd",)  # the workload of the publication's per-model tables
SOURCE = "GPU in the Cloud (cnn-benchmarks)"  # the publication, as the Source column names it
HEADER = ["GPU", "cuDNN", "Forward (ms)", "Backward (ms)", "Total (ms)", "Median step (ms)"]
NOTE = ("Forward, Backward: medians over the measured steps; Total = Forward + Backward; "
        "Median step: the median of the per-step forward + backward times.")
HOST_BOUND = " (host-bound)"


def _row_key(r: Result) -> tuple:
    return rowinfo.system(r), rowinfo.cudnn(r) or "None", r.tag or ""


def tables(results: list[Result], published: bool = False) -> list[Table]:
    """Latest result per (model, input, system); OOM rows say so; sorted by total time. Models
    come in the order of the built-in ones (cnn-benchmarks'), others after them by name."""
    groups: "OrderedDict[tuple, dict[tuple, Result]]" = OrderedDict()
    order = {name: i for i, name in enumerate(TITLES)}
    chosen = [r for r in results if r.workload in SELECTS and r.status in ("ok", "oom")]
    chosen.sort(key=lambda r: (order.get(r.model, len(order)), r.model, r.started))
    for r in chosen:
        shape = r.measured.data.input_shape or [r.setup.batch, *(r.setup.input_shape or [])]
        groups.setdefault((r.model, tuple(shape)), {})[_row_key(r)] = r
    shapes: dict[str, int] = {}
    for model, _ in groups:
        shapes[model] = shapes.get(model, 0) + 1
    return [_table(model, shape, by_system, published, shapes[model] > 1) for (model, shape), by_system in groups.items()]


@dataclass
class _Entry:
    order: tuple
    cells: list[object]
    tag: str = ""
    source: str = "dlbench"
    check: str | None = None


def _table(model: str, shape: tuple, by_system: dict[tuple, Result], published: bool, by_input: bool) -> Table:
    entries = []
    host_notes = []
    for (label, cudnn, tag), r in by_system.items():
        cells = _cells(r)
        order = _order(r.status != "ok", cells[2])
        waited = host_bound(r) if r.status == "ok" else None
        if waited is not None:
            cells[2] += HOST_BOUND
            host_notes.append(_host_note(label, waited.idle / waited.step, waited.idle_from))
        entries.append(_Entry(order, [label, rowinfo.cudnn(r) or DASH, *cells], tag))
    notes = [f"(input {' x '.join(map(str, shape))})", NOTE, *host_notes]
    found = _published(model, shape) if published else []
    if found:
        entries += found
        notes.append("Rows from GPU in the Cloud (cnn-benchmarks) are its published figures (Torch, CUDA 8.0 RC); its Total is the sum "
                     "before rounding, so it can differ from Forward + Backward in the last digit.")
    entries.sort(key=lambda e: e.order)
    header, align, body = list(HEADER), "llrrrr", [e.cells for e in entries]
    tags = [e.tag for e in entries]
    mine = [e.tag for e in entries if e.source == "dlbench"]
    if rowinfo.tag_column(mine):
        header, align, body = header + ["Tag"], align + "l", [b + [t or None] for b, t in zip(body, tags)]
    notes += rowinfo.tag_note(mine)
    if published:
        header, align, body = header + [rowinfo.SOURCE], align + "l", [b + [e.source] for b, e in zip(body, entries)]
    checks = rowinfo.check_notes([(f"{e.cells[0]} (cuDNN {e.cells[1]})", e.check) for e in found])
    notes += checks or (["Published arithmetic checked: Total = Forward + Backward in every published row."] if found else [])
    if any(str(b[0]).startswith("CPU") for b in body):  # the publication's GPU column holds its CPU rows too
        header = ["GPU or CPU", *header[1:]]
    if not found and not any(rowinfo.on_gpu(r) for r in by_system.values()):
        header, align, body = _without(header, align, body, "cuDNN")
    title = model_title(next(iter(by_system.values())))
    about = (f"How long one batch of {shape[0]} takes forward and backward on each GPU (and CPU), the measure "
             "of speed per model that GPU in the Cloud (cnn-benchmarks) uses; fastest first.")
    # Two tables of one model (two inputs) would share the publication's heading: the input tells them apart.
    return Table(f"{title} ({notes[0][1:-1]})" if by_input else title, header, align, body, notes=[about, *notes])


def _host_note(label: str, share: float, source: str) -> str:
    how = "by the profile" if source == "profile" else "by NVML's busy share"
    return (f"(host-bound), {label}: the GPU waited for the host {percent(share)} of each step ({how}), so these "
            "times are the host's launching of the operators more than the GPU's work; `dlbench doctor` says more.")


def _without(header: list[str], align: str, body: list[list[object]], column: str):
    """The table without `column`: cuDNN means nothing where no row ran on a GPU."""
    i = header.index(column)
    return header[:i] + header[i + 1:], align[:i] + align[i + 1:], [row[:i] + row[i + 1:] for row in body]


def _order(failed: bool, total: object) -> tuple:
    try:
        return failed, float(str(total).rstrip(" †"))
    except ValueError:
        return True, float("inf")


def _cells(r: Result) -> list[str]:
    if r.status == "oom":
        return ["OOM"] * 4
    m = r.measured
    forward, backward = ms(m.phase_ms("forward")), ms(m.phase_ms("backward"))
    return [forward, backward, add(forward, backward), ms(_median_step_ms(m))]


def _median_step_ms(m: Measurement) -> float | None:
    total = m.stats.get("total")  # fwdbwd's step: forward + backward
    if total is not None and total.median is not None:
        return total.median * 1e3
    return m.window.total_ms


def _published(model: str, shape: tuple) -> list[_Entry]:
    from dlbench.report import published

    block = published.data()["seed004"]
    if list(shape) != [block["batch"], *block["input_shape"]]:
        return []
    out = []
    for row in published.seed004(model):
        c = row.cells
        cells = [c["gpu"], c["cudnn"], c["forward_ms"], c["backward_ms"], row.mark("Total (ms)", c["total_ms"]), DASH]
        out.append(_Entry(_order(False, c["total_ms"]), cells, source=SOURCE, check=row.check_text()))
    for name in published.seed004_oom(model):
        gpu, _, cudnn = name.partition(" (cuDNN ")
        out.append(_Entry((True, float("inf")), [gpu, cudnn.rstrip(")") or DASH, "OOM", "OOM", "OOM", DASH],
                          source=SOURCE))
    return out
