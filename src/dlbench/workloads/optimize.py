"""Optimisation levels: one place that turns an eager model into a faster one and proves it
still computes the same thing.

Levels (`spec.optimize`):
  eager    the model as built;
  compile  torch.compile of the model (forward and, in training, the backward through AOTAutograd);
  graphs   CUDA graphs of the model's forward (and backward in training: make_graphed_callables),
           static inputs, warmed up on a side stream before capture; fwdbwd and train capture
           their whole step instead, one graph per phase (StepGraphs, `capture_step`);
  max      channels-last, cuDNN timing its algorithms for each convolution (cudnn.benchmark),
           torch.compile with autotuned matrix multiplications, replayed as CUDA graphs
           (MAX_OPTIONS; inside StepGraphs where the step is captured), and a fused optimizer
           (`optimizer_kwargs`); a training step compiles the model with layers that run faster
           in an equivalent form rewritten (workloads.rewrites: ResNet's stem convolution).

`prepare` applies the level and, before anything is timed, runs the optimised model and an
eager copy of it on the same input: outputs, loss and parameter gradients must agree, or the
run fails with the measured error. How close is close enough depends on the precision and on
the network: deep networks with batch norm in training mode amplify rounding differences
(ResNet-50's bf16 gradients move by more than 100% when the input moves by one bf16 rounding
step). So the allowed error is the larger of a fixed tolerance per precision and
NOISE_FACTOR times eager's own sensitivity: the change of eager's results when the input is
nudged by the precision's rounding error. Both are stored with the result. The time from the
eager model to the first optimised call done (compilation, capture) is `compile_s`; it falls
before warm-up, and warm-up runs at least `MIN_WARMUP` more steps, so none of it is measured.
While it runs the user sees it as a phase with its elapsed time, and a compiler's output goes to a
log the result names, not to the terminal; Inductor's caches persist in dlbench's cache folder
(workloads.compiling).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import os
import time
from typing import Any, Callable, Iterator

import torch
from torch import nn

from dlbench.errors import UserError
from dlbench.measure.loop import Progress, _no_progress
from dlbench.results.measurement import Measurement, Run
from dlbench.workloads import compiling, rewrites
from dlbench.workloads.runtime import autocast_dtype

# The same as spec.OPTIMIZE_LEVELS (which checks specs before any workload loads) and
# report.optimize.LEVELS; written out here because workloads do not import the layers above them.
LEVELS = ("eager", "compile", "graphs", "max")
NEEDS_CUDA = ("graphs", "max")
COMPILED = ("compile", "max")  # levels that run torch.compile
STEP_LEVELS = ("graphs", "max")  # levels at which a training step is captured whole where it can be
# Relative norm error ||optimised - eager|| / ||eager|| allowed per precision: reduction order and
# kernel choice change the rounding, by about the precision's epsilon times the depth of the network.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 5e-2, "bf16": 5e-2}
ROUNDING = {"fp32": 2.0**-24, "tf32": 2.0**-11, "fp16": 2.0**-11, "bf16": 2.0**-8}  # unit roundoff
# Kernels that round differently from eager land within a few times eager's sensitivity to one
# rounding step of the input, a wrong step far outside it.
NOISE_FACTOR = 4.0
# mode="max-autotune" without two of its parts: convolutions stay on cuDNN and pointwise kernels
# are not coordinate-descent tuned; autotuning those for ResNet-50 outran a 10-minute limit.
MAX_OPTIONS = {"max_autotune": True, "triton.cudagraphs": True, "max_autotune_conv_backends": "ATEN"}
# The same without inductor's own CUDA graphs, for a model that runs inside captured StepGraphs.
GRAPHED_OPTIONS = {**MAX_OPTIONS, "triton.cudagraphs": False}
MIN_WARMUP = 3  # steps after compilation/capture before measuring (recompiles, cudagraph recording)
CHECK_CALLS = 3  # optimised calls in the check; the last is compared (graph-replay paths start late)
# Tests on 2 CPU cores cannot afford inductor for every model: this internal setting swaps in
# another torch.compile backend ("aot_eager" keeps the dynamo + AOTAutograd path). Not a user option.
BACKEND_ENV = "DLBENCH_COMPILE_BACKEND"
# How many of cuDNN's algorithms cudnn.benchmark times for each convolution at `max` (torch's
# default: 10; 0: every one cuDNN offers). This internal setting changes it for measurements; not a
# user option.
CUDNN_LIMIT_ENV = "DLBENCH_CUDNN_BENCHMARK_LIMIT"

Loss = Callable[[Any], torch.Tensor]


class MismatchError(RuntimeError):
    """The optimised model computes something else than the eager one."""


def check_level(level: str, device: torch.device) -> None:
    if level in NEEDS_CUDA and device.type != "cuda":
        raise UserError(f"--optimize {level} needs a CUDA GPU (CUDA graphs); on {device.type} use eager or compile")


# Where the compile phase reports: set by `switches` for the run, read where `prepare` compiles
_progress: contextvars.ContextVar[Progress] = contextvars.ContextVar("compile_progress", default=_no_progress)


@contextlib.contextmanager
def switches(level: str, progress: Progress = _no_progress) -> Iterator[None]:
    """Global switches a level turns on for the run, restored after: cudnn.benchmark at `max`;
    Inductor's caches in dlbench's cache folder where torch.compile runs (compiling.caches); and
    `progress`, the workload's callback, to which the compile phase reports: workloads hand
    `prepare` a model and an input, not the run's display."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = saved or level == "max"
    token = _progress.set(progress)
    try:
        with compiling.caches() if level in COMPILED else contextlib.nullcontext(), \
                cudnn_limit(os.environ.get(CUDNN_LIMIT_ENV) if level == "max" else None):
            yield
    finally:
        torch.backends.cudnn.benchmark = saved
        _progress.reset(token)


