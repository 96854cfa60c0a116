"""Figures for the HTML report, drawn with matplotlib and returned as self-contained SVG.

Each function takes results and returns a list of `Plot` (empty when the results hold
nothing to draw), so a report without traces or sweeps simply has fewer figures.
"""

from __future__ import annotations

import base64
import io
import json
import textwrap
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dlbench.report import profile
from dlbench.report import rows as rowinfo
from dlbench.report.compare import benchmark_key
from dlbench.report.tables import model_title
from dlbench.figures import sig
from dlbench.results.record import Result
from dlbench.shorten import shorten as shorten_text
from dlbench.system.records import ceilings_for
from dlbench.workloads import declared

MAX_DISTRIBUTIONS = 24  # boxes in one latency figure
MAX_TRACES = 8  # monitored runs drawn
LABEL_CHARS = 40  # a label line's longest: a 256-character model name made figures 3000-5000 pt wide
LABEL_LINES = 3  # a label's most lines (system; what sets the run apart, wrapped)


@dataclass
class Plot:
    id: str  # stable anchor, e.g. "throughput-fwdbwd"
    title: str
    caption: str
    svg: bytes

    @property
    def data_uri(self) -> str:
        # An <img> with an SVG data URI cannot run scripts, so labels from results are inert.
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg).decode("ascii")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _horizontal() -> dict:
    import matplotlib

    major, minor = (int(p) for p in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def shorten(text: object, limit: int = LABEL_CHARS) -> str:
    """`text` in at most `limit` characters, its middle elided (dlbench/shorten.py), a label's length by default."""
    return shorten_text(text, limit)


# Control characters (an escape sequence, a bell, NUL) and the Unicode direction overrides and
# marks: in a plot they would draw nothing or reorder the label, and matplotlib's warning about
# a glyph it lacks would carry them raw to the terminal. They are drawn as their escapes.
_INVISIBLE = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
              for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F),
                        *range(0x2066, 0x206A)]}


def visible(text: object) -> str:
    """`text` with every control or direction-override character written as its escape (`\\x1b`)."""
    return str(text).translate(_INVISIBLE)


def _label(text: object) -> str:
    """Every tick label, legend entry and axis label: inert (see `visible`), shortened, so no name
    from a result widens the figure, and '$' escaped, as it would start matplotlib mathtext. A
    label of two lines (system, then run) keeps both; a long line wraps at spaces, at most
    LABEL_LINES lines in all, the last shortened."""
    lines = [wrapped for line in str(text).split("\n", 1)
             for wrapped in textwrap.wrap(visible(line), LABEL_CHARS, break_long_words=False, break_on_hyphens=False) or [""]]
    kept = lines[:LABEL_LINES - 1] + [" ".join(lines[LABEL_LINES - 1:])] if len(lines) > LABEL_LINES else lines
    return "\n".join(shorten(line) for line in kept).replace("$", r"\$")


def _row_height(labels: list[str]) -> float:
    """Inches per bar or box: room for its label's lines."""
    return 0.2 + 0.16 * max((t.count("\n") + 1 for t in labels), default=1)


def _legend(ax) -> None:
    """A legend only where it tells two things apart: one entry says nothing the caption does not
    (one system's bars, one line). Outside the axes, to their right: inside, even loc="best"
    covers bars when every spot holds data; _svg's bbox_inches="tight" widens the figure to it."""
    handles, labels = ax.get_legend_handles_labels()
    if len(set(labels)) > 1:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)


def _plain(number: float) -> str:
    """A tick as a reader writes it: 600, 1000, 0.5, never 6x10^2."""
    return f"{number:,.0f}" if abs(number) >= 1000 else f"{number:g}"


