"""Tables of the image workloads: seed 002's phase table (one per model) and seed 003's
throughput (with weak scaling) and latency tables. The latest result per row wins.

Times of a step or a phase are in milliseconds here as everywhere (seed 002 printed seconds;
its rows are converted digit for digit). The phase columns add up: Total is their sum and
the median of the whole steps has its own column. Weak scaling is seed 003's: throughput on
N GPUs over throughput on one GPU (same batch per GPU); its efficiency (÷ N) has its own
column. Columns that tell rows apart (precision, batch, input, data, tag) appear where the
rows of a table differ in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlbench.report import phases
from dlbench.report import rows as rowinfo
from dlbench.report.derived import scaling_efficiency, weak_scaling
from dlbench.report.tables import Table, model_title
from dlbench.figures import DASH, fixed
from dlbench.results.record import Result

SELECTS = ("train", "infer", "smooth")  # the workloads of the publications' image tables
BENCHMARK = phases.BENCHMARK  # the publication's name of each benchmark
PRECISION = {"fp32": "FP32", "tf32": "TF32", "fp16": "mixed precision (fp16)", "bf16": "mixed precision (bf16)"}
FULL, MIXED = ("fp32", "tf32"), ("fp16", "bf16")
LATENCY = ["Batch size", "Resolution", "Throughput Avg [img/s]", "Latency Avg [ms]", "Latency 90% [ms]",
           "Latency 95% [ms]", "Latency 99% [ms]"]
SEED003 = "NVIDIA UNet_Medical"  # the publication, as the Source column names it


def dataset(r: Result) -> str:
    return rowinfo.data_source(r)


def _latest(results: list[Result], key) -> dict:
    chosen: dict = {}
    for r in sorted(results, key=lambda r: r.started):
        chosen[key(r)] = r
    return chosen


@dataclass
class _Row:
    cells: list[object]
    extra: dict[str, object] = field(default_factory=dict)  # optional columns: Precision, Batch, Input, Tag
    source: str = "dlbench"
    check: str | None = None


def _assemble(title: str, header: list[str], align: str, rows: list[_Row], notes: list[str], published: bool,
              optional: tuple[str, ...], named: int = 3) -> Table:
    """The table with each optional column only where rows differ in it, then Source; the Check of
    published rows whose arithmetic does not hold goes under the table, by the row's first cell."""
    body = [list(r.cells) for r in rows]
    for name in optional:
        values = [r.extra.get(name) for r in rows]
        wanted = rowinfo.tag_column([r.extra.get(name) for r in rows if r.source == "dlbench"]) if name == "Tag" \
            else len({str(v) for v in values}) > 1
        if wanted:
            header, align = header + [name], align + ("r" if name in ("Batch",) else "l")
            body = [b + [v] for b, v in zip(body, values)]
        elif name == "Tag":
            notes = notes + rowinfo.tag_note([r.extra.get(name) for r in rows if r.source == "dlbench"])
    if published:
        header, align = header + [rowinfo.SOURCE], align + "l"
        body = [b + [r.source] for b, r in zip(body, rows)]
    seeds = [r for r in rows if r.source != "dlbench"]
    checks = rowinfo.check_notes([(_label(b, header, named), r.check) for b, r in zip(body, rows) if r.source != "dlbench"])
    if checks:
        notes = notes + checks
    elif seeds:
        notes = notes + ["Published arithmetic checked: no slips in these rows."]
    return Table(title, header, align, body, notes=notes)


def _label(cells: list[object], header: list[str], named: int) -> str:
    """A published row named in a Check line: its first cell, then the next `named` - 1 cells with
    their column's name ('DGX A100, GPUs 8, Batch size / GPU 8')."""
    named_cells = [f"{h} {c}" for h, c in zip(header[1:named], cells[1:named]) if c not in (None, DASH, "")]
    return ", ".join([str(cells[0]), *named_cells])


def tables(results: list[Result], published: bool = False) -> list[Table]:
    mine = [r for r in results if r.workload in SELECTS and r.status in ("ok", "oom")]
    return phase_tables(mine, published) + throughput_tables(mine, published) + latency_tables(mine, published)


# ---- BenchmarkJade: phases ----------------------------------------------------------------