def recorded_switches(level: str) -> Measurement:
    """The switches of `level` a result records, read inside `switches`: at `max`, how many
    algorithms cudnn.benchmark timed per convolution."""
    if level != "max" or not torch.backends.cudnn.is_available():
        return Measurement()
    return Measurement(run=Run(cudnn_benchmark_limit=torch.backends.cudnn.benchmark_limit))


@contextlib.contextmanager
def cudnn_limit(value: str | None) -> Iterator[None]:
    """cudnn.benchmark times this many algorithms per convolution in the block (0: all; None: as it is)."""
    if value is None or not torch.backends.cudnn.is_available():
        yield
        return
    limit = int(value) if value.strip().isdigit() else -1
    if limit < 0:
        raise UserError(f"{CUDNN_LIMIT_ENV} is a count of algorithms, 0 for all; got {value!r}")
    saved = torch.backends.cudnn.benchmark_limit
    torch.backends.cudnn.benchmark_limit = limit
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark_limit = saved


def effective_spec(spec):
    """The spec a workload runs: `max` means channels-last, and every optimised level warms up
    for at least MIN_WARMUP steps after compilation."""
    level = getattr(spec, "optimize", "eager")
    if level == "eager":
        return spec
    changes: dict[str, Any] = {"warmup": max(spec.warmup, MIN_WARMUP)}
    if level == "max":
        changes["channels_last"] = True
    return dataclasses.replace(spec, **changes)


def optimizer_kwargs(spec, params: list[torch.Tensor]) -> dict[str, Any]:
    """`fused=True` for SGD/Adam/AdamW at level max when every parameter is on a GPU."""
    if getattr(spec, "optimize", "eager") == "max" and params and all(p.is_cuda for p in params):
        return {"fused": True}
    return {}


# ---------------------------------------------------------------- applying a level


