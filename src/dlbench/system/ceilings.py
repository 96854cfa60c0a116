"""Measured ceilings of this machine: what the hardware does at best on plain operations.

Each function measures one ceiling and returns a `Ceiling` that carries its method. Device
work is timed with CUDA events (read after a synchronize); host work with a host clock.
Every figure is the median of several repetitions; where a sweep is made (matmul sizes)
the best size is kept, since a ceiling is what the chip can reach.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from dlbench.errors import UserError
from dlbench.measure import nvml

GPU_MATMUL_SIZES = (4096, 8192, 16384)
CPU_MATMUL_SIZES = (256, 512, 1024, 2048)
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
REPS = 5
REP_SECONDS = 0.05  # each repetition runs enough calls to last about this long
ALLREDUCE_CALLS = 10


@dataclass
class Ceiling:
    name: str  # e.g. matmul_bf16_tflops; the unit is in the name, so flat metrics read well
    value: float
    unit: str
    method: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Unmeasured(Exception):
    """A ceiling this machine cannot measure (no GPU, no fp8, one GPU only...)."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: torch.device, reps: int = REPS,
              rep_seconds: float = REP_SECONDS, calls: int | None = None) -> float:
    """Median seconds per call of `fn`, after a warm-up call; calls are batched per repetition
    so that launch and timer overheads vanish. `calls` fixes the batch (collectives need
    every rank to make the same calls)."""
    fn()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    single = max(time.perf_counter() - start, 1e-7)
    calls = calls or max(1, min(1000, math.ceil(rep_seconds / single)))
    per_call = []
    for _ in range(reps):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            per_call.append(begin.elapsed_time(end) / 1e3 / calls)
        else:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call.append((time.perf_counter() - start) / calls)
    return statistics.median(per_call)


def _matmul_fn(precision: str, n: int, device: torch.device) -> Callable[[], object]:
    if precision == "fp8":
        return _fp8_matmul_fn(n, device)
    dtype = _DTYPES[precision]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


def _conv_gemm_fn(n: int) -> Callable[[], object]:
    """The same n x n x n product as a 1x1 convolution (n channels in and out over n positions):
    on a CPU it runs in the convolution library (oneDNN), which the workloads' convolutions use
    and which can outrun torch.mm's BLAS on the same cores."""
    x = torch.randn(1, n, 1, n).contiguous(memory_format=torch.channels_last)
    w = torch.randn(n, n, 1, 1).contiguous(memory_format=torch.channels_last)

    def call() -> object:
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w)
    return call


def _fp8_matmul_fn(n: int, device: torch.device) -> Callable[[], object]:
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        raise Unmeasured("fp8 needs a GPU of compute capability 8.9 or newer")
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        raise Unmeasured(f"torch {torch.__version__} has no fp8 matmul")
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)


