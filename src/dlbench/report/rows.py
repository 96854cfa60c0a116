"""What every section says about a result's row the same way: the system it ran on (a GPU, or
a CPU in CPU terms), how it differs from its neighbours (GPUs, precision, layout, level), its
tag in a column of its own, and CUDA/cuDNN only where a GPU ran it."""

from __future__ import annotations

import re
from typing import Callable, Sequence

from dlbench.results.record import Result
from dlbench.shorten import shorten
from dlbench.workloads import declared

SOURCE = "Source"


def on_gpu(r: Result) -> bool:
    return r.device.startswith("cuda")


def processes(r: Result) -> int:
    return int(r.measured.run.processes or r.setup.gpus)


def count(r: Result) -> str:
    """'x4' on GPUs; on a CPU several processes share it, so '4 processes'."""
    n = processes(r)
    if n == 1:
        return ""
    return f"x{n}" if on_gpu(r) else f"{n} processes"


def variant(r: Result, *, precision: bool = True) -> list[str]:
    """What sets this row apart from the same model on the same machine."""
    setup = r.setup
    parts = []
    if precision and setup.precision != "fp32":
        parts.append(setup.precision)
    if setup.channels_last:
        parts.append("channels-last")
    if r.optimize != "eager":
        parts.append(r.optimize)
    return parts


def system(r: Result, *, gpus: bool = True, precision: bool = True) -> str:
    """'NVIDIA H200 (x2, bf16)', 'CPU: Xeon (16 cores)'."""
    extras = ([count(r)] if gpus and count(r) else []) + variant(r, precision=precision)
    return r.system_label + (f" ({', '.join(extras)})" if extras else "")


def cuda(r: Result) -> str | None:
    return r.machine.cuda if on_gpu(r) else None


def cudnn(r: Result) -> str | None:
    return r.machine.cudnn if on_gpu(r) else None


def torch_version(r: Result) -> str | None:
    version = r.machine.torch
    return version.split("+")[0] if version else None


def tag(r: Result) -> str | None:
    return r.tag or None


def with_optional(header: list[str], align: str, rows: list[list[object]], name: str, values: Sequence[object],
                  at: int | None = None) -> tuple[list[str], str, list[list[object]]]:
    """Add column `name` (values per row) only if some row has a value; at index `at` or last."""
    if not any(v not in (None, "", "-") for v in values):
        return header, align, rows
    position = len(header) if at is None else at
    header = header[:position] + [name] + header[position:]
    align = align[:position] + "l" + align[position:]
    rows = [row[:position] + [value] + row[position:] for row, value in zip(rows, values)]
    return header, align, rows


def differing(results: Sequence[Result], key: Callable[[Result], object]) -> bool:
    return len({str(key(r)) for r in results}) > 1


def data_source(r: Result) -> str:
    """Where the inputs came from: synthetic, dummy, a folder or a volume (its file name)."""
    from pathlib import Path

    options = r.setup.options
    if declared(r.workload).takes("input"):  # blockwise prediction reads --input, else a volume it generates
        return Path(str(options["input"]).split(":")[0].rstrip("/")).name if options.get("input") else "Generated volume"
    stored = str(options.get("data") or r.measured.data.source or "synthetic")
    folder = stored.startswith("folder:")  # the path the run read, resolved below, has no prefix
    source = _resolved(stored, r)
    if _VARIABLE.search(source):  # a record from before runs stored the path they read
        named = source.removeprefix("folder:")
        return f"JPEG folder ({named}, path not recorded)" if folder else f"{named} (path not recorded)"
    for prefix in ("folder:", "volume:"):
        if source.startswith(prefix):
            source = source[len(prefix):]
            break
    if folder or "/" in source or source.endswith((".h5", ".hdf5", ".zarr", ".n5")):
        name = Path(source.split(":")[0].rstrip("/")).name or source
        gpu = ", GPU decode" if options.get("decode") in ("gpu", "hardware") else ""
        # A folder of class folders of JPEG files (data/images.py reads nothing else): real images, decoded per batch.
        return f"JPEG folder ({name}{gpu})" if folder else name + (" (GPU decode)" if gpu else "")
    return source.capitalize() if source in ("synthetic", "dummy") else plain_source(source)


def plain_source(text: object) -> object:
    """A stored data source as a report shows it: generated data without its random seed (the
    record keeps it), which tells a reader of the tables nothing."""
    return re.sub(r" \((?:random )?seed \d+\)", "", text) if isinstance(text, str) else text


_VARIABLE = re.compile(r"\$(\w+|\{\w+\})")


def _resolved(source: str, r: Result) -> str:
    """`source` as stored, or, where it names an environment variable ('$DLBENCH_TRAIN_VOLUME'),
    the path the run read (`data_path`, stored by train) when the record holds one. Never this
    machine's environment: the report may be read far from where the run was."""
    path = r.measured.data.path
    if _VARIABLE.search(source) and isinstance(path, str) and path and not _VARIABLE.search(path):
        return path
    return source


def shape_text(shape: Sequence[int] | None, sep: str = "x") -> str:
    return sep.join(map(str, shape)) if shape else "-"


def prune(table, keep: int):
    """Leave out the columns after the first `keep` that no row fills (a speed-up between two
    precisions no row ran, weak scaling where no row used several GPUs)."""
    used = [i < keep or any(row[i] not in (None, "-", "") for row in table.rows) for i in range(len(table.header))]
    table.header = [h for h, u in zip(table.header, used) if u]
    table.align = "".join(a for a, u in zip(table.align, used) if u)
    table.rows = [[v for v, u in zip(row, used) if u] for row in table.rows]
    return table


SLIP_NOTE = ("† marks a published figure that the publication's own columns do not give; each Check line below "
             "says what they give.")


def tag_column(tags: Sequence[object]) -> bool:
    """A Tag column where dlbench's rows (`tags`: theirs only, None for an untagged run) differ in
    their tag, an untagged row among tagged ones included; one tag on every row goes in a note."""
    found = {str(t) if t else "" for t in tags}
    return len(found) > 1


def tag_note(tags: Sequence[object]) -> list[str]:
    """The note that names the one tag every dlbench row carries (`tags`: dlbench's rows only)."""
    found = {str(t) if t else "" for t in tags}
    # a huge tag cut as in the cells (dlbench/shorten.py)
    return [f"dlbench's rows are runs tagged `{shorten(found.pop())}`."] if len(found) == 1 and "" not in found else []


def check_notes(checks: Sequence[tuple[object, object]]) -> list[str]:
    """The published rows whose arithmetic does not hold, one line each under the table (a Check
    column of sentences made tables too wide to read): (row label, check text) pairs."""
    lines = [f"Check, {label}: {check}" for label, check in checks if check not in (None, "ok", "-", "")]
    return [SLIP_NOTE, *lines] if lines else []
