"""BenchmarkSpec: everything that defines one benchmark, validated on construction.

The general fields are typed options (`dlbench.options`); a workload's own settings are
its `Options` class, kept in `options` as the mapping of what the spec sets (that mapping
is what records store) and read typed through `spec.opts`. The command line and suite
files build specs through `BenchmarkSpec.from_dict`, which fills the workload's defaults.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from dlbench import workloads
from dlbench.errors import UserError
from dlbench.options import (MAX_BATCH, MAX_GPUS, MAX_SECONDS, MAX_SEED, MAX_STEPS, MAX_TIMEOUT_S, Options,
                             check_fields, option, shown)
from dlbench.units import suggest

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "auto")
OPTIMIZE_LEVELS = ("eager", "compile", "graphs", "max")  # workloads/optimize.py


def check_device(text: str) -> None:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise UserError(f"bad device {text!r}: use auto, cpu, cuda or cuda:N")


@dataclass(frozen=True)
class BenchmarkSpec:
    workload: str
    model: str = option("resnet50", "Model name (`dlbench models`), any torchvision classifier, or timm:<name>.")
    batch: int | None = option(None, "Batch size per process (default: the workload's, else the model's: 16, "
                                     "1 for 3D U-Nets).", low=1, high=MAX_BATCH)
    input_shape: tuple[int, ...] | None = option(None, "Input shape without the batch, e.g. 3x224x224 (default: "
                                                       "the model's).")
    precision: str = option("fp32", "fp32, tf32 (TF32 matmuls/convolutions), fp16 (autocast; a gradient scaler "
                                    "when training), bf16 (autocast), or auto (volume only: on a GPU the fastest "
                                    "half type whose output agrees with fp32's, else fp32).", choices=PRECISIONS)
    channels_last: bool = option(False, "Use the channels-last memory format (channels-last-3d for volumes).")
    device: str = option("auto", "auto (the first GPU if there is one), cpu, cuda or cuda:N.", parse=check_device)
    warmup: int = option(5, "Warm-up steps (at least).", low=0, high=MAX_STEPS)
    warmup_seconds: float = option(1.0, "Warm-up time (at least).", unit="s", low=0, high=MAX_SECONDS)
    steps: int = option(20, "Measured steps (at least).", low=1, high=MAX_STEPS)
    min_seconds: float = option(1.0, "Measured time (at least).", unit="s", low=0, high=MAX_SECONDS)
    seed: int = option(0, "Random seed for weights and inputs.", low=0, high=MAX_SEED)
    gpus: int = option(1, "Processes (one per GPU) under torchrun with DistributedDataParallel; "
                          "with --device cpu they run on the CPU (gloo).", low=1, high=MAX_GPUS)
    timeout: float | None = option(None, "Seconds before an isolated run is stopped and stored as timeout.",
                                   unit="s", low=0, low_open=True, high=MAX_TIMEOUT_S)
    optimize: str = option("eager", "eager (as built), compile (torch.compile), graphs (CUDA graphs of the step; "
                                    "GPU only) or max (compile with autotuned kernels, CUDA graphs, channels-last, "
                                    "fused optimizer; GPU only). Checked against eager before timing; compile time "
                                    "is reported apart.", choices=OPTIMIZE_LEVELS)
    profile: int = option(0, "Steps run under torch.profiler after the measured ones (0: none): the step's time "
                             "split into kernel classes, GPU idle among them; `dlbench doctor` reads it.",
                          low=0, high=1000)
    profile_trace: str | None = option(None, "With --profile: also write a Chrome trace (Perfetto, TensorBoard) "
                                             "to this file: on a GPU one more step with host operators, shapes "
                                             "and kernels; on a CPU the profiled steps.")
    options: dict[str, Any] = field(default_factory=dict)  # the workload's settings this spec sets

    def __post_init__(self) -> None:
        from dlbench.models import registry

        workload = self.declared
        if self.gpus == "all":  # every GPU of this machine (1 without GPUs)
            object.__setattr__(self, "gpus", _all_gpus())
        if not isinstance(self.model, str):
            raise UserError(f"--model must be a model name, got {shown(self.model)}")
        entry = registry.resolve(self.model)  # raises UserError with suggestions
        workloads.check_task(workload, self.model, entry.task)
        if self.batch is None:  # one patch per GPU for volumes (seeds 000/001), else 16
            object.__setattr__(self, "batch", workload.defaults.get("batch") or (1 if len(entry.input_shape) == 4 else 16))
        check_fields(self)
        if self.precision == "auto" and not workload.auto_precision:
            raise UserError(f"--precision auto is for `run volume` only; {self.workload} takes fp32, tf32, fp16 or bf16")
        if self.input_shape is not None:
            registry.check_input(entry, self.input_shape)
        if self.profile_trace is not None and not self.profile:
            raise UserError("--profile-trace needs --profile N (the number of steps to profile)")
        if self.profile_trace is not None:
            from dlbench.paths import check_new_file

            check_new_file(self.profile_trace, "profile trace")
        if not isinstance(self.options, dict):
            raise UserError(f"options must be a mapping, got {shown(self.options)}")
        object.__setattr__(self, "_opts", workload.options.from_dict(self.options, f"workload {self.workload!r} "))

    @functools.cached_property
    def declared(self) -> workloads.Workload:
        """The workload this spec runs (its registry entry: options, run, describe, preflight,
        tuning), looked up once; the launchers and commands take it from here."""
        return workloads.get(self.workload)

    def __getstate__(self) -> dict[str, Any]:
        # A workload's functions need not pickle (a plug-in's may be closures): a copy looks it up again.
        return {k: v for k, v in self.__dict__.items() if k != "declared"}

    @property
    def opts(self) -> Options:
        """The workload's options, typed, defaults filled in."""
        return self._opts  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BenchmarkSpec":
        """From a command line, a suite entry or a stored spec; workload options may sit beside
        the general keys. Keys the entry leaves out take the workload's defaults."""
        if "workload" not in data:
            raise UserError("spec is missing 'workload'")
        workload = workloads.get(data["workload"])
        general = set(GENERAL_FIELDS)
        own = set(workload.options.names())
        unknown = sorted(set(data) - general - own - {"workload", "options"}, key=str)
        if unknown:
            known = sorted(general | own)
            raise UserError(f"unknown spec key {shown(unknown[0])}{suggest(str(unknown[0]), known)}; "
                            f"known keys: {', '.join(known)}")
        values = {**{k: v for k, v in workload.defaults.items() if k != "batch"}, **data}
        fields = {k: v for k, v in values.items() if k in general or k == "workload"}
        options = {**{k: v for k, v in values.items() if k in own}, **(data.get("options") or {})}
        return cls(**fields, options=options)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["input_shape"] = list(self.input_shape) if self.input_shape else None
        data["options"] = dict(self.options)
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


def _all_gpus() -> int:
    from dlbench.system.info import visible_gpus

    return max(1, visible_gpus())


GENERAL_FIELDS = tuple(f.name for f in dataclasses.fields(BenchmarkSpec) if f.name not in ("workload", "options"))