"""NVML access in one place: raw readings, their parsing, and per-GPU link/clock/power facts.

Every call degrades to None when NVML, the driver or one query is missing (old GPUs lack
the energy counter, some drivers lack throttle reasons). Raw readings are plain dicts of
NVML's own numbers and units, so parsing is tested without a GPU.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from dlbench.measure.host import command_line, parent

# Throttle ("clocks event") reason bits, as in nvml.h.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean a busy GPU ran below the clock it could otherwise hold.
SLOWDOWN_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown",
                              "hw_thermal_slowdown", "hw_power_brake_slowdown"})

_lock = threading.Lock()
_users = 0
_error: str | None = None


def acquire() -> Any | None:
    """The pynvml module, initialised (reference-counted), or None; `last_error()` says why."""
    global _users, _error
    try:
        import pynvml
    except ImportError:
        _error = "nvidia-ml-py is not installed"
        return None
    with _lock:
        if _users == 0:
            try:
                pynvml.nvmlInit()
            except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                _error = f"NVML unavailable: {error}"
                return None
        _users += 1
    return pynvml


def release() -> None:
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            try:
                import pynvml

                pynvml.nvmlShutdown()
            except Exception:
                pass


def last_error() -> str:
    return _error or "NVML unavailable"


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """nvml.<name>(*args), or None when this NVML lacks the query or the GPU refuses it."""
    fn = getattr(nvml, name, None)
    return None if fn is None else _try(fn, *args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def handle_for(nvml: Any, torch_index: int) -> Any | None:
    """NVML handle of a torch CUDA device; by UUID, so CUDA_VISIBLE_DEVICES reordering is safe."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(torch_index).uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    except Exception:
        uuid = None
    if uuid:
        for key in (uuid, uuid.encode()):  # nvidia-ml-py versions differ on str vs bytes
            handle = _call(nvml, "nvmlDeviceGetHandleByUUID", key)
            if handle is not None:
                return handle
    return _call(nvml, "nvmlDeviceGetHandleByIndex", torch_index)


def read_raw(nvml: Any, handle: Any) -> dict[str, Any]:
    """One reading in NVML's units (%, MHz, bytes, mW, mJ, °C, reason bitmask)."""
    util = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    reasons = _call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # the older name of the same query
        reasons = _call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return {
        "utilization_gpu": getattr(util, "gpu", None),
        "utilization_memory": getattr(util, "memory", None),
        "clock_sm_mhz": _call(nvml, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
        "memory_used_bytes": getattr(memory, "used", None),
        "power_mw": _call(nvml, "nvmlDeviceGetPowerUsage", handle),
        "energy_mj": _call(nvml, "nvmlDeviceGetTotalEnergyConsumption", handle),
        "temperature_c": _call(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
        "throttle_reasons": reasons,
    }


def throttle_names(mask: int | None) -> list[str]:
    if not mask:
        return []
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def parse(raw: dict[str, Any], t: float) -> dict[str, Any]:
    """A raw reading in the units people read: W, J, GB, MHz, %, °C, reason names."""

    def scaled(key: str, factor: float) -> float | None:
        value = raw.get(key)
        return None if value is None else value * factor

    return {
        "t": t,
        "util": raw.get("utilization_gpu"),
        "mem_util": raw.get("utilization_memory"),
        "sm_clock_mhz": raw.get("clock_sm_mhz"),
        "memory_used_gb": scaled("memory_used_bytes", 1e-9),
        "power_w": scaled("power_mw", 1e-3),
        "energy_j": scaled("energy_mj", 1e-3),
        "temperature_c": raw.get("temperature_c"),
        "throttle": throttle_names(raw.get("throttle_reasons")),
    }


def other_processes(nvml: Any, handle: Any, own_pid: int | None = None) -> list[dict[str, Any]]:
    """Compute processes on the GPU other than this one (pid and GPU memory in GB). The processes
    that started this one (a dlbench suite, torchrun, a user's script) are marked `launcher` with
    their command line: they are named, not blamed as a stranger's work."""
    own_pid = os.getpid() if own_pid is None else own_pid
    found = _call(nvml, "nvmlDeviceGetComputeRunningProcesses", handle) or []
    launchers = ancestors(own_pid)
    return [{"pid": p.pid, "memory_gb": (p.usedGpuMemory or 0) / 1e9,
             **({"launcher": command_line(p.pid)[:LAUNCHER_CHARS] or "?"} if p.pid in launchers else {})}
            for p in found if p.pid != own_pid]


LAUNCHER_CHARS = 120  # enough of a command line to recognise it in a report


def process_utilisation(nvml: Any, handle: Any, since_us: int) -> list[tuple[int, int, float]]:
    """NVML's per-process SM utilisation samples newer than `since_us` (microseconds, NVML's clock):
    (pid, timestamp, SM %) each; [] where the driver keeps none (no process ran since, or the
    query is not supported)."""
    found = _call(nvml, "nvmlDeviceGetProcessUtilization", handle, since_us) or []
    return [(int(s.pid), int(s.timeStamp), float(s.smUtil)) for s in found if getattr(s, "pid", None)]


def ancestors(pid: int) -> set[int]:
    """The processes above `pid` up to, not including, init (Linux; empty elsewhere)."""
    found: set[int] = set()
    above = parent(pid)
    while above and above > 1 and above not in found:
        found.add(above)
        above = parent(above)
    return found


def _nvlinks(nvml: Any, handle: Any) -> int | None:
    count = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    states = [_call(nvml, "nvmlDeviceGetNvLinkState", handle, link) for link in range(count)]
    if all(s is None for s in states):
        return None
    return sum(1 for s in states if s == getattr(nvml, "NVML_FEATURE_ENABLED", 1))


def device_facts(nvml: Any, handle: Any) -> dict[str, Any]:
    """PCIe link, NVLink, ECC, clocks and power limit of one GPU (None where unknown)."""
    ecc = _call(nvml, "nvmlDeviceGetEccMode", handle)
    limit = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    default_limit = _call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    return {
        "name": _text(_call(nvml, "nvmlDeviceGetName", handle) or ""),
        "pcie_gen": _call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_width": _call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "pcie_gen_max": _call(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_width_max": _call(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        "pcie_gen_gpu_max": _call(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        "nvlinks_active": _nvlinks(nvml, handle),
        "ecc": None if not ecc else bool(ecc[0]),
        "sm_clock_mhz": _call(nvml, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": _call(nvml, "nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": _call(nvml, "nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_MEM),
        "power_limit_w": None if limit is None else limit / 1e3,
        "power_limit_default_w": None if default_limit is None else default_limit / 1e3,
        "temperature_c": _call(nvml, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
        "other_processes": other_processes(nvml, handle),
    }


def all_device_facts(torch_indices: list[int]) -> tuple[list[dict[str, Any]], str | None]:
    """device_facts for each torch device index, or ([], why not)."""
    nvml = acquire()
    if nvml is None:
        return [], last_error()
    try:
        facts = []
        for index in torch_indices:
            handle = handle_for(nvml, index)
            facts.append({"index": index, **device_facts(nvml, handle)} if handle else {"index": index})
        return facts, None
    finally:
        release()


def pcie_link(torch_index: int) -> tuple[int | None, int | None]:
    """Current PCIe (generation, width) of a GPU; read it while the link is busy, since an
    idle GPU drops to a lower generation to save power."""
    nvml = acquire()
    if nvml is None:
        return None, None
    try:
        handle = handle_for(nvml, torch_index)
        return (_call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
                _call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle))
    finally:
        release()
