"""The machine's fingerprint: GPUs, driver, CUDA, cuDNN, torch, CPU, memory, OS, host.

Works with no GPU and without NVML; what could not be read is left out, never guessed.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


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
    import torch

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
    """The package's own __version__, read from its version.py where it is not imported yet:
    importing torchvision imports torch's compiler too, which a run that needs neither should not wait for."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__version__", None)
    try:
        spec = importlib.util.find_spec(module)
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
        return re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE).group(1)
    except Exception:  # noqa: BLE001 - absent, or laid out otherwise: its distribution's version
        try:
            return metadata.version(module)
        except metadata.PackageNotFoundError:
            return None


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict[str, Any]:
    """The machine as the process that measures sees it (this initialises CUDA where there is a GPU)."""
    return _fingerprint(_gpus(), _torch_facts())


@functools.lru_cache(maxsize=1)
def launcher_fingerprint() -> dict[str, Any]:
    """The same facts for a process that starts benchmarks but measures none (a suite's, a SLURM
    job's, torchrun's parent): its GPUs come from NVML, so it never initialises CUDA. Only the
    records it makes itself (a benchmark that died before writing one) carry it."""
    gpus = _nvml_gpus()
    return _fingerprint(gpus, _torch_unimported(len(gpus)) or _torch_facts())


def _torch_facts() -> dict[str, Any]:
    import torch  # here, not above: `dlbench suite --list` imports this module and needs no torch

    return {"gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "cuda": torch.version.cuda, "cudnn": _cudnn_version(), "torch": torch.__version__}


def _torch_unimported(nvml_gpus: int) -> dict[str, Any] | None:
    """`_torch_facts` read without importing torch (seconds on a busy CPU, in a process that runs
    none of it): torch/version.py run on its own, the GPUs NVML sees where torch was built for
    them, cuDNN's own version call; None where one of them cannot be read so."""
    import runpy

    try:
        found = importlib.util.find_spec("torch")
        folder = Path(next(iter(found.submodule_search_locations or [])))
        build = runpy.run_path(str(folder / "version.py"))
    except Exception:  # noqa: BLE001 - an unusual install: torch is asked instead
        return None
    cuda, hip = build.get("cuda"), build.get("hip")
    cudnn = _cudnn_library_version(folder) if cuda else None
    if not isinstance(build.get("__version__"), str) or (cuda and cudnn is None):
        return None
    return {"gpu_count": nvml_gpus if cuda or hip else 0, "cuda": cuda, "cudnn": cudnn,
            "torch": build["__version__"]}


def _cudnn_library_version(torch_folder: Path) -> int | None:
    """cudnnGetVersion() of the cuDNN a CUDA torch loads (the nvidia-cudnn wheel's, else torch/lib's)."""
    import ctypes

    wheel = importlib.util.find_spec("nvidia.cudnn") if importlib.util.find_spec("nvidia") else None
    folders = [Path(p) / "lib" for p in (wheel.submodule_search_locations or [])] if wheel else []
    for library in [f for folder in [*folders, torch_folder / "lib"] for f in sorted(folder.glob("libcudnn.so*"))]:
        try:
            get = ctypes.CDLL(str(library)).cudnnGetVersion
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_size_t
        return int(get())
    return None


def _fingerprint(gpus: list[dict[str, Any]], torch_facts: dict[str, Any]) -> dict[str, Any]:
    nvml = _nvml()
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": {"model": _cpu_model(), "cores": os.cpu_count()},
        "ram_bytes": _ram_bytes(),
        "gpus": gpus,
        "gpu_count": torch_facts["gpu_count"],
        "driver": nvml.get("driver"),
        "gpu_uuids": nvml.get("uuids", []),
        "cuda": torch_facts["cuda"],
        "cudnn": format_cudnn(torch_facts["cudnn"]),
        "torch": torch_facts["torch"],
        "torchvision": _version("torchvision"),
        # A host name says nothing of the cluster it belongs to; reports show only one given.
        "cluster": os.environ.get("DLBENCH_CLUSTER") or os.environ.get("SLURM_CLUSTER_NAME") or None,
        "cloud": os.environ.get("DLBENCH_CLOUD") or None,  # the GPU table's Cloud and Instance Name
        "instance": os.environ.get("DLBENCH_INSTANCE") or None,
    }


def _cudnn_version() -> int | None:
    # torch.backends.cudnn.version() checks every GPU's compute capability first, and so
    # initialises CUDA; the library's own version number needs no GPU.
    try:
        from torch._C import _cudnn

        return int(_cudnn.getVersionInt())
    except (ImportError, AttributeError, RuntimeError):
        return None


def visible_gpus() -> int:
    """How many GPUs this process may use, read without torch where it can be (a suite's `gpus:
    all` is expanded when the suite is checked, before anything runs): NVML honours
    CUDA_VISIBLE_DEVICES and initialises no CUDA; a machine without a GPU driver has none;
    only otherwise is torch asked."""
    seen = gpus_seen()
    if seen is not None:
        return seen
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpus_seen() -> int | None:
    """How many GPUs this process may use as far as can be told without torch (milliseconds, where
    importing torch takes seconds): NVML's count, or 0 on a machine without a GPU driver; None where
    only torch can tell (a driver NVML cannot read: ROCm, WSL)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return len(_nvml_gpus())
    except Exception:  # noqa: BLE001 - no NVML: no NVIDIA driver, or not one NVML can read
        pass
    if not any(os.path.exists(device) for device in GPU_DEVICES):
        return 0
    return None


GPU_DEVICES = ("/dev/nvidia0", "/dev/kfd", "/dev/dxg")  # NVIDIA, ROCm, WSL: a GPU driver is loaded


def gpu_names() -> list[str]:
    """The names of the GPUs this process may use, from NVML: no torch, no CUDA; [] without NVML."""
    return [gpu["name"] for gpu in _nvml_gpus()]


def _nvml_gpus() -> list[dict[str, Any]]:
    """Name and compute capability of each GPU CUDA_VISIBLE_DEVICES shows, through NVML; [] without it."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = []
        for handle in _visible(handles, lambda h: _text(pynvml.nvmlDeviceGetUUID(h))):
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append({"name": _text(pynvml.nvmlDeviceGetName(handle)), "capability": f"{major}.{minor}"})
        return gpus
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _visible(handles: list[Any], uuid: Any) -> list[Any]:
    """The devices CUDA_VISIBLE_DEVICES names (indices or UUID prefixes), in its order; like CUDA, the
    list ends at the first entry that names no device."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return handles
    shown = []
    for entry in (e.strip() for e in text.split(",")):
        if entry.isdigit() and int(entry) < len(handles):
            shown.append(handles[int(entry)])
        elif entry.startswith("GPU-") and (match := [h for h in handles if uuid(h).startswith(entry)]):
            shown.append(match[0])
        else:
            break
    return shown


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
