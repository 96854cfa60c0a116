"""The tile pipeline of `volume`: every block's tile read, copied in, predicted, copied out and
written, each stage overlapping the others:

  reader threads (read + reflect into pinned memory) -> bounded queue -> host-to-device on a
  side stream -> forward -> device-to-host on another stream -> bounded writer threads

Without a GPU the same code runs without streams or pinned memory (what the tests exercise).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator

import numpy as np
import torch

from dlbench.data.blocking import Block, Blocking
from dlbench.data.pinned import Pinned
from dlbench.data.prediction_store import PredictionStore
from dlbench.data.volumes import Volume
from dlbench.errors import BenchmarkFailed, UserError
from dlbench.measure.loop import Progress, synchronize
from dlbench.measure.timer import Spans, record_event


def to_input(tile: torch.Tensor, channels_last: bool) -> torch.Tensor:
    x = tile[None, None]
    return x.contiguous(memory_format=torch.channels_last_3d) if channels_last else x


def forward(model: torch.nn.Module, x: torch.Tensor, tile: tuple[int, ...]) -> torch.Tensor:
    """The model's output for one tile, [C, *tile]; a model that changes the shape is the user's error."""
    with torch.no_grad():
        y = model(x)
    if not isinstance(y, torch.Tensor) or y.dim() != 5 or tuple(y.shape[2:]) != tuple(tile) or y.shape[0] != 1:
        got = "x".join(map(str, y.shape)) if isinstance(y, torch.Tensor) else type(y).__name__
        raise UserError(f"model output {got} does not match the tile 1x1x{'x'.join(map(str, tile))}: "
                        f"the model must return [1, C, Z, Y, X] with the input's spatial shape")
    return y[0]


def encode_dtype(dtype: str) -> torch.dtype:
    return torch.uint8 if dtype == "uint8" else torch.float16


def encode(y: torch.Tensor, dtype: str) -> torch.Tensor:
    """float probabilities -> the output dtype (uint8: x 255, rounded; float16 as is)."""
    if dtype == "uint8":
        return y.float().clamp_(0, 1).mul_(255).round_().to(torch.uint8)
    return y.to(torch.float16)


def host_dtype(source: np.dtype) -> torch.dtype:
    """The tile's type on the host (uint8 EM data stays uint8: a quarter of the bytes to copy)."""
    if np.dtype(source) not in (np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64):
        return torch.float32  # uint16/uint32 have no torch dtype for every version
    return torch.from_numpy(np.zeros(1, source)).dtype


def read_host_tile(blocking: Blocking, volume: Volume, block: Block, pin: bool = False,
                   into: torch.Tensor | None = None, nonfinite: NonFinite | None = None,
                   counted: bool = True) -> torch.Tensor:
    """`block`'s input tile on the host, read as the run reads it: into the buffer (`into`, else a
    new one, pinned where asked), reflected there; its NaN and Inf found by `nonfinite` (and added
    to its count where `counted`)."""
    tile = torch.empty(blocking.tile, dtype=host_dtype(volume.dtype), pin_memory=pin) if into is None else into
    blocking.read_tile_into(volume.read, block, tile.numpy(), volume.read_into)
    if nonfinite is not None:
        nonfinite.check(tile.numpy(), blocking, block, counted)
    return tile


NONFINITE_HINT = ("the model spreads each over its field of view, where the prediction is lost (0 or NaN): fix the "
                  "input, or pass --allow-nonfinite to predict it as it is")


def nonfinite_voxels(count: int) -> str:
    return f"{count} non-finite voxel{'s' if count != 1 else ''} (NaN or Inf)"


def count_nonfinite(values: np.ndarray) -> int:
    """NaN and ±Inf among float `values`. One sum finds none on finite data (a NaN or Inf makes it
    non-finite; an overflow only costs the exact count); integers hold none."""
    if not np.issubdtype(values.dtype, np.floating) or np.isfinite(values.sum()):
        return 0
    return int(values.size - np.count_nonzero(np.isfinite(values)))


