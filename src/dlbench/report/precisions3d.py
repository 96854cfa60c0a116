"""GPU Benchmarks' comments on precision, answered with one modern GPU: they found the 1080 Ti
"surprisingly fast compared to P100 and V100" (single precision is what their code used) and
thought the V100 slow because CUDA 9.1 / PyTorch 0.4 might not use its tensor cores. dlbench's
rows train their network (unet3d-aniso, their patch, one GPU) at FP32 (TF32 off: no tensor
cores), TF32 and bf16 (tensor cores), so the table says what the tensor cores give on one GPU
and where its FP32 stands against their 1-GPU FP32 rows.

  | System | Precision | Iters / Min | Iteration [s] | vs FP32 | vs their fastest 1-GPU FP32 | Iterations measured |
"""

from __future__ import annotations

from dlbench.figures import DASH, fixed
from dlbench.report import rows as rowinfo
from dlbench.report import training3d
from dlbench.report.tables import Table, model_title
from dlbench.results.record import Result

ORDER = ("fp32", "tf32", "bf16", "fp16")
MEANING = {"fp32": "FP32 (TF32 off: CUDA cores only)", "tf32": "TF32 (tensor cores, FP32 storage)",
           "bf16": "bf16 (tensor cores, autocast)", "fp16": "fp16 (tensor cores, autocast)"}


def tables(results: list[Result], published: bool = False) -> list[Table]:
    chosen: dict[tuple, Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        if (r.workload == "train" and r.model == training3d.SEED_MODEL and r.status == "ok"
                and rowinfo.on_gpu(r) and rowinfo.processes(r) == 1 and r.setup.precision in ORDER):
            chosen[(rowinfo.system(r, gpus=False, precision=False), r.setup.precision)] = r
    systems: dict[str, dict[str, Result]] = {}
    for (system, precision), r in chosen.items():
        systems.setdefault(system, {})[precision] = r
    # Only a system that ran FP32 and a tensor-core precision answers the comments.
    compared = {s: by for s, by in systems.items() if "fp32" in by and len(by) > 1}
    if not compared:
        return []
    return [_table(compared, published)]


def _table(systems: dict[str, dict[str, Result]], published: bool) -> Table:
    theirs = _their_fastest_fp32() if published else None
    rows = []
    for system, by in sorted(systems.items()):
        base = training3d._mean_step(by["fp32"])
        for precision in sorted(by, key=ORDER.index):
            r = by[precision]
            step = training3d._mean_step(r)
            row = [system, MEANING[precision], fixed(60 / step, 1) if step else DASH, fixed(step, 3) if step else DASH,
                   f"{fixed(base / step, 2)}x" if step and base else DASH]
            if theirs:
                row.append(f"{fixed(theirs[1] / step, 2)}x" if step else DASH)
            rows.append(row + [f"{training3d.iterations(r):,}"])
    header = ["System", "Precision", "Iters / Min", "Iteration [s]", "vs FP32"]
    if theirs:
        header.append(f"vs {theirs[0]} (FP32)")
    header.append("Iterations measured")
    first = next(r for by in systems.values() for r in by.values())
    notes = ["GPU Benchmarks found the 1080 Ti about as fast as the P100 and V100 in single precision and thought "
             "their software might leave the V100's tensor cores idle; this table trains their network on one "
             "modern GPU at FP32, TF32 and bf16 to show what the tensor cores give.",
             f"{model_title(first)}, patch {training3d._patch(first)}, batch 1, one GPU. Iteration: the mean "
             "seconds per training iteration; Iters / Min: 60 over it; vs FP32: the FP32 row's iteration over this "
             "row's (tensor cores against none on the same GPU)."]
    if theirs:
        notes.append(f"vs {theirs[0]} (FP32): their fastest 1-GPU iteration ({theirs[0]}, "
                     f"{fixed(theirs[1], 3)} s from its printed Iters / Min) over this row's.")
    return Table(f"{model_title(first)}: FP32 against the tensor cores' precisions on one GPU", header,
                 "ll" + "r" * (len(header) - 2), rows, notes=notes)


def _their_fastest_fp32() -> tuple[str, float] | None:
    """(system, seconds per iteration) of the publications' fastest 1-GPU training row."""
    from dlbench.report import published

    found = [(r.cells["system"], 60 / float(r.cells["iters_per_min"])) for r in published.seed000_001()
             if r.gpus == 1 and r.cells.get("iters_per_min")]
    return min(found, key=lambda f: f[1]) if found else None