class Optimized(nn.Module):
    """The optimised model, with the eager one beside it for FLOP counting: torch.utils.flop_counter
    cannot see inside compiled kernels or graph replays, so under a dispatch mode the eager path runs."""

    def __init__(self, eager: nn.Module, fast: Callable) -> None:
        super().__init__()
        self.eager = eager
        # A module here (compiled, graphed shell) becomes a child, so train()/eval() reach it: a
        # graphed shell replays only in the mode it was captured in and runs eagerly otherwise.
        self.fast = fast

    def forward(self, *args, **kwargs):
        if counting():
            return self.eager(*args, **kwargs)
        return self.fast(*args, **kwargs)


def counting() -> bool:
    """Whether a dispatch mode (FLOP counting) is watching: it sees nothing of compiled kernels or
    graph replays, so the eager path must run."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode() is not None


class _StepMarked:
    """Tells cudagraph trees (mode max-autotune) that each call starts a new step, so
    outputs of a previous step still held by the caller are never overwritten mid-step."""

    def __init__(self, compiled: Callable) -> None:
        self.compiled = compiled

    def __call__(self, *args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled(*args, **kwargs)


class _Shell(nn.Module):
    """A fresh module around the model: make_graphed_callables replaces the forward of the module
    it gets, and the model itself must stay eager (FLOP counting, recapture)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)


class _ForwardGraph:
    """Forward-only CUDA graph (inference): copy into the static input, replay, return the static
    output. Another input shape runs eagerly."""

    def __init__(self, model: nn.Module, example: torch.Tensor) -> None:
        self.model = model
        self.static_in = example.clone()
        current = torch.cuda.current_stream(example.device)
        side = torch.cuda.Stream(example.device)
        side.wait_stream(current)
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(3):  # cuDNN autotuning and allocator growth happen before capture
                model(self.static_in)
        current.wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.static_out = model(self.static_in)

    def __call__(self, x: torch.Tensor):
        if x.shape != self.static_in.shape or x.dtype != self.static_in.dtype:
            return self.model(x)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out


@contextlib.contextmanager
def weights_kept(model: nn.Module) -> Iterator[None]:
    """The model's weights as they were before the block, put back in place (graphs keep their addresses)."""
    saved = [p.detach().clone() for p in model.parameters()]
    try:
        yield
    finally:
        with torch.no_grad():
            for p, value in zip(model.parameters(), saved):
                p.copy_(value)


class StepGraphs:
    """A training step captured as CUDA graphs, one per phase: forward (with the loss), backward
    and, given an optimizer, its step. They share one memory pool and replay in capture order, as
    make_graphed_callables does for a module, here for the whole step: between the kernels there
    is no Python, no autograd engine and no allocator, and a timer still marks the phases between
    replays. Gradients are captured from None, so each backward replay writes them afresh (no
    reset). `example` is the static input and `run` the model as called (compiled at `max`): the
    caller fills the input, and any target the loss reads, in place. Warm-up steps (which create
    the optimizer's state) are undone on the parameters before capture."""

    def __init__(self, model: nn.Module, example: torch.Tensor, loss: Loss,
                 optimizer: torch.optim.Optimizer | None = None, run: Callable | None = None, warmup: int = 3) -> None:
        self.model, self.example, self.loss = model, example, loss
        self.run = model if run is None else run
        self.out: Any = None
        self.value: torch.Tensor | None = None
        phases = {"forward": self._forward, "backward": self._backward}
        if optimizer is not None:
            phases["optimizer"] = optimizer.step
        self.replays = self._capture(phases, warmup)

    def _forward(self) -> None:
        self.out = self.run(self.example)
        self.value = self.loss(self.out)

    def _backward(self) -> None:
        self.value.backward()

    def _capture(self, phases: dict[str, Callable[[], Any]], warmup: int) -> dict[str, Callable[[], None]]:
        device = self.example.device
        current, side = torch.cuda.current_stream(device), torch.cuda.Stream(device)
        side.wait_stream(current)
        # compilation, cuDNN autotuning and allocator growth happen before capture
        with torch.cuda.stream(side), weights_kept(self.model):
            for _ in range(warmup):
                for phase in phases.values():
                    phase()
                self.model.zero_grad(set_to_none=True)
        current.wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        replays = {}
        for name, phase in phases.items():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                phase()
            replays[name] = graph.replay
        return replays

    def step(self, timer) -> None:
        """One replay of every phase, each marked on `timer` by its name; while FLOPs are counted
        (replays are invisible to the counter) the eager forward and backward instead, whose
        gradients land in the graph's, which the next replay overwrites."""
        if counting():
            self.loss(self.model(self.example)).backward()
            return
        for name, replay in self.replays.items():
            replay()
            timer.mark(name)


