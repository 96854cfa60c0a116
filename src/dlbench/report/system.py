"""Machine ceilings tables: the newest `dlbench system` record of each machine."""

from __future__ import annotations

from dlbench.figures import percent
from dlbench.report.tables import Table
from dlbench.results.measurement import GpuFacts
from dlbench.results.record import Result
from dlbench.system.records import is_survey, is_system_record, machine_key

_LABELS = {  # in the order of the table's rows
    "matmul_fp32_tflops": "matmul fp32", "matmul_tf32_tflops": "matmul tf32",
    "matmul_fp16_tflops": "matmul fp16", "matmul_bf16_tflops": "matmul bf16",
    "matmul_fp8_tflops": "matmul fp8", "copy_gbs": "memory copy",
    "h2d_pinned_gbs": "host to device pinned", "h2d_pageable_gbs": "host to device pageable",
    "d2h_pinned_gbs": "device to host pinned", "d2h_pageable_gbs": "device to host pageable",
    "allreduce_busbw_gbs": "all-reduce bus bw", "jpeg_decode_cpu_img_s_per_core": "JPEG decode, 1 CPU core",
    "jpeg_loader_cpu_img_s_per_core": "JPEG loader, 1 worker", "jpeg_decode_gpu_img_s": "JPEG decode, GPU", "disk_read_gbs": "disk read",
}


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _facts_line(facts: GpuFacts) -> str:
    parts = [f"GPU {facts.index}: {facts.name or '?'}"]
    if facts.pcie_gen is not None:
        parts.append(f"PCIe gen {facts.pcie_gen} x{facts.pcie_width} "
                     f"(max gen {facts.pcie_gen_max} x{facts.pcie_width_max})")
    if facts.nvlinks_active is not None:
        parts.append(f"NVLink links active {facts.nvlinks_active}")
    if facts.ecc is not None:
        parts.append(f"ECC {'on' if facts.ecc else 'off'}")
    if facts.sm_clock_max_mhz:
        parts.append(f"SM clock max {facts.sm_clock_max_mhz} MHz")
    if facts.power_limit_w:
        parts.append(f"power limit {facts.power_limit_w:.0f} W")
    if facts.other_processes:
        parts.append(f"{facts.other_processes} other process(es) on it")
    if facts.launcher_processes:
        parts.append(f"{facts.launcher_processes} launcher process(es) on it")
    return ", ".join(parts)


def ceilings_table(record: Result) -> Table:
    host, label = machine_key(record)
    system = record.measured.system
    sheet = system.datasheet or {}
    rows = []
    stored = system.ceilings or {}
    order = [*(n for n in _LABELS if n in stored), *sorted(n for n in stored if n not in _LABELS)]
    for ceiling in (system.ceiling(n) for n in order):  # not the record's key order: an export sorts keys
        peak = sheet.get(ceiling.name)
        ratio = percent(ceiling.value / peak) if peak else "-"
        rows.append([_LABELS.get(ceiling.name, ceiling.name), _number(ceiling.value), ceiling.unit,
                     _number(peak) if peak else "-", ratio, ceiling.method])
    notes = ["How fast this machine's parts are on their own (matrix multiply, memory, copies, JPEG decoding), "
             "beside the datasheet: the ceilings the benchmarks above can approach.",
             f"Measured {record.started[:16].replace('T', ' ')} UTC, record {record.id[:8]}."]
    if not is_survey(record):
        notes.append("Measured by a benchmark that needed it for FLOP utilisation; `dlbench system` measures them all.")
    notes += [_facts_line(f) for f in system.facts]
    h2d = system.ceiling("h2d_pinned_gbs")
    busy = h2d.details if h2d else {}
    if busy.get("pcie_gen"):
        notes.append(f"PCIe link during the host-to-device copies: gen {busy['pcie_gen']} x{busy.get('pcie_width')}")
    notes += [f"Not measured: {_LABELS.get(k, k)}: {why}" for k, why in (system.unmeasured or {}).items()]
    return Table(f"Ceilings: {label}{_on(host)}",
                 ["Ceiling", "Measured", "Unit", "Datasheet", "Measured/datasheet", "Method"],
                 "lrlrrl", rows, [n + "  " for n in notes])


GENERIC_HOSTS = {"vm", "localhost", "ubuntu", "(none)", "", "none"}


def _on(host: object) -> str:
    """' on node17': a host name only where it names a machine; a lent VM calls itself 'vm', which
    tells a reader nothing."""
    return "" if str(host).strip().lower() in GENERIC_HOSTS else f" on {host}"


def tables(results: list[Result]) -> list[Table]:
    newest: dict[tuple[str, str], Result] = {}
    for r in results:
        if is_system_record(r) and r.status == "ok":
            key = machine_key(r)
            # a run's quick record holds one ceiling: it stands for a machine only where no survey does
            if key not in newest or (is_survey(r), r.started) >= (is_survey(newest[key]), newest[key].started):
                newest[key] = r
    return [ceilings_table(r) for r in newest.values()]
