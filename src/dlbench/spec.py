"""BenchmarkSpec: everything that defines one benchmark, validated on construction.

CLI flags and suite YAML build the same object through `BenchmarkSpec.from_dict`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from dlbench.errors import UserError
from dlbench.units import parse_shape, suggest

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
OPTIMIZE_LEVELS = ("eager", "compile", "graphs", "max")  # the same as workloads.optimize.LEVELS
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _workloads() -> dict[str, str]:
    from dlbench.workloads import WORKLOADS

    return WORKLOADS


def workload_options(workload: str) -> dict[str, Any]:
    """The options a workload accepts, with their defaults (its module's OPTIONS)."""
    import importlib

    return importlib.import_module(_workloads()[workload]).OPTIONS


def check_workload_options(workload: str, options: dict[str, Any]) -> None:
    """A workload module may define `check_options(options)` to reject bad values early (UserError);
    it sees every option, the defaults filled in."""
    import importlib

    module = importlib.import_module(_workloads()[workload])
    check = getattr(module, "check_options", None)
    if check is not None:
        check({**module.OPTIONS, **options})


@dataclass(frozen=True)
class BenchmarkSpec:
    workload: str
    model: str
    batch: int = 16
    input_shape: tuple[int, ...] | None = None  # None: the model's default
    precision: str = "fp32"
    channels_last: bool = False
    device: str = "auto"
    warmup: int = 5
    warmup_seconds: float = 1.0
    steps: int = 20
    min_seconds: float = 1.0
    seed: int = 0
    gpus: int = 1  # processes (one per GPU) that run the benchmark together
    timeout: float | None = None  # seconds before an isolated run is stopped
    optimize: str = "eager"  # eager | compile | graphs | max (workloads/optimize.py)
    options: dict[str, Any] = field(default_factory=dict)  # workload-specific settings

    def __post_init__(self) -> None:
        from dlbench.models import registry

        known = _workloads()
        if self.workload not in known:
            raise UserError(f"unknown workload {self.workload!r}{suggest(self.workload, list(known))}; known: {', '.join(known)}")
        registry.resolve(self.model)  # raises UserError with suggestions
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch <= 0:
            raise UserError(f"batch must be a positive integer, got {self.batch!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.optimize not in OPTIMIZE_LEVELS:
            raise UserError(f"unknown optimisation level {self.optimize!r}; choose one of {', '.join(OPTIMIZE_LEVELS)}")
        if not _DEVICE.match(str(self.device)):
            raise UserError(f"bad device {self.device!r}: use auto, cpu, cuda or cuda:N")
        if self.input_shape is not None:
            object.__setattr__(self, "input_shape", parse_shape(self.input_shape))
        if self.gpus == "all":  # every GPU of this machine (1 without GPUs)
            import torch

            object.__setattr__(self, "gpus", max(1, torch.cuda.device_count() if torch.cuda.is_available() else 1))
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise UserError(f"gpus must be an integer ≥ 1 or 'all', got {self.gpus!r}")
        if self.timeout is not None and (not isinstance(self.timeout, (int, float)) or self.timeout <= 0):
            raise UserError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if not isinstance(self.options, dict):
            raise UserError(f"options must be a mapping, got {self.options!r}")
        known_options = workload_options(self.workload)
        for key in self.options:
            if key not in known_options:
                raise UserError(f"workload {self.workload!r} has no option {key!r}{suggest(key, list(known_options))}")
        check_workload_options(self.workload, self.options)
        for name in ("warmup", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "steps" else 0):
                raise UserError(f"{name} must be an integer ≥ {1 if name == 'steps' else 0}, got {value!r}")
        for name in ("warmup_seconds", "min_seconds"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise UserError(f"{name} must be a number of seconds ≥ 0, got {value!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BenchmarkSpec":
        """From a suite entry or a stored spec; workload options may sit beside the general keys."""
        for required in ("workload", "model"):
            if required not in data:
                raise UserError(f"spec is missing {required!r}")
        general = {f.name for f in dataclasses.fields(cls)}
        workload_keys = set(workload_options(data["workload"])) if data["workload"] in _workloads() else set()
        unknown = sorted(set(data) - general - workload_keys)
        if unknown:
            known = sorted(general | workload_keys)
            raise UserError(f"unknown spec key {unknown[0]!r}{suggest(unknown[0], known)}; known keys: {', '.join(known)}")
        fields = {k: v for k, v in data.items() if k in general}
        options = {**{k: v for k, v in data.items() if k not in general}, **(fields.pop("options", None) or {})}
        return cls(**fields, options=options)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["input_shape"] = list(self.input_shape) if self.input_shape else None
        return data

    def label(self) -> str:
        """Short human name: 'fwdbwd resnet50 b16 fp32'."""
        shape = "x".join(map(str, self.input_shape)) if self.input_shape else ""
        parts = [self.workload, self.model, f"b{self.batch}", shape, self.precision]
        if self.channels_last:
            parts.append("cl")
        if self.optimize != "eager":
            parts.append(self.optimize)
        return " ".join(p for p in parts if p)
