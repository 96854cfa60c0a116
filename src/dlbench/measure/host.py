"""The host's CPU during a measured window: how much this run's processes used, how much others did.

A starved input pipeline looks the same on the GPU whether its workers are too few or the cores
are taken by someone else; the doctor tells the two apart with these figures. They come from
/proc (Linux): the CPU time of every process at the window's two ends, split into this run's
process tree (the benchmark and its loader workers) and the rest, plus the load average. Elsewhere
nothing is recorded and the result says so.

A host that keeps the step's launching thread off its CPU slows a host-bound step though no other
process may show: the run's own threads, a neighbour on the same cores, the hypervisor (steal), a CPU
set or cgroup quota smaller than the machine. So the same two snapshots also read each thread's time
waiting for a CPU (/proc/<pid>/task/<tid>/schedstat), the launching thread's involuntary switches and
migrations, and steal (/proc/stat); at the window's end the CPUs' clock, the CPUs the process may
use, its cgroup's quota, torch's thread counts and the environment variables that change how CUDA,
NCCL, torch and OpenMP behave. Still two snapshots a window and no sampling thread, so the sampler
takes no CPU from the step it measures.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TOP_OTHERS = 3  # the other processes named in a result: enough to recognise a culprit
TOP_THREADS = 5  # the benchmark process's threads that waited longest for a CPU, named in a result
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


def _cpu_ticks() -> list[int] | None:
    """The CPU time of all cores since boot by kind, in ticks (/proc/stat's first line: user, nice,
    system, idle, iowait, irq, softirq, steal; guest time is already counted in user)."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return values + [0] * (8 - len(values))


def _busy_seconds(ticks: list[int] | None) -> float | None:
    """CPU seconds all cores spent busy since boot (idle and iowait left out)."""
    return None if ticks is None else (sum(ticks) - ticks[3] - ticks[4]) / _ticks()


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


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _wait_ns(pid: int, tid: int) -> int | None:
    """Nanoseconds thread `tid` of `pid` has spent runnable but waiting for a CPU (schedstat's 2nd field)."""
    text = _read(f"/proc/{pid}/task/{tid}/schedstat")
    try:
        return int(text.split()[1]) if text else None
    except (ValueError, IndexError):
        return None


def _thread_waits(pids: set[int]) -> dict[tuple[int, int], int]:
    """(pid, tid) → nanoseconds waited for a CPU, for every thread of `pids` that shows it."""
    found = {}
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()]
        except OSError:
            continue  # gone
        for tid in tids:
            if (wait := _wait_ns(pid, tid)) is not None:
                found[(pid, tid)] = wait
    return found


def _counter(path: str, name: str) -> int | None:
    """The integer after `name:` on its line of a /proc status-like file (`se.nr_migrations : 12`)."""
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            try:
                return int(float(value.strip()))
            except ValueError:
                return None
    return None


def _thread_counts(pid: int, tid: int) -> tuple[int | None, int | None]:
    """The thread's involuntary context switches and its migrations between CPUs (the latter only
    where the kernel shows /proc/<pid>/task/<tid>/sched)."""
    task = f"/proc/{pid}/task/{tid}"
    return _counter(f"{task}/status", "nonvoluntary_ctxt_switches"), _counter(f"{task}/sched", "se.nr_migrations")


@dataclass
class _Snapshot:
    t: float
    busy: float | None
    processes: dict[int, tuple[int, float]] = field(default_factory=dict)
    ticks: list[int] | None = None  # /proc/stat's CPU time by kind
    waits: dict[tuple[int, int], int] = field(default_factory=dict)  # the run's threads' waits for a CPU
    launcher: tuple[int | None, int | None] = (None, None)  # the launching thread's switches, migrations

    @classmethod
    def take(cls, root: int | None = None, thread: int | None = None) -> "_Snapshot":
        """The CPU time of every process; with `root`, the waits of its tree's threads; with
        `thread` (a native id in this process), that thread's switches and migrations."""
        ticks, processes = _cpu_ticks(), _processes()
        waits = _thread_waits(_tree(root, processes)) if root is not None else {}
        launcher = _thread_counts(os.getpid(), thread) if thread is not None else (None, None)
        return cls(time.perf_counter(), _busy_seconds(ticks), processes, ticks, waits, launcher)


class HostSampler:
    """`start()` and `stop()` around a window; `figures()` then gives the window's CPU use.
    The thread that calls `start()` is the one that launches the steps: its wait is kept apart."""

    def __init__(self, root: int | None = None) -> None:
        self.root = run_root() if root is None else root
        self._start: _Snapshot | None = None
        self._thread: int | None = None
        self._environment: dict[str, str] = {}
        self._figures: dict[str, Any] = {}

    def start(self) -> "HostSampler":
        if os.path.isdir("/proc/self"):
            self._thread = threading.get_native_id()
            self._environment = environment()  # as the process saw it when its window began
            self._start = _Snapshot.take(self.root, self._thread)
        return self

    def stop(self) -> dict[str, Any]:
        if self._start is None:
            return {}
        end = _Snapshot.take(self.root, self._thread)
        self._figures = window_figures(self._start, end, self.root)
        if self._figures:
            self._figures.update(wait_figures(self._start, end, os.getpid(), self._thread),
                                 cpu_steal_share=steal_share(self._start, end), **cpu_set(), **torch_threads(),
                                 environment=self._environment)
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


