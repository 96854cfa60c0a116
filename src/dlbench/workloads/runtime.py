"""What every workload needs around its steps: the device, precision switches, OOM detection."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from dlbench.errors import UserError

_AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    """'auto' -> the first GPU if there is one, else the CPU; 'cuda' without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} asked for, but no CUDA GPU is visible (use --device cpu)")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} asked for, but only {torch.cuda.device_count()} GPU(s) are visible")
        return torch.device("cuda", index)
    return device


@contextlib.contextmanager
def precision(mode: str, device: torch.device) -> Iterator[None]:
    """TF32 on only for 'tf32'; autocast for the half types. Restores the global switches.

    Autocast's weight cache is off: the context spans a whole run, and a cached half-precision
    copy of a weight would outlive the optimizer steps that change the weight (the model would
    train on its initial weights). A plain loop re-enters autocast every step; this costs the same."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    try:
        if mode in _AUTOCAST:
            with torch.autocast(device.type, dtype=_AUTOCAST[mode], cache_enabled=False):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The type autocast casts to on this device, None where it is off."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 has no per-device query
        enabled = torch.is_autocast_enabled()
    if not enabled:
        return None
    getter = getattr(torch, "get_autocast_dtype", None)
    return getter(device_type) if getter else torch.get_autocast_gpu_dtype()


def casts_kept(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast's weight cache on for what runs inside, for work whose weights do not change: a
    generation casts each weight once, as under a plain `with torch.autocast(...): generate(...)`,
    not at every decode step (`precision` keeps the cache off for training's sake)."""
    dtype = autocast_dtype(device.type)
    return torch.autocast(device.type, dtype=dtype, cache_enabled=True) if dtype else contextlib.nullcontext()


def grad_scaler(spec, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16's gradient scaler where a training step needs one (fp16 on a GPU), else None."""
    return torch.amp.GradScaler(device.type) if spec.precision == "fp16" and device.type == "cuda" else None


def backward_and_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
                      timer) -> None:
    """The end of a training step after its forward pass, each part marked on `timer`: the backward
    pass (of the scaled loss under fp16), the optimizer's step (through the scaler), gradients reset."""
    timer.mark("forward")
    (scaler.scale(loss) if scaler else loss).backward()
    timer.mark("backward")
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    timer.mark("optimizer")


def is_oom(error: BaseException) -> bool:
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or isinstance(error, MemoryError)
    )


def release_memory(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def memory_format(channels_last: bool, ndim: int) -> torch.memory_format:
    """The memory format for tensors of `ndim` dimensions (4: images, 5: volumes) and their models."""
    if channels_last and ndim in (4, 5):
        return torch.channels_last if ndim == 4 else torch.channels_last_3d
    return torch.contiguous_format


def built_model(entry, shape: tuple[int, ...], device: torch.device, channels_last: bool) -> torch.nn.Module:
    """`entry`'s model on `device`, in the memory format for inputs of `shape`. Lazy layers
    (`nn.LazyLinear`, common in plug-ins) learn their sizes from a first input, so they get one sample
    of `shape` before anything reads a parameter's shape: a memory format, a parameter count, DDP and
    the optimizers all do, and an uninitialised parameter refuses."""
    model = entry.build().to(device)
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.parameters()):
        training = model.training
        with torch.no_grad():  # eval: a normalisation layer takes a batch of one there
            model.eval()(torch.randn((1, *shape), device=device))
        model.train(training)
    return model.to(memory_format=memory_format(channels_last, len(shape) + 1))


def random_input(batch: int, shape: tuple[int, ...], device: torch.device, channels_last: bool, seed: int) -> torch.Tensor:
    """Random inputs, never zeros: zeros can run faster than real data."""
    generator = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((batch, *shape), device=device, generator=generator)
    return x.contiguous(memory_format=memory_format(channels_last, x.dim()))