def phase_tables(results: list[Result], published: bool = False) -> list[Table]:
    """Milliseconds per batch in each phase (means, which add up to the wall time per batch), per
    cluster, dataset, benchmark and device count, as BenchmarkJade prints them; each run's setup
    in a second table, joined by the Run label, so that neither is wider than a page."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.model, []).append(r)
    return [t for rs in groups.values() for t in _phase_table(rs, published)]


def _phase_table(rs: list[Result], published: bool) -> list[Table]:
    latest = _latest(rs, lambda r: (phases.cluster(r), dataset(r), r.workload, rowinfo.system(r, gpus=False),
                                    r.setup.gpus, r.setup.batch, r.setup.precision, r.tag, str(r.setup.input_shape)))
    ordered = sorted(latest.values(), key=lambda r: (r.system_label, r.setup.gpus, dataset(r), r.workload,
                                                      r.setup.batch or 0))
    rows = [_phase_row(r) for r in ordered]
    notes = [phases.ABOUT, phases.NOTE]
    setup_notes = [phases.SETUP_ABOUT]
    if published and _published_model(rs[0].model, "seed002"):
        notes.append(phases.PUBLISHED_NOTE)
        rows += [_Row(phases.published_row(row), {"Precision": "fp32", "Batch": None, "Input": "3x224x224"},
                      phases.SOURCE, row.check_text()) for row in _published_rows()]
    batches = {r.extra.get("Batch") for r in rows}
    if len(batches) == 1 and None not in batches:
        notes[1] += f" Batch {batches.pop()} per device."
    labels = _run_labels(rows)
    if any(str(c).endswith(phases.CLAMPED) for r in rows for c in r.cells):
        notes.append(phases.CLAMP_NOTE)
    if any(rowinfo.processes(r) > 1 for r in ordered):
        notes.append(phases.SEVERAL)
    timing = Table(phases.title(rs[0]), [phases.RUN, *phases.PHASES], "l" + "r" * len(phases.PHASES),
                   [[label, *r.cells[len(phases.SETUP):]] for label, r in zip(labels, rows)], notes=notes)
    setup_rows = [_Row([label, *r.cells[:len(phases.SETUP)]], r.extra, r.source, r.check) for label, r in zip(labels, rows)]
    setup = _assemble(f"{model_title(rs[0])}: the runs of the phase table", [phases.RUN, *phases.SETUP], "lllllrr",
                      setup_rows, setup_notes, published, ("Precision", "Batch", "Input", "Tag"), named=1)
    if not any(row[1] not in (None, DASH) for row in setup.rows):  # no cluster named: no column
        setup.header, setup.align = setup.header[:1] + setup.header[2:], setup.align[:1] + setup.align[2:]
        setup.rows = [row[:1] + row[2:] for row in setup.rows]
    # a published row's slips are in its phases: their † and Check lines go under the phase table
    checks = [n for n in setup.notes if n == rowinfo.SLIP_NOTE or n.startswith("Check, ")]
    timing.notes += checks
    setup.notes = [n for n in setup.notes if n not in checks]
    return [timing, setup]


_TELLS_APART = (("Precision", "{}"), ("Batch", "batch {}"), ("Input", "input {}"), ("Tag", "tagged {}"))


def _run_labels(rows: list[_Row]) -> list[str]:
    """Each row's Run label, made unique with what sets it apart in words (its precision, 'batch 4',
    its tag), and only where nothing does, with 'run 2'."""
    labels = [phases.run_label(r.cells) for r in rows]
    for name, words in _TELLS_APART:
        labels = [f"{label}, {words.format(r.extra[name])}" if labels.count(label) > 1 and r.extra.get(name) else label
                  for label, r in zip(labels, rows)]
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if labels.count(label) == 1 else f"{label}, run {seen[label]}")
    return out


def _phase_row(r: Result) -> _Row:
    extra = {"Precision": r.setup.precision, "Batch": r.setup.batch, "Input": _input(r),
             "Tag": r.tag}
    return _Row(phases.row_head(r) + phases.phase_cells(r), extra)


def _published_model(model: str, seed: str) -> bool:
    from dlbench.report import published

    return published.measured_with(seed, model)


def _published_rows() -> list:
    from dlbench.report import published

    return published.seed002()


# ---- seed 003: throughput and weak scaling -------------------------------------------------

def throughput_tables(results: list[Result], published: bool = False) -> list[Table]:
    """Seed 003: throughput per system, GPU count and batch per precision, the mixed-precision
    speed-up, weak scaling (N-GPU over 1-GPU throughput at the same batch per GPU) and its
    efficiency (÷ N)."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        throughput = r.measured.throughput
        if r.status == "ok" and r.workload in ("train", "infer") and throughput.value:
            unit = throughput.unit or "img/s"
            groups.setdefault((r.workload, r.model, unit), []).append(r)
    out = []
    for (workload, model, unit), rs in groups.items():
        # A row per setup and tag; weak scaling looks past the tag for its 1-GPU run (_one_gpu).
        latest = _latest(rs, lambda r: ((_setup(r), r.tag or ""), r.setup.gpus, r.setup.batch, r.setup.precision))
        seeds = _seed003_training() if published and workload == "train" and _is_seed003(model) else []
        present = {k[3] for k in latest} | {p for s in seeds for p in s["values"]}
        precisions = [p for p in PRECISION if p in present]
        fulls = [p for p in precisions if p in FULL]
        mixeds = [p for p in precisions if p in MIXED]
        terms = _count_terms(list(latest.values()), bool(seeds))
        header = ["System", *terms[:2]] + [f"Throughput - {PRECISION[p]} [{unit}]" for p in precisions]
        header += [f"Throughput speedup ({PRECISION[f]} - {PRECISION[m]})" for f in fulls for m in mixeds]
        header += [f"Weak scaling - {PRECISION[p]}" for p in precisions]
        header += [f"Scaling efficiency - {PRECISION[p]}" for p in precisions]
        rows: list[_Row] = []
        for run in sorted({k[0] for k in latest}, key=str):
            points = {k[1:]: r for k, r in latest.items() if k[0] == run}
            for gpus, batch in sorted({(g, b) for g, b, _ in points}):
                rows.append(_throughput_row(points, gpus, batch, _one_gpu(latest, run, batch), precisions, fulls, mixeds))
        for s in seeds:
            rows.append(_seed003_row(s, precisions, fulls, mixeds))
        what = "patches" if unit.startswith("patch") else "images"
        notes = _throughput_about(what, workload, speedup=True)
        if seeds:
            notes.append("Rows from NVIDIA UNet_Medical are its published figures (TF1 20.06, mixed precision = TF-AMP fp16, "
                         "ISBI 2012 EM data with augmentation).")
        title = f"{model_title(rs[0])} {BENCHMARK[workload].lower()} throughput"
        if any(str(c).endswith(OVER_ONE) for row in rows for c in row.cells):
            notes.append(OVER_ONE_NOTE)
        table = _assemble(title, header, "l" + "r" * (len(header) - 1), rows, notes, published, ("Data", "Input", "Tag"))
        table = rowinfo.prune(table, 3 + len(precisions))
        if not any(h.startswith("Throughput speedup") for h in table.header):  # one precision: no speed-up to define
            table.notes[:2] = _throughput_about(what, workload, speedup=False)
        out += _split_scaling(table, terms)
    return out


