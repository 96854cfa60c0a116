"""Data for the workloads: image sources here; volumes (HDF5, zarr, N5), their generator,
augmentation, targets, patches and blocking, and 2D segmentation sets in their own modules.

Data sources for the workloads. `make_loader` is the one entry point: it reads the spec's
`data` option and returns an endless iterable of (inputs, targets) batches.

Sources (`--data`):
  synthetic     random tensors made once on the device (no input cost); targets None, so the
                workload makes targets shaped like the model's output
  dummy         random images made on the CPU, through the real transforms (seed 002's "Dummy")
  folder:PATH   an ImageFolder of JPEG/PNG files (class folders); `--decode gpu` decodes on the GPU

  PATH[:KEY]    a 3D volume (.h5/.hdf5, .zarr, .n5) with labels in the CREMI layout: random
                training patches of the model's input shape (`data/patches.py`), elastically
                deformed and flipped in the workers (`augment` cpu) or on the GPU (gpu; the
                default on a GPU), with affinity or foreground targets for the model's task

A new source is one more branch in `make_loader`. Every loader has `images` (samples per epoch, 0 when endless), `corrupt` (skipped files or
None), `__len__` where an epoch has a length, and `close()`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dlbench.errors import UserError

OPTIONS: dict[str, Any] = {
    "data": "synthetic",  # synthetic | dummy | folder:PATH | PATH[:KEY] of a 3D volume
    "workers": None,  # DataLoader worker processes (None: min(8, CPU cores))
    "decode": "cpu",  # cpu (workers) | gpu (torchvision.io on the device)
    "cpu_share": 0.0,  # --decode gpu: the share of the images the workers decode instead (see DeviceDecoder)
    "prefetch": 2,  # batches each worker prepares ahead
    "max_corrupt": 0.05,  # fraction of files that may fail to decode before the run fails
    "dummy_images": 10_000,  # images per epoch of the dummy source
}
DECODERS = ("cpu", "gpu")
AUGMENT_MODES = ("auto", "cpu", "gpu", "none")  # volume patches: where elastic deformation and flips run
VOLUME_SUFFIXES = (".h5", ".hdf5", ".hdf", ".zarr", ".n5")


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
    volume = _volume_source(str(text))
    if volume:
        return "volume", volume
    raise UserError(f"unknown data source {text!r}: use synthetic, dummy, folder:PATH or a volume PATH[:KEY] "
                    "(.h5/.hdf5, .zarr, .n5)")


def _volume_source(text: str) -> str | None:
    """The expanded PATH[:KEY] when `text` names a 3D volume, else None."""
    from dlbench.data.volumes import detect_format, split_path_key

    expanded = os.path.expandvars(os.path.expanduser(text))
    if "$" in expanded:
        raise UserError(f"data path {text!r} names an environment variable that is not set: write a volume "
                        "with `dlbench data volume PATH.h5 --shape 125x1250x1250` and set the variable to PATH.h5")
    path, _ = split_path_key(expanded)
    if path.suffix.lower() in VOLUME_SUFFIXES:
        return expanded
    if path.exists():
        try:
            detect_format(path)
        except UserError:
            return None
        return expanded
    return None


def augment_mode(spec, device: torch.device) -> str:
    """Where patches are deformed: `auto` is the GPU when the run has one (a 40x432x432 patch takes
    far longer to deform on one CPU core than the GPU takes for a training step), else the workers."""
    mode = spec.options.get("augment", "auto")
    if mode not in AUGMENT_MODES:
        raise UserError(f"unknown augment {mode!r}: use {', '.join(AUGMENT_MODES)}")
    if mode == "gpu" and device.type != "cuda":
        raise UserError("--augment gpu needs a CUDA GPU (this run is on the CPU): use --augment cpu")
    if mode == "auto":
        return "gpu" if device.type == "cuda" else "cpu"
    return mode


def workers(spec) -> int:
    value = spec.options.get("workers")
    if value is None:
        return min(8, os.cpu_count() or 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"workers must be an integer ≥ 0, got {value!r}")
    return value


def check(spec, device: torch.device, shape: tuple[int, ...] | None = None) -> list[str]:
    """Validate the data options before anything runs; returns warnings for the user.

    For a volume, `shape` (the model's input, channels first) is the training patch: the volume
    is opened and must hold it."""
    kind, arg = parse_source(spec.options.get("data", OPTIONS["data"]))
    decode = spec.options.get("decode", "cpu")
    if decode not in DECODERS:
        raise UserError(f"unknown decode {decode!r}: use cpu or gpu")
    if kind == "volume":
        _check_volume(spec, device, arg, shape)
    if decode == "gpu" and kind != "folder":
        raise UserError("--decode gpu needs a JPEG folder (--data folder:PATH)")
    if decode == "gpu" and device.type != "cuda":
        raise UserError("--decode gpu needs a CUDA GPU (this run is on the CPU)")
    prefetch = spec.options.get("prefetch", OPTIONS["prefetch"])
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise UserError(f"prefetch must be an integer ≥ 1, got {prefetch!r}")
    share = spec.options.get("cpu_share", OPTIONS["cpu_share"])
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise UserError(f"cpu_share must be a fraction between 0 and 1, got {share!r}")
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


def _check_volume(spec, device: torch.device, path_key: str, shape: tuple[int, ...] | None) -> None:
    from dlbench.data.patches import check_source
    from dlbench.data.volumes import open_pair

    if spec.workload != "train":
        raise UserError(f"a volume as --data feeds `dlbench run train` only; to predict a volume use "
                        f"`dlbench run volume --input {path_key}`")
    augment_mode(spec, device)
    if shape is None:
        for volume in open_pair(path_key):
            volume.close()
        return
    if len(shape) != 4:
        raise UserError(f"a volume feeds 3D models (input CxZxYxX); this model's input is "
                        f"{'x'.join(map(str, shape))}")
    check_source(path_key, shape[-3:])


def volume_workers(spec, augment: str, world: int = 1) -> int:
    """Workers per process for volume patches. Deforming on the CPU is the slow part of the
    pipeline, so that mode gets every core (shared among the processes on this host); readers
    for GPU augmentation need fewer."""
    if spec.options.get("workers") is not None:
        return workers(spec)
    share = max(1, (os.cpu_count() or 1) // world)
    return share if augment == "cpu" else min(8, share)


def make_loader(spec, device: torch.device, train: bool = True, *, batch: int | None = None,
                shape: tuple[int, ...] | None = None, rank: int = 0, world: int = 1, target: str | None = None):
    """The loader the spec asks for; `batch` overrides spec.batch (smooth reads one image per step).

    `target` is what a volume source makes from its labels (the model's task: affinities or mask)."""
    from dlbench.data import images

    kind, arg = parse_source(spec.options.get("data", OPTIONS["data"]))
    batch = batch or spec.batch
    shape = tuple(shape or spec.input_shape or (3, 224, 224))
    if kind == "synthetic":
        return images.SyntheticImages(batch, shape, device, spec.seed + rank, spec.channels_last)
    if kind == "volume":
        return _volume_loader(spec, device, arg, batch, shape, rank, world, target)
    config = images.ImageConfig(
        size=(shape[-2], shape[-1]), batch=batch, train=train, workers=workers(spec),
        prefetch=spec.options.get("prefetch", OPTIONS["prefetch"]), seed=spec.seed,
        max_corrupt=float(spec.options.get("max_corrupt", OPTIONS["max_corrupt"])), rank=rank, world=world,
        cpu_share=float(spec.options.get("cpu_share", OPTIONS["cpu_share"])),
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


def _volume_loader(spec, device: torch.device, path_key: str, batch: int, shape: tuple[int, ...], rank: int,
                   world: int, target: str | None):
    from dlbench.data.patches import make_volume_loader
    from dlbench.data.targets import TARGETS

    if target not in TARGETS:
        raise UserError(f"a volume dataset trains models with affinity or mask outputs (unet3d, unet3d-aniso); "
                        f"this workload or model has {target!r}")
    augment = augment_mode(spec, device)
    return make_volume_loader(path_key, shape[-3:], batch, target, volume_workers(spec, augment, world), augment,
                              spec.seed + 1000 * rank, device)
