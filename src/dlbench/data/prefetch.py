"""Batches made on the device ahead of the step, by a background thread on its own CUDA stream.

The GPU input paths (JPEG decoding, elastic deformation of volume patches) launch many small
kernels per batch. Launched from the step's own thread they would sit on the step's critical
path (the host is busy launching while the GPU idles); from a thread of their own, on a stream
of their own, they run while the previous step computes. The consumer's stream waits on an
event per batch, so what is left of the wait shows up in the step's `data` phase. The side
stream only runs beside the step's if they do not share a hardware queue (dlbench/__init__.py
raises CUDA's count of them). On the CPU the same code runs without streams (that is what the
tests exercise).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from typing import Any, Callable, Iterator

import torch

from dlbench.errors import UserError

_END = object()
# The side stream's priority (lower is higher; torch's default 0 is the step's own): above the
# step's, CUDA starts the batch's waiting kernels before the step's as blocks free up. This
# internal setting changes it for measurements; not a user option.
PRIORITY_ENV = "DLBENCH_PREFETCH_PRIORITY"
PRIORITY = -1


def priority() -> int:
    value = os.environ.get(PRIORITY_ENV, "").strip()
    if not value:
        return PRIORITY
    if not value.removeprefix("-").isdigit():
        raise UserError(f"{PRIORITY_ENV} is a CUDA stream priority, an integer (lower is higher); got {value!r}")
    return int(value)


class DevicePrefetch:
    """Iterates `make()` (tuples of tensors, None allowed) in a thread, `depth` batches ahead."""

    def __init__(self, make: Callable[[], Iterator[tuple]], device: torch.device, depth: int, name: str) -> None:
        self.make, self.device, self.name = make, device, name
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.priority = priority()  # read here: a bad value raised in the thread would leave the consumer waiting

    def __iter__(self) -> Iterator[tuple]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._produce, daemon=True, name=self.name)
            self._thread.start()
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            tensors, ready = item
            if ready is not None:
                stream = torch.cuda.current_stream(self.device)
                stream.wait_event(ready)
                for tensor in tensors:
                    if isinstance(tensor, torch.Tensor):
                        tensor.record_stream(stream)  # made on the prefetch stream, used on this one
            yield tensors

    def _produce(self) -> None:
        cuda = self.device.type == "cuda"
        stream = torch.cuda.Stream(self.device, priority=self.priority) if cuda else None
        try:
            with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
                for tensors in self.make():  # the generator runs here, so on `stream`
                    ready = None
                    if cuda:
                        ready = torch.cuda.Event()
                        ready.record(stream)
                    if not self._put((tensors, ready)):  # False once closed
                        return
            self._put(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(error)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