def _throughput_about(what: str, workload: str, speedup: bool) -> list[str]:
    """What a throughput table shows, and what its columns are; the speed-up only where it has one."""
    verb = "trains" if workload == "train" else "infers"
    if not speedup:
        return [f"How many {what} per second each system {verb} at each precision.",
                f"Throughput: {what} over total measured time, all processes together."]
    return [f"How many {what} per second each system {verb} at each precision, and how much mixed precision "
            "speeds that up.",
            f"Throughput: {what} over total measured time, all processes together; speedup: mixed-precision "
            "throughput over full-precision throughput of the same row."]


SCALING = ("Weak scaling", "Scaling efficiency")


def _split_scaling(table: Table, terms: tuple[str, ...]) -> list[Table]:
    """Throughput in one table, weak scaling and its efficiency (rows on several GPUs) in a second:
    one table of both was 16 columns wide. Each Check line goes with the column it names."""
    scaling = [i for i, h in enumerate(table.header) if h.startswith(SCALING)]
    if not scaling:
        return [table]
    rows = [row for row in table.rows if isinstance(row[1], int) and row[1] > 1]
    kept = [table.header.index(h) for h in ("Data", "Input", "Tag", rowinfo.SOURCE)
            if h in table.header and (h in ("Tag", rowinfo.SOURCE) or _tells_apart(rows, table.header, h))]
    first = [i for i in range(len(table.header)) if i not in scaling]
    second = [0, 1, 2, *scaling, *kept]
    about = (f"How close {terms[2]} come to N times one {terms[3]}'s throughput at the same batch per {terms[3]} "
             f"(weak scaling; perfect: N) and that over N (efficiency; perfect: 1.00).")
    about += (" Weak scaling: throughput on N " + terms[2] + " over throughput on 1 " + terms[3] + " at the same "
              "batch per " + terms[3] + "; scaling efficiency: weak scaling / N.")
    moved = [n for n in table.notes if _names_column(n, [table.header[i] for i in scaling])]
    extra = [n for n in table.notes if n.startswith(("! ", "dlbench's rows", "Rows from"))]
    # the efficiencies, and so their ! marks, are all in the second table
    notes = [n for n in table.notes if n not in moved and not n.startswith("! ")
             and (n != rowinfo.SLIP_NOTE or _checks_left(table.notes, moved))]
    scaled = Table(table.title.replace("throughput", "weak scaling"), [table.header[i] for i in second],
                   "".join(table.align[i] for i in second), [[row[i] for i in second] for row in rows],
                   notes=[about, *extra, *([rowinfo.SLIP_NOTE] if moved else []), *moved])
    table.header, table.align = [table.header[i] for i in first], "".join(table.align[i] for i in first)
    table.rows, table.notes = [[row[i] for i in first] for row in table.rows], notes
    return [table, scaled]


