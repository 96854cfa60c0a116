"""volume: blockwise prediction of a volume that need not fit in memory (seed 000/001 prediction).

The volume is cut into output blocks (`data/blocking.py`); each block's input tile carries a
halo and is reflect-padded at the border; the model's output is cropped to the block and
written as one chunk of a zarr/N5 output. The pipeline overlaps everything:

  reader threads (read + reflect + pinned memory) -> bounded queue -> host-to-device on a
  side stream -> forward -> device-to-host on another stream -> bounded writer threads

Blocks are sharded round-robin over torchrun ranks. A completion record in the output makes
`resume` skip finished blocks. The measurement is the whole volume, after a short warm-up on
the first tile, which is reported on its own.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from dlbench.data.blocking import Block, Blocking, auto_candidates
from dlbench.data.prediction_store import DTYPES, PredictionStore
from dlbench.data.volumes import Volume, open_volume
from dlbench.errors import UserError
from dlbench.measure.loop import Progress, synchronize
from dlbench.measure.monitor import Monitor, MonitorData
from dlbench.models import registry
from dlbench.spec import parse_shape
from dlbench.workloads import optimize
from dlbench.workloads.runtime import is_oom

OPTIONS = {
    "input": None,  # PATH[:KEY]; None: generate a synthetic EM volume of `volume_shape` on local disk first
    "output": None,  # PATH[:KEY] (.zarr or .n5); None: a temporary output, deleted after the run
    "block": "32x384x384",  # output block ZxYxX, or 'auto' (largest that fits the GPU)
    "halo": "16x64x64",  # context on each side of a block
    "resume": False,
    "overwrite": False,
    "dtype": "uint8",  # uint8 (probabilities x 255) or float16
    "extrapolate": "8.1T",  # voxels to extrapolate to (the seed's Platynereis volume)
    "readers": 8,
    "writers": 4,
    "queue": 8,  # tiles in flight between readers and the GPU, and blocks between the GPU and writers
    "compile": False,  # torch.compile the model
    "volume_shape": "200x3072x3072",  # the generated volume when no input is given (the seed's padded CREMI)
}

_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_voxels(text: str | float | int) -> float:
    """'8.1T' -> 8.1e12 voxels (decimal suffixes K, M, G, T, P)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgtp]?)\s*(?:vox)?\s*", str(text).lower())
    if not match or float(match.group(1)) <= 0:
        raise UserError(f"bad --extrapolate {text!r}: give a voxel count like 8.1T, 500G or 1.9e9")
    return float(match.group(1)) * _SUFFIX.get(match.group(2), 1.0)


# ---------------------------------------------------------------- distributed


@dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    started: bool = False  # this workload initialised the process group (and must end it)

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def gather(self, obj: dict) -> list[dict]:
        if self.world == 1:
            return [obj]
        out: list = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.started:
            torch.distributed.destroy_process_group()