def _autocast_without_cache(device: torch.device):
    """Graph capture under autocast needs its weight cache off (cached casts would outlive the capture)."""
    dtype = autocast_dtype(device.type)
    return torch.autocast(device.type, dtype=dtype, cache_enabled=False) if dtype else contextlib.nullcontext()


def rewritten(model: nn.Module, training: bool) -> nn.Module:
    """The model a training step at `max` compiles: layers the compiled step runs faster in another
    form that computes the same (workloads.rewrites), parameters shared; inference as it is."""
    return rewrites.rewritten(model)[0] if training else model


def rewrite_metrics(level: str, model: nn.Module, training: bool) -> dict[str, Any]:
    """The layers `max` rewrote, for the record."""
    if level != "max" or not training:
        return {}
    return {"rewrites": rewrites.found(model)}


def _compile(model: nn.Module, **kwargs) -> Callable:
    backend = os.environ.get(BACKEND_ENV)
    if backend:  # a test backend takes none of inductor's options
        return torch.compile(model, backend=backend)
    return torch.compile(model, **kwargs)


def apply_level(level: str, model: nn.Module, example: torch.Tensor, training: bool) -> Callable:
    """The optimised callable for `model` (sharing its parameters); `example` fixes graph shapes."""
    if level == "compile":
        return _compile(model)
    if level == "max":
        return _StepMarked(_compile(rewritten(model, training), options=MAX_OPTIONS))
    if level == "graphs":
        with _autocast_without_cache(example.device):
            if training:
                return torch.cuda.make_graphed_callables(_Shell(model), (example,))
            return _ForwardGraph(model, example)
    raise ValueError(level)


# ---------------------------------------------------------------- checking against eager