def _plain_ticks(axis, values: list[float] | None = None, subs: tuple[float, ...] = (1, 2, 5)) -> None:
    """Plain numbers on a log axis: at `values` (the GPU counts or batch sizes measured), or at
    `subs` times each power of ten, no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    axis.set_major_locator(FixedLocator(sorted(set(values))) if values else LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda x, _: _plain(x)))
    axis.set_minor_locator(NullLocator() if values else LogLocator(base=10, subs="auto"))
    axis.set_minor_formatter(NullFormatter())


def _svg(fig) -> bytes:
    buffer = io.BytesIO()
    # Labels are inert, but a name in a script the font lacks still makes matplotlib warn, quoting
    # the name on stderr: the figure shows a box for the glyph, and the warning is not the user's.
    # A fixed salt makes the SVG's element ids follow from the figure alone, so a page printed
    # twice from one store is the same file (the published pages are checked that way).
    with warnings.catch_warnings(), _pyplot().rc_context({"svg.hashsalt": "dlbench"}):
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(fig)
    return buffer.getvalue()


def throughput_of(r: Result) -> tuple[float, str] | None:
    """The figure people plan with, in its unit: 3D training in iterations per minute (seeds
    000/001), never patches or images per second."""
    m = r.measured
    if m.training.iters_per_min or m.training.iteration_mean_s:
        return float(m.training.iters_per_min or 60.0 / m.training.iteration_mean_s), "iters/min"
    if m.throughput.value:
        return float(m.throughput.value), str(m.throughput.unit or "img/s")
    if m.data.images_per_s:
        return float(m.data.images_per_s), "img/s"
    steps = r.samples.get("step")
    if steps and r.setup.batch:
        return r.setup.batch * len(steps) / float(np.sum(steps)), "img/s"
    return None


def latest_ok(results: list[Result]) -> list[Result]:
    """The latest successful benchmark result per benchmark, system and tag (machine records
    aside): a tag names a run someone wants to see beside another, as in the tables."""
    chosen: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        if r.status == "ok" and r.workload != "system":
            chosen[(benchmark_key(r), r.system_label, r.tag or "")] = r
    return list(chosen.values())


def _input(r: Result) -> str:
    return rowinfo.shape_text(r.setup.input_shape or (r.measured.data.input_shape or [None])[1:])


def _count(r: Result) -> str:
    """' x2GPU' on GPUs, ' 2 processes' on a CPU, nothing for one."""
    n = r.setup.gpus
    if n == 1:
        return ""
    return f" x{n}GPU" if rowinfo.on_gpu(r) else f" {n} processes"


def _parts(r: Result, among: list[Result]) -> list[tuple[str, str]]:
    """What tells `r` apart from the other runs drawn with it, in the order a label reads, each
    with its key: the workload, model, batch, precision and GPUs, then the input shape, data
    source, memory layout, optimisation level and tag. The defaults (channels-first, eager, no
    tag) read as nothing: the runs that differ from them carry the word, never '[untagged]'."""
    return _parts_of(r, _several_counts(among))


def _several_counts(among: list[Result]) -> bool:
    """Whether the runs drawn together used different GPU (or process) counts."""
    return rowinfo.differing(among, lambda x: x.setup.gpus)


def _parts_of(r: Result, several_counts: bool) -> list[tuple[str, str]]:
    """`_parts` where whether the runs drawn with `r` used several counts is known."""
    setup = r.setup
    one = ("x1GPU" if rowinfo.on_gpu(r) else "1 process") if several_counts else ""
    parts = [("workload", r.workload), ("model", model_title(r)), ("batch", f"b{setup.batch}"),
             ("precision", setup.precision), ("count", _count(r).strip() or one),
             ("input", _input(r)), ("data", rowinfo.data_source(r)),
             ("layout", "channels-last" if setup.channels_last else ""),
             ("level", "" if r.optimize == "eager" else r.optimize), ("tag", f"[{r.tag}]" if r.tag else "")]
    return [(key, text) for key, text in parts if text]


_GROUPS_KEPT = 8
_groups: list[tuple[list[Result], dict[int, list[tuple[str, str]]], set[str]]] = []  # newest first


def _group(runs: list[Result]) -> tuple[dict[int, list[tuple[str, str]]], set[str]]:
    """Each run's label parts among `runs` (by `id`) and the keys of the parts that differ between
    them, figured once per group drawn: figured again for each run and part, labelling n runs took
    n^3 parts (13 of the 21 s of an HTML report of 100 settings). The newest few groups are kept,
    with their runs, so an id names the same run while its entry lives."""
    for drawn, parts, differ in _groups:
        if len(drawn) == len(runs) and all(a is b for a, b in zip(drawn, runs)):
            return parts, differ
    several = _several_counts(runs)
    parts = {id(r): _parts_of(r, several) for r in runs}
    named = [dict(p) for p in parts.values()]
    differ = {key for key in {k for p in named for k in p} if len({p.get(key, "") for p in named}) > 1}
    _groups[:] = [(list(runs), parts, differ), *_groups[:_GROUPS_KEPT - 1]]
    return parts, differ


FULL = ("model", "batch", "precision", "count")  # a run's label where nothing else is drawn with it


def _short(r: Result, among: list[Result] | None = None) -> str:
    """A run's label among the runs drawn together: only what differs between them (a label is a
    bar's key: two runs with one label would overwrite each other's bar); what they share goes
    to the caption (`_shared`). Alone, or where nothing differs: model, batch, precision, GPUs."""
    if among is None or len(among) < 2:
        return " ".join(text for key, text in _parts(r, [r]) if key in FULL)
    parts, differ = _group(among)
    mine = parts.get(id(r)) or _parts(r, among)
    texts = [text for key, text in mine if key in differ]
    return " ".join(texts) or " ".join(text for key, text in mine if key in FULL)


def _differs(runs: list[Result], key: str) -> bool:
    return key in _group(runs)[1]


def _shared(runs: list[Result]) -> str:
    """The caption's words on what every run drawn shares and the labels leave out: the system
    they all ran on, and the model, batch, precision and the rest."""
    if not runs:
        return ""
    common = [f"tag {runs[0].tag}" if key == "tag" else text for key, text in _parts(runs[0], runs)
              if not _differs(runs, key)]
    what = f" All runs: {shorten(visible(' '.join(common)), 120)} (b: batch size)." if len(runs) > 1 and common else ""
    return what + _where(runs)


def _run_label(r: Result, runs: list[Result]) -> str:
    """One run among `runs` drawn in one figure: the system on a line of its own only where they
    ran on several (one machine's name on every box says nothing), then what sets the run apart."""
    text = _short(r, runs)
    return f"{r.system_label}\n{text}" if rowinfo.differing(runs, lambda x: x.system_label) else text


def _where(runs: list[Result]) -> str:
    """The caption's word on the one system that ran every run, which the labels leave out."""
    systems = {r.system_label for r in runs}
    return f" All on {shorten(systems.pop(), 80)}." if len(systems) == 1 else ""


def throughput_plots(results: list[Result]) -> list[Plot]:
    """One bar chart per workload and unit: img/s, iters/min (3D training), Mvox/s never share an axis."""
    plt = _pyplot()
    by_workload: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in latest_ok(results):
        found = throughput_of(r)
        if found:
            by_workload[(r.workload, found[1])].append(r)
    units = defaultdict(set)
    for workload, unit in by_workload:
        units[workload].add(unit)
    plots = []
    for (workload, unit), runs in sorted(by_workload.items()):
        benches = sorted({_short(r, runs) for r in runs})
        systems = sorted({r.system_label for r in runs})
        height = 0.8 / len(systems)
        ticks = [_label(b) for b in benches]
        fig, ax = plt.subplots(figsize=(8, 0.6 + _row_height(ticks) * len(benches) * max(1, len(systems) / 2)))
        for i, system in enumerate(systems):
            values = {_short(r, runs): throughput_of(r)[0] for r in runs if r.system_label == system}
            y = [b + i * height for b in range(len(benches))]
            bars = ax.barh(y, [values.get(b, 0.0) for b in benches], height=height, label=_label(system))
            # each bar's figure at its end: a CPU's bar beside a GPU's is a sliver whose length says nothing
            ax.bar_label(bars, [sig(values[b]) if b in values else "" for b in benches], padding=2,
                         fontsize="x-small")
        ax.margins(x=0.12)  # room for the figure at the longest bar's end
        ax.set_yticks([b + 0.4 - height / 2 for b in range(len(benches))], ticks)
        ax.invert_yaxis()
        ax.set_xlabel(_label(unit))
        _legend(ax)
        ax.grid(axis="x", alpha=0.3)
        several = len(units[workload]) > 1
        slug = "".join(c if c.isalnum() else "-" for c in unit)
        per = " per system" if len(systems) > 1 else ""
        plots.append(Plot(f"throughput-{workload}" + (f"-{slug}" if several else ""),
                          f"Throughput: {declared(workload).title}" + (f" ({unit})" if several else ""),
                          f"Throughput{per} ({unit}), latest run of each benchmark.{_shared(runs)}", _svg(fig)))
    return plots


SWEPT = {"gpus": "count", "batch": "batch"}  # the label part a sweep's x axis shows


def _sweeps(results: list[Result], field: str) -> dict[tuple, list[tuple[float, float, Result]]]:
    """Lines of throughput against one spec field (gpus or batch), per unit, system, benchmark and
    tag: (x, throughput, run) at two or more points. As in the tables, a base the tag lacks (a point
    below its own) comes from another tag, the latest: a 1-GPU 'baseline' is the base of an 8-GPU
    'scale'. Lines that end up with the same runs are drawn once."""
    lines: dict[tuple, dict[float, tuple[float, Result]]] = defaultdict(dict)
    for r in sorted(latest_ok(results), key=lambda r: r.started):
        found = throughput_of(r)
        if not found:
            continue
        rest = {k: v for k, v in r.spec.items() if k != field}
        key = (found[1], r.system_label, benchmark_key(Result(spec=rest, system={})), r.tag or "")
        lines[key][float(getattr(r.setup, field) or 1)] = (found[0], r)
    drawn: dict[tuple, list[tuple[float, float, Result]]] = {}
    for key, own in lines.items():
        points, lowest = {}, min(own)
        for other, theirs in lines.items():  # in order of their latest run: the latest fills last
            if other[:3] == key[:3] and other != key:
                points.update((x, p) for x, p in theirs.items() if x < lowest)
        points.update(own)
        line = [(x, *points[x]) for x in sorted(points)]
        runs = {id(r) for _, _, r in line}
        if len(line) > 1 and all({id(r) for _, _, r in done} != runs for done in drawn.values()):
            drawn[key] = line
    return drawn


def _line_labels(sweeps: dict, field: str) -> dict[tuple, str]:
    """Each line's legend entry: what tells its runs apart from the other lines' (not the swept
    field), the system first where the lines ran on several."""
    reps = {key: points[-1][2] for key, points in sweeps.items()}
    runs = list(reps.values())
    systems = rowinfo.differing(runs, lambda x: x.system_label)
    labels = {}
    for key, r in reps.items():
        text = " ".join(t for k, t in _parts(r, runs) if k != SWEPT[field] and _differs(runs, k))
        text = text or model_title(r)
        labels[key] = f"{r.system_label}: {text}" if systems else text
    return labels


def _one_line(labels: dict) -> str:
    """The caption's name for a figure's only line, which gets no legend."""
    return f" The line: {shorten(visible(next(iter(labels.values()))), 120)}." if len(labels) == 1 else ""


def _swept_runs(sweeps: dict) -> list[Result]:
    return [r for points in sweeps.values() for _, _, r in points]


def _x_axis(ax, sweeps: dict, xlabel: str) -> None:
    """Log base 2, ticks at the values measured, as plain numbers (1, 2, 8; never 2^0)."""
    ax.set_xscale("log", base=2)
    _plain_ticks(ax.xaxis, [x for points in sweeps.values() for x, _, _ in points])
    ax.set_xlabel(xlabel)


def batch_plots(results: list[Result]) -> list[Plot]:
    """Throughput against the batch size, one figure per unit, from zero up."""
    sweeps = _sweeps(results, "batch")
    units = sorted({k[0] for k in sweeps})
    plots = []
    for unit in units:
        mine = {k: v for k, v in sweeps.items() if k[0] == unit}
        labels = _line_labels(mine, "batch")
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for key, points in sorted(mine.items(), key=lambda kv: labels[kv[0]]):
            ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker="o", label=_label(labels[key]))
        _x_axis(ax, mine, "batch size")
        ax.set_ylim(bottom=0)
        ax.set_ylabel(_label(unit))
        ax.grid(alpha=0.3)
        _legend(ax)
        slug = f"-{''.join(c if c.isalnum() else '-' for c in unit)}" if len(units) > 1 else ""
        plots.append(Plot(f"batch-sweep{slug}", "Batch-size sweeps" + (f" ({unit})" if len(units) > 1 else ""),
                          f"Throughput ({unit}) against the batch size, from zero up."
                          f"{_one_line(labels)}{_shared(_swept_runs(mine))}", _svg(fig)))
    return plots


