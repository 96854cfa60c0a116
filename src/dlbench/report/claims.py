"""The publications' sentences about speed, checked against their own tables, and the same
sentences computed from dlbench's rows.

- GPU in the Cloud (cnn-benchmarks) concludes "A is 2.2x to 2.5x faster than B across all
  models". Each such conclusion is recomputed from its tables (the fastest row of each GPU per
  model, Total over Total); dlbench's systems get the same range against each published GPU
  (published Total over dlbench's Forward + Backward medians) and against each other
  (`dlbench compare`'s medians of forward + backward per step with bootstrap intervals).
- BenchmarkJade prints "Expected Speed" ratios taken from an external benchmark and "JADE2 is
  9.38 times slower than a A40". Each is set beside what its own table gives for the same
  clusters, devices and counts (per-batch totals of like rows: same data, benchmark and device
  count), or says that its table has no such rows. dlbench's own systems are compared with
  each other per benchmark; never with the publication's rows, whose batch size is unpublished.
"""

from __future__ import annotations

from typing import Sequence

from dlbench.report import compare
from dlbench.report.tables import Table, model_title
from dlbench.figures import fixed
from dlbench.results.record import Result

CNN_TITLE = "GPU in the Cloud (cnn-benchmarks): conclusions"
JADE_TITLE = "BenchmarkJade: expected speed and comparison"
DLBENCH = "dlbench"
SOURCE_004 = "GPU in the Cloud (cnn-benchmarks)"


def tables(results: list[Result], published: bool = False) -> list[Table]:
    out = []
    fwdbwd = [r for r in results if r.workload == "fwdbwd" and r.status in ("ok", "oom")]
    if fwdbwd:
        out.append(cnn_table(fwdbwd, published))
    images = [r for r in results if r.workload in ("train", "infer", "smooth") and r.model == "resnet50"
              and r.status in ("ok", "oom")]
    if published and any(r.device.startswith("cuda") for r in images):  # its sentences are about GPUs
        out.append(jade_table(images))
    return [t for t in out if t.rows]


# ---- cnn-benchmarks ------------------------------------------------------------------------

def _x(value: float) -> str:
    return f"{fixed(value, 2)}x"


def _span(low: float, high: float) -> str:
    return _x(low) if _x(low) == _x(high) else f"{_x(low)} to {_x(high)}"


def spread(faster: dict[str, float], slower: dict[str, float]) -> tuple[float, float, list[str]] | None:
    """The lowest and highest time(slower) / time(faster) over the models both ran."""
    models = [m for m in faster if m in slower]
    if not models:
        return None
    ratios = [slower[m] / faster[m] for m in models]
    return min(ratios), max(ratios), models


def published_totals() -> dict[str, dict[str, float]]:
    """Per published GPU (as printed), per model, its fastest Total (several cuDNN versions ran)."""
    from dlbench.report import published

    out: dict[str, dict[str, float]] = {}
    for model in published.seed004_models():
        for row in published.seed004(model):
            gpu, total = row.cells["gpu"], float(row.cells["total_ms"])
            out.setdefault(gpu, {})[model] = min(total, out.get(gpu, {}).get(model, total))
    return out


def check_conclusion(claim: dict, totals: dict[str, dict[str, float]]) -> list[object]:
    """One printed conclusion beside the range its own tables give."""
    found = spread(totals[claim["faster"]], totals[claim["slower"]])
    low, high, models = found
    given = _span(low, high)
    if not claim["low"]:  # "==": the same speed within 5%
        verdict = "ok" if 0.95 <= low and high <= 1.05 else f"† not the same speed: {given}"
    else:
        places = max(len(claim["low"].partition(".")[2]), len(claim["high"].partition(".")[2]))
        unit = 10.0 ** -places / 2
        holds = float(claim["low"]) - unit <= low and high <= float(claim["high"]) + unit
        verdict = "ok" if holds else f"† its tables give {given}"
    return [_as_meant(claim), len(models), given, verdict, "GPU in the Cloud (cnn-benchmarks)"]


def _as_meant(claim: dict) -> str:
    """The printed sentence with the GPU names it means; a misprinted name ('Quadro M40000' for the
    Quadro M4000 of its tables) is named after it as printed, so the typo is never dlbench's text."""
    text = claim["text"]
    printed = text.partition(" > ")[2].partition(":")[0]
    if not printed or printed == claim["slower"]:
        return text
    return text.replace(printed, claim["slower"], 1) + f' (printed "{printed}")'



