"""The report's legend: every abbreviation and mark its tables use, explained once for a reader
who has not read the publications. Only the entries whose term appears in the report's tables
(titles, notes, headers, cells) are listed, so the legend grows with the report and never
explains what the reader cannot see."""

from __future__ import annotations

import re

from dlbench.figures import ODD_LEGEND
from dlbench.report.tables import Table

TITLE = "Legend: abbreviations and marks"
ABOUT = "Every abbreviation and mark the tables above use, for a reader who has not read the publications."

# (term as shown, what in the report's text shows it is used, meaning). A pattern of None: the term itself.
ENTRIES: tuple[tuple[str, str | None, str], ...] = (
    ("dlbench", r"\|dlbench\|?$|^dlbench$", "A row measured by dlbench on the machine of this store; the other Source "
                                           "names are publications, their figures copied as printed."),
    ("†", None, "A published figure that the publication's own columns do not give (an arithmetic slip or figures "
                "that cannot all hold); the Check line under the table says what they give."),
    ("Check", r"^Check, ", "A line under a table: for a published row with †, what its own figures give instead."),
    ("(extrapolated …)", r"\(extrapolated", "Not measured as the column defines it: the measured rate scaled to the "
                                           "column's size (more iterations, a larger volume), from what the bracket says."),
    ("(of …)", r"\d \(of \d+x", "A wall time of the volume the run predicted, named in the bracket, which is smaller "
                                 "than the one the row's Inference is extrapolated to."),
    ("(data-bound)", r"\(data-bound\)", "The run waited for its data loader for much of each batch: its times are the "
                                        "loader's stalls, not the model's; the note under the table gives the share."),
    ("(host-bound)", r"\(host-bound\)", "The GPU waited for the host to launch work for much of each step: the "
                                        "times are the host's (Python, the framework's dispatch) more than the "
                                        "GPU's; the note under the table gives the share."),
    ("(clamped)", r"\(clamped\)", "Other Time came out a few microseconds below zero (device and host clocks overlap) "
                                  "and is shown as 0."),
    ("(medians)", r"\(medians\)", "A record from before per-phase means were stored: Total is the sum of phase "
                                  "medians, which need not equal the wall time."),
    ("?", r"^\?$", ODD_LEGEND + "; the table 'Stored values that are not valid figures' lists them."),
    ("!", r" !$", "A scaling efficiency above 1: N processes did more than N times the work of one, so the 1-GPU "
                  "run is no baseline for that row."),
    ("*", r"\d\*$| \*$", "A fold missed the DICE target; its whole training budget counts in the time."),
    ("-", r"^-$", "No figure: not measured here, or not published for that row."),
    ("OOM", None, "The run ran out of device memory at that size."),
    ("x1, x2, x4", r" x\d+\b", "Run on that many GPUs (devices) at once, one process each."),
    ("fp32, tf32", r"\b(?:fp32|FP32|tf32|TF32)\b", "Full precision: 32-bit floats; tf32 lets the tensor cores "
                                                   "multiply them with a 10-bit mantissa."),
    ("fp16, bf16, mixed precision", r"\b(?:fp16|bf16)\b|mixed precision",
     "Mixed precision: most arithmetic in 16-bit floats (fp16 or bfloat16), weights kept in fp32; the "
     "publications' 'mixed precision' is fp16."),
    ("channels-last", None, "The images stored as N x H x W x C in memory, the layout tensor cores prefer."),
    ("aniso", r"\(aniso\)", "The anisotropic 3D U-Net of GPU Benchmarks: it pools only in-plane (x, y), as "
                            "electron microscopy volumes such as CREMI are finer in-plane than in depth."),
    ("halo", r"\bhalo\b", "In prediction of a large volume in blocks: the margin each block reads around itself so "
                          "that its output has no seams; it is computed but not kept."),
    ("Gvox, Tvox, Megavox / s", r"Gvox|Tvox|Megavox", "10^9 and 10^12 voxels (3D pixels); Megavox / s: 10^6 voxels "
                                                      "predicted per second."),
    ("Platynereis", None, "The 8.1 teravoxel electron microscopy volume of a Platynereis worm that GPU Benchmarks "
                          "extrapolates prediction to."),
    ("CREMI", None, "The electron microscopy data set of the MICCAI CREMI challenge the 3D U-Net trains on."),
    ("VM:, Cluster:, SMC:", r"VM:|Cluster:|SMC:", "Where a GPU Benchmarks row ran, as it labels it: VM, a virtual "
                                                   "machine; Cluster, nodes of EMBL's compute cluster with their GPUs on "
                                                   "PCIe; SMC, a Supermicro test system whose GPUs are joined by NVLink."),
    ("TN, JADE2", r"\bTN\b|JADE2", "BenchmarkJade's clusters: JADE2, the UK's JADE 2 GPU cluster it examines, and TN, "
                                   "the cluster it compares it with (the publication does not spell the name out)."),
    ("Dummy, Synthetic, JPEG folder", r"Dummy|Synthetic|JPEG folder",
     "The images a run reads: Dummy, random images made on the CPU and passed through the real transforms by "
     "data-loader workers (no files, no decoding); "
     "Synthetic, a tensor made once on the device (no loading at all); JPEG folder, real JPEG files read and "
     "decoded from disk."),
    ("DICE", r"\bDICE\b", "The overlap of a segmentation with the true one: 2 |A ∩ B| / (|A| + |B|), 1 is perfect."),
    ("Latency 90%, 95%, 99%", r"Latency \d\d%", "The time per batch that 90%, 95% or 99% of the batches stay under."),
    ("cuDNN", None, "NVIDIA's library of neural-network kernels; its version changes the speed."),
    ("tagged", r"tagged `|^Tag$", "The name given to a set of runs (`--tag`), to tell them from others in one store."),
    ("GPU Benchmarks, GPU Benchmark Summary", r"GPU Benchmark", "Two reports of EMBL's 3D U-Net timings (PyTorch 0.4): "
     "1001 training iterations on CREMI and prediction of a padded 1.89 gigavoxel CREMI volume, on 1 to 4 GPUs."),
    ("BenchmarkJade", None, "A report on the JADE 2 GPU cluster: one epoch of ResNet-50 training, inference and "
                            "repeated ('smooth') inference on ImageNet and on dummy images, its time split into data "
                            "loading, forward and backward per batch."),
    ("NVIDIA UNet_Medical", None, "NVIDIA's 2D U-Net example for medical and microscopy images (TensorFlow 1): "
                                  "training and inference throughput and latency on DGX machines, DICE and time to train."),
    ("GPU in the Cloud (cnn-benchmarks)", r"cnn-benchmarks", "A comparison of cloud GPUs with a desktop GPU and a "
                                                             "CPU: forward and backward time of common image classifiers "
                                                             "at batch 16, built on jcjohnson/cnn-benchmarks."),
    ("ImageNet", r"\bImageNet\b", "The 1.28 million labelled photographs most image classifiers train on."),
    ("ISBI 2012", None, "The electron microscopy images of neurons of the ISBI 2012 segmentation challenge (30 "
                        "images of 512 x 512) that NVIDIA UNet_Medical trains on."),
)


