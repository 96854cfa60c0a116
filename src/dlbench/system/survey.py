"""`dlbench system`: measure every ceiling this machine has and make one stored record of it.

The record is a Result whose spec has workload 'system' (so every store, export and import
keeps working unchanged). Its metrics hold each ceiling flat (`matmul_bf16_tflops`, ...),
the details and methods under 'ceilings', what could not be measured and why under
'unmeasured', and NVML facts per GPU under 'gpu_facts'. Reports find a machine's
ceilings with `records.ceilings_for`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from dlbench.errors import UserError
from dlbench.results.measurement import Run, System
from dlbench.results.record import Result, now
from dlbench.system import ceilings as c
from dlbench.measure import nvml
from dlbench.system.datasheet import lookup
from dlbench.system.records import QUICK, SYSTEM_WORKLOAD

Progress = Callable[[str, int, int], None]


def expected_seconds(device: torch.device, disk: Path | None, rate: float) -> float:
    """How long `survey` will take, from each ceiling's own time budget (ceilings.py `budget_s`);
    `rate`: the FLOP/s its matmuls are expected to run at (a stored ceiling, the datasheet, a stand-in)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return sum(c.budget_s(name, device, rate, gpus=gpus, disk=disk) for name, _ in _plan(device, disk))


def _plan(device: torch.device, disk: Path | None) -> list[tuple[str, Callable[[], c.Ceiling]]]:
    plan: list[tuple[str, Callable[[], c.Ceiling]]] = [
        (f"matmul_{p}_tflops", lambda p=p: c.matmul(p, device)) for p in c.PRECISIONS
    ]
    plan.append(("copy_gbs", lambda: c.copy_bandwidth(device)))
    for direction in ("h2d", "d2h"):
        for pinned in (True, False):
            name = f"{direction}_{'pinned' if pinned else 'pageable'}_gbs"
            plan.append((name, lambda d=direction, p=pinned: c.host_device(device, d, p)))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    plan.append(("allreduce_busbw_gbs", lambda: c.allreduce(gpus)))
    plan.append(("jpeg_decode_cpu_img_s_per_core", c.jpeg_decode_cpu))
    plan.append(("jpeg_loader_cpu_img_s_per_core", c.jpeg_loader_cpu))
    plan.append(("jpeg_decode_gpu_img_s", lambda: c.jpeg_decode_gpu(device)))
    if disk is not None:
        plan.append(("disk_read_gbs", lambda: c.disk_read(disk)))
    return plan


def _datasheet(system: dict, device: torch.device) -> dict[str, float]:
    """Datasheet counterparts of the ceilings, for measured/datasheet."""
    if device.type != "cuda" or not system.get("gpus"):
        return {}
    spec = lookup(system["gpus"][device.index or 0]["name"])
    if spec is None:
        return {}
    sheet = {f"matmul_{p}_tflops": spec.peak_tflops(p) for p in c.PRECISIONS}
    sheet["copy_gbs"] = spec.bandwidth_gbs
    return {k: v for k, v in sheet.items() if v is not None}


def survey(system: dict, device: torch.device, *, disk: Path | None = None,
           progress: Progress = lambda stage, done, total: None) -> Result:
    """Measure everything measurable; one failure never stops the others."""
    if disk is not None and not Path(disk).exists():
        raise UserError(f"--disk {disk}: no such file or folder")
    result = Result(spec={"workload": SYSTEM_WORKLOAD, "model": "", "device": str(device),
                          "disk": str(disk) if disk else None}, system=system)
    measured: dict[str, dict] = {}
    values: dict[str, float] = {}
    unmeasured: dict[str, str] = {}
    plan = _plan(device, disk)
    for i, (name, measure) in enumerate(plan):
        progress(name, i, len(plan))
        try:
            ceiling = measure()
            measured[name] = ceiling.to_dict()
            values[name] = ceiling.value
        except c.Unmeasured as why:
            unmeasured[name] = str(why)
        except UserError:
            raise
        except Exception as error:  # noqa: BLE001 - a failed measurement is reported, not fatal
            unmeasured[name] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
    progress("done", len(plan), len(plan))
    indices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    facts, why = nvml.all_device_facts(indices) if indices else ([], "no GPU")
    if why:
        unmeasured["nvml"] = why
    result.add(Run(device=str(device)), System(**values, ceilings=measured, unmeasured=unmeasured, gpu_facts=facts,
                                               datasheet=_datasheet(system, device)))
    result.finished = now()
    return result


QUICK_SIZES = {"cuda": (8192,), "cpu": (1024,)}  # the size a full survey finds best, or near it


def quick_ceiling(system: dict, device: torch.device, precision: str) -> Result | None:
    """One matmul ceiling, measured in a second or two for a run whose machine had none for its
    precision, as a system record marked quick; None where it cannot be measured here."""
    started = now()
    try:
        ceiling = c.matmul(precision, device, sizes=QUICK_SIZES.get(device.type, QUICK_SIZES["cpu"]))
    except (c.Unmeasured, RuntimeError, KeyError):  # no such precision here, or no memory left for it
        return None
    finally:
        c._free(device)
    sheet = {k: v for k, v in _datasheet(system, device).items() if k == ceiling.name}
    result = Result(spec={"workload": SYSTEM_WORKLOAD, "model": "", "device": str(device), QUICK: True},
                    system=system, started=started)
    result.add(Run(device=str(device)), System(**{ceiling.name: ceiling.value}, unmeasured={}, gpu_facts=[],
                                               ceilings={ceiling.name: ceiling.to_dict()}, datasheet=sheet))
    result.finished = now()
    return result
