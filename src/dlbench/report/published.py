"""The seeds' published tables (system/references.yaml), their arithmetic checked, as rows for
the report (`dlbench report --with-references`) and as references for `dlbench doctor`.

Figures stay the strings the seeds print (19.58, 0.1022), so a published row reads exactly as
in its report. Each row carries the `Slip`s found in it: a derived figure (iterations per
minute, a speed-up, weak scaling, hours for a volume, throughput from latency) that the row's
own inputs do not give, with what they do give. Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from dlbench.report import derived
from dlbench.figures import fixed

ITERATIONS_000 = 1001  # seed 000: "the time for 1001 iterations" (seed 001 says 1000)
TARGET_ITERATIONS = 100_000  # seed 001's "100k Iters [d]"
CREMI_PADDED = (200, 3072, 3072)  # the "~1.9 gigavoxel" volume: 1.887e9 voxels
PLATYNEREIS = 8.1e12
MIXED = "fp16"  # the seeds' "mixed precision" is TF-AMP / apex fp16
NAMES = {"fp32": "FP32", "tf32": "TF32", "fp16": "mixed precision", "bf16": "mixed precision (bf16)"}
# How the reports name each publication to users (its own title); the keys are internal.
PUBLICATIONS = {"000": "GPU Benchmarks", "001": "GPU Benchmark Summary", "002": "BenchmarkJade",
                "003": "NVIDIA UNet_Medical", "004": "GPU in the Cloud (cnn-benchmarks)"}


def publication(seed: str) -> str:
    """'004' -> 'GPU in the Cloud (cnn-benchmarks)'; '000, 001' names both reports."""
    return ", ".join(PUBLICATIONS[s] for s in seed.split(", "))


@dataclass
class Slip:
    column: str
    printed: str
    computed: str
    how: str  # the arithmetic, e.g. "120.08 / 40.50"
    kind: str = "slip"  # 'slip' (arithmetic) or 'inconsistent' (figures that cannot all hold)

    def text(self) -> str:
        verb = "gives" if self.kind == "slip" else "would give"
        return f"{self.column}: printed {self.printed}, {self.how} {verb} {self.computed}"


@dataclass
class Row:
    """One published row: `cells` by column key, as printed; `slips` found in it."""
    seed: str  # '000', '001', '000, 001', '002', '003', '004'
    source: str
    cells: dict[str, str]
    gpu: str | None = None  # datasheet name; None for a CPU
    gpus: int = 1
    slips: list[Slip] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        value = self.cells.get(key)
        return None if value in (None, "-", "") else value

    def number(self, key: str) -> float | None:
        value = self.get(key)
        return None if value is None else float(value)

    def slipped(self, column: str) -> bool:
        return any(s.column == column for s in self.slips)

    def mark(self, column: str, value: str | None) -> str | None:
        """The printed figure, marked † where this row's arithmetic does not give it."""
        if value is None:
            return None
        return f"{value} †" if self.slipped(column) else value

    def check_text(self) -> str:
        return "; ".join(f"† {s.text()}" for s in self.slips) if self.slips else "ok"


def cells(block: str) -> list[list[str]]:
    """A pasted Markdown table block -> rows of stripped cells."""
    rows = []
    for line in block.strip().splitlines():
        line = line.strip()
        if line:
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