def matmul(precision: str, device: torch.device, sizes: tuple[int, ...] | None = None) -> Ceiling:
    """Best TFLOP/s of C = A·B over square sizes (2n³ FLOPs per product)."""
    sizes = sizes or (GPU_MATMUL_SIZES if device.type == "cuda" else CPU_MATMUL_SIZES)
    if device.type != "cuda" and precision != "fp32":
        raise Unmeasured(f"{precision} matmul is measured on GPUs only")
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        rates = {}
        for n in sizes:
            try:
                seconds = time_call(_matmul_fn(precision, n, device), device)
            except torch.cuda.OutOfMemoryError:
                break
            except RuntimeError as error:  # fp8 kernels missing in this build, for instance
                if precision == "fp8":
                    raise Unmeasured(f"fp8 matmul failed: {str(error).splitlines()[0]}") from None
                raise
            if device.type == "cpu":  # the faster library is the ceiling (see _conv_gemm_fn)
                seconds = min(seconds, time_call(_conv_gemm_fn(n), device))
            rates[n] = 2 * n**3 / seconds / 1e12
            _free(device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    if not rates:
        raise Unmeasured("not even the smallest matmul fitted in memory")
    best = max(rates, key=rates.get)
    kind = ("torch._scaled_mm e4m3 x e4m3 -> bf16, fast accumulation" if precision == "fp8" else
            f"the faster of torch.mm {precision} and the same product as a 1x1 convolution" if device.type == "cpu"
            else f"torch.mm {precision}")
    return Ceiling(f"matmul_{precision}_tflops", rates[best], "TFLOP/s",
                   f"{kind}, square n x n, n in {list(sizes)}; 2n^3 FLOPs / median time of {REPS} "
                   f"repetitions; best size kept", {"best_n": best, "by_size": {str(n): v for n, v in rates.items()},
                    "device": str(device)})


# What a ceiling spends beyond its timed calls, on 2 busy EPYC cores (`dlbench system`, load 3.8,
# 2026-11-28): making its inputs, and for the JPEG loader writing 32 files and starting a worker
# process that imports torch (10.9 s in all with its 2 s of batches).
SETUP_S = {"copy_gbs": 1.0, "jpeg_decode_cpu_img_s_per_core": 0.5, "jpeg_loader_cpu_img_s_per_core": 6.0,
           "jpeg_decode_gpu_img_s": 3.0, "allreduce_busbw_gbs": 15.0}


def budget_s(name: str, device: torch.device, rate: float, *, gpus: int = 0, disk: Path | None = None) -> float:
    """About how long measuring ceiling `name` takes: its timed seconds (`time_call`: a warm-up and a
    single call, then REPS repetitions of at least REP_SECONDS; a matmul's call from its FLOPs at `rate`)
    plus its set-up (SETUP_S); 0 for what this machine cannot measure (it stops at once)."""
    gpu = device.type == "cuda"
    if name.startswith("matmul_"):
        precision = name.split("_")[1]
        if not gpu and precision != "fp32":
            return 0.0
        sizes = GPU_MATMUL_SIZES if gpu else CPU_MATMUL_SIZES
        calls = 1 if gpu else 2  # on a CPU the same product again as a convolution
        return sum(calls * _timed(2 * n**3 / rate) for n in sizes)
    if name in ("h2d_pinned_gbs", "h2d_pageable_gbs", "d2h_pinned_gbs", "d2h_pageable_gbs") and not gpu:
        return 0.0
    if name == "allreduce_busbw_gbs" and gpus < 2 or name == "jpeg_decode_gpu_img_s" and not gpu:
        return 0.0
    timed = {"jpeg_decode_cpu_img_s_per_core": 1.0, "jpeg_loader_cpu_img_s_per_core": 2.0,
             "jpeg_decode_gpu_img_s": 1.0, "disk_read_gbs": _disk_bytes(disk) / DISK_BYTES_PER_S if disk else 0.0}
    return timed.get(name, _timed(REP_SECONDS)) + SETUP_S.get(name, 0.0)


DISK_BYTES_PER_S = 5e8  # a stand-in for a disk never measured: a SATA SSD's reads


def _disk_bytes(path: Path) -> int:
    """What `disk_read` will read of `path`: its files, up to its 4 GiB."""
    try:
        return min(sum(f.stat().st_size for f in _files_under(Path(path))), 4 << 30)
    except OSError:
        return 0


def _timed(single: float) -> float:
    """`time_call` of a call taking `single` seconds."""
    return 2 * single + REPS * max(single, REP_SECONDS)


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def copy_bandwidth(device: torch.device, nbytes: int | None = None) -> Ceiling:
    """Device-memory bandwidth of a large copy, counting bytes read plus bytes written."""
    nbytes = nbytes or (1 << 30 if device.type == "cuda" else 1 << 27)
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    seconds = time_call(functools.partial(dst.copy_, src), device)
    del src, dst
    _free(device)
    where = "device memory" if device.type == "cuda" else "host memory"
    return Ceiling("copy_gbs", 2 * nbytes / seconds / 1e9, "GB/s",
                   f"{where}: copy of {nbytes >> 20} MiB, (read + written bytes) / median time of {REPS}",
                   {"bytes": nbytes, "device": str(device)})


def host_device(device: torch.device, direction: str, pinned: bool, nbytes: int = 1 << 28) -> Ceiling:
    """Host-to-device ('h2d') or device-to-host ('d2h') copy bandwidth, pinned or pageable."""
    if device.type != "cuda":
        raise Unmeasured("no GPU")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).random_()
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    src, dst = (host, gpu) if direction == "h2d" else (gpu, host)
    seconds = time_call(lambda: dst.copy_(src, non_blocking=pinned), device)
    gen, width = nvml.pcie_link(device.index or 0)  # right after the copies, while the link is up
    del host, gpu
    _free(device)
    kind = "pinned" if pinned else "pageable"
    return Ceiling(f"{direction}_{kind}_gbs", nbytes / seconds / 1e9, "GB/s",
                   f"{direction} copy of {nbytes >> 20} MiB from {kind} host memory; bytes / median time "
                   f"of {REPS}", {"bytes": nbytes, "device": str(device), "pcie_gen": gen, "pcie_width": width})