def _tells_apart(rows: list[list[object]], header: list[str], column: str) -> bool:
    """Whether `column` differs between rows of one system, GPU count, batch and source (two weak
    scaling rows of ResNet-50 on 2 GPUs, one on dummy data, one on a JPEG folder)."""
    at, source = header.index(column), header.index(rowinfo.SOURCE) if rowinfo.SOURCE in header else None
    seen: dict[tuple, set[str]] = {}
    for row in rows:
        key = (*row[:3], row[source] if source is not None else None)
        seen.setdefault(key, set()).add(str(row[at]))
    return any(len(values) > 1 for values in seen.values())


def _checks_left(notes: list[str], moved: list[str]) -> bool:
    return any(n.startswith("Check, ") and n not in moved for n in notes)


def _names_column(note: str, columns: list[str]) -> bool:
    """Is `note` a Check line about one of `columns` (and about none of the others)?"""
    return note.startswith("Check, ") and any(f"† {c.split(' [')[0]}" in note for c in columns)



def _throughput_row(points: dict, gpus: int, batch: int, single: dict, precisions: list[str], fulls: list[str],
                    mixeds: list[str]) -> _Row:
    """One system, GPU count and batch: throughput per precision, speed-up, weak scaling, efficiency."""
    value = {p: points[(gpus, batch, p)].measured.throughput.value for p in precisions if (gpus, batch, p) in points}
    any_result = next(points[(gpus, batch, p)] for p in precisions if (gpus, batch, p) in points)
    cells = [rowinfo.system(any_result, gpus=False, precision=False), gpus, batch]
    cells += [fixed(value.get(p)) for p in precisions]
    cells += [fixed(value[m] / value[f]) if f in value and m in value else DASH for f in fulls for m in mixeds]
    cells += [fixed(weak_scaling(value.get(p), single.get(p))) if gpus > 1 else DASH for p in precisions]
    cells += [_efficiency(scaling_efficiency(value.get(p), single.get(p), gpus)) if gpus > 1 else DASH
              for p in precisions]
    return _Row(cells, {"Data": dataset(any_result), "Tag": any_result.tag, "Input": _input(any_result)})


OVER_ONE = " !"
OVER_ONE_NOTE = ("! marks a scaling efficiency above 1: N processes did more than N times the work of one, which "
                 "parallel work cannot; the 1-GPU run is no baseline for this row (on a CPU, processes share its "
                 "cores and one process alone left some idle; or the runs measured different things).")


