"""What differed between a run and the run it is compared with: the measured figures, the versions,
the environment variables that change how CUDA, NCCL and PyTorch run, and the figures one of them
lacks. The doctor lists them where its causes leave a loss unexplained.
"""

from __future__ import annotations

from typing import Any, Callable

from dlbench.results.measurement import Measurement
from dlbench.results.record import Result

LAUNCHER_SETS = frozenset({"OMP_NUM_THREADS"})  # torchrun sets it to 1 in every rank where the user did not

_COMPARED: tuple[tuple[str, Callable[[Measurement], Any], str], ...] = (
    ("SM clock", lambda m: m.monitor.sm_clock_mean_mhz, "{:.0f} MHz"),
    ("power", lambda m: m.monitor.power_mean_w, "{:.0f} W"),
    ("temperature", lambda m: m.monitor.temperature_max_c, "{:.0f} °C"),
    ("GPU busy", lambda m: m.monitor.gpu_util_mean, "{:.0f}%"),
    ("other processes' SM time", lambda m: m.neighbours.gpu_neighbours_sm_share, "{:.0%}"),
    ("other processes on the GPU", lambda m: m.neighbours.other_processes, "{}"),
    ("other processes' CPU", lambda m: m.neighbours.cpu_other_cores, "{:.1f} cores"),
    ("load average", lambda m: m.neighbours.load_average_1m, "{:.1f}"),
    ("data wait", lambda m: m.phase_share("data"), "{:.1%}"),
    ("launching thread's wait for a CPU", lambda m: m.host.launch_wait_share, "{:.1%} of the window"),
    ("steal", lambda m: m.host.cpu_steal_share, "{:.1%}"),
    ("CPU clock", lambda m: m.host.cpu_mhz_mean, "{:.0f} MHz"),
    ("cores allowed", lambda m: m.host.allowed_cores, "{:g}"),
    ("torch threads", lambda m: m.host.torch_threads, "{}"))
_VERSIONS = ("torch", "cuda", "cudnn", "driver", "torchvision")


def differences(r: Result, other: Result) -> list[str]:
    """The measured figures and versions in which two runs differ, and those one of them lacks."""
    out, missing = [], []
    measured = r.measured, other.measured
    for name, figure, fmt in _COMPARED:
        mine, theirs = (figure(m) for m in measured)
        if mine is None or theirs is None:
            if (mine is None) != (theirs is None):
                missing.append(name)
            continue
        if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and \
                abs(mine - theirs) <= 0.02 * max(abs(mine), abs(theirs), 1e-9):
            continue
        out.append(f"{name} {fmt.format(mine)} against {fmt.format(theirs)}")
    for key in _VERSIONS:
        if r.system.get(key) != other.system.get(key):
            out.append(f"{key} {r.system.get(key)} against {other.system.get(key)}")
    environments = [m.host.environment for m in measured]
    if None not in environments:  # NCCL_* among them: said once, here
        out += environment_differences(r, other)
    else:
        missing += ["environment"] if environments != [None, None] else []
        mine, theirs = (m.training.all_reduce.nccl_settings for m in measured)
        if mine != theirs and (mine or theirs):
            out.append(f"NCCL settings {mine} against {theirs}")
    if missing:
        out.append(f"not recorded in one of them (stored by an earlier dlbench): {', '.join(missing)}")
    return out


def environment_differences(r: Result, other: Result) -> list[str]:
    """The recorded environment variables that change behaviour and differ between two runs; none
    where either run did not record them."""
    mine, theirs = r.measured.host.environment, other.measured.host.environment
    if mine is None or theirs is None:
        return []
    if (r.setup.gpus > 1) != (other.setup.gpus > 1):  # what torchrun sets in its ranks is no user's setting
        mine, theirs = ({k: v for k, v in env.items() if k not in LAUNCHER_SETS} for env in (mine, theirs))
    return [f"{key} {mine.get(key, 'unset')} against {theirs.get(key, 'unset')}"
            for key in sorted(mine.keys() | theirs.keys()) if mine.get(key) != theirs.get(key)]
