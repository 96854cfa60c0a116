"""The host's CPU during a measured window: how much this run's processes used, how much others did.

A starved input pipeline looks the same on the GPU whether its workers are too few or the cores
are taken by someone else; the doctor tells the two apart with these figures. They come from
/proc (Linux): the CPU time of every process at the window's two ends, split into this run's
process tree (the benchmark and its loader workers) and the rest, plus the load average. Elsewhere
nothing is recorded and the result says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

TOP_OTHERS = 3  # the other processes named in a result: enough to recognise a culprit
_COMMAND_CHARS = 80


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of one process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()  # the name in parentheses may hold spaces
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / _ticks()
    except (OSError, ValueError, IndexError):
        return None


def _processes() -> dict[int, tuple[int, float]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            found[int(entry)] = stat
    return found


def _tree(root: int, processes: dict[int, tuple[int, float]]) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def parent(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[0] if stat else None


def command_line(pid: int) -> str:
    """The command line of process `pid` as one string, or '' when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (/proc/stat's first line, idle and iowait left out)."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _ticks()


def _load_average() -> float | None:
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run_root() -> int:
    """The process whose tree is this run: the process that started the ranks (launch/ranks.py, or
    torchrun's agent; every rank and their loader workers are below it), else this process."""
    started = "DLBENCH_RANKS" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ
    return os.getppid() if started else os.getpid()


@dataclass
class _Snapshot:
    t: float
    busy: float | None
    processes: dict[int, tuple[int, float]] = field(default_factory=dict)

    @classmethod
    def take(cls) -> "_Snapshot":
        return cls(time.perf_counter(), _busy_seconds(), _processes())


class HostSampler:
    """`start()` and `stop()` around a window; `figures()` then gives the window's CPU use."""

    def __init__(self, root: int | None = None) -> None:
        self.root = run_root() if root is None else root
        self._start: _Snapshot | None = None
        self._figures: dict[str, Any] = {}

    def start(self) -> "HostSampler":
        if os.path.isdir("/proc/self"):
            self._start = _Snapshot.take()
        return self

    def stop(self) -> dict[str, Any]:
        if self._start is None:
            return {}
        self._figures = window_figures(self._start, _Snapshot.take(), self.root)
        return self._figures


def window_figures(start: _Snapshot, end: _Snapshot, root: int) -> dict[str, Any]:
    """Cores used by this run's processes and by all others over the window, the load average at
    its end, and the other processes that used the most CPU."""
    seconds = end.t - start.t
    if seconds <= 0 or start.busy is None or end.busy is None:
        return {}
    own = _tree(root, end.processes) | _tree(root, start.processes)

    def used(pid: int) -> float:
        before = start.processes.get(pid, (0, 0.0))[1]
        return max(0.0, end.processes[pid][1] - before)

    own_cores = sum(used(pid) for pid in own if pid in end.processes) / seconds
    total_cores = max(0.0, end.busy - start.busy) / seconds
    others = sorted(((used(pid) / seconds, pid) for pid in end.processes if pid not in own), reverse=True)
    top = [{"pid": pid, "cores": round(cores, 2), "command": command_line(pid)[:_COMMAND_CHARS]}
           for cores, pid in others[:TOP_OTHERS] if cores >= 0.05]
    return {"cpu_cores": os.cpu_count(), "cpu_own_cores": own_cores,
            "cpu_other_cores": max(0.0, total_cores - own_cores), "load_average_1m": _load_average(),
            "cpu_other_top": top, "cpu_other_busy_processes": sum(1 for cores, _ in others if cores >= 0.5)}
