"""Datasheet figures of known GPUs, to print measured/datasheet and to scale references.

Figures are the vendor's peak numbers at boost clock, per device as CUDA sees it (a
Tesla K80 board holds two GK210 devices; one entry is one device). Tensor figures are
dense (no 2:4 sparsity) with fp32 accumulation, which is what PyTorch uses. `fp16_tflops`
is also given for P100, whose packed fp16 runs at twice the fp32 rate; on other pre-Volta
chips fp16 runs far below fp32 and is left out (None), as is every type a chip lacks.
The figures themselves are in datasheets.yaml beside this module; `GPUS` lists them in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    memory_type: str
    bandwidth_gbs: float
    architecture: str
    cuda_cores: int | None
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    release: str  # YYYY-MM
    match: str  # regex, fullmatch against normalize(device name)

    def peak_tflops(self, precision: str) -> float | None:
        """Peak TFLOP/s for a dlbench precision name (fp32, tf32, fp16, bf16, fp8)."""
        return {
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "fp16": self.fp16_tflops,
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
        }.get(precision)


_DATA_FILE = "datasheets.yaml"  # next to this module; order matters: the first match wins


@lru_cache(maxsize=1)
def _load() -> tuple[GpuSpec, ...]:
    """The entries of datasheets.yaml in file order, read once (its `pattern` is `match` here)."""
    text = resources.files("dlbench.system").joinpath(_DATA_FILE).read_text(encoding="utf-8")
    return tuple(GpuSpec(**{("match" if key == "pattern" else key): value for key, value in entry.items()})
                 for entry in yaml.safe_load(text)["gpus"])


GPUS: list[GpuSpec]  # the table in order; read from datasheets.yaml on first use, see __getattr__


def __getattr__(name: str):
    if name == "GPUS":
        return list(_load())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro|grid)\b")


def normalize(name: str) -> str:
    """'Tesla V100-SXM2-16GB' -> 'v100sxm216gb': no vendor words, only letters and digits."""
    text = _VENDOR_WORDS.sub(" ", name.lower())
    return re.sub(r"[^a-z0-9]", "", text)


def lookup(name: str) -> GpuSpec | None:
    """The datasheet entry for a device name as CUDA/NVML report it, or None if unknown."""
    key = normalize(name)
    if not key:
        return None
    for gpu in _load():
        if re.fullmatch(gpu.match, key):
            return gpu
    return None