def cudnn_totals() -> dict[str, dict[str, dict[str, float]]]:
    """Per published GPU, per cuDNN version, per model: the Total its tables print."""
    from dlbench.report import published

    out: dict[str, dict[str, dict[str, float]]] = {}
    for model in published.seed004_models():
        for row in published.seed004(model):
            out.setdefault(row.cells["gpu"], {}).setdefault(row.cells["cudnn"], {})[model] = float(row.cells["total_ms"])
    return out


def cudnn_rows(claim: dict) -> list[list[object]]:
    """"Prefer latest cuDNN", one row per pair of versions it orders and one for its caveat, checked
    against the GPUs its tables ran on both versions (Total of the older over Total of the newer)."""
    totals = cudnn_totals()
    versions = claim["versions"]
    rows = [_cudnn_pair(claim["text"], newer, older, totals) for newer, older in zip(versions, versions[1:])]
    return rows + [_cudnn_caveat(claim["caveat"], totals)]


def _cudnn_pair(text: str, newer: str, older: str, totals: dict) -> list[object]:
    claim = f"{text.partition(':')[0]}: cuDNN {newer} faster than {older}"
    pairs = [(gpu, m, by[older][m] / by[newer][m]) for gpu, by in totals.items() if newer in by and older in by
             for m in by[newer] if m in by[older]]
    if not pairs:
        ran = {v for by in totals.values() for v in by}
        missing = " and ".join(f"cuDNN {v}" for v in (newer, older) if v not in ran) or f"GPU on both {newer} and {older}"
        return [claim, 0, "-", f"not derivable from its tables: they have no {missing} row", SOURCE_004]
    ratios = [r for _, _, r in pairs]
    x3 = (lambda v: f"{fixed(v, 3)}x")  # "slightly": two decimals would print 1.00x either side of 1
    slower = [f"{gpu} on {model_title(m)} ({x3(r)})" for gpu, m, r in pairs if r < 1]
    check = "ok" if not slower else f"† slower on {len(slower)} of {len(pairs)} models: " + ", ".join(slower)
    return [claim, len(pairs), f"{x3(min(ratios))} to {x3(max(ratios))}", check, SOURCE_004]


def _cudnn_caveat(caveat: dict, totals: dict) -> list[object]:
    from dlbench.report import published

    gpu, model = caveat["gpu"], caveat["model"]
    failed = any(gpu in entry for entry in published.seed004_oom(model))
    ran = sorted(v for v, by in totals.get(gpu, {}).items() if model in by)
    if failed and ran:
        check = f"ok: its {model_title(model)} table notes the failure and has {gpu} rows on cuDNN {', '.join(ran)}"
    else:
        check = f"† its {model_title(model)} table " + ("has no failure of it" if not failed else f"has no {gpu} row")
    return [caveat["text"], 1, "-", check, SOURCE_004]


def _seed_setting(r: Result) -> bool:
    from dlbench.report import published

    block = published.data()["seed004"]
    shape = r.measured.data.input_shape or [r.setup.batch, *(r.setup.input_shape or [])]
    return list(shape) == [block["batch"], *block["input_shape"]] and r.setup.precision == "fp32"


def mine_totals(results: Sequence[Result]) -> dict[str, dict[str, float]]:
    """Per dlbench system, per model, Forward + Backward (medians) of its latest run at the seed's setting."""
    out: dict[str, dict[str, float]] = {}
    for r in sorted(results, key=lambda r: r.started):
        m = r.measured
        forward, backward = m.phase_ms("forward"), m.phase_ms("backward")
        if r.status == "ok" and forward and backward and _seed_setting(r):
            out.setdefault(r.system_label, {})[r.model] = forward + backward
    return out


def against_published(mine: dict[str, dict[str, float]], theirs: dict[str, dict[str, float]]) -> list[list[object]]:
    rows = []
    for system, times in mine.items():
        for gpu, published_times in theirs.items():
            found = spread(times, published_times)
            if found is None:
                continue
            low, high, models = found
            verb = "as fast as" if low >= 1 else "the speed of"
            rows.append([f"{system} is {_span(low, high)} {verb} {gpu}", len(models), _span(low, high), "-",
                         f"{DLBENCH} vs published"])
    return rows