def efficiency(points: list[tuple[float, float, Result]], unit: str) -> list[float]:
    """Scaling efficiency at each point against the line's fewest GPUs: throughput per GPU over
    that on the fewest (1.0: perfect). 3D training in iterations per minute is weak scaling with
    a patch per GPU each iteration: perfect keeps the iterations per minute, so its ratio is theirs."""
    base_x, base_y, _ = points[0]
    if unit == "iters/min":
        return [y / base_y for _, y, _ in points]
    return [(y / x) / (base_y / base_x) for x, y, _ in points]


def scaling_plots(results: list[Result]) -> list[Plot]:
    """Scaling efficiency against the GPUs, every unit in one figure (efficiency has none), the
    throughput written at each point. Efficiency, from zero with 1.0 marked: a throughput axis
    fitted to its points draws a dip of under 1% as a collapse."""
    sweeps = _sweeps(results, "gpus")
    if not sweeps:
        return []
    labels = {key: f"{text} ({' → '.join(sig(y) for _, y, _ in sweeps[key])} {key[0]})"
              for key, text in _line_labels(sweeps, "gpus").items()}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    top = 1.0
    for key, points in sorted(sweeps.items(), key=lambda kv: labels[kv[0]]):
        xs, ys = [x for x, _, _ in points], efficiency(points, key[0])
        top = max(top, *ys)
        ax.plot(xs, ys, marker="o", label=_label(labels[key]))
    _x_axis(ax, sweeps, "GPUs")
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel("scaling efficiency (1.0: perfect)")
    ax.grid(alpha=0.3)
    _legend(ax)
    caption = ("Scaling efficiency: throughput per GPU on N GPUs over throughput per GPU on the fewest GPUs measured "
               "(dashed: 1.0, perfect scaling; 0.9: a tenth of each GPU's time lost to communication or waiting). "
               "3D training (iters/min, a patch per GPU each iteration): iterations per minute on N GPUs over those "
               "on the fewest. Each line's name ends with its measured throughputs, fewest GPUs first."
               + _one_line(labels) + _shared(_swept_runs(sweeps)))
    return [Plot("scaling", "Scaling with GPUs", caption, _svg(fig))]