def _texts(tables: list[Table]) -> list[str]:
    """Every piece of text a reader sees: titles, notes, headers, and each cell on its own."""
    out = []
    for t in tables:
        out += [t.title, *t.notes, *t.header]
        out += ["-" if v is None else str(v) for row in t.rows for v in row]
    return out


def _used(pattern: str, texts: list[str]) -> bool:
    found = re.compile(pattern, re.MULTILINE)
    return any(found.search(text) for text in texts)


def _tags_shown(tables: list[Table]) -> str:
    """The tags the tables show (in a Tag column or a 'tagged' note), each named once."""
    found: list[str] = []
    for t in tables:
        if "Tag" in t.header:
            at = t.header.index("Tag")
            found += [str(row[at]) for row in t.rows if row[at] not in (None, "", "-")]
        found += [m for n in t.notes for m in re.findall(r"tagged `([^`]+)`", n)]
    names = list(dict.fromkeys(found))
    return f" Tags in this report: {', '.join(f'`{n}`' for n in names)}." if names else ""


def legend(tables: list[Table]) -> list[Table]:
    """The legend of the terms these tables use; none where they use none."""
    texts = _texts(tables)
    rows = [[term, meaning + (_tags_shown(tables) if term == "tagged" else "")]
            for term, pattern, meaning in ENTRIES if _used(pattern or re.escape(term), texts)]
    return [Table(TITLE, ["Term or mark", "Meaning"], "ll", rows, notes=[ABOUT])] if rows else []