def setup_ranks(device: torch.device) -> tuple[Ranks, torch.device]:
    """Under torchrun: join the process group and take this rank's GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks(), device
    dist = torch.distributed
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Ranks(dist.get_rank(), dist.get_world_size(), started), device


# ---------------------------------------------------------------- model


def load_model(name: str, device: torch.device, channels_last: bool, compile_model: bool, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = registry.resolve(name).build().to(device)
    with contextlib.suppress(NotImplementedError):  # torch.export modules have no train/eval switch
        model = model.eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    if compile_model:
        model = torch.compile(model)
    return model


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


def encode(y: torch.Tensor, dtype: str) -> torch.Tensor:
    """float probabilities -> the output dtype (uint8: x 255, rounded; float16 as is)."""
    if dtype == "uint8":
        return y.float().clamp_(0, 1).mul_(255).round_().to(torch.uint8)
    return y.to(torch.float16)


def host_tile(tile: np.ndarray) -> torch.Tensor:
    """The tile as read (uint8 EM data stays uint8: a quarter of the bytes to copy)."""
    if tile.dtype not in (np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64):
        tile = tile.astype(np.float32)  # uint16/uint32 have no torch dtype for every version
    return torch.from_numpy(np.ascontiguousarray(tile))


def scale(x: torch.Tensor, source: np.dtype) -> torch.Tensor:
    """On the device: integer intensities to [0, 1] float32, like the training patches."""
    if np.issubdtype(source, np.integer):
        return x.float().div_(float(np.iinfo(source).max))
    return x.float()


# ---------------------------------------------------------------- pipeline


@dataclass
class PhaseLog:
    """Per-block times in seconds; device phases from CUDA events, host phases from the clock."""

    read: list[float] = field(default_factory=list)
    wait: list[float] = field(default_factory=list)  # the GPU loop waiting for a tile
    write: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    copy_in: list[float] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    copy_out: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, value: float) -> None:
        with self.lock:
            getattr(self, name).append(value)

    def resolve_events(self) -> None:
        for e in self.events:
            self.copy_in.append(e[0].elapsed_time(e[1]) / 1e3)
            self.compute.append(e[2].elapsed_time(e[3]) / 1e3)
            self.copy_out.append(e[4].elapsed_time(e[5]) / 1e3)
        self.events.clear()

    def samples(self) -> dict[str, list[float]]:
        return {"step": self.step, "read": self.read, "copy_in": self.copy_in, "compute": self.compute,
                "copy_out": self.copy_out, "write": self.write, "wait": self.wait}


class _Clock:
    """CUDA events on a GPU; on the CPU a host reading (work there is synchronous)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self, stream=None):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(stream)
            return event
        return _HostMark()


class _HostMark:
    def __init__(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: "_HostMark") -> float:
        return (end.t - self.t) * 1e3


class PinnedBuffers:
    """Page-locked host buffers made once and reused. Pinning memory for every tile
    (cudaHostAlloc) took up to 30 ms a call and holds a driver lock: kernel launches from the
    thread that drives the GPU waited behind it (measured: the GPU idle within the run while
    its kernel time per tile matched the model alone's). A buffer handed back with an event is
    taken again only after the event, i.e. after the copy that reads or fills it."""

    def __init__(self, count: int, numel: int, dtype: torch.dtype, pin: bool = True) -> None:
        self._free: queue.Queue = queue.Queue()
        for _ in range(count):
            self._free.put((torch.empty(numel, dtype=dtype, pin_memory=pin), None))

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        buffer, event = self._free.get()
        if event is not None:
            event.synchronize()
        return buffer[: int(np.prod(shape))].view(shape)

    def give(self, view: torch.Tensor, event=None) -> None:
        self._free.put((view._base if view._base is not None else view, event))