def _steps_notes(runs: list[Result]) -> str:
    """What the workloads in the plot say of their steps, each once."""
    return "".join(f" {note}" for note in dict.fromkeys(declared(r.workload).steps_note for r in runs) if note)


def latency_plots(results: list[Result]) -> list[Plot]:
    """A box per run of its per-step times, the median and p99 written beside it: where a run's
    steps are steady its box and whiskers are narrower than a line, and the numbers still say it."""
    runs = [r for r in latest_ok(results) if r.samples.get("step")][-MAX_DISTRIBUTIONS:]
    if not runs:
        return []
    plt = _pyplot()
    labels = [_label(_run_label(r, runs)) for r in runs]
    fig, ax = plt.subplots(figsize=(8, 0.8 + _row_height(labels) * len(runs)))
    data = [np.asarray(r.samples["step"], dtype=float) * 1e3 for r in runs]
    ax.boxplot(data, whis=(1, 99), showfliers=True, flierprops={"markersize": 2}, **_horizontal())
    ax.set_yticks(range(1, len(runs) + 1), labels)
    ax.invert_yaxis()
    low, high = min(float(d.min()) for d in data), max(float(d.max()) for d in data)
    if high > 3 * low > 0:  # a log axis only where the runs span more than a factor 3
        ax.set_xscale("log")
        _plain_ticks(ax.xaxis)
    for i, d in enumerate(data, start=1):
        median, p99 = np.percentile(d, [50, 99])
        # named: the tables beside it give means (a phase table's Total, a mean iteration) as well
        ax.annotate(f"median {sig(median)} ms, p99 {sig(p99)}", (1.01, i), xycoords=("axes fraction", "data"), va="center",
                    fontsize="small")
    ax.set_xlabel("step time (ms)")
    ax.grid(axis="x", alpha=0.3)
    caption = ("Per-step times of each run: the box spans the middle half of the steps (p25 to p75), the line in it "
               "is the median, the whiskers reach the fastest and slowest steps within p1 to p99 and the dots are the "
               "steps beyond. Beside each box: its median and p99 in ms (a box of steady steps is as thin as a line)."
               + _steps_notes(runs) + _shared(runs))
    return [Plot("latency", "Step time distributions", caption, _svg(fig))]


