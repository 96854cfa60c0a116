"""Workloads: what a benchmark does. Each is one module that declares a `Workload`:

- `options`: a typed `Options` class, its settings beyond the general spec (defaults, help,
  units and bounds in one place; the command line and suite schema are made from it);
- `preflight(spec) -> warnings`: checks that read files or devices, before anything runs;
- `run(spec, device, progress) -> (Measurement, samples)`: the benchmark itself. The Measurement
  (results/measurement.py) holds the throughput and its unit, and in `traces` and `settled` what
  the runner moves into the Result beside the metrics; samples hold `step` (seconds per step). A
  plug-in may return a plain metrics mapping instead, read by `measurement`;
- `describe(Measurement) -> str`: one line for the terminal;
- how its results read where nothing else knows it: `label`, `unit`, `passes`, `batch_free`,
  `steps_note`. The report's general table, the plots, the estimate and the doctor read these,
  so a new workload appears in all of them with no edit there (`declared` answers for a name,
  known or not).

A workload never prints and never writes the store; `launch/` runs it and stores the
Result. The built-in workloads are declared in `workloads/builtin.py` (names, help, options:
all the command line and the suites need, without torch); their modules, which load torch,
are imported when a benchmark first runs (`later`). Plug-ins `register` theirs.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from dlbench.errors import UserError
from dlbench.options import Options, shown
from dlbench.results.measurement import Measurement
from dlbench.units import suggest

# The general spec fields a workload's command shows by default.
GENERAL = ("model", "batch", "input_shape", "precision", "channels_last", "optimize", "device", "warmup",
           "warmup_seconds", "steps", "min_seconds", "seed", "gpus", "profile", "profile_trace")


def no_preflight(spec: Any) -> list[str]:
    return []


@dataclass(frozen=True)
class Workload:
    name: str
    help: str  # the command's --help: what it measures, in the user's words
    run: Callable[..., tuple[Measurement | Mapping[str, Any], dict]]
    describe: Callable[[Measurement], str]
    options: type[Options] = Options
    # Specs are spec.BenchmarkSpec, which imports this module (its checks read the workloads'
    # options): the layers below the spec take it untyped rather than import it back.
    preflight: Callable[[Any], list[str]] = no_preflight
    general: tuple[str, ...] = GENERAL  # general spec fields its command takes
    defaults: dict[str, Any] = field(default_factory=dict)  # general fields whose default differs here
    batch_plans: bool = False  # --batch also takes lists (1,2,4), 'sweep' and 'auto'
    auto_precision: bool = False  # --precision auto: the workload settles the precision itself
    trains: bool = False  # runs its model in training mode (BatchNorm then needs more than one value per channel)
    # spec -> what a choice it measures itself depends on beyond the general spec fields (volume's
    # --block auto: the input's shape and type), or None where the spec leaves nothing to choose; the
    # launcher keeps the choice under that key (launch/tuning.py) and hands it to the next run that matches.
    tuning: Callable[[Any], dict | None] | None = None
    # (spec, what `tuning` returned, a remembered choice) -> what makes the choice unusable for this run
    # (edited, damaged, not what the user's flags say), or None: the launcher ignores such a choice.
    tuned_check: Callable[[Any, dict, dict], str | None] | None = None
    # Its ranks exchange only small objects (blocks shared out, figures gathered), never GPU tensors:
    # a gloo group on the host serves them, made in milliseconds where NCCL connects the GPUs in seconds.
    host_group: bool = False
    # spec -> what a run of it will compute, where its steps are not the spec's (volume: one tile a step,
    # as many as the blocking has): the estimate of its time goes by it (suites/estimate.py).
    planned: Callable[[Any], "Planned | None"] | None = None
    label: str = ""  # what it measures, as a caption says it ("training"); its name where empty
    unit: str = ""  # the unit of its throughput (img/s, tokens/s); the results' own where empty
    passes: float = 3.0  # forward passes' worth of FLOPs a step costs: an estimate from the model's FLOPs
    batch_free: bool = False  # its figure does not depend on a batch size (volume: blocks of a volume)
    steps_note: str = ""  # what its step times show that a reader would not guess, for a plot's caption
    # The model tasks (models/registry.py `ModelEntry.task`) it alone runs, such as "language": a model of
    # such a task runs only under the workloads that name it; a workload that names none runs the rest.
    tasks: tuple[str, ...] = ()

    def takes(self, option: str) -> bool:
        """Whether it has this option of its own (volume's `kernels`): a hint may name it."""
        return option in self.options.names()

    @property
    def title(self) -> str:
        """Its label and name, as a table or plot heads its results: "training (train)"."""
        return f"{self.label} ({self.name})" if self.label else self.name


@dataclass(frozen=True)
class Planned:
    """What a run will compute, as its workload knows before it starts: its steps' input, how many
    there are, and what the run does besides them."""
    shape: tuple[int, ...]  # one step's input, batch included (volume: [1, 1, *tile])
    steps: int  # steps in the measured window (volume: the busiest rank's tiles)
    warmup: int  # steps of the warm-up
    precision: str  # what will run ('auto' settled as the workload settles it)
    passes: float = 1.0  # forward passes a step costs
    counted_free: bool = False  # its FLOP count costs no step (counted on the meta device)
    efficiency: float | None = None  # share of the matmul ceiling its steps reach, where known to differ
    cpu_efficiency: float | None = None  # the same on a CPU only, where its device is not known without torch
    prepare: tuple[tuple[str, float], ...] = ()  # (what, seconds, at the stand-in rate) before the steps: an input made
    warmup_seconds: float = 0.0  # the warm-up lasts at least this long (train's --warmup-seconds)
    min_seconds: float = 0.0  # and the measured window (train's --min-seconds)
    bound: str | None = None  # where `steps` is a limit, not a count (converge stops at its target): what it is


def measurement(figures: Measurement | Mapping[str, Any]) -> Measurement:
    """What `run` returned as a Measurement: a plug-in's plain metrics mapping is read, its monitor
    trace (under 'traces') and the spec fields it chose (under 'settled') taken out of the metrics."""
    if isinstance(figures, Measurement):
        return figures
    metrics = dict(figures)
    traces, settled = metrics.pop("traces", None) or {}, metrics.pop("settled", None) or {}
    return dataclasses.replace(Measurement.read(metrics), traces=dict(traces), settled=dict(settled))


def later(module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported on the first call: declaring a workload this way loads no torch."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{name}"
    call.module = module  # type: ignore[attr-defined]  # what a caller may import ahead of the first call
    return call


_LOADED: dict[str, Workload] = {}


def _builtin() -> dict[str, Workload]:
    from dlbench.workloads.builtin import BUILTIN  # it declares its options with this module's types

    return BUILTIN


def register(workload: Workload) -> Workload:
    """Add a workload (a plug-in's); its name becomes `dlbench run <name>` and a suite `workload:`."""
    _LOADED[workload.name] = workload
    return workload


def names() -> list[str]:
    return list(dict.fromkeys([*_builtin(), *_LOADED]))


def get(name: str) -> Workload:
    if not isinstance(name, str):
        raise UserError(f"workload must be a name, got {shown(name)}")
    if name not in _LOADED:
        if name not in _builtin():
            known = names()
            raise UserError(f"unknown workload {shown(name)}{suggest(name, known)}; known: {', '.join(known)}")
        register(_builtin()[name])
    return _LOADED[name]


def check_task(workload: Workload, model: str, task: str) -> None:
    """A UserError where `workload` cannot run a model of `task`, naming the workloads that can."""
    owners = [w for w in (get(n) for n in names()) if task in w.tasks]
    if owners and workload not in owners:
        runs = " or ".join(f"`dlbench run {w.name}`" for w in owners)
        raise UserError(f"model {model!r} is a {task} model, which {workload.name} cannot run: use {runs}")
    if workload.tasks and task not in workload.tasks:
        from dlbench.models import registry

        known = [e.name for e in registry.MODELS.values() if e.task in workload.tasks]
        examples = f" ({', '.join(known)})" if known else ""
        raise UserError(f"{workload.name} runs {' and '.join(workload.tasks)} models{examples}; {model!r} is a {task} model")


def declared(name: str) -> Workload:
    """The declaration of a stored result's workload; a workload no longer known here (a plug-in
    not installed where the results are read) reads as a bare one of that name."""
    found = _LOADED.get(name) or _builtin().get(name)
    return found if found is not None else Workload(name, "", _unknown, _unknown)


def _unknown(*_: Any) -> Any:
    raise UserError("this workload is not installed here")