class Pipeline:
    def __init__(self, blocking: Blocking, volume: Volume, store: PredictionStore, model: torch.nn.Module,
                 device: torch.device, *, dtype: str, channels_last: bool, readers: int, writers: int, queue: int) -> None:
        self.blocking, self.volume, self.store, self.model = blocking, volume, store, model
        self.device, self.dtype, self.channels_last = device, dtype, channels_last
        self.readers, self.writers, self.queue = max(1, readers), max(1, writers), max(1, queue)
        self.cuda = device.type == "cuda"
        self.log = PhaseLog()
        self.clock = _Clock(device)
        # Every read or write in flight holds one buffer: `queue` of each, one more being filled.
        # Without a GPU the buffers are plain memory and the same code runs (what the tests exercise).
        tile_dtype = host_tile(np.zeros(1, volume.dtype)).dtype
        self.tiles = PinnedBuffers(self.queue + 2, int(np.prod(blocking.tile)), tile_dtype, pin=self.cuda)
        self.outputs: PinnedBuffers | None = None  # sized at the first block (channels known then)
        if self.cuda:
            self.copy_in_stream = torch.cuda.Stream(device)
            self.copy_out_stream = torch.cuda.Stream(device)

    def _read(self, block: Block) -> torch.Tensor:
        start = time.perf_counter()
        tile = host_tile(self.blocking.read_tile(self.volume.read, block))
        tile = self.tiles.take(tuple(tile.shape)).copy_(tile)
        self.log.add("read", time.perf_counter() - start)
        return tile

    def _write(self, block: Block, host: torch.Tensor, done_event) -> None:
        if done_event is not None:
            done_event.synchronize()
        start = time.perf_counter()
        self.store.write_block(block.index, block.box, host.numpy())
        self.outputs.give(host)
        self.log.add("write", time.perf_counter() - start)

    def _compute(self, tile: torch.Tensor):
        """Copy in, forward, crop, encode and copy out one tile; returns the host buffer and its ready event."""
        stream = torch.cuda.current_stream(self.device) if self.cuda else None
        with torch.cuda.stream(self.copy_in_stream) if self.cuda else contextlib.nullcontext():
            t0 = self.clock.mark(self.copy_in_stream if self.cuda else None)
            x = scale(tile.to(self.device, non_blocking=True), self.volume.dtype)
            t1 = self.clock.mark(self.copy_in_stream if self.cuda else None)
        if self.cuda:
            stream.wait_stream(self.copy_in_stream)
            x.record_stream(stream)
        t2 = self.clock.mark(stream)
        y = forward(self.model, to_input(x, self.channels_last), self.blocking.tile)
        # Reused once the copy has read it (on a GPU), or the forward (on the CPU, x may be the buffer).
        self.tiles.give(tile, t1 if self.cuda else None)
        return x, y, t0, t1, t2, stream

    def _finish(self, block: Block, y: torch.Tensor, stream):
        out = encode(y[(slice(None), *self.blocking.crop(block))], self.dtype)
        t3 = self.clock.mark(stream)
        if self.outputs is None:
            numel = out.shape[0] * int(np.prod(self.blocking.block))
            self.outputs = PinnedBuffers(self.queue + 2, numel, out.dtype, pin=self.cuda)
        host = self.outputs.take(tuple(out.shape))
        if not self.cuda:
            return host.copy_(out), None, t3, self.clock.mark(), self.clock.mark()
        self.copy_out_stream.wait_stream(stream)
        out.record_stream(self.copy_out_stream)
        with torch.cuda.stream(self.copy_out_stream):
            t4 = self.clock.mark(self.copy_out_stream)
            host.copy_(out, non_blocking=True)
            t5 = self.clock.mark(self.copy_out_stream)
        return host, t5, t3, t4, t5

    def run(self, blocks: list[Block], progress: Progress) -> float:
        """Predict `blocks`; returns the wall time. A write failure stops the run as a UserError."""
        start = time.perf_counter()
        with ThreadPoolExecutor(self.readers, "dlbench-read") as read_pool, \
                ThreadPoolExecutor(self.writers, "dlbench-write") as write_pool:
            reads: deque[tuple[Block, Future]] = deque()
            writes: deque[tuple[Block, Future]] = deque()
            todo = iter(blocks)
            for block in _take(todo, self.queue):
                reads.append((block, read_pool.submit(self._read, block)))
            done, last = 0, time.perf_counter()
            try:
                while reads:
                    block, future = reads.popleft()
                    waited = time.perf_counter()
                    tile = future.result()
                    self.log.add("wait", time.perf_counter() - waited)
                    for nxt in _take(todo, 1):
                        reads.append((nxt, read_pool.submit(self._read, nxt)))
                    x, y, t0, t1, t2, stream = self._compute(tile)
                    host, ready, t3, t4, t5 = self._finish(block, y, stream)
                    self.log.events.append((t0, t1, t2, t3, t4, t5))
                    writes.append((block, write_pool.submit(self._write, block, host, ready)))
                    while len(writes) > self.queue:
                        _check(*writes.popleft(), self.store)
                    done += 1
                    now = time.perf_counter()
                    self.log.step.append(now - last)
                    last = now
                    progress("predict", done, len(blocks))
                while writes:
                    _check(*writes.popleft(), self.store)
            except BaseException:
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