def measured_pairs(results: Sequence[Result]) -> list[list[object]]:
    """`dlbench compare` between every system the results hold, its sentences as rows."""
    labels = sorted({r.system_label for r in results})
    if len(labels) < 2:
        return []
    try:
        comparison = compare.compare(results, labels)
    except Exception as error:  # no benchmark in common: nothing to say
        from dlbench.errors import UserError

        if isinstance(error, UserError):
            return []
        raise
    lines = compare.conclusions(comparison)
    return [[line, _models_in(line), "-", "-", DLBENCH] for line in lines]


def _models_in(line: str) -> int:
    return int(line.split()[1]) if line.startswith("Across ") else 1


def cnn_table(results: list[Result], published: bool) -> Table:
    rows: list[list[object]] = []
    # Its sentences compare GPUs at its own setting: beside CPU runs or other inputs they concern nothing shown.
    published = published and any(r.device.startswith("cuda") and _seed_setting(r) for r in results)
    notes = ["The publication's sentences about which GPU is faster, checked against its own tables, and the same "
             "comparison for the systems measured here." if published else
             "Which of the systems measured here is faster, and by how much, model by model.",
             "Range: time of the slower over time of the faster, per model, lowest to highest across the models "
             "both ran at 16 x 3 x 224 x 224, fp32. dlbench's rows between its own systems come from `dlbench "
             "compare` (medians of forward + backward per step, the tables' Total; 95% bootstrap interval "
             "where each side has 10 steps or more)."]
    if published:
        from dlbench.report import published as pub

        theirs = published_totals()
        rows += [check_conclusion(c, theirs) for c in pub.data()["seed004"]["conclusions"]]
        rows += cudnn_rows(pub.data()["seed004"]["cudnn"])
        rows += against_published(mine_totals(results), {g: t for g, t in theirs.items() if not g.startswith("CPU")})
        notes.append("The publication's conclusions are checked against its own tables (the fastest cuDNN row of "
                     "each GPU per model); dlbench against a published GPU: the published Total over dlbench's "
                     "Forward + Backward. Its cuDNN rows: the Total on the older version over the Total on the "
                     "newer, for each GPU and model its tables ran on both (below 1.000x the newer was slower).")
    rows += measured_pairs(results)
    header = ["Conclusion", "Models", "Range", "Check", "Source"]
    return Table(CNN_TITLE, header, "lrlll", rows, notes=notes)


# ---- BenchmarkJade -------------------------------------------------------------------------

def _batch_seconds(row) -> float:
    return sum(row.number(k) or 0.0 for k in ("data_s", "processing_s", "forward_s", "backward_s"))


def like_rows(a: Sequence, b: Sequence, benchmark: str | None = None) -> list[tuple[str, float]]:
    """(what, time of b / time of a) for rows of a and b with the same data, benchmark and devices."""
    out = []
    for x in a:
        for y in b:
            same = all(x.cells[k] == y.cells[k] for k in ("dataset", "benchmark", "devices"))
            if same and (benchmark is None or x.cells["benchmark"] == benchmark):
                devices = int(x.cells["devices"])
                out.append((f"{x.cells['dataset']} {x.cells['benchmark']}, {devices} device{'s' if devices > 1 else ''}",
                            _batch_seconds(y) / _batch_seconds(x)))
    return out


def _rows_of(rows: Sequence, cluster: str | None, device: str | None, devices: int | None = None) -> list:
    return [r for r in rows if (cluster is None or r.cells["cluster"] == cluster)
            and (device is None or r.cells["device"] == device)
            and (devices is None or int(r.cells["devices"]) == devices)]


def _range(found: list[tuple[str, float]]) -> str:
    low, high = min(found, key=lambda f: f[1]), max(found, key=lambda f: f[1])
    if low is high:
        return f"{_x(low[1])} ({low[0]})"
    return f"{_x(low[1])} ({low[0]}) to {_x(high[1])} ({high[0]})"


def expected_row(claim: dict, rows: Sequence) -> list[object]:
    a, b = _rows_of(rows, *claim["a"]), _rows_of(rows, *claim["b"])
    found = like_rows(a, b)
    if not found:
        missing = " and ".join(f"{c[2]} x {c[1]} on {c[0]}" for c, r in ((claim["a"], a), (claim["b"], b)) if not r)
        return [claim["text"], claim["ratio"], "external (LambdaLabs GPU benchmarks)",
                f"no rows: its table has no {missing}", "not derivable from its table"]
    values = [v for _, v in found]
    inside = min(values) <= float(claim["ratio"]) <= max(values)
    check = "within its like rows" if inside else "outside its like rows (they time data loading too)"
    return [claim["text"], claim["ratio"], "external (LambdaLabs GPU benchmarks)", _range(found), check]


