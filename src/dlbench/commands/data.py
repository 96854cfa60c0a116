"""`dlbench data ...`: write synthetic datasets. Every parameter is a typed option and the
target path is checked (its folder exists and is writable) before anything is written."""

from __future__ import annotations

from dataclasses import MISSING, dataclass
from pathlib import Path

from dlbench.figures import sig
from dlbench.launch.view import Terminal
from dlbench.options import MAX_SEED, Options, option
from dlbench.paths import check_folder_of, check_new_file, check_new_folder

SEED_HELP = "Random seed (the same seed writes the same files)."
SEED_BOUNDS = dict(low=0, high=MAX_SEED)
WORKER_BOUNDS = dict(low=1, high=1024)


@dataclass(frozen=True, kw_only=True)
class ImagesRequest(Options):
    """An ImageNet-like JPEG dataset: photo-like images around 500x375 pixels and ~100 KB each."""
    path: str = option(MISSING, "Folder to write (class folders of JPEGs).", argument=True)
    n: int = option(1000, "Number of images.", low=1, high=10**8)
    classes: int = option(10, "Number of class folders.", low=1, high=10**6)
    size: tuple[int, ...] | None = option(None, "Every image WIDTHxHEIGHT pixels, e.g. 2048x1536 for large photos "
                                                "(default: ImageNet's common sizes, around 500x375).")
    seed: int = option(0, SEED_HELP, **SEED_BOUNDS)
    workers: int | None = option(None, "Processes writing images (default: min(8, cores)).", **WORKER_BOUNDS)
    overwrite: bool = option(False, "Replace a set written here before.")


def images(request: ImagesRequest, view: Terminal) -> None:
    from dlbench.data.generate import check, check_size, generate

    check_size(request.size)
    check(Path(request.path), request.overwrite)
    check_new_folder(request.path, "dataset")
    with view.progress("writing JPEGs", request.n, "images") as progress:
        summary = generate(Path(request.path), request.n, classes=request.classes, seed=request.seed,
                           workers=request.workers, progress=progress, overwrite=request.overwrite,
                           size=request.size)
    view.message(f"wrote {summary['images']} images in {summary['classes']} classes to {request.path} "
                 f"({summary['bytes'] / 1e6:.1f} MB, {summary['mean_kb']:.0f} KB each on average)")


@dataclass(frozen=True, kw_only=True)
class VolumeRequest(Options):
    """Write an EM-like volume (cells, membranes, texture, noise) with labels in the CREMI layout, slab by slab."""
    path: str = option(MISSING, "File (.h5/.hdf5) or directory (.zarr, .n5) to write.", argument=True)
    shape: tuple[int, ...] = option((200, 3072, 3072), "Volume size ZxYxX (the padded CREMI volume of the 3D U-Net "
                                                                    "benchmarks).")
    format: str | None = option(None, "hdf5, zarr or n5 (default: from the path's suffix).",
                                choices=("hdf5", "zarr", "n5"))
    chunks: tuple[int, ...] | None = option(None, "Chunk size ZxYxX (default 8x256x256).")
    labels: bool = option(True, "Also write volumes/labels/neuron_ids.")
    seed: int = option(0, SEED_HELP, **SEED_BOUNDS)
    workers: int = option(4, "Threads computing slabs.", **WORKER_BOUNDS)
    overwrite: bool = option(False, "Replace an existing volume.")


def volume(request: VolumeRequest, view: Terminal) -> None:
    from dlbench.data.generate_volume import available_memory, check, generate, slab_bytes, slab_workers

    path, size = Path(request.path), request.shape
    fmt, chunks = check(path, size, request.format, request.chunks, request.overwrite)
    if request.overwrite and path.exists():
        check_folder_of(path, "volume")  # written beside it, then in its place
    elif fmt == "hdf5":
        check_new_file(path, "volume")
    else:
        check_new_folder(path, "volume")
    free = available_memory()
    workers = slab_workers(size, chunks, request.workers, free)
    if workers < request.workers:
        slab = "x".join(map(str, (min(chunks[0], size[0]), size[1], size[2])))
        view.message(f"computing {workers} slabs at a time, not {request.workers}: a slab of {slab} takes about "
                     f"{sig(slab_bytes(size, chunks) / 1e9)} GB, and {sig(free / 1e9)} GB of memory are available")
    with view.progress(f"writing {path}", size[0], "planes") as progress:
        generate(path, size, request.format, chunks=request.chunks, seed=request.seed, labels=request.labels,
                 workers=workers, overwrite=request.overwrite, progress=progress)
    view.message(f"wrote {'x'.join(map(str, size))} volume to {path}")


@dataclass(frozen=True, kw_only=True)
class SegRequest(Options):
    """Write an EM-membrane-like 2D segmentation set: cells, membranes, organelles, texture, blur, noise.

    Masks are 255 inside cells and 0 on membranes (the ISBI 2012 convention)."""
    path: str = option(MISSING, "Folder to write: PATH/images and PATH/masks.", argument=True)
    n: int = option(30, "Number of image/mask pairs (the ISBI 2012 set has 30).", low=1, high=10**6)
    size: int = option(512, "Width and height in pixels.", low=16, high=65536)
    format: str = option("tif", "tif or png.", choices=("tif", "png"))
    seed: int = option(0, SEED_HELP, **SEED_BOUNDS)
    overwrite: bool = option(False, "Replace an existing set in PATH.")


def seg(request: SegRequest, view: Terminal) -> None:
    from dlbench.data import generate_seg
    from dlbench.workloads.runtime import resolve_device

    generate_seg.check(request.path, request.n, request.size, request.format, request.overwrite)
    check_new_folder(request.path, "dataset")
    with view.progress(f"writing {request.path}", request.n, "pairs") as progress:
        generate_seg.write(request.path, request.n, request.size, request.format, request.seed,
                           overwrite=request.overwrite, device=resolve_device("auto"), progress=progress)
    view.message(f"wrote {request.n} images and masks of {request.size}x{request.size} to {request.path}/images "
                 f"and {request.path}/masks")