def _check(block: Block, future: Future, store: PredictionStore) -> None:
    try:
        future.result()
    except OSError as error:
        finished = len(store.done())
        raise UserError(f"writing block {block.index} to {store.path} failed ({error.strerror or error}); "
                        f"{finished} finished blocks are recorded: rerun with --resume to complete") from None


# ---------------------------------------------------------------- the workload


@contextlib.contextmanager
def _input(opts: dict, seed: int, ranks: Ranks, progress: Progress) -> Iterator[str]:
    """The input's PATH[:KEY]; without one, a synthetic volume generated in a temporary folder."""
    if opts["input"]:
        yield str(opts["input"])
        return
    from dlbench.data.generate_volume import generate

    shape = parse_shape(opts["volume_shape"])
    folder = tempfile.mkdtemp(prefix="dlbench-volume-") if ranks.rank == 0 else None
    try:
        if ranks.rank == 0:
            generate(Path(folder) / "volume.zarr", shape, "zarr", seed=seed, labels=False,
                     workers=min(16, os.cpu_count() or 1), progress=lambda d, t: progress("generate", d, t))
        folder = ranks.broadcast(folder)
        yield str(Path(folder) / "volume.zarr")
    finally:
        ranks.barrier()
        if ranks.rank == 0 and folder:
            shutil.rmtree(folder, ignore_errors=True)


def check_options(opts: dict) -> None:
    opts = {**OPTIONS, **opts}  # a spec holds only the options it sets
    if opts["dtype"] not in DTYPES:
        raise UserError(f"unknown output dtype {opts['dtype']!r}; choose {' or '.join(DTYPES)}")
    for name in ("readers", "writers", "queue"):
        if isinstance(opts[name], bool) or not isinstance(opts[name], int) or opts[name] < 1:
            raise UserError(f"{name} must be an integer ≥ 1, got {opts[name]!r}")
    parse_voxels(opts["extrapolate"])
    if str(opts["block"]) != "auto":
        parse_shape(opts["block"])
    parse_shape(opts["halo"])


def preflight(options: dict) -> None:
    """The checks a user can fail, before anything runs: called by the CLI so errors come first."""
    opts = {**OPTIONS, **options}
    check_options(opts)
    if opts["input"]:
        volume = open_volume(str(opts["input"]))
        volume.close()
        if str(opts["block"]) != "auto":
            Blocking(volume.shape, parse_shape(opts["block"]), parse_shape(opts["halo"]))
    if opts["output"]:
        PredictionStore(str(opts["output"])).check_new(bool(opts["resume"]), bool(opts["overwrite"]))


def choose_block(opts: dict, shape: tuple[int, ...], halo: tuple[int, ...], model, device, channels_last) -> tuple[int, ...]:
    if str(opts["block"]) != "auto":
        return parse_shape(opts["block"])
    candidates = auto_candidates(shape, halo)
    if device.type != "cuda":
        return next((c for c in candidates if np.prod(c) <= 32 * 256 * 256), candidates[-1])
    total = torch.cuda.get_device_properties(device).total_memory
    for block in candidates:
        tile = tuple(b + 2 * h for b, h in zip(block, halo))
        try:
            torch.cuda.reset_peak_memory_stats(device)
            x = to_input(torch.rand(tile, device=device), channels_last)
            forward(model, x, tile)
            torch.cuda.synchronize(device)
            # Room for the pipeline's second tile in flight and the allocator's slack.
            if torch.cuda.max_memory_allocated(device) < 0.7 * total:
                return block
        except Exception as error:  # noqa: BLE001
            if not is_oom(error):
                raise
        finally:
            torch.cuda.empty_cache()
    raise UserError("--block auto found no block that fits this GPU's memory; give --block")