TRACE_SERIES = (("sm_clock_mhz", "SM clock (MHz)"), ("power_w", "power (W)"), ("util", "utilisation (%)"),
                ("temperature_c", "temperature (°C)"))
_ALIASES = {"temperature_c": ("temperature_c", "temp_c")}


def _trace(r: Result) -> dict[str, list[float]] | None:
    monitor = (r.traces or {}).get("monitor")
    if not isinstance(monitor, dict) or not isinstance(monitor.get("t"), list) or not monitor["t"]:
        return None
    n = len(monitor["t"])
    series = {}
    for key, _ in TRACE_SERIES:
        for name in _ALIASES.get(key, (key,)):
            values = monitor.get(name)
            if isinstance(values, list) and len(values) == n and any(v is not None for v in values):
                series[key] = _floats(values)
                break
    return {"t": _floats(monitor["t"]), **series} if series else None


def _floats(values: list) -> list[float]:
    # Readings NVML could not take are None: drawn as gaps.
    return [float("nan") if v is None else float(v) for v in values]


def trace_plots(results: list[Result]) -> list[Plot]:
    runs = [(r, t) for r in latest_ok(results) if (t := _trace(r))][-MAX_TRACES:]
    if not runs:
        return []
    plt = _pyplot()
    present = [(k, label) for k, label in TRACE_SERIES if any(k in t for _, t in runs)]
    fig, axes = plt.subplots(len(present), 1, figsize=(8, 2.2 * len(present)), sharex=True, squeeze=False)
    drawn = [run for run, _ in runs]
    for (key, label), ax in zip(present, axes[:, 0]):
        for r, t in runs:
            if key in t:
                start = t["t"][0]
                ax.plot([x - start for x in t["t"]], t[key], label=_label(_run_label(r, drawn)))
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)  # from zero: fitted to 1920-1980 MHz, a 3% dip would look like a fall
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds into the measured window")
    _legend(axes[0, 0])
    one = f" The run: {shorten(visible(_short(drawn[0])), 120)}." if len(drawn) == 1 else ""
    return [Plot("gpu-traces", "GPU clock and power", "GPU readings sampled during each measured window." + one
                 + _shared(drawn), _svg(fig))]