class NonFiniteInput(BenchmarkFailed):
    """A tile of the input holds NaN or Inf, and --allow-nonfinite was not given."""


class NonFinite:
    """The NaN and Inf of a float input, counted per tile as it is read (the reader threads call
    `check`). Unless allowed, the first tile that holds one stops the run before its block is
    predicted, so every block written came from finite data. Allowed, each voxel is counted once:
    in its own block's part of the tile, not in the halos that repeat it."""

    def __init__(self, volume: Volume, allow: bool) -> None:
        self.name, self.allow = volume.name, allow
        self.voxels = 0  # in the blocks read, where allowed
        self._lock = threading.Lock()

    def check(self, tile: np.ndarray, blocking: Blocking, block: Block, counted: bool = True) -> None:
        found = count_nonfinite(tile)
        if not found:
            return
        own = count_nonfinite(tile[blocking.crop(block)])
        if not self.allow:
            where = ", ".join(f"{axis} {b}-{e}" for axis, b, e in zip("zyx", block.begin, block.end))
            raise NonFiniteInput(f"input {self.name} holds {nonfinite_voxels(own)} in block {block.index} ({where}), "
                                 f"{found} in its tile with the halo: {NONFINITE_HINT}")
        if counted:
            with self._lock:
                self.voxels += own


def scale(x: torch.Tensor, source: np.dtype) -> torch.Tensor:
    """On the device: integer intensities to [0, 1] float32, like the training patches."""
    if np.issubdtype(source, np.integer):
        return x.float().div_(float(np.iinfo(source).max))
    return x.float()


class PhaseLog:
    """Per-block seconds. Host phases (read, write, the GPU loop's wait for a tile, the step) are
    clock readings added as they end, from the reader and writer threads too; device phases
    (copy in, compute, copy out) are event spans on their streams, read after the last synchronize."""

    def __init__(self) -> None:
        names = ("step", "read", "copy_in", "compute", "copy_out", "write", "wait")
        self._times: dict[str, list[float]] = {name: [] for name in names}
        self.spans = Spans()  # added to by the GPU loop's thread only
        self._lock = threading.Lock()

    def add(self, name: str, value: float) -> None:
        with self._lock:
            self._times[name].append(value)

    def resolve_events(self) -> None:
        for phase, values in self.spans.resolve().items():
            self._times[phase].extend(values)

    def samples(self) -> dict[str, list[float]]:
        return dict(self._times)


class PinnedBuffers:
    """Page-locked host buffers made once and reused. Pinning memory for every tile
    (cudaHostAlloc) is slow and holds a driver lock: kernel launches from the thread that drives
    the GPU would wait behind it, and the GPU idle. A buffer handed back with an event is
    taken again only after the event, i.e. after the copy that reads or fills it."""

    def __init__(self, count: int, numel: int, dtype: torch.dtype, pinned: Pinned | None = None) -> None:
        """`pinned` makes (and owns) page-locked buffers; without it they are plain memory."""
        self._pinned = pinned
        self._free: queue.Queue = queue.Queue()
        for _ in range(count):
            buffer = pinned.empty(numel, dtype) if pinned else torch.empty(numel, dtype=dtype)
            self._free.put((buffer, None))

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        buffer, event = self._free.get()
        if event is not None:
            event.synchronize()
        return buffer[: int(np.prod(shape))].view(shape)

    def give(self, view: torch.Tensor, event=None) -> None:
        self._free.put((view._base if view._base is not None else view, event))


def buffer_count(queue: int, most: int) -> int:
    """Host buffers of each kind for a queue of `queue` and `most` blocks: every read or write in
    flight holds one, `queue` of each and one more being filled; never more than the blocks to run,
    each of which holds one at most."""
    return min(max(1, queue) + 2, max(1, most))


def make_buffers(count: int, numel: int, dtype: torch.dtype, device: torch.device) -> Future[PinnedBuffers]:
    """`count` buffers made on a thread of their own, page-locked on a GPU, plain memory on the CPU
    (the same code then runs without them: what the tests exercise). Pinning gigabytes takes a
    second or more; made at the first block, they would cost it inside the measured run."""
    pool = ThreadPoolExecutor(1, "dlbench-pin")
    future = pool.submit(_made, count, numel, dtype, device)
    pool.shutdown(wait=False)  # the thread ends with its one task
    return future