def wait_figures(start: _Snapshot, end: _Snapshot, pid: int, thread: int | None) -> dict[str, Any]:
    """Seconds the run's threads waited for a CPU over the window: the launching thread `thread` of
    process `pid`, all of `pid`'s threads, all threads of the run's processes; the `pid` threads that
    waited longest by name; the launching thread's involuntary switches and migrations. A thread
    that ended inside the window is not counted."""
    figures: dict[str, Any] = {"host_window_s": end.t - start.t}
    (switches0, migrations0), (switches1, migrations1) = start.launcher, end.launcher
    if switches0 is not None and switches1 is not None:
        figures["launch_thread_switches"] = switches1 - switches0
    if migrations0 is not None and migrations1 is not None:
        figures["launch_thread_migrations"] = migrations1 - migrations0
    if not end.waits:
        return figures  # no schedstat on this kernel: the waits are not recorded
    waited = {key: max(0, ns - start.waits.get(key, 0)) / 1e9 for key, ns in end.waits.items()}
    own = sorted(((seconds, tid) for (p, tid), seconds in waited.items() if p == pid), reverse=True)
    figures.update(cpu_wait_run_s=sum(waited.values()), cpu_wait_process_s=sum(seconds for seconds, _ in own),
                   cpu_wait_threads=[{"tid": tid, "name": (_read(f"/proc/{pid}/task/{tid}/comm") or "?").strip(),
                                      "wait_s": round(seconds, 4)} for seconds, tid in own[:TOP_THREADS]])
    if thread is not None and (pid, thread) in waited:
        figures["launch_thread_wait_s"] = waited[(pid, thread)]
    return figures


def steal_share(start: _Snapshot, end: _Snapshot) -> float | None:
    """The share of all CPUs' time the hypervisor gave to other guests over the window."""
    if start.ticks is None or end.ticks is None:
        return None
    total = sum(end.ticks) - sum(start.ticks)
    return (end.ticks[7] - start.ticks[7]) / total if total > 0 else None


def cpu_set() -> dict[str, Any]:
    """The CPUs this process may run on, its cgroup's CPU quota in cores (None: no quota), and the
    allowed CPUs' mean clock now."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {"cpus_allowed": len(allowed) or None, "cpu_quota_cores": quota_cores(),
            "cpu_mhz_mean": cpu_mhz(allowed)}


def cpu_mhz(cpus: list[int]) -> float | None:
    """The mean current clock of `cpus` in MHz: cpufreq's reading where the kernel has it, else
    /proc/cpuinfo's (which some virtual machines fix at the nominal clock)."""
    clocks = []
    for cpu in cpus:
        khz = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        if khz and khz.strip().isdigit():
            clocks.append(int(khz) / 1e3)
    if not clocks:
        found: dict[int, float] = {}
        processor = None
        for line in (_read("/proc/cpuinfo") or "").splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            try:
                if key == "processor":
                    processor = int(value)
                elif key == "cpu MHz" and processor is not None:
                    found[processor] = float(value)
            except ValueError:
                continue
        clocks = [found[cpu] for cpu in cpus if cpu in found] or list(found.values())
    return sum(clocks) / len(clocks) if clocks else None


def _cgroup_dirs() -> list[str]:
    """The directories of this process's CPU cgroup (v2, and v1's cpu controller), each followed by
    its parents: a quota on any of them limits the process."""
    dirs = []
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            bases = ["/sys/fs/cgroup"]
        elif "cpu" in controllers.split(","):
            bases = [f"/sys/fs/cgroup/{controllers}", "/sys/fs/cgroup/cpu"]
        else:
            continue
        while True:
            dirs += [os.path.normpath(base + "/" + path) for base in bases]
            if path in ("", "/"):
                break
            path = os.path.dirname(path)
    return dirs


def _quota(folder: str) -> float | None:
    """One cgroup's CPU quota in cores: v2's cpu.max ("max 100000" is none), v1's cfs quota."""
    text = _read(f"{folder}/cpu.max")
    try:
        if text is not None:
            quota, period = text.split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota, period = _read(f"{folder}/cpu.cfs_quota_us"), _read(f"{folder}/cpu.cfs_period_us")
        if quota is not None and period is not None and int(quota) > 0:
            return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        pass
    return None


def quota_cores() -> float | None:
    """The smallest CPU quota of this process's cgroup and its parents, in cores; None where none is set."""
    quotas = [q for folder in dict.fromkeys(_cgroup_dirs()) if (q := _quota(folder)) is not None]
    return min(quotas) if quotas else None


def torch_threads() -> dict[str, Any]:
    """torch's intra- and inter-op thread counts, where this process has loaded torch (the sampler
    itself does not load it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    return {"torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads()}


# Variables that change how CUDA, NCCL, torch and the math libraries run a step
ENVIRONMENT_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "PYTORCH_")
ENVIRONMENT_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_VALUE_CHARS = 200


def environment() -> dict[str, str]:
    """The environment variables that change behaviour, as this process sees them now."""
    return {k: v[:_VALUE_CHARS] for k, v in sorted(os.environ.items())
            if k.startswith(ENVIRONMENT_PREFIXES) or k in ENVIRONMENT_NAMES}
