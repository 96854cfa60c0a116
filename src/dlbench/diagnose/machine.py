"""Conditions of the machine a `dlbench system` survey or the run's monitor finds, with no share of the
step to measure: a PCIe link below what the slot and the GPU allow, the run's own launcher holding GPU
memory, a matmul ceiling far below the datasheet. The doctor lists them apart from the causes.
"""

from __future__ import annotations

from dlbench.diagnose.check import Cause, Check, Context, Kind
from dlbench.diagnose.references import datasheet_peak
from dlbench.figures import percent, sig
from dlbench.report import profile
from dlbench.system.records import ceiling_name, machine_key

LOW_CEILING_SHARE = 0.7
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

LINK = Kind("degraded link")
LAUNCHER = Kind("the run's launcher on the GPU")
BELOW_DATASHEET = Kind("GPU below its datasheet")


def degraded_link(ctx: Context) -> Cause | None:
    record, facts = ctx.record, ctx.facts
    problems = []
    system = record.measured.system if record else None
    copy = system.ceiling("h2d_pinned_gbs") if system else None
    busy = copy.details if copy else {}
    width, width_max = busy.get("pcie_width") or facts.pcie_width, facts.pcie_width_max
    gen_busy = busy.get("pcie_gen")
    if gen_busy and facts.pcie_gen_max and gen_busy < facts.pcie_gen_max:
        problems.append(f"PCIe gen {gen_busy} while copying, the slot allows gen {facts.pcie_gen_max}")
    if width and width_max and width < width_max:
        problems.append(f"PCIe link x{width} of x{width_max}")
    gen_max, gen_gpu = facts.pcie_gen_max, facts.pcie_gen_gpu_max
    if gen_max and gen_gpu and gen_max < gen_gpu:
        problems.append(f"slot allows PCIe gen {gen_max}, the GPU supports gen {gen_gpu}")
    h2d = system.h2d_pinned_gbs if system else None
    if h2d and gen_gpu and width_max:
        nominal = PCIE_LANE_GBS.get(gen_gpu, 0) * width_max
        if nominal and h2d < 0.5 * nominal:
            problems.append(f"host-to-device pinned {h2d:.1f} GB/s, under half of gen {gen_gpu} x{width_max} "
                            f"({nominal:.0f} GB/s)")
    return LINK("; ".join(problems)) if problems else None


def own_launcher(ctx: Context) -> Cause | None:
    seen = ctx.run.measured.neighbours
    count, memory = seen.launcher_processes or 0, seen.launcher_memory_gb or 0.0
    if not count:
        return None
    # Results stored before the command was recorded only had dlbench's own launchers marked
    commands = "; ".join(seen.launcher_commands or ["a dlbench suite or torchrun"])
    return LAUNCHER(f"the process that started this run ({commands}) held {memory:.1f} GB of GPU memory during it, "
                    "memory the run could not use")


def low_ceiling(ctx: Context) -> Cause | None:
    r, record, facts = ctx.run, ctx.record, ctx.facts
    if record is None:
        return None
    precision = r.setup.precision
    measured = profile.measured_ceiling(record, ceiling_name(precision))
    peak = datasheet_peak(machine_key(r)[1], precision)
    if not measured or not peak or measured >= LOW_CEILING_SHARE * peak:
        return None
    text = (f"a plain {precision} matmul reaches only {sig(measured, grouping=True)} TFLOP/s, "
            f"{percent(measured / peak)} of the datasheet's {sig(peak, grouping=True)}")
    if facts.power_limit_w and facts.power_limit_default_w and facts.power_limit_w < facts.power_limit_default_w:
        text += f"; power limit lowered to {facts.power_limit_w:.0f} of {facts.power_limit_default_w:.0f} W"
    return BELOW_DATASHEET(text + " (clocks, power limit, or a virtual/MIG slice)")


DEGRADED_LINK = Check("the GPU's link", "the survey's PCIe generation and width (at rest and while copying) against "
                      "the slot's and the GPU's, and its pinned host-to-device rate", degraded_link, (LINK,), machine=True)
OWN_LAUNCHER = Check("the run's launcher", "the GPU memory the process that started the run held during it",
                     own_launcher, (LAUNCHER,), machine=True)
LOW_CEILING = Check("the GPU's ceiling", "the survey's matmul ceiling for the run's precision against the datasheet, "
                    "the power limit", low_ceiling, (BELOW_DATASHEET,), machine=True)
