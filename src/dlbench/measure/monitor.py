"""GPU monitor: a sampler thread that reads NVML during a measured window.

It records utilisation, SM clock, memory used, power, the energy counter, temperature
and throttle reasons, one reading every `interval` seconds plus one at each end of the
window so the energy counter's difference covers exactly the window; and every process's
share of the GPU's SM time (NVML's per-process samples), so a neighbour computing on the
same GPU is seen, not only its memory. Without a GPU or NVML it records nothing of the GPU
and says why; it never fails a benchmark. The host's CPU use over the window (measure/host.py)
is recorded on every device.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from dlbench.measure.host import HostSampler, command_line
from dlbench.measure import nvml as nvml_api

DEFAULT_INTERVAL = 0.1
# Every process's share of the SM time is read once a second (and at the window's end): NVML answers
# each query with about one sample a process, so a neighbour's share rests on one sample a second. Read
# with every reading, the query cost a step at the edge of host-bound 0.4% in interleaved runs, and
# coincided with the slow runs of that step (docs/performance.md, 2026-11-28).
PROCESS_EVERY_S = 1.0
# A window is flagged throttled when this share of its readings carry a slowdown reason.
THROTTLED_SHARE = 0.1

Reader = Callable[[], dict[str, Any]]


@dataclass
class MonitorData:
    available: bool
    reason: str | None = None  # why nothing was recorded
    readings: list[dict[str, Any]] = field(default_factory=list)  # parsed readings
    other_processes: list[dict[str, Any]] = field(default_factory=list)
    # (pid, NVML timestamp) -> SM %: every process's samples during the window
    process_samples: dict[tuple[int, int], float] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)  # measure/host.py's figures

    def trace(self) -> dict[str, Any]:
        """Column-wise trace for Result.traces['monitor']."""
        if not self.available:
            return {"available": False, "reason": self.reason}
        keys = ("t", "util", "sm_clock_mhz", "memory_used_gb", "power_w", "energy_j",
                "temperature_c", "throttle")
        return {"available": True, **{k: [r.get(k) for r in self.readings] for k in keys}}

    def summary(self) -> dict[str, Any]:
        """Window figures: means, extremes, energy, throttling, neighbours, the host's CPU."""
        if not self.available or not self.readings:
            return dict(self.host)
        return {**summarize_readings(self.readings, self.other_processes),
                **neighbours(self.process_samples, self.other_processes), **self.host}


def _values(readings: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in readings if r.get(key) is not None]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def window_energy_j(readings: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """Energy over the window: the counter's difference, else power integrated over time."""
    energy = [(r["t"], r["energy_j"]) for r in readings if r.get("energy_j") is not None]
    if len(energy) >= 2 and energy[-1][1] >= energy[0][1]:
        return energy[-1][1] - energy[0][1], "energy counter"
    power = [(r["t"], r["power_w"]) for r in readings if r.get("power_w") is not None]
    if len(power) >= 2:
        joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:]))
        return joules, "power integrated"
    return None, None