def _warmup(model, blocking: Blocking, volume: Volume, device, channels_last: bool, repeats: int) -> tuple[int, float, float]:
    """Run the first tile `repeats` times: compilation and autotuning stay out of the measurement."""
    tile = scale(host_tile(blocking.read_tile(volume.read, blocking[0])).to(device), volume.dtype)
    start = time.perf_counter()
    channels = 0
    for _ in range(max(1, repeats)):
        channels = forward(model, to_input(tile, channels_last), blocking.tile).shape[0]
    synchronize(device)
    total = time.perf_counter() - start
    return channels, total, total / max(1, repeats)


def _warmup_checked(name: str, model, blocking: Blocking, volume: Volume, device, channels_last: bool, repeats: int):
    """The warm-up; a user's model file that cannot run this tile (an export for another shape) is a user error."""
    try:
        return _warmup(model, blocking, volume, device, channels_last, repeats)
    except (UserError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as error:  # noqa: BLE001
        if not name.endswith(registry.MODEL_FILES) or is_oom(error):
            raise
        tile = "x".join(map(str, blocking.tile))
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise UserError(f"model file {name} fails on a 1x1x{tile} tile ({first}): save it for this tile shape "
                        f"or with dynamic shapes") from None


def _settings(spec, volume: Volume, blocking: Blocking, channels: int, dtype: str) -> dict:
    """What the output depends on; --resume must match all of it."""
    return {"input": volume.name, "input_shape": list(volume.shape), "model": spec.model, "seed": spec.seed,
            "precision": spec.precision, "block": list(blocking.block), "halo": list(blocking.halo),
            "channels": channels, "dtype": dtype}


def run(spec, device: torch.device, progress: Progress):
    opts = {**OPTIONS, **spec.options}
    check_options(opts)
    ranks, device = setup_ranks(device)
    try:
        with _input(opts, spec.seed, ranks, progress) as input_key, _output(opts, ranks) as output:
            return _predict(spec, opts, input_key, output, ranks, device, progress)
    finally:
        ranks.close()


@contextlib.contextmanager
def _output(opts: dict, ranks: Ranks) -> Iterator[str]:
    if opts["output"]:
        yield str(opts["output"])
        return
    folder = tempfile.mkdtemp(prefix="dlbench-prediction-") if ranks.rank == 0 else None
    folder = ranks.broadcast(folder)
    try:
        yield str(Path(folder) / "prediction.zarr")
    finally:
        ranks.barrier()
        if ranks.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


def _predict(spec, opts: dict, input_key: str, output: str, ranks: Ranks, device, progress: Progress):
    resume, overwrite = bool(opts["resume"]), bool(opts["overwrite"])
    store = PredictionStore(output)
    store.check_new(resume, overwrite)
    volume = open_volume(input_key)
    halo = parse_shape(opts["halo"])
    model = load_model(spec.model, device, spec.channels_last, bool(opts["compile"]), spec.seed)
    block = choose_block(opts, volume.shape, halo, model, device, spec.channels_last)
    blocking = Blocking(volume.shape, block, halo)
    model, optimized = optimize.prepare(spec, model, to_input(torch.rand(blocking.tile, device=device), spec.channels_last))
    progress("warm-up", 0, 1)
    channels, warmup_s, warmup_tile_s = _warmup_checked(spec.model, model, blocking, volume, device,
                                                         spec.channels_last, spec.warmup)
    if ranks.rank == 0:
        store.create(_settings(spec, volume, blocking, channels, opts["dtype"]), (channels, *volume.shape),
                     (channels, *block), opts["dtype"], resume, overwrite)
    ranks.barrier()
    store.open()
    finished = store.done()
    mine = [blocking[i] for i in range(ranks.rank, len(blocking), ranks.world) if i not in finished]
    pipeline = Pipeline(blocking, volume, store, model, device, dtype=opts["dtype"], channels_last=spec.channels_last,
                        readers=opts["readers"], writers=opts["writers"], queue=opts["queue"])
    with Monitor(device) as monitor:  # clocks, power and throttling while the blocks run
        wall = pipeline.run(mine, progress)
    voxels = sum(int(np.prod(b.shape)) for b in mine)
    volume.close()
    per_rank = ranks.gather({"voxels": voxels, "wall": wall, "blocks": len(mine),
                             "phases": {k: float(sum(v)) for k, v in pipeline.log.samples().items()}})
    ranks.barrier()
    metrics = _metrics(opts, volume, blocking, per_rank, ranks.world, len(finished), warmup_s, warmup_tile_s, store)
    metrics.update(optimized)
    metrics.update(_monitor_metrics(monitor.data, voxels))
    return metrics, pipeline.log.samples()


def _monitor_metrics(data: MonitorData, voxels: int) -> dict:
    """This rank's GPU during the run (clocks, power, throttling) and its energy per Mvox."""
    summary = data.summary()
    if summary.get("energy_j") is not None and voxels:
        summary["energy_j_per_mvox"] = summary["energy_j"] / (voxels / 1e6)
    return {**summary, "traces": {"monitor": data.trace()}}


def _metrics(opts, volume: Volume, blocking: Blocking, per_rank: list[dict], world: int, skipped: int,
             warmup_s: float, warmup_tile_s: float, store: PredictionStore) -> dict:
    voxels = sum(r["voxels"] for r in per_rank)
    wall = max(r["wall"] for r in per_rank) or float("nan")
    mvox_s = voxels / wall / 1e6 if voxels else 0.0
    per_gpu = mvox_s / world
    target = parse_voxels(opts["extrapolate"])
    phases = {k: sum(r["phases"][k] for r in per_rank) for k in per_rank[0]["phases"]}
    compute = phases.get("compute") or float("nan")
    hours = {str(n): target / (per_gpu * 1e6 * n) / 3600 if per_gpu else None for n in sorted({1, world, 8})}
    return {
        "throughput": mvox_s, "throughput_unit": "Mvox/s", "mvox_per_s": mvox_s,
        "total_s": wall, "voxels": voxels, "blocks": sum(r["blocks"] for r in per_rank), "blocks_skipped": skipped,
        "volume_shape": list(volume.shape), "volume_voxels": int(np.prod(volume.shape)),
        "block": list(blocking.block), "halo": list(blocking.halo), "tile": list(blocking.tile),
        "block_fill": blocking.fill, "kept_share": blocking.kept,
        "output": str(store.path), "dtype": opts["dtype"], "world_size": world,
        "phase_s": phases, "data_wait_share": phases.get("wait", 0.0) / (wall * world) if voxels else 0.0,
        "model_mvox_per_s": voxels / compute / 1e6 if voxels else None,
        "warmup_s": warmup_s, "warmup_tile_s": warmup_tile_s,
        "extrapolate_voxels": target, "extrapolate_hours": hours,
    }


def describe(metrics: dict) -> str:
    """Voxels, seconds and Mvox/s; the hours for the extrapolated volume on one GPU, or at this
    run's rate where it ran on a CPU (no "GPU" for a CPU run)."""
    from dlbench.report.units import fixed, percent, sig

    hours = metrics.get("extrapolate_hours", {})
    target = metrics.get("extrapolate_voxels")
    on_gpu = str(metrics.get("device", "cuda")).startswith("cuda")
    if on_gpu and hours.get("1"):
        extra = f", {sig(target / 1e12)} Tvox in {fixed(hours['1'], 1)} h on 1 GPU"
    elif not on_gpu and target and metrics.get("mvox_per_s"):
        extra = f", {sig(target / 1e12)} Tvox in {fixed(target / (metrics['mvox_per_s'] * 1e6) / 3600, 1)} h on this CPU"
    else:
        extra = ""
    fill = metrics.get("block_fill", 1.0)
    cut = (f"; the far border cuts blocks: {percent(1 - fill)} of the model's work is outside the volume"
           if fill < 0.95 else "")
    return (f"{sig(metrics['voxels'] / 1e6)} Mvox in {sig(metrics['total_s'])} s = {sig(metrics['mvox_per_s'])} Mvox/s "
            f"({metrics['blocks']} blocks, {metrics['blocks_skipped']} already done){extra}{cut}")