def _efficiency(value: float | None) -> str:
    """Flagged above 1 (beyond rounding): such a figure is no scaling, whatever the arithmetic says."""
    return fixed(value) + (OVER_ONE if value is not None and value > 1.005 else "")


def _one_gpu(latest: dict, run: tuple, batch: int) -> dict[str, float]:
    """Throughput on one GPU per precision, the base of weak scaling: same setup and batch per
    GPU whatever the tag (a 1-GPU run tagged 'baseline' is the base of an 8-GPU run tagged
    'scale'); the row's own tag wins, then the latest run."""
    setup, tag = run
    found = sorted(((t == tag, r.started, p, r) for ((s, t), g, b, p), r in latest.items()
                    if s == setup and g == 1 and b == batch), key=lambda x: x[:2])
    return {p: r.measured.throughput.value for _, _, p, r in found}


def _count_terms(results: list[Result], seeds: bool) -> tuple[str, str, str, str]:
    """The count and batch headers and the words of the notes: GPUs as in seed 003; processes
    where every row ran on a CPU (several processes share one CPU, there is no 'GPU' to count)."""
    cpu = [r for r in results if not rowinfo.on_gpu(r)]
    if not cpu:
        return "GPUs", "Batch size / GPU", "GPUs", "GPU"
    if len(cpu) == len(results) and not seeds:
        return "Processes", "Batch size / process", "processes", "process"
    return "GPUs or processes", "Batch size / GPU or process", "GPUs (processes on a CPU)", "GPU (process)"


def _input(r: Result) -> str:
    """The input without the batch (the model's default where the spec gives none)."""
    return rowinfo.shape_text(r.setup.input_shape or (r.measured.data.input_shape or [None])[1:])


def _setup(r: Result) -> tuple:
    """Everything but GPUs, batch and precision that makes rows measure different things. Not
    the tag: it names a run, not a setup, and has its own column."""
    return r.system_label, dataset(r), str(r.setup.input_shape), r.setup.channels_last, r.optimize


def _is_seed003(model: str) -> bool:
    from dlbench.report import published

    return published.measured_with("seed003", model)


def _seed003_training() -> list[dict]:
    from dlbench.report import published

    found = []
    for row in published.seed003_training():
        full = row.extra["full"]
        found.append({"row": row, "values": {full: row.cells[f"throughput_{full}"], "fp16": row.cells["throughput_fp16"]},
                      "weak": {full: row.cells[f"weak_{full}"], "fp16": row.cells["weak_fp16"]}, "full": full})
    return found


def _seed003_row(s: dict, precisions: list[str], fulls: list[str], mixeds: list[str]) -> _Row:
    from dlbench.report.published import NAMES

    row = s["row"]
    c = row.cells
    gpus = int(c["gpus"])
    speedup_column = f"Throughput speedup ({NAMES[s['full']]} - mixed precision)"
    cells: list[object] = [f"{c['system']}", gpus, int(c["batch"])]
    cells += [s["values"].get(p) for p in precisions]
    cells += [row.mark(speedup_column, c["speedup"]) if (f, m) == (s["full"], "fp16") else None
              for f in fulls for m in mixeds]
    weak = {p: row.mark(f"Weak scaling - {NAMES[p]}", v) if v != "-" else None for p, v in s["weak"].items()}
    cells += [weak.get(p) for p in precisions]
    cells += [_published_efficiency(row, NAMES[p], s["weak"].get(p), gpus) for p in precisions]
    check = "; ".join(c for c in [row.check_text()] + [_efficiency_check(row, NAMES[p], gpus) for p in precisions]
                      if c and c != "ok") or "ok"
    return _Row(cells, {"Data": "ISBI 2012 (augmented)", "Tag": None, "Input": "1x572x572"}, SEED003, check)


def _published_efficiency(row, name: str, weak: str | None, gpus: int) -> str | None:
    """Weak scaling / N from the printed weak scaling; marked † where that figure is (it carries the slip)."""
    if not weak or weak == "-" or gpus <= 1:
        return None
    return fixed(float(weak) / gpus) + (" †" if row.slipped(f"Weak scaling - {name}") else "")