def slower_rows(claim: dict, rows: Sequence, expected: list[dict]) -> list[list[object]]:
    jade, a40 = _rows_of(rows, claim["a"], None), _rows_of(rows, None, claim["b"])
    found = like_rows(a40, jade, claim["benchmark"])
    printed = float(claim["ratio"])
    derivable = any(abs(v - printed) / printed < 0.005 for _, v in found)
    check = "ok" if derivable else f"† {claim['ratio']} cannot be derived from its table: no pair of like inference rows gives it"
    first = [f"JADE2 is {claim['ratio']} times slower than a A40 (inference)", claim["ratio"], "its table",
             _range(found) if found else "no like rows", check]
    lowest = min(float(e["ratio"]) for e in expected if e["a"][0] == "JADE2")
    should = printed * lowest
    check = "ok" if abs(should - float(claim["should"])) < 0.05 else f"† gives {fixed(should, 2)}"
    second = [f"around {claim['should']} x slower than it should be", claim["should"],
              f"{claim['ratio']} x the expected {fixed(lowest, 3)}", fixed(should, 2), check]
    return [first, second]


def jade_table(results: list[Result]) -> Table:
    from dlbench.report import published

    rows_002 = published.seed002()
    block = published.data()["seed002"]
    rows = [expected_row(c, rows_002) for c in block["expected"]]
    rows += slower_rows(block["slower"], rows_002, block["expected"])
    rows = [row + ["BenchmarkJade"] for row in rows]
    rows += [[line, "-", "dlbench compare", "-", "-", DLBENCH] for line in _jade_measured(results)]
    rows += [[line, "-", "throughput, data loading included", "-", "-", DLBENCH] for line in data_pairs(results)]
    notes = ["BenchmarkJade's sentences about expected speed, set beside what its own phase table gives.",
             "Its own table gives: the time per batch (the sum of its phases) of the slower over the faster, "
             "for rows of the same data, benchmark and device count. The expected speeds come from another "
             "benchmark, so its table can confirm them only where it has like rows.",
             "dlbench's systems are compared with each other per benchmark (`dlbench compare`: medians of whole "
             "steps, 95% bootstrap interval), not with the publication's rows: their batch size is not published, "
             "so their seconds per batch cannot be set against dlbench's. Within one system its rows are compared "
             "as the publication compares its own: real images (a JPEG folder) against dummy data, per benchmark "
             "and GPU count, by throughput with the data loading in it."]
    header = ["Claim", "Printed", "Basis", "Its own table gives", "Check", "Source"]
    return Table(JADE_TITLE, header, "lrllll", rows, notes=notes)


def _jade_measured(results: list[Result]) -> list[str]:
    return [row[0] for row in measured_pairs(results)]


def _data_kind(r: Result) -> str | None:
    data = str(r.setup.options.get("data") or "")
    return "dummy data" if data == "dummy" else "the JPEG folder" if data.startswith("folder:") else None


def data_pairs(results: Sequence[Result]) -> list[str]:
    """Per system, benchmark and GPU count: dummy data against the JPEG folder (the latest run of
    each) by throughput, data loading included, as the publication's per-batch times include it (a
    median step would leave out the loader's stalls)."""
    latest: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        kind = _data_kind(r)
        if kind and r.status == "ok" and r.measured.throughput.value:
            latest[(r.system_label, r.workload, r.setup.gpus, r.setup.batch, r.setup.precision, kind)] = r
    lines = []
    for key, dummy in latest.items():
        folder = latest.get(key[:-1] + ("the JPEG folder",))
        if key[-1] != "dummy data" or folder is None:
            continue
        a, b = dummy.measured.throughput, folder.measured.throughput
        if a.unit != b.unit:
            continue
        gpus = f"{key[2]} GPU{'s' if key[2] != 1 else ''}"
        (fast, high), (slow, low) = sorted([("dummy data", a.value), ("the JPEG folder", b.value)], key=lambda f: -f[1])
        lines.append(f"{key[0]}, {model_title(dummy)} {dummy.workload} (batch {key[3]}, {key[4]}, {gpus}): {fast} is "
                     f"{fixed(high / low, 2)}x as fast as {slow} ({fixed(high, 2)} against {fixed(low, 2)} {a.unit}; "
                     "one run each)")
    return lines