def _first_tensor(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    return _first_tensor(out[0])


def _run_once(model: Callable, params: list[nn.Parameter], x: torch.Tensor, loss: Loss | None) -> dict[str, torch.Tensor]:
    """Output (and loss and gradients in training) of one call, copied out of any static buffer."""
    if loss is None:
        with torch.no_grad():
            return {"outputs": _first_tensor(model(x)).detach().float().clone()}
    for p in params:
        p.grad = None
    out = model(x)
    value = loss(out)
    value.backward()
    grads = [p.grad.detach().float().flatten() for p in params if p.grad is not None]
    result = {"outputs": _first_tensor(out).detach().float().clone(), "loss": value.detach().float().clone(),
              "gradients": torch.cat(grads) if grads else torch.zeros(1, device=x.device)}
    for p in params:
        p.grad = None
    return result


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, in float64 on the host's terms (nan if shapes differ or values are not finite)."""
    if got.shape != want.shape:
        return float("nan")
    diff = torch.linalg.vector_norm((got - want).double())
    scale = torch.linalg.vector_norm(want.double()).clamp_min(1e-30)
    return float(diff / scale)


def compare(reference: dict[str, torch.Tensor], optimised: dict[str, torch.Tensor]) -> dict[str, float]:
    return {name: relative_error(optimised[name], reference[name]) for name in reference}


def allowed_errors(noise: dict[str, float], precision: str) -> dict[str, float]:
    return {name: max(TOLERANCE[precision], NOISE_FACTOR * value) for name, value in noise.items()}


def verdict(errors: dict[str, float], allowed: dict[str, float], precision: str, level: str) -> None:
    """Raise MismatchError with the measured errors if any is above what is allowed (or not finite)."""
    bad = {k: v for k, v in errors.items() if not (v <= allowed[k])}
    if bad:
        text = ", ".join(f"{k} {v:.3g} (allowed {allowed[k]:.3g})" for k, v in bad.items())
        raise MismatchError(f"--optimize {level} does not match eager at {precision}: relative error {text}; "
                            f"allowed is the larger of {TOLERANCE[precision]:g} and {NOISE_FACTOR:g}x eager's own "
                            f"change when the input moves by one rounding step; no timing was taken")


def nudged(x: torch.Tensor, precision: str, seed: int = 0) -> torch.Tensor:
    """`x` with every element moved by about the precision's rounding error (integers unchanged)."""
    if not x.is_floating_point():
        return x
    g = torch.Generator(device=x.device).manual_seed(seed)
    return x * (1 + ROUNDING[precision] * torch.empty_like(x).normal_(generator=g))


class _DropoutOff:
    """Dropout draws different random numbers in eager, compiled and graphed code, so the check
    compares with dropout off in both models."""

    def __init__(self, *models: nn.Module) -> None:
        self.modules = [m for model in models for m in model.modules()
                        if isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0]

    def __enter__(self) -> bool:
        for m in self.modules:
            m.eval()
        return bool(self.modules)

    def __exit__(self, *exc) -> None:
        for m in self.modules:
            m.train()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capture_step(spec, model: nn.Module, example: torch.Tensor, loss: Loss,
                 optimizer: torch.optim.Optimizer | None = None) -> tuple[StepGraphs, dict[str, Any]]:
    """The step captured as StepGraphs (`--optimize graphs`, and `max` with the compiled model
    inside) and checked against eager as `prepare` checks a model: output, loss and gradients of a
    replay on `example`. With an optimizer, one replay of the whole step must also reach the next
    forward: its output must equal the eager model's on the updated weights (`check_update_error`)."""
    level = spec.optimize
    run = _compile(rewritten(model, training=True), options=GRAPHED_OPTIONS) if level == "max" else model
    after = None if optimizer is None else lambda g, allowed: _check_update(g, model, allowed["outputs"], spec)
    graphs, metrics = _checked(spec, model, example, loss, level, lambda: StepGraphs(model, example, loss, optimizer, run),
                               lambda g: _replayed(g, model), captured=True, after=after)
    return graphs, {**metrics, "step_graphs": list(graphs.replays), **rewrite_metrics(level, model, True)}


def _replayed(graphs: StepGraphs, model: nn.Module) -> dict[str, torch.Tensor]:
    """Output, loss and gradients of one replay of forward and backward (gradients stay: they are the graph's)."""
    graphs.replays["forward"]()
    graphs.replays["backward"]()
    grads = [p.grad.detach().float().flatten() for p in model.parameters() if p.grad is not None]
    return {"outputs": _first_tensor(graphs.out).detach().float().clone(),
            "loss": graphs.value.detach().float().clone(), "gradients": torch.cat(grads)}


def _check_update(graphs: StepGraphs, model: nn.Module, allowed: float, spec) -> dict[str, float]:
    """Replay the whole step, then the forward: its output must be the eager model's on the updated
    weights, so the optimizer's graph updates the weights the forward's graph reads. The weights
    are put back after."""
    with weights_kept(model):
        for replay in graphs.replays.values():
            replay()
        graphs.replays["forward"]()
        got = _first_tensor(graphs.out).detach().float().clone()
        with torch.no_grad():
            want = _first_tensor(model(graphs.example)).float()
    error = relative_error(got, want)
    if not error <= allowed:
        raise MismatchError(f"--optimize {spec.optimize}: the captured optimizer step does not reach the next "
                            f"forward (relative error {error:.3g}, allowed {allowed:.3g}); no timing was taken")
    return {"check_update_error": error}


def _checked(spec, model: nn.Module, example: torch.Tensor, loss: Loss | None, level: str,
             make: Callable[[], Any], outcome: Callable[[Any], dict[str, torch.Tensor]], captured: bool,
             after: Callable[[Any, dict[str, float]], dict[str, Any]] | None = None) -> tuple[Any, dict[str, Any]]:
    """`make()` the optimised form of `model` and check `outcome(it)` against eager on `example`
    (see `prepare`); then `after(it, allowed)`, a further check whose metrics join the rest.
    Returns it and the check's metrics. A mismatch raises MismatchError. `captured`: it holds
    CUDA graphs, which keep the dropout setting they were captured with. All of it is one phase
    the user sees (compiling.phase), with a compiler's output in a log."""
    with _phase(spec, level, example, training=loss is not None) as found:
        fast, metrics = _check(spec, model, example, loss, level, make, outcome, captured, after)
    return fast, {**metrics, **found}


def _phase(spec, level: str, example: torch.Tensor, training: bool):
    """The phase of `_checked`, named after what it runs; a compile's log and cache are keyed by what
    decides the code it makes."""
    if level not in COMPILED:
        return compiling.phase("capture (CUDA graphs)", _progress.get())
    backend = os.environ.get(BACKEND_ENV)
    how = ", ".join(filter(None, ("torch.compile", backend or ("max-autotune" if level == "max" else None))))
    device = example.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    changed = rewrites.chosen() if level == "max" and training else ()
    key = "|".join(map(str, (level, backend, spec.workload, spec.model, spec.precision, tuple(example.shape),
                             example.stride(), example.dtype, training, name) + ((changed,) if changed else ())))
    title = spec.label() if hasattr(spec, "label") else f"{spec.workload} {spec.model}"
    return compiling.phase(f"compile ({how})", _progress.get(), title, key)


def _check(spec, model: nn.Module, example: torch.Tensor, loss: Loss | None, level: str,
           make: Callable[[], Any], outcome: Callable[[Any], dict[str, torch.Tensor]], captured: bool,
           after: Callable[[Any, dict[str, float]], dict[str, Any]] | None) -> tuple[Any, dict[str, Any]]:
    device = example.device
    reference = copy.deepcopy(model)
    reference_params = list(reference.parameters())
    with _DropoutOff(model, reference) as dropout:
        want = _run_once(reference, reference_params, example, loss)
        noise = compare(want, _run_once(reference, reference_params, nudged(example, spec.precision), loss))
        del reference, reference_params
        _synchronize(device)
        start = time.perf_counter()
        fast = make()
        got = outcome(fast)
        _synchronize(device)
        compile_s = time.perf_counter() - start
        for _ in range(CHECK_CALLS - 1):
            got = outcome(fast)
        errors, allowed = compare(want, got), allowed_errors(noise, spec.precision)
        verdict(errors, allowed, spec.precision, level)
        further = after(fast, allowed) if after else {}
    if dropout and captured:  # the checked graph had dropout off; capture the real one
        start = time.perf_counter()
        fast = make()
        _synchronize(device)
        compile_s += time.perf_counter() - start
    return fast, {"optimize": level, "compile_s": compile_s, "check_error": errors, "check_noise": noise,
                  "check_allowed": allowed, "check_tolerance": TOLERANCE[spec.precision], **further}


def prepare(spec, model: nn.Module, example: torch.Tensor, loss: Loss | None = None,
            apply: Callable[[str, nn.Module, torch.Tensor, bool], Callable] | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Apply `spec.optimize` to `model` and check it against eager on `example`.

    `loss(output) -> scalar` makes it a training check (loss and gradients compared too); without
    it outputs are compared under no_grad. Returns the model to run and the metrics to report
    (optimize, compile_s, check_error, check_noise, check_allowed, check_tolerance; after a torch.compile
    compile_log and compile_cache, see compiling.phase). A mismatch raises
    MismatchError."""
    level = getattr(spec, "optimize", "eager")
    if level == "eager":
        return model, {"optimize": "eager"}
    apply = apply or apply_level
    params = list(model.parameters())
    fast, metrics = _checked(spec, model, example, loss, level, lambda: apply(level, model, example, loss is not None),
                             lambda f: _run_once(f, params, example, loss), captured=level == "graphs")
    return Optimized(model, fast), {**metrics, **rewrite_metrics(level, model, loss is not None)}