def _efficiency_check(row, name: str, gpus: int) -> str | None:
    slip = next((s for s in row.slips if s.column == f"Weak scaling - {name}"), None)
    if slip is None:
        return None
    return (f"† Scaling efficiency - {name}: {slip.printed} / {gpus} from the printed weak scaling; its own "
            f"throughputs give {slip.computed} / {gpus} = {fixed(float(slip.computed) / gpus)}")


# ---- seed 003: latency ---------------------------------------------------------------------

def latency_tables(results: list[Result], published: bool = False) -> list[Table]:
    """Seed 003: inference throughput and latency per batch size, one table per model and precision."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.status == "ok" and r.workload == "infer" and r.setup.gpus == 1 and r.measured.throughput.value:
            groups.setdefault((r.model, r.setup.precision), []).append(r)
    out = []
    for (model, precision), rs in groups.items():
        latest = _latest(rs, lambda r: ((_setup(r), r.tag or ""), r.setup.batch))
        rows = []
        for key in sorted(latest, key=lambda k: (str(k[0]), k[1])):
            r = latest[key]
            m = r.measured
            shape = (m.data.input_shape or [r.setup.batch])[1:]
            latencies = [fixed(v, 3) for v in (m.latency.avg_ms, m.latency.p90_ms, m.latency.p95_ms, m.latency.p99_ms)]
            waiting = data_bound(r)
            cells = [rowinfo.system(r, gpus=False, precision=False), r.setup.batch,
                     "x".join(map(str, shape[1:] + shape[:1])), fixed(m.throughput.value),
                     latencies[0] + (DATA_BOUND if waiting else ""), *latencies[1:]]
            rows.append(_Row(cells, {"Data": dataset(r), "Tag": r.tag, "waiting": waiting}))
        notes = ["How long one batch takes to infer, on average and in the slow tail, at each batch size.",
                 "Latency is per batch, in milliseconds; throughput: images over the measured time."]
        notes += [_data_bound_note(row) for row in rows if row.extra.get("waiting")]
        if published and _is_seed003(model):
            found = _seed003_latency(precision)
            if found:
                notes.append("Rows from NVIDIA UNet_Medical are its published figures (TF1 20.06; latency per batch, as its last "
                             "line says, though an earlier line says per image).")
            rows += found
        out.append(_assemble(f"{model_title(rs[0])} inference latency, {PRECISION[precision]}", ["System"] + LATENCY,
                             "lrlrrrrr", rows, notes, published, ("Data", "Tag"), named=2))
    return out


DATA_BOUND = " (data-bound)"
DATA_SHARE = 0.25  # waiting for data above this share of the mean batch: the loader, not the model, sets the latency


def data_bound(r: Result) -> tuple[float, float, float | None] | None:
    """(data wait, mean batch, median batch) in ms where the run waited for its data loader for more
    than DATA_SHARE of the mean batch: its latencies are the loader's stalls, not the model's time."""
    stats = r.measured.stats
    wait = sum(float(s.mean or 0.0) for p in ("data", "h2d") if (s := stats.get(p)) is not None)
    whole = stats.get("step")
    step = whole.mean if whole else None
    if not step or wait <= DATA_SHARE * float(step):
        return None
    median = whole.median
    return wait * 1e3, float(step) * 1e3, None if median is None else float(median) * 1e3


def _data_bound_note(row: _Row) -> str:
    wait, step, median = row.extra["waiting"]
    middle = f" (the median batch took {fixed(median, 1)} ms)" if median is not None else ""
    return (f"(data-bound), {row.cells[0]}, batch {row.cells[1]}: {fixed(wait, 1)} of the mean {fixed(step, 1)} ms per "
            f"batch went to waiting for the data loader{middle}; these latencies are the loader's stalls, not the "
            "model's latency.")


def _seed003_latency(precision: str) -> list[_Row]:
    from dlbench.report import published

    out = []
    for row in published.seed003_inference():
        c = row.cells
        if c["precision"] != precision:
            continue
        cells = [c["system"], int(c["batch"]), c["resolution"], row.mark("Throughput Avg [img/s]", c["throughput"]),
                 c["latency_avg_ms"], c["latency_p90_ms"], c["latency_p95_ms"], c["latency_p99_ms"]]
        out.append(_Row(cells, {"Data": "ISBI 2012", "Tag": None}, SEED003, row.check_text()))
    return out