def _made(count: int, numel: int, dtype: torch.dtype, device: torch.device) -> PinnedBuffers:
    if device.type != "cuda":
        return PinnedBuffers(count, numel, dtype)
    torch.cuda.set_device(device)  # this thread's device: pinning uses its context, never another GPU's
    return PinnedBuffers(count, numel, dtype, Pinned(device))


class Pipeline:
    def __init__(self, blocking: Blocking, volume: Volume, store: PredictionStore, model: torch.nn.Module,
                 device: torch.device, *, channels: int, dtype: str, channels_last: bool, readers: int, writers: int,
                 queue: int, most: int, nonfinite: NonFinite | None = None,
                 tiles: Future[PinnedBuffers] | None = None) -> None:
        """`most`: the most blocks this process will run (its share of them); `tiles`: the input
        tiles' buffers where their making has begun (`make_buffers`), else they are made from here on."""
        self.blocking, self.volume, self.store, self.model = blocking, volume, store, model
        self.nonfinite = nonfinite or NonFinite(volume, allow=False)
        self.device, self.dtype, self.channels_last = device, dtype, channels_last
        self.readers, self.writers, self.queue = max(1, readers), max(1, writers), max(1, queue)
        self.cuda = device.type == "cuda"
        self.log = PhaseLog()
        self.buffers = buffer_count(queue, most)
        # Made beside what the workload does before the run; `run` waits for them before its clock starts.
        self._tiles = tiles or make_buffers(self.buffers, int(np.prod(blocking.tile)), host_dtype(volume.dtype), device)
        self._outputs = make_buffers(self.buffers, channels * int(np.prod(blocking.block)), encode_dtype(dtype), device)
        # Copies run on their own streams, beside the forward on the current one.
        self.copy_in_stream = torch.cuda.Stream(device) if self.cuda else None
        self.copy_out_stream = torch.cuda.Stream(device) if self.cuda else None

    def _read(self, block: Block) -> torch.Tensor:
        start = time.perf_counter()
        tile = read_host_tile(self.blocking, self.volume, block, into=self.tiles.take(self.blocking.tile),
                              nonfinite=self.nonfinite)
        self.log.add("read", time.perf_counter() - start)
        return tile

    def _write(self, block: Block, host: torch.Tensor, done_event) -> None:
        if done_event is not None:
            done_event.synchronize()
        start = time.perf_counter()
        self.store.write_block(block.index, block.box, host.numpy())
        self.outputs.give(host)
        self.log.add("write", time.perf_counter() - start)

    def _on(self, stream: torch.cuda.Stream | None):
        """Work queued inside the block runs on `stream`; the CPU has no streams."""
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def _compute(self, tile: torch.Tensor, recycle: bool = True):
        """Copy in and forward one tile; returns the output, the event at the forward's start, its stream.
        `recycle`: the tile is one of `self.tiles`, handed back once read."""
        stream = torch.cuda.current_stream(self.device) if self.cuda else None
        with self._on(self.copy_in_stream):
            t0 = record_event(self.device, self.copy_in_stream)
            x = scale(tile.to(self.device, non_blocking=True), self.volume.dtype)
            t1 = record_event(self.device, self.copy_in_stream)
        self.log.spans.add("copy_in", t0, t1)
        if self.cuda:
            stream.wait_stream(self.copy_in_stream)
            x.record_stream(stream)  # x's memory is reused only after the forward has read it
        start = record_event(self.device, stream)
        y = forward(self.model, to_input(x, self.channels_last), self.blocking.tile)
        # Reused once the copy has read it (on a GPU), or the forward (on the CPU, x may be the buffer).
        if recycle:
            self.tiles.give(tile, t1 if self.cuda else None)
        return y, start, stream

    def _finish(self, block: Block, y: torch.Tensor, start, stream):
        """Crop, encode and copy out one block; returns the host buffer and the event after which it
        holds the block (None on the CPU, where the copy is done on return)."""
        out = encode(y[(slice(None), *self.blocking.crop(block))], self.dtype)
        self.log.spans.add("compute", start, record_event(self.device, stream))
        host = self.outputs.take(tuple(out.shape))
        if self.cuda:
            self.copy_out_stream.wait_stream(stream)
            out.record_stream(self.copy_out_stream)
        with self._on(self.copy_out_stream):
            t4 = record_event(self.device, self.copy_out_stream)
            host.copy_(out, non_blocking=self.cuda)
            t5 = record_event(self.device, self.copy_out_stream)
        self.log.spans.add("copy_out", t4, t5)
        return host, t5 if self.cuda else None

    def replay(self, block: Block, tile: torch.Tensor) -> None:
        """One block's device work as `run` does it (copy in, forward, encode, copy out) from a tile
        read and pinned before, as the reader threads do, nothing written: what --profile looks at."""
        y, start, stream = self._compute(tile, recycle=False)
        host, ready = self._finish(block, y, start, stream)
        self.outputs.give(host, ready)

    def run(self, blocks: list[Block], progress: Progress) -> float:
        """Predict `blocks`; returns the wall time. A write failure stops the run as a UserError."""
        # All made before the clock starts (an allocation's error raised here); the reads and writes take them.
        self.tiles, self.outputs = self._tiles.result(), self._outputs.result()
        start = time.perf_counter()
        with ThreadPoolExecutor(self.readers, "dlbench-read") as read_pool, \
                ThreadPoolExecutor(self.writers, "dlbench-write") as write_pool:
            reads: deque[tuple[Block, Future]] = deque()
            writes: deque[tuple[Block, Future]] = deque()
            todo = iter(blocks)
            # The first tile is read alone: the GPU waits for it, and reads started beside it would
            # share the CPU with it.
            for block in _take(todo, 1):
                reads.append((block, read_pool.submit(self._read, block)))
            done, last = 0, time.perf_counter()
            try:
                while reads:
                    block, future = reads.popleft()
                    waited = time.perf_counter()
                    tile = future.result()
                    self.log.add("wait", time.perf_counter() - waited)
                    for nxt in _take(todo, self.queue - len(reads)):
                        reads.append((nxt, read_pool.submit(self._read, nxt)))
                    y, started, stream = self._compute(tile)
                    host, ready = self._finish(block, y, started, stream)
                    writes.append((block, write_pool.submit(self._write, block, host, ready)))
                    while len(writes) > self.queue:
                        _check(*writes.popleft(), self.store)
                    done += 1
                    now = time.perf_counter()
                    self.log.add("step", now - last)
                    last = now
                    progress("predict", done, len(blocks))
                while writes:
                    _check(*writes.popleft(), self.store)
            except Exception:
                # A bad tile or a failed write stops the run; the blocks predicted before it are
                # still written, so the output keeps them and the error counts them.
                for _, pending in reads:
                    pending.cancel()
                _settle(writes, self.store)
                raise
            except BaseException:  # a stop: nothing more is started
                for _, pending in list(reads) + list(writes):
                    pending.cancel()
                raise
        synchronize(self.device)
        self.log.resolve_events()
        return time.perf_counter() - start


def _take(iterator: Iterator[Block], n: int) -> list[Block]:
    out = []
    for _ in range(n):
        try:
            out.append(next(iterator))
        except StopIteration:
            break
    return out


def _settle(writes: deque[tuple[Block, Future]], store: PredictionStore) -> None:
    """Wait for the writes in flight; one that failed too adds nothing to the error that stopped the run."""
    for block, future in writes:
        with contextlib.suppress(Exception):
            _check(block, future, store)


def _check(block: Block, future: Future, store: PredictionStore) -> None:
    try:
        future.result()
    except OSError as error:
        finished = len(store.done())
        raise UserError(f"writing block {block.index} to {store.path} failed ({error.strerror or error}); "
                        f"{finished} finished blocks are recorded: rerun with --resume to complete") from None