@lru_cache(maxsize=1)
def data() -> dict[str, Any]:
    text = resources.files("dlbench.system").joinpath("references.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def measured_with(seed: str, model: str) -> bool:
    """Whether `model` is the model whose published rows `seed` holds."""
    return model == data()[seed]["model"]


def datasheet_name(printed: str) -> str | None:
    names = data()["gpus"]
    if printed.startswith("CPU"):
        return None
    return names.get(printed, printed)


def _decimals(text: str) -> int:
    return len(text.partition(".")[2])


def _same(printed: str, value: float, slack: float = 0.0) -> bool:
    """Does `value`, rounded like `printed`, give `printed` (within `slack` in its last place)?"""
    places = _decimals(printed)
    unit = 10.0 ** -places
    return abs(float(printed) - value) <= unit / 2 + slack * unit + 1e-9


# ---- seed 004 ------------------------------------------------------------------------------

def seed004(model: str) -> list[Row]:
    """The published rows of one model's table (GPU | cuDNN | Forward | Backward | Total)."""
    block = data()["seed004"]
    rows = []
    for gpu, cudnn, forward, backward, total in cells(block["models"].get(model, "")):
        row = Row("004", block["source"], {"gpu": gpu, "cudnn": cudnn, "forward_ms": forward,
                                            "backward_ms": backward, "total_ms": total}, gpu=datasheet_name(gpu))
        # The seed's Total is the sum before rounding: within one unit of the last place of F + B.
        summed = float(forward) + float(backward)
        if not _same(total, summed, slack=1.0):
            row.slips.append(Slip("Total (ms)", total, fixed(summed, 2), f"{forward} + {backward}"))
        rows.append(row)
    return rows


def seed004_models() -> list[str]:
    return list(data()["seed004"]["models"])


def seed004_oom(model: str) -> list[str]:
    return list(data()["seed004"].get("oom", {}).get(model, []))


# ---- seeds 000 and 001 ---------------------------------------------------------------------

_SYSTEM = re.compile(r"^(?:(?P<site>[A-Za-z]+):)?(?P<gpu>[\w-]+?)(?:\(x(?P<n>\d+)\))?$")


def _systems(block: str, columns: int) -> list[tuple[str, str, int, list[str]]]:
    """(row label with its site, GPU key, GPU count, the other cells) for a 000/001 table; '(xN)'
    rows belong to the site of the single-GPU row above them ('P100 (x2)' under 'SMC: P100')."""
    out, site_of = [], {}
    for row in cells(block):
        m = _SYSTEM.match(row[0].replace(" ", ""))
        if m is None:
            raise ValueError(f"unreadable system {row[0]!r} in references.yaml")
        gpu, n = m.group("gpu"), int(m.group("n") or 1)
        site = m.group("site") or site_of.get(gpu, "")
        if n == 1:
            site_of[gpu] = site
        label = f"{site}:{gpu}" if site else gpu
        out.append((label + (f" (x{n})" if n > 1 else ""), f"{site} {gpu}".strip(), n, row[1:columns]))
    return out


def _gpu_of(key: str) -> str:
    names = data()["gpus"]
    site, _, gpu = key.rpartition(" ")
    return names.get(key) or names.get(gpu) or gpu


def seed000_001() -> list[Row]:
    """One row per system and GPU count with every column the two seeds print for it:
    training [s], inference [s], iters/min, Mvox/s, 100k iters [d], Platynereis [h]."""
    d = data()
    rows: dict[str, Row] = {}

    def row(label: str, key: str, n: int, seed: str) -> Row:
        if label not in rows:
            rows[label] = Row(seed, d[f"seed{seed}"]["source"], {"system": label}, gpu=_gpu_of(key), gpus=n)
        found = rows[label]
        if seed not in found.seed.split(", "):
            found.seed = ", ".join(sorted(found.seed.split(", ") + [seed]))
            found.source = d["seed001"]["source"] if "001" in found.seed else found.source
        return found

    for seed, times in (("000", d["seed000"]["times"]), ("001", d["seed001"]["times"])):
        for label, key, n, (cuda, torch, training, inference) in _systems(times, 5):
            r = row(label, key, n, seed)
            r.cells.update({"cuda": cuda, "pytorch": torch, "training_s": training, "inference_s": inference})
    for label, key, n, (per_min, mvox) in _systems(d["seed000"]["rates"], 3):
        row(label, key, n, "000").cells.update({"iters_per_min": per_min, "mvox_per_s": mvox})
    for label, key, n, (per_min, days) in _systems(d["seed001"]["iterations"], 3):
        row(label, key, n, "001").cells.update({"iters_per_min": per_min, "days_100k": days})
    for label, key, n, (mvox, hours) in _systems(d["seed001"]["prediction"], 3):
        row(label, key, n, "001").cells.update({"mvox_per_s": mvox, "platynereis_h": hours})
    for r in rows.values():
        r.slips = _check_3d(r)
    return list(rows.values())


def _check_3d(r: Row) -> list[Slip]:
    slips = []
    training, per_min = r.get("training_s"), r.get("iters_per_min")
    if training and per_min:
        options = [derived.iters_per_min(n, float(training)) for n in (ITERATIONS_000, ITERATIONS_000 - 1)]
        if not any(_same(per_min, v) for v in options):
            slips.append(Slip("Iters / Min", per_min, fixed(options[0], 1), f"60 x {ITERATIONS_000} / {training} s"))
    days = r.get("days_100k")
    if days and per_min:
        rates = [float(per_min)] + ([derived.iters_per_min(ITERATIONS_000, float(training))] if training else [])
        if not any(_same(days, derived.days_to(TARGET_ITERATIONS, v)) for v in rates):
            slips.append(Slip("100k Iters [d]", days, fixed(derived.days_to(TARGET_ITERATIONS, float(per_min)), 1),
                              f"100,000 / {per_min} / 1440"))
    inference, mvox = r.get("inference_s"), r.get("mvox_per_s")
    voxels = CREMI_PADDED[0] * CREMI_PADDED[1] * CREMI_PADDED[2]
    if inference and mvox and not _same(mvox, derived.mvox_per_s(voxels, float(inference))):
        slips.append(Slip("Megavox / s", mvox, fixed(derived.mvox_per_s(voxels, float(inference)), 1),
                          f"{voxels / 1e9:.3f} Gvox / {inference} s"))
    hours = r.get("platynereis_h")
    if hours and mvox and not _same(hours, derived.hours_for(PLATYNEREIS, float(mvox))):
        slips.append(Slip("Platynereis [h]", hours, fixed(derived.hours_for(PLATYNEREIS, float(mvox)), 1),
                          f"8.1e12 voxels / ({mvox} x 10^6 voxels/s) / 3600"))
    return slips


# ---- seed 002 ------------------------------------------------------------------------------

SEED002_COLUMNS = ("cluster", "dataset", "benchmark", "device", "devices", "workers",
                   "data_s", "processing_s", "forward_s", "backward_s")
SEED002_WORKLOAD = {"Train": "train", "Inference": "infer", "Smooth Inference": "smooth"}


def seed002() -> list[Row]:
    block = data()["seed002"]
    rows = [Row("002", block["source"], dict(zip(SEED002_COLUMNS, c)), gpu=datasheet_name(c[3]), gpus=int(c[4]))
            for c in cells(block["rows"])]
    # The forward pass does not depend on where the images came from: a forward time ten times
    # its counterpart on the other data source (same cluster, benchmark, devices) is a slip.
    by_key = {(r.cells["cluster"], r.cells["benchmark"], r.cells["devices"], r.cells["dataset"]): r for r in rows}
    for (cluster, benchmark, devices, dataset), r in by_key.items():
        other = by_key.get((cluster, benchmark, devices, "Dummy" if dataset == "ImageNet" else "ImageNet"))
        mine, theirs = r.number("forward_s"), other.number("forward_s") if other else None
        if mine and theirs and mine > 5 * theirs:
            r.slips.append(Slip("Forward Time", r.cells["forward_s"], f"about {other.cells['forward_s']}",
                                f"the {other.cells['dataset']} row's forward time ({other.cells['forward_s']}; "
                                f"the forward pass does not depend on the data)", kind="inconsistent"))
    return rows


def seconds_to_ms(text: str | None) -> str | None:
    """'0.1022' s -> '102.2' ms, keeping exactly the printed digits ('0.0100' -> '10.0', '0.559' -> '559')."""
    if text in (None, "-", ""):
        return None
    return format(Decimal(text).scaleb(3), "f")  # '0.0100' -> '10.0': its places stay


# ---- seed 003 ------------------------------------------------------------------------------

def seed003_systems() -> dict[str, dict[str, str]]:
    return data()["seed003"]["systems"]


def _check_ratio(row: Row, column: str, printed: str, top: str, bottom: str) -> None:
    """Marks the printed ratio as a slip where the row's own figures, top / bottom, do not give it."""
    computed = float(top) / float(bottom)
    if not _same(printed, computed):
        row.slips.append(Slip(column, printed, fixed(computed, 2), f"{top} / {bottom}"))


def _row003(system: str, gpus: str, figures: dict[str, str]) -> Row:
    """A row of seed 003's training or accuracy table; extra["full"] names the system's full precision."""
    info = seed003_systems()[system]
    return Row("003", info["source"], {"system": system, "gpus": gpus, **figures},
               gpu=datasheet_name(system), gpus=int(gpus), extra={"full": info["full"]})


def seed003_training() -> list[Row]:
    """GPUs | Batch | throughput per precision | speedup | weak scaling per precision."""
    d = data()["seed003"]
    rows = []
    for system, block in d["training"].items():
        full = d["systems"][system]["full"]
        parsed = cells(block)
        single = {(r[1]): r for r in parsed if r[0] == "1"}
        for gpus, batch, t_full, t_mixed, speedup, w_full, w_mixed in parsed:
            row = _row003(system, gpus, {"batch": batch, f"throughput_{full}": t_full, f"throughput_{MIXED}": t_mixed,
                                         "speedup": speedup, f"weak_{full}": w_full, f"weak_{MIXED}": w_mixed})
            _check_ratio(row, f"Throughput speedup ({NAMES[full]} - mixed precision)", speedup, t_mixed, t_full)
            one = single.get(batch)
            for precision, weak, value, index in ((full, w_full, t_full, 2), (MIXED, w_mixed, t_mixed, 3)):
                if weak != "-" and one is not None:  # weak scaling: N GPUs over 1 at the same batch
                    _check_ratio(row, f"Weak scaling - {NAMES[precision]}", weak, value, one[index])
            rows.append(row)
    return rows


def seed003_accuracy() -> list[Row]:
    """GPUs | Batch | accuracy per precision | minutes to train per precision | speedup."""
    blocks = data()["seed003"]["accuracy"]
    return [_accuracy_row(system, *c) for system, block in blocks.items() if system != "iterations" for c in cells(block)]


def _accuracy_row(system: str, gpus: str, batch: str, a_full: str, a_mixed: str, m_full: str, m_mixed: str,
                  speedup: str) -> Row:
    full = seed003_systems()[system]["full"]
    row = _row003(system, gpus, {"batch": batch, f"accuracy_{full}": a_full, f"accuracy_{MIXED}": a_mixed,
                                 f"minutes_{full}": m_full, f"minutes_{MIXED}": m_mixed, "speedup": speedup})
    _check_ratio(row, "Time to train speedup", speedup, m_full, m_mixed)
    return row


def seed003_inference() -> list[Row]:
    d = data()["seed003"]
    rows = []
    for key, block in d["inference"].items():
        system, _, precision = key.rpartition(" ")
        info = d["systems"][system]
        for batch, resolution, throughput, avg, p90, p95, p99 in cells(block):
            row = Row("003", info["source"], {"system": system, "precision": precision, "batch": batch,
                                              "resolution": resolution, "throughput": throughput, "latency_avg_ms": avg,
                                              "latency_p90_ms": p90, "latency_p95_ms": p95, "latency_p99_ms": p99},
                      gpu=datasheet_name(system))
            # Latency is per batch: batch / average latency is the throughput. Where they differ by
            # more than 1% the two columns cannot both hold (a mean of per-step rates, perhaps).
            computed = int(batch) * 1e3 / float(avg)
            if abs(float(throughput) / computed - 1) > 0.01:
                row.slips.append(Slip("Throughput Avg [img/s]", throughput, fixed(computed, 2),
                                      f"{batch} images / {avg} ms", kind="inconsistent"))
            rows.append(row)
    return rows


def all_rows() -> list[Row]:
    return ([r for m in seed004_models() for r in seed004(m)] + seed000_001() + seed002() + seed003_training()
            + seed003_accuracy() + seed003_inference())


def slips() -> list[tuple[Row, Slip]]:
    """Every figure the seeds print that their own numbers do not give."""
    return [(r, s) for r in all_rows() for s in r.slips]


# ---- references for doctor -----------------------------------------------------------------

def references() -> list[dict[str, Any]]:
    """The published figures as doctor's references (Reference fields), GPU rows only: a CPU is
    never a reference for a GPU. Derived figures come from the seeds' raw times, not their
    (sometimes slipped) derived columns."""
    out: list[dict[str, Any]] = []
    d = data()
    block = d["seed004"]
    for model in seed004_models():
        for r in seed004(model):
            if r.gpu is None:
                continue
            total = float(r.cells["forward_ms"]) + float(r.cells["backward_ms"])
            out.append(dict(source=f"{r.source}, cuDNN {r.cells['cudnn']}", gpu=r.gpu, gpus=1, workload="fwdbwd",
                            model=model, batch=block["batch"], input_shape=list(block["input_shape"]),
                            precision=block["precision"], metric="throughput", value=block["batch"] * 1e3 / total,
                            unit="img/s", note=f"forward {r.cells['forward_ms']} ms + backward {r.cells['backward_ms']} "
                                               f"ms per batch of {block['batch']}"))
    voxels = CREMI_PADDED[0] * CREMI_PADDED[1] * CREMI_PADDED[2]
    for r in seed000_001():
        what = f"{r.cells['system']}, {publication(r.seed)}"
        if r.get("training_s"):
            out.append(dict(source=f"{r.source} ({r.cells['system']})", gpu=r.gpu, gpus=r.gpus, workload="train",
                            model="unet3d-aniso", batch=1, precision="fp32", metric="throughput",
                            value=derived.iters_per_min(ITERATIONS_000, r.number("training_s")), unit="iters/min",
                            note=f"{what}: {ITERATIONS_000} iterations in {r.cells['training_s']} s, one patch per GPU"))
        if r.get("inference_s"):
            out.append(dict(source=f"{r.source} ({r.cells['system']})", gpu=r.gpu, gpus=r.gpus, workload="volume",
                            model="unet3d-aniso", batch=None, precision="fp32", metric="throughput",
                            value=derived.mvox_per_s(voxels, r.number("inference_s")), unit="Mvox/s",
                            note=f"{what}: the padded CREMI volume ({voxels / 1e9:.3f} Gvox) in {r.cells['inference_s']} s"))
    for r in seed002():
        if r.cells["cluster"] == "JADE2":  # the machine that seed asks about, not a reference
            continue
        workload = SEED002_WORKLOAD[r.cells["benchmark"]]
        if workload == "smooth":
            continue
        parts = [r.number(k) or 0.0 for k in ("data_s", "processing_s", "forward_s", "backward_s")]
        out.append(dict(source=f"{r.source}, cluster {r.cells['cluster']}, {r.cells['dataset']} data, "
                               f"{r.cells['workers']} workers", gpu=r.gpu, gpus=r.gpus, workload=workload,
                        model=d["seed002"]["model"], batch=None, precision="fp32", metric="step_s", value=sum(parts),
                        unit="s/step", dataset=r.cells["dataset"].lower(), data_wait_s=parts[0],
                        note="seconds per step; batch size not published"))
    for r in seed003_training():
        for precision in (r.extra["full"], MIXED):
            out.append(dict(source=r.source, gpu=r.gpu, gpus=r.gpus, workload="train", model=d["seed003"]["model"],
                            batch=int(r.cells["batch"]), input_shape=list(d["seed003"]["input_shape"]),
                            precision=precision, metric="throughput", value=float(r.cells[f"throughput_{precision}"]),
                            unit="img/s", note="batch per GPU" + ("; mixed precision is fp16" if precision == MIXED else "")))
    for r in seed003_inference():
        out.append(dict(source=r.source, gpu=r.gpu, gpus=1, workload="infer", model=d["seed003"]["model"],
                        batch=int(r.cells["batch"]), input_shape=list(d["seed003"]["input_shape"]),
                        precision=r.cells["precision"], metric="throughput", value=float(r.cells["throughput"]),
                        unit="img/s", note=""))
    return out
