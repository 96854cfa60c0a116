"""The GPU table of GPU in the Cloud (cnn-benchmarks) for the GPUs in the results: datasheet
figures beside measured ceilings.

`|GPU|Cloud|Instance Name|Memory|Architecture|CUDA Cores|FP32 TFLOPS|Release Date|`, fastest
first, plus one column per ceiling that `dlbench system` measured on a machine with that GPU.
Cloud and Instance Name appear where a row has them: the publication's, or a cloud the user
named for the machine (DLBENCH_CLOUD, DLBENCH_INSTANCE).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dlbench.report.tables import Table
from dlbench.figures import fixed
from dlbench.results.measurement import System
from dlbench.results.record import Result
from dlbench.system.records import is_survey

HEADER = ["GPU", "Memory", "Architecture", "CUDA Cores", "FP32 TFLOPS", "Release Date"]
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
CLOUD = ["Cloud", "Instance Name"]
SOURCE = "GPU in the Cloud (cnn-benchmarks)"


def _datasheet():
    try:
        from dlbench.system import datasheet
    except ImportError:  # an install without the datasheet module: no GPU table
        return None
    return datasheet


def gpu_names(results: list[Result]) -> list[str]:
    names: dict[str, None] = {}
    for r in results:
        for name in r.machine.gpu_names:
            if name:
                names[name] = None
    return list(names)


def release(text: str | None) -> str | None:
    """'2016-10' -> 'Oct 2016', as the seed writes it."""
    try:
        return dt.datetime.strptime(str(text), "%Y-%m").strftime("%b %Y")
    except ValueError:
        return text


def _number(value: float | None, digits: int = 2) -> str | None:
    return None if value is None else fixed(value, digits)


def ceilings(r: Result) -> dict[str, float]:
    """Measured ceilings of a `dlbench system` record, named by column; {} for other results."""
    if r.workload != "system" or r.status != "ok":
        return {}
    system = r.measured.system
    found: dict[str, float] = {}
    for p in PRECISIONS:
        value = _value(system, f"matmul_{p}_tflops")
        if value is not None:
            found[f"Measured {p.upper()} TFLOPS"] = value
    copy = _value(system, "copy_gbs")
    if copy is not None:
        found["Measured copy GB/s"] = copy
    return found


def _value(system: System, name: str) -> float | None:
    # System records hold each ceiling flat, and with its method under `ceilings`.
    value: Any = getattr(system, name)
    if value is None and (ceiling := system.ceiling(name)) is not None:
        value = ceiling.value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def measured_by_gpu(results: list[Result]) -> dict[str, dict[str, float]]:
    """Latest measured ceilings for each GPU name."""
    out: dict[str, dict[str, float]] = {}
    for r in sorted(results, key=lambda r: (is_survey(r), r.started)):  # a `dlbench system` survey wins
        found = ceilings(r)
        if found and str(r.measured.run.device or "").startswith("cuda"):  # CPU ceilings are no GPU's
            out.setdefault(r.system_label, {}).update(found)
    return out


def tables(results: list[Result], published: bool = False) -> list[Table]:
    """The publication's layout, its Cloud and Instance Name columns where a row has one (a
    cloud the user named: DLBENCH_CLOUD, DLBENCH_INSTANCE), and with `published` its own rows."""
    datasheet = _datasheet()
    names = gpu_names(results)
    if datasheet is None or not names:
        return []
    measured = measured_by_gpu(results)
    extra = sorted({c for m in measured.values() for c in m}, key=_column_order)
    rows = []
    for name in names:
        spec = datasheet.lookup(name)
        cells: list[object] = [name, *_cloud(results, name)]
        if spec is None:
            cells += [None] * (len(HEADER) - 1)
        else:
            cells += [f"{spec.memory_gb:g}GB {spec.memory_type}", spec.architecture, spec.cuda_cores,
                      _number(spec.fp32_tflops), release(spec.release)]
        cells += [_number(measured.get(name, {}).get(c), 1) for c in extra]
        rows.append((spec.fp32_tflops if spec else -1.0, cells + ["dlbench"]))
    rows.sort(key=lambda item: -item[0])
    body = [cells for _, cells in rows]
    notes = [] if not extra else ["Datasheet figures; Measured columns come from `dlbench system` on a machine with that GPU."]
    if published:
        body += [row[:1] + row[1:3] + row[3:] + [None] * len(extra) + [SOURCE] for row in _published_rows()]
        notes.append(f"Rows from {SOURCE} are its own table as printed (its FP32 TFLOPS and release dates, "
                     "links left out).")
    header, align = [HEADER[0], *CLOUD, *HEADER[1:], *extra, "Source"], "lll" + "llrrl" + "r" * len(extra) + "l"
    table = Table("GPUs", header, align, body if published else [row[:-1] for row in body], notes=notes)
    if not published:
        table.header, table.align = header[:-1], align[:-1]
    if not any(row[i] not in (None, "") for row in table.rows for i in (1, 2)):  # no cloud named anywhere
        table.header, table.align = table.header[:1] + table.header[3:], table.align[:1] + table.align[3:]
        table.rows = [row[:1] + row[3:] for row in table.rows]
    return _split_measured(table)


def _split_measured(table: Table) -> list[Table]:
    """The datasheet in one table, the ceilings measured on the GPUs that ran here in a second:
    together they were 15 columns wide."""
    measured = [i for i, h in enumerate(table.header) if h.startswith("Measured ")]
    table.notes = ["What each GPU is on paper (the publication's GPU table, and the GPUs measured here).",
                   *(n for n in table.notes if not n.startswith("Datasheet figures"))]
    if not measured:
        return [table]
    rows = [[row[0], *(row[i] for i in measured)] for row in table.rows if any(row[i] is not None for i in measured)]
    ceilings = Table("GPUs: measured ceilings", ["GPU", *(table.header[i].replace("Measured ", "") for i in measured)],
                     "l" + "r" * len(measured), rows,
                     notes=["What each GPU measured here reaches: the fastest matrix multiply per precision "
                            "(TFLOP/s) and device memory copy (GB/s), from `dlbench system`; the datasheet's "
                            "figures are in the table above."])
    keep = [i for i in range(len(table.header)) if i not in measured]
    table.header, table.align = [table.header[i] for i in keep], "".join(table.align[i] for i in keep)
    table.rows = [[row[i] for i in keep] for row in table.rows]
    return [table, ceilings]


def _cloud(results: list[Result], name: str) -> list[str | None]:
    """Cloud and instance name the user gave for a machine with this GPU (the latest such result)."""
    found = [r.machine for r in sorted(results, key=lambda r: r.started) if name in r.machine.gpu_names]
    return [found[-1].cloud, found[-1].instance] if found else [None, None]


def _published_rows() -> list[list[object]]:
    from dlbench.report import published

    rows = published.cells(published.data()["seed004"]["gpu_table"])
    return [[gpu, cloud, instance, memory, arch, int(cores), tflops, date]
            for gpu, cloud, instance, memory, arch, cores, tflops, date in rows]


def _column_order(column: str) -> tuple[int, str]:
    for i, p in enumerate(PRECISIONS):
        if p.upper() in column:
            return i, column
    return len(PRECISIONS), column
