"""The machine a result ran on, as typed records read from the record's `system` mapping (which
system/info.py writes): the one module besides that writer that knows its keys.

Records come from other machines and older versions, so reading never fails: a value of the wrong
type reads as unknown (None, or nothing in a list), and keys this version does not know are kept
in the mapping, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _version(value: Any) -> str | None:
    """A version as text; some records stored cuDNN's as its number (91900)."""
    return str(value) if type(value) is int else _text(value)


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


@dataclass(frozen=True)
class Cpu:
    model: str | None = None
    cores: int | None = None  # logical CPUs the machine has


@dataclass(frozen=True)
class Gpu:
    name: str = ""
    memory_bytes: int | None = None
    capability: str | None = None  # CUDA compute capability, "9.0"
    multiprocessors: int | None = None


@dataclass(frozen=True)
class Machine:
    host: str = ""
    os: str | None = None
    python: str | None = None
    cpu: Cpu = field(default_factory=Cpu)
    ram_bytes: int | None = None
    gpus: tuple[Gpu, ...] = ()  # the GPUs the run's process saw, in CUDA's order
    gpu_count: int | None = None
    driver: str | None = None
    gpu_uuids: tuple[str, ...] = ()
    cuda: str | None = None
    cudnn: str | None = None
    torch: str | None = None
    torchvision: str | None = None
    cluster: str | None = None  # as the user named it (DLBENCH_CLUSTER, SLURM's cluster name)
    cloud: str | None = None
    instance: str | None = None

    @classmethod
    def read(cls, system: Mapping[str, Any]) -> "Machine":
        cpu = system.get("cpu")
        cpu = cpu if isinstance(cpu, Mapping) else {}
        gpus = system.get("gpus")
        uuids = system.get("gpu_uuids")
        return cls(
            host=_text(system.get("host")) or "", os=_text(system.get("os")), python=_text(system.get("python")),
            cpu=Cpu(_text(cpu.get("model")), _int(cpu.get("cores"))), ram_bytes=_int(system.get("ram_bytes")),
            gpus=tuple(Gpu(_text(g.get("name")) or "", _int(g.get("memory_bytes")), _text(g.get("capability")),
                           _int(g.get("multiprocessors")))
                       for g in (gpus if isinstance(gpus, list) else []) if isinstance(g, Mapping)),
            gpu_count=_int(system.get("gpu_count")), driver=_version(system.get("driver")),
            gpu_uuids=tuple(u for u in (uuids if isinstance(uuids, list) else []) if isinstance(u, str)),
            cuda=_version(system.get("cuda")), cudnn=_version(system.get("cudnn")), torch=_version(system.get("torch")),
            torchvision=_version(system.get("torchvision")),
            **{key: _text(system.get(key)) for key in ("cluster", "cloud", "instance")})

    @property
    def gpu_names(self) -> list[str]:
        return [g.name for g in self.gpus]
