"""Data for the workloads: image sources here; volumes (HDF5, zarr, N5), their generator,
augmentation, targets, patches and blocking, and 2D segmentation sets in their own modules.

Data sources for the workloads. `make_loader` is the one entry point: it reads the spec's
`data` option and returns an endless iterable of (inputs, targets) batches.

Sources (`--data`):
  synthetic     random tensors made once on the device (no input cost); targets None, so the
                workload makes targets shaped like the model's output
  dummy         random images made on the CPU, through the real transforms (seed 002's "Dummy")
  folder:PATH   an ImageFolder of JPEG/PNG files (class folders); `--decode gpu` decodes on the GPU

A new source is one more branch in `make_loader` (3D volumes: `PATH[:KEY]` of HDF5/zarr/N5).
Every loader has `images` (samples per epoch, 0 when endless), `corrupt` (skipped files or
None), `__len__` where an epoch has a length, and `close()`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dlbench.errors import UserError

OPTIONS: dict[str, Any] = {
    "data": "synthetic",  # synthetic | dummy | folder:PATH
    "workers": None,  # DataLoader worker processes (None: min(8, CPU cores))
    "decode": "cpu",  # cpu (workers) | gpu (torchvision.io on the device)
    "prefetch": 2,  # batches each worker prepares ahead
    "max_corrupt": 0.05,  # fraction of files that may fail to decode before the run fails
    "dummy_images": 10_000,  # images per epoch of the dummy source
}
DECODERS = ("cpu", "gpu")


def parse_source(text: str) -> tuple[str, str]:
    """'synthetic' -> ('synthetic', ''); 'folder:/data/x' -> ('folder', '/data/x')."""
    kind, _, arg = str(text).partition(":")
    if kind in ("synthetic", "dummy") and not arg:
        return kind, ""
    if kind == "folder" and arg:
        path = os.path.expandvars(os.path.expanduser(arg))
        if "$" in path:
            raise UserError(f"data path {arg!r} names an environment variable that is not set: write a dataset "
                            "with `dlbench data images DIR --n 20000` and set the variable to DIR")
        return kind, path
    raise UserError(f"unknown data source {text!r}: use synthetic, dummy or folder:PATH")


def workers(spec) -> int:
    value = spec.options.get("workers")
    if value is None:
        return min(8, os.cpu_count() or 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"workers must be an integer ≥ 0, got {value!r}")
    return value


def check(spec, device: torch.device) -> list[str]:
    """Validate the data options before anything runs; returns warnings for the user."""
    kind, arg = parse_source(spec.options.get("data", OPTIONS["data"]))
    decode = spec.options.get("decode", "cpu")
    if decode not in DECODERS:
        raise UserError(f"unknown decode {decode!r}: use cpu or gpu")
    if decode == "gpu" and kind != "folder":
        raise UserError("--decode gpu needs a JPEG folder (--data folder:PATH)")
    if decode == "gpu" and device.type != "cuda":
        raise UserError("--decode gpu needs a CUDA GPU (this run is on the CPU)")
    prefetch = spec.options.get("prefetch", OPTIONS["prefetch"])
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise UserError(f"prefetch must be an integer ≥ 1, got {prefetch!r}")
    limit = spec.options.get("max_corrupt", OPTIONS["max_corrupt"])
    if not isinstance(limit, (int, float)) or not 0 <= limit <= 1:
        raise UserError(f"max_corrupt must be a fraction between 0 and 1, got {limit!r}")
    if kind == "folder":
        from dlbench.data.images import scan_folder

        scan_folder(Path(arg))
    count, cores = workers(spec), os.cpu_count() or 1
    if kind != "synthetic" and count > cores:
        return [f"--workers {count} is more than this machine's {cores} CPU cores: "
                "workers will compete for cores and data loading may look slower than it is"]
    return []


def make_loader(spec, device: torch.device, train: bool = True, *, batch: int | None = None,
                shape: tuple[int, ...] | None = None, rank: int = 0, world: int = 1):
    """The loader the spec asks for; `batch` overrides spec.batch (smooth reads one image per step)."""
    from dlbench.data import images

    kind, arg = parse_source(spec.options.get("data", OPTIONS["data"]))
    batch = batch or spec.batch
    shape = tuple(shape or spec.input_shape or (3, 224, 224))
    if kind == "synthetic":
        return images.SyntheticImages(batch, shape, device, spec.seed + rank, spec.channels_last)
    config = images.ImageConfig(
        size=(shape[-2], shape[-1]), batch=batch, train=train, workers=workers(spec),
        prefetch=spec.options.get("prefetch", OPTIONS["prefetch"]), seed=spec.seed,
        max_corrupt=float(spec.options.get("max_corrupt", OPTIONS["max_corrupt"])), rank=rank, world=world,
    )
    if kind == "dummy":
        dataset = images.DummyImages(int(spec.options.get("dummy_images", OPTIONS["dummy_images"])), config)
        _check_enough(len(dataset), config, "dummy_images")
        return images.HostLoader(images.data_loader(dataset, config, device), None)
    items, _ = images.scan_folder(Path(arg))
    _check_enough(len(items), config, arg)
    corrupt = images.Corrupt(len(items), config.max_corrupt)
    if spec.options.get("decode", "cpu") == "gpu":
        dataset = images.FolderImages(items, config, decode=False)
        host = images.HostLoader(images.data_loader(dataset, config, device, images.collate_bytes), corrupt)
        return images.DeviceDecoder(host, config, device)
    dataset = images.FolderImages(items, config)
    return images.HostLoader(images.data_loader(dataset, config, device), corrupt)


def _check_enough(count: int, config, where: str) -> None:
    if count < config.batch * config.world:
        raise UserError(f"{where} has {count} images, fewer than one batch ({config.batch}"
                        f"{f' x {config.world} processes' if config.world > 1 else ''})")