def ceiling_plots(results: list[Result]) -> list[Plot]:
    shares = [(r, r.measured.utilisation) for r in latest_ok(results)]
    shares = [(r, u) for r, u in shares if isinstance(u.ceiling_fraction, (int, float))]
    runs = [r for r, _ in shares]
    if not runs:
        return []
    plt = _pyplot()
    labels = [_label(_run_label(r, runs)) for r in runs]
    fig, ax = plt.subplots(figsize=(8, 0.8 + _row_height(labels) * len(runs)))
    values = [100.0 * float(u.ceiling_fraction) for _, u in shares]
    bars = ax.barh(range(len(runs)), values)
    for bar, (_, u) in zip(bars, shares):
        achieved = u.achieved_tflops
        if isinstance(achieved, (int, float)):
            ax.annotate(f" {sig(achieved)} TFLOP/s", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                        va="center", fontsize="small")
    ax.set_yticks(range(len(runs)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(100.0, max(values) * 1.15))
    ax.axvline(100.0, color="grey", linestyle="--")
    ax.set_xlabel("% of the measured matmul ceiling for the precision used")
    return [Plot("ceiling", "Utilisation against the measured matmul ceiling",
                 "Achieved model TFLOP/s as a share of the matmul ceiling measured on that machine for the precision "
                 "that ran (by `dlbench system`, or once by the first run that needed it); dashed: 100%, the "
                 "ceiling." + _shared(runs),
                 _svg(fig))]


PROFILE_COLOURS = {"tensor_core": "#1f77b4", "matmul": "#aec7e8", "elementwise": "#ff7f0e", "reduction": "#ffbb78",
                   "other": "#8c564b", "d2d": "#9467bd", "h2d": "#c5b0d5", "d2h": "#e377c2", "communication": "#2ca02c",
                   "idle": "#bbbbbb"}
MAX_ROOFLINE_RUNS = 6
ASSUMED_INTENSITY = 0.25  # FLOP/byte where a class's FLOPs are not counted: where elementwise passes sit


def profile_label(r: Result, runs: list[Result], figure: bool = False) -> str:
    """A profiled run among others: its label, and the workload options in which the runs differ
    (volume's --kernels pytorch beside --kernels fused). In a table (no caption to hold what the
    runs share) the model and its settings always, the level where levels differ; in a figure
    only what differs."""
    options = [x.setup.options for x in runs]
    mine = r.setup.options
    differ = sorted({k for o in options for k in o if len({json.dumps(x.get(k), sort_keys=True) for x in options}) > 1})
    label = _run_label(r, runs) if figure else _row_label(r, runs)
    return " ".join([label, *(f"{k}={mine.get(k)}" for k in differ if k in mine)])


def _row_label(r: Result, runs: list[Result]) -> str:
    """A table row's name for a run (its workload stands in a column before it): model, batch,
    precision and GPUs, then what differs, 'eager' included where the levels differ."""
    parts = dict(_parts(r, runs))
    texts = [parts.get(k) for k in FULL]
    texts += [parts.get(k) or ("eager" if k == "level" else "") for k in ("input", "data", "layout", "level", "tag")
              if _differs(runs, k)]
    text = " ".join(t for t in texts if t)
    return f"{r.system_label}: {text}" if rowinfo.differing(runs, lambda x: x.system_label) else text


def _profiled(results: list[Result]) -> list[Result]:
    return [r for r in latest_ok(results) if profile.profile_of(r)][-MAX_DISTRIBUTIONS:]


def profile_plots(results: list[Result]) -> list[Plot]:
    """One stacked bar per profiled run: the step's time by class, GPU idle included."""
    runs = _profiled(results)
    if not runs:
        return []
    plt = _pyplot()
    labels = [_label(profile_label(r, runs, figure=True)) for r in runs]
    fig, ax = plt.subplots(figsize=(8, 0.9 + (_row_height(labels) + 0.05) * len(runs)))
    present = [c for c in PROFILE_COLOURS if any(profile.profile_of(r).share(c) is not None for r in runs)]
    left = np.zeros(len(runs))
    for cls in present:
        shares = np.array([100.0 * (profile.profile_of(r).share(cls) or 0.0) for r in runs])
        ax.barh(range(len(runs)), shares, left=left, color=PROFILE_COLOURS[cls], label=profile.CLASS_LABELS[cls])
        left += shares
    ax.set_yticks(range(len(runs)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(100.0, float(left.max()) * 1.02))
    ax.set_xlabel("% of the profiled step")
    _legend(ax)
    return [Plot("profile", "Where the step's time goes", "Each profiled run's step split into kernel classes and GPU "
                 "idle (`--profile`); the classes add up to the profiled step." + _shared(runs), _svg(fig))]


def roofline_plots(results: list[Result]) -> list[Plot]:
    """Per machine: the classes of its profiled runs as points under the measured compute and
    memory ceilings (`dlbench system`)."""
    by_system: dict[str, list[tuple[Result, Result]]] = defaultdict(list)
    for r in _profiled(results):
        record = ceilings_for(r, results)
        if record is not None and record.measured.system.copy_gbs:
            by_system[r.system_label].append((r, record))
    return [_roofline(system, pairs[-MAX_ROOFLINE_RUNS:]) for system, pairs in sorted(by_system.items())]


def _roofline(system: str, pairs: list[tuple[Result, Result]]) -> Plot:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    record = pairs[-1][1]
    bandwidth = float(record.measured.system.copy_gbs) * 1e9
    x = np.logspace(-2, 4, 200)
    roofs = {}
    for r, rec in pairs:
        for cls in profile.COMPUTE:
            ceiling, name = profile.compute_ceiling(cls, r.setup.precision, rec)
            if ceiling:
                roofs[name] = ceiling
    for name, ceiling in sorted(roofs.items(), key=lambda kv: kv[1]):
        ax.plot(x, np.minimum(ceiling, bandwidth * x) / 1e12, color="grey", linewidth=1)
        ax.annotate(name.removeprefix("matmul_").removesuffix("_tflops"), (x[-1], ceiling / 1e12), fontsize="small",
                    ha="right", va="bottom")
    runs = [r for r, _ in pairs]
    markers = "osD^vP"
    drawn = set()
    for i, (r, rec) in enumerate(pairs):
        for p in profile.placements(r, rec):
            point = _roofline_point(p, bandwidth)
            if point:
                drawn.add(p.cls)
                ax.scatter(*point, color=PROFILE_COLOURS.get(p.cls, "black"), marker=markers[i % len(markers)],
                           edgecolors="black", linewidths=0.5, zorder=3)
        ax.scatter([], [], color="white", edgecolors="black", marker=markers[i % len(markers)],
                   label=_label(profile_label(r, runs, figure=True)))
    for cls in (c for c in PROFILE_COLOURS if c in drawn):
        ax.scatter([], [], color=PROFILE_COLOURS[cls], label=profile.CLASS_LABELS[cls])
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_ticks(ax.xaxis, subs=(1.0,))
    _plain_ticks(ax.yaxis, subs=(1.0,))
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(alpha=0.3, which="both")
    _legend(ax)
    slug = "".join(c if c.isalnum() else "-" for c in system)[:40]
    return Plot(f"roofline-{slug}", f"Roofline: {shorten(system, 60)}",
                f"Kernel classes of the profiled runs under the ceilings `dlbench system` measured (grey: matmul per "
                f"precision and the {sig(bandwidth / 1e9)} GB/s copy rate). Classes whose FLOPs are not counted "
                f"(elementwise, reductions, copies) are drawn at {ASSUMED_INTENSITY} FLOP/byte, at the height their "
                f"bandwidth reaches.", _svg(fig))


def _roofline_point(p, bandwidth: float) -> tuple[float, float] | None:
    """(FLOP/byte, TFLOP/s) of one class; None for idle, host copies and classes without a rate."""
    if p.cls in profile.COMPUTE and p.flop_s:
        # Intensity not measured: drawn where the memory roof is twice as high, under the compute roof.
        intensity = p.intensity or (p.flop_s / bandwidth) * 2
        return intensity, p.flop_s / 1e12
    if p.bytes_s and p.ceiling_name == "copy_gbs":  # host copies are bound by the link, not by memory
        return ASSUMED_INTENSITY, p.bytes_s * ASSUMED_INTENSITY / 1e12
    return None


def learning_curve_plots(results: list[Result]) -> list[Plot]:
    """One figure per run of report/curves.py's (the newest MAX_RUNS): loss and DICE against the
    step, a line per fold."""
    from dlbench.report import curves

    out = []
    for i, r in enumerate(curves.latest(results)[-curves.MAX_RUNS:]):
        fig, (loss_ax, dice_ax) = _pyplot().subplots(1, 2, figsize=(10, 3.5))
        for fold, points in curves.folds(r).items():
            steps = [p[0] for p in points]
            loss_ax.plot(steps, [p[1] for p in points], marker=".", label=f"fold {fold + 1}")
            dice_ax.plot(steps, [p[2] for p in points], marker=".", label=f"fold {fold + 1}")
        target = r.measured.convergence.target_dice
        if target is not None:
            dice_ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
        loss_ax.set_xlabel("iteration")
        loss_ax.set_ylabel("training loss (mean since the last evaluation)")
        dice_ax.set_xlabel("iteration")
        dice_ax.set_ylabel("validation DICE")
        for ax in (loss_ax, dice_ax):
            ax.grid(alpha=0.3)
        _legend(dice_ax)
        title, label = model_title(r), curves.run_label(r)
        caption = (f"{title}, {label}: the training loss (left) and the validation DICE (right) at each "
                   f"evaluation of each fold ({curves.evaluation_text(r)}); the dashed line is the target.")
        out.append(Plot(f"learning-curve-{i + 1}", f"{title}: learning curve, {label}", caption, _svg(fig)))
    return out


ALL: list[Callable[[list[Result]], list[Plot]]] = [
    throughput_plots, scaling_plots, batch_plots, latency_plots, trace_plots, ceiling_plots, profile_plots,
    roofline_plots, learning_curve_plots,
]


def plots(results: list[Result]) -> list[Plot]:
    return [p for make in ALL for p in make(results)]