def summarize_readings(readings: list[dict[str, Any]], others: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    clocks = _values(readings, "sm_clock_mhz")
    slow = [r for r in readings if nvml_api.SLOWDOWN_REASONS.intersection(r.get("throttle") or ())]
    reasons = sorted({name for r in slow for name in r["throttle"] if name in nvml_api.SLOWDOWN_REASONS})
    energy, energy_method = window_energy_j(readings)
    temps, power, memory = _values(readings, "temperature_c"), _values(readings, "power_w"), _values(readings, "memory_used_gb")
    return {
        "monitor_readings": len(readings),
        "gpu_util_mean": _mean(_values(readings, "util")),
        "sm_clock_mean_mhz": _mean(clocks),
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "power_mean_w": _mean(power),
        "power_max_w": max(power) if power else None,
        "temperature_max_c": max(temps) if temps else None,
        "memory_used_max_gb": max(memory) if memory else None,
        "energy_j": energy,
        "energy_method": energy_method,
        "throttled": len(slow) >= THROTTLED_SHARE * len(readings) and bool(slow),
        "throttled_share": len(slow) / len(readings),
        "throttle_reasons": reasons,
        **_processes(others or []),
    }


def neighbours(samples: dict[tuple[int, int], float], others: list[dict[str, Any]],
               own_pid: int | None = None) -> dict[str, Any]:
    """Each process's share of the GPU's SM time over the window: its SM % summed over NVML's
    sampling instants divided by the number of instants (a process absent from an instant used
    none of it). Other processes are named with their command; a launcher stays marked."""
    if not samples:
        return {}
    own_pid = os.getpid() if own_pid is None else own_pid
    instants = len({t for _, t in samples})
    share: dict[int, float] = {}
    for (pid, _), sm in samples.items():
        share[pid] = share.get(pid, 0.0) + min(max(sm, 0.0), 100.0) / 100 / instants
    known = {p["pid"]: p for p in others}
    found = [{"pid": pid, "sm_share": round(value, 4), "memory_gb": known.get(pid, {}).get("memory_gb"),
              "command": command_line(pid)[:nvml_api.LAUNCHER_CHARS],
              **({"launcher": True} if known.get(pid, {}).get("launcher") else {})}
             for pid, value in sorted(share.items(), key=lambda item: -item[1]) if pid != own_pid]
    return {"gpu_own_sm_share": round(share.get(own_pid, 0.0), 4), "gpu_sm_instants": instants,
            "gpu_neighbours": found,
            "gpu_neighbours_sm_share": round(sum(p["sm_share"] for p in found if not p.get("launcher")), 4)}


def _processes(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Other processes on the GPU, and apart from them the processes that started this one."""
    launchers = [p for p in found if p.get("launcher")]
    others = [p for p in found if not p.get("launcher")]
    figures = {"other_processes": len(others),
               "other_processes_memory_gb": sum(p.get("memory_gb", 0.0) for p in others)}
    if launchers:
        figures.update(launcher_processes=len(launchers),
                       launcher_memory_gb=sum(p.get("memory_gb", 0.0) for p in launchers),
                       launcher_commands=sorted({str(p["launcher"]) for p in launchers}))
    return figures


class Monitor:
    """`with Monitor(device):` samples the device's GPU in a thread until the block ends."""

    def __init__(self, device: torch.device | str, interval: float = DEFAULT_INTERVAL,
                 reader: Reader | None = None, others: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self.device = torch.device(device)
        self.interval = interval
        self._reader, self._others = reader, others
        self._nvml = None
        self._utilisation: Callable[[int], list[tuple[int, int, float]]] | None = None
        self._since_us = self._next_since = 0
        self._process_read = -PROCESS_EVERY_S  # when the processes' samples were last read (perf_counter)
        self._host = HostSampler()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self.data = MonitorData(available=False, reason="monitor not started")

    def _open(self) -> bool:
        if self._reader is not None:
            return True
        if self.device.type != "cuda":
            self.data = MonitorData(available=False, reason=f"no GPU monitor on device {self.device}")
            return False
        nvml = nvml_api.acquire()
        if nvml is None:
            self.data = MonitorData(available=False, reason=nvml_api.last_error())
            return False
        handle = nvml_api.handle_for(nvml, self.device.index or 0)
        if handle is None:
            nvml_api.release()
            self.data = MonitorData(available=False, reason="NVML does not know this GPU")
            return False
        self._nvml = nvml
        self._reader = lambda: nvml_api.read_raw(nvml, handle)
        self._others = lambda: nvml_api.other_processes(nvml, handle)
        self._utilisation = lambda since: nvml_api.process_utilisation(nvml, handle, since)
        return True

    def _sample(self, last: bool = False) -> None:
        try:
            raw = self._reader()
        except Exception:  # a failed reading is a gap in the trace, not a failed benchmark
            return
        now = time.perf_counter()
        self.data.readings.append(nvml_api.parse(raw, now - self._t0))
        if self._utilisation is not None and (last or now - self._process_read >= PROCESS_EVERY_S):
            self._process_read = now
            for pid, stamp, sm in self._utilisation(self._since_us):
                self.data.process_samples[(pid, stamp)] = sm
                self._next_since = max(self._next_since, stamp)
            self._since_us = self._next_since

    def _other_processes(self) -> list[dict[str, Any]]:
        """Processes on the GPU at the window's start, and those that came during it."""
        found = {p["pid"]: p for p in self.data.other_processes}
        for p in self._others() if self._others is not None else []:
            found.setdefault(p["pid"], p)
        return list(found.values())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> "Monitor":
        self._host.start()
        if not self._open():
            return self
        self.data = MonitorData(available=True)
        self._t0 = time.perf_counter()
        self._since_us = self._next_since = int(time.time() * 1e6)  # NVML stamps samples with the host's clock
        if self._others is not None:
            self.data.other_processes = self._others()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="dlbench-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MonitorData:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample(last=True)
            self.data.other_processes = self._other_processes()
        self.data.host = self._host.stop()
        if self._nvml is not None:
            nvml_api.release()
            self._nvml = None
        return self.data

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
