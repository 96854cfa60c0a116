"""Page-locked host buffers, made the quick way where CUDA allows it.

`torch.empty(..., pin_memory=True)` calls cudaHostAlloc, which faults in, zeroes and pins every page
on one thread while it holds the driver's lock, and torch's host allocator rounds each size up to a
power of two (a 346 MB tile takes 537 MB). Here a buffer is plain memory of its exact size, its pages
touched by several threads at once, then registered with cudaHostRegister, which only pins pages that
are already there. Where registration fails the buffer is made by cudaHostAlloc as before.

A registered buffer is unregistered when its owner (`Pinned`) is collected, before its memory can be
freed, never at the process's exit, where the system releases it all at once.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from concurrent.futures import ThreadPoolExecutor

import torch

TOUCH_CHUNK = 64 << 20  # bytes a thread zeroes at a time: large enough that the threads' start is nothing


def touch_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _touched(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """Plain memory with every page in place: zeroed in chunks by several threads (zero_ releases the
    interpreter), since faulting pages in is what takes the time."""
    buffer = torch.empty(numel, dtype=dtype)
    flat = buffer.view(torch.uint8)
    chunks = flat.split(TOUCH_CHUNK)
    if len(chunks) == 1:
        flat.zero_()
    else:
        with ThreadPoolExecutor(min(touch_threads(), len(chunks)), "dlbench-touch") as pool:
            list(pool.map(torch.Tensor.zero_, chunks))
    return buffer


def _register(buffer: torch.Tensor) -> bool:
    try:
        cudart = torch.cuda.cudart()
        return cudart.cudaHostRegister(buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0) \
            == cudart.cudaError.success
    except Exception:  # no GPU, or a build without the runtime's bindings (ROCm): pinned the usual way
        return False


def _unregister(device: torch.device, buffers: list[torch.Tensor]) -> None:
    if not buffers:  # all made the usual way: nothing to wait for, and no GPU to touch
        return
    with torch.cuda.device(device):
        # A run stopped by an error may leave a copy from or into a buffer in flight: it ends first.
        with contextlib.suppress(RuntimeError):
            torch.cuda.synchronize(device)
        for buffer in buffers:
            torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())
    buffers.clear()  # the memory is freed only now, after its registration ended


class Pinned:
    """Makes page-locked buffers for `device` and owns those it registered. Registering is tried on
    the thread that calls `empty`: a failed registration stays CUDA's last error on that thread,
    where a later kernel launch would report it, so call it from a thread that launches none."""

    def __init__(self, device: torch.device) -> None:
        self._registered: list[torch.Tensor] = []
        self._end = weakref.finalize(self, _unregister, device, self._registered)
        self._end.atexit = False

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = _touched(numel, dtype)
        if _register(buffer):
            self._registered.append(buffer)
            return buffer
        return torch.empty(numel, dtype=dtype, pin_memory=True)