def _allreduce_worker(rank: int, world: int, backend: str, nbytes: int, init_file: str, out_file: str) -> None:
    import torch.distributed as dist

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        tensor = torch.randn(nbytes // 4, device=device)
        seconds = time_call(lambda: dist.all_reduce(tensor), device, calls=ALLREDUCE_CALLS)
        if rank == 0:
            Path(out_file).write_text(repr(seconds))
    finally:
        dist.destroy_process_group()


def allreduce(world: int, backend: str = "nccl", nbytes: int = 1 << 28) -> Ceiling:
    """All-reduce bus bandwidth across `world` local ranks: (bytes / time) · 2(n-1)/n, the
    figure nccl-tests reports, comparable across GPU counts."""
    import torch.multiprocessing as mp

    from dlbench import scratch

    if world < 2:
        raise Unmeasured(f"{world} GPU(s): all-reduce needs two or more")
    if backend == "nccl" and not (torch.cuda.is_available() and torch.distributed.is_nccl_available()):
        raise Unmeasured("NCCL is not available")
    with scratch.folder("allreduce") as tmp:
        out_file = os.path.join(tmp, "seconds")
        mp.spawn(_allreduce_worker, args=(world, backend, nbytes, os.path.join(tmp, "init"), out_file),
                 nprocs=world, join=True)
        seconds = float(Path(out_file).read_text())
    algbw = nbytes / seconds / 1e9
    return Ceiling("allreduce_busbw_gbs", algbw * 2 * (world - 1) / world, "GB/s",
                   f"{backend} all_reduce of {nbytes >> 20} MiB fp32 over {world} ranks; bus bandwidth = "
                   f"bytes / median time x 2(n-1)/n", {"world": world, "backend": backend, "bytes": nbytes,
                                                        "algbw_gbs": algbw})


def synthetic_jpeg(height: int = 375, width: int = 500, quality: int = 90, seed: int = 0) -> torch.Tensor:
    """A JPEG of ImageNet's typical size with photo-like content (smooth shapes plus noise)."""
    import io

    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, max(1, height // 25), max(1, width // 25), generator=g)
    smooth = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bicubic", align_corners=False)
    image = (smooth[0] * 200 + torch.rand(3, height, width, generator=g) * 55).clamp(0, 255).to(torch.uint8)
    out = io.BytesIO()
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(out, "JPEG", quality=quality)
    return torch.frombuffer(bytearray(out.getvalue()), dtype=torch.uint8)


def _one_thread(measure: Callable[[], float]) -> float:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure()
    finally:
        torch.set_num_threads(threads)


def jpeg_decode_cpu(seconds: float = 1.0) -> Ceiling:
    """JPEG decode rate of one CPU core (libjpeg-turbo through Pillow, what the loader's workers run)."""
    import io

    from PIL import Image

    data = synthetic_jpeg().numpy().tobytes()

    def measure() -> float:
        Image.open(io.BytesIO(data)).convert("RGB")
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            Image.open(io.BytesIO(data)).convert("RGB")
            count += 1
        return count / (time.perf_counter() - start)

    rate = _one_thread(measure)
    cores = os.cpu_count() or 1
    return Ceiling("jpeg_decode_cpu_img_s_per_core", rate, "img/s",
                   f"Pillow (libjpeg-turbo) full-size decode on one thread, 500x375 q90 JPEG "
                   f"({len(data) // 1024} KiB), repeated for {seconds:g} s",
                   {"cores": cores, "all_cores_estimate_img_s": rate * cores})


LOADER_FILES, LOADER_BATCH = 32, 16


def jpeg_loader_cpu(seconds: float = 2.0, files: int = LOADER_FILES, batch: int = LOADER_BATCH) -> Ceiling:
    """Images a second that one loader worker delivers to the main process: the real path of
    `--data folder:PATH` (read, decode at reduced size, crop and resize to 224x224, flip,
    collate, hand-over), one worker process, on ImageNet-sized JPEGs from a scratch folder.
    What a run's workers reach at best, per worker; the decoder alone is `jpeg_decode_cpu`."""
    from dlbench import scratch
    from dlbench.data import images

    with scratch.folder("jpeg-loader") as tmp:
        folder = Path(tmp) / "class0000"
        folder.mkdir()
        for i in range(files):
            (folder / f"{i:04d}.jpg").write_bytes(synthetic_jpeg(seed=i).numpy().tobytes())
        items, _ = images.scan_folder(Path(tmp))
        config = images.ImageConfig(size=(224, 224), batch=batch, train=True, workers=1, prefetch=2, seed=0,
                                    max_corrupt=0.0)
        loader = images.HostLoader(images.data_loader(images.FolderImages(items, config), config,
                                                      torch.device("cpu")), None)
        try:
            batches = iter(loader)
            next(batches)  # the worker's start-up stays out
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                next(batches)
                count += batch
            rate = count / (time.perf_counter() - start)
        finally:
            loader.close()
    return Ceiling("jpeg_loader_cpu_img_s_per_core", rate, "img/s",
                   f"one DataLoader worker through dlbench's JPEG folder path (read, decode, random-resized "
                   f"crop to 224x224, flip, collate, hand-over), {files} 500x375 q90 JPEGs in batches of {batch}, "
                   f"for {seconds:g} s after the first batch", {"files": files, "batch": batch})


def jpeg_decode_gpu(device: torch.device, batch: int = 128, seconds: float = 1.0) -> Ceiling:
    """Batched JPEG decode rate on the GPU (nvjpeg through torchvision)."""
    from dlbench.data.images import cuda_decode

    if device.type != "cuda":
        raise Unmeasured("no GPU")
    images = [synthetic_jpeg(seed=i) for i in range(batch)]
    try:
        cuda_decode(images, device)
    except Exception as error:
        raise Unmeasured(f"GPU JPEG decode unavailable: {str(error).splitlines()[0]}") from None
    _sync(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        cuda_decode(images, device)
        count += batch
    _sync(device)
    rate = count / (time.perf_counter() - start)
    return Ceiling("jpeg_decode_gpu_img_s", rate, "img/s",
                   f"torchvision.io.decode_jpeg(device=cuda) on batches of {batch} 500x375 q90 JPEGs, "
                   f"for {seconds:g} s", {"batch": batch, "device": str(device)})


def _files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def disk_read(path: str | os.PathLike, max_bytes: int = 4 << 30, chunk: int = 16 << 20) -> Ceiling:
    """Sequential read bandwidth of the files at `path` (a file or a folder), up to
    `max_bytes`. Each file's cached pages are dropped first (posix_fadvise), so the figure
    is the storage's, unless the kernel keeps them."""
    root = Path(path)
    if not root.exists():
        raise UserError(f"--disk {path}: no such file or folder")
    files = _files_under(root)
    buffer = bytearray(chunk)
    total, count, dropped = 0, 0, True
    start = time.perf_counter()
    for file in files:
        try:
            fd = os.open(file, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except (AttributeError, OSError):
                dropped = False
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                while (n := f.readinto(buffer)) and total < max_bytes:
                    total += n
        finally:
            os.close(fd)
        count += 1
        if total >= max_bytes:
            break
    seconds = time.perf_counter() - start
    if total == 0:
        raise UserError(f"--disk {path}: nothing readable there (give a file or a folder with data)")
    cache = "page cache dropped per file first" if dropped else "page cache NOT dropped (may read from RAM)"
    return Ceiling("disk_read_gbs", total / seconds / 1e9, "GB/s",
                   f"sequential read of {count} file(s), {total >> 20} MiB in {chunk >> 20} MiB chunks; {cache}",
                   {"path": str(root.resolve()), "bytes": total, "files": count, "cache_dropped": dropped})
