"""The machine's fingerprint: GPUs, driver, CUDA, cuDNN, torch, CPU, memory, OS, host.

Works with no GPU and without NVML; what could not be read is left out, never guessed.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from typing import Any

import torch


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _nvml() -> dict[str, Any]:
    """Driver version and per-GPU details through NVML, or {} when NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        info: dict[str, Any] = {"driver": _text(pynvml.nvmlSystemGetDriverVersion())}
        info["uuids"] = [
            _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
        return info
    except Exception:
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpus() -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append({
            "name": p.name,
            "memory_bytes": p.total_memory,
            "capability": f"{p.major}.{p.minor}",
            "multiprocessors": p.multi_processor_count,
        })
    return gpus


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict[str, Any]:
    nvml = _nvml()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": {"model": _cpu_model(), "cores": os.cpu_count()},
        "ram_bytes": _ram_bytes(),
        "gpus": _gpus(),
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "driver": nvml.get("driver"),
        "gpu_uuids": nvml.get("uuids", []),
        "cuda": torch.version.cuda,
        "cudnn": format_cudnn(cudnn),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        # A host name says nothing of the cluster it belongs to; reports show only one given.
        "cluster": os.environ.get("DLBENCH_CLUSTER") or os.environ.get("SLURM_CLUSTER_NAME") or None,
        "cloud": os.environ.get("DLBENCH_CLOUD") or None,  # the GPU table's Cloud and Instance Name
        "instance": os.environ.get("DLBENCH_INSTANCE") or None,
    }


def format_cudnn(version: int | None) -> str | None:
    """cuDNN's integer version as text: 90100 -> '9.1.0', 8902 -> '8.9.2'."""
    if not version:
        return None
    if version >= 90000:
        major, rest = divmod(version, 10000)
        minor, patch = divmod(rest, 100)
    else:
        major, rest = divmod(version, 1000)
        minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"
