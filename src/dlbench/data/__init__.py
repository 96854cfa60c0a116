"""Data for the workloads: image sources here; volumes (HDF5, zarr, N5), their generator,
augmentation, targets, patches and blocking, and 2D segmentation sets in their own modules.

Data sources for the workloads. `make_loader` is the one entry point: it reads the spec's
`data` option and returns an endless iterable of (inputs, targets) batches.

Sources (`--data`):
  synthetic     random tensors made once on the device (no input cost); targets None, so the
                workload makes targets shaped like the model's output
  dummy         random images made on the CPU, through the real transforms (seed 002's "Dummy")
  folder:PATH   an ImageFolder of JPEG/PNG files (class folders; the folder's PATH alone does too);
                `--decode gpu` decodes on the GPU

  PATH[:KEY]    a 3D volume (.h5/.hdf5, .zarr, .n5) with labels in the CREMI layout: random
                training patches of the model's input shape (`data/patches.py`), elastically
                deformed and flipped in the workers (`augment` cpu) or on the GPU (gpu; the
                default on a GPU), with affinity or foreground targets for the model's task

A new source is one more branch in `make_loader`. Every loader has `images` (samples per epoch, 0 when endless), `corrupt` (skipped files or
None), `__len__` where an epoch has a length, and `close()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING


from dlbench.cores import decoding_workers, per_process
from dlbench.errors import UserError
from dlbench.options import Options, option

if TYPE_CHECKING:  # the options and checks here load no torch: the command line reads them
    import torch

DECODERS = ("cpu", "gpu", "hardware")  # data/decoders.py chooses among them
AUGMENT_MODES = ("auto", "cpu", "gpu", "none")  # volume patches: where elastic deformation and flips run


@dataclass(frozen=True)
class DataOptions(Options):
    """Where the images of train, infer and smooth come from and how they are prepared."""
    data: str = option("synthetic", "synthetic (random tensors on the device), dummy (random images through the "
                                    "real CPU transforms), folder:PATH or the folder's PATH alone (class folders of "
                                    "JPEGs) or, for train with 3D models, a volume PATH[:KEY] (.h5/.hdf5, .zarr, .n5 "
                                    "with labels; `dlbench data volume`).")
    workers: int | None = option(None, "DataLoader worker processes per GPU (default: where they decode JPEGs, "
                                       "the GPU's share of the CPU cores less one; else min(8, that share)).", low=0,
                                 high=1024)
    decode: str = option("cpu", "Where JPEGs are decoded: cpu (in the workers, at reduced size where the crop "
                                "allows), gpu (nvjpeg on the GPU's SMs; crop and resize on the GPU) or hardware (the "
                                "GPU's hardware JPEG decoders, where it has them: `pip install 'dlbench[jpeg-gpu]'`)."
                                , choices=DECODERS)
    cpu_share: float = option(0.0, "With --decode gpu: the share of each batch the workers decode on the CPU "
                                   "beside the GPU (0: all on the GPU). Raise it when nvjpeg cannot keep up (data "
                                   "wait while the workers idle), e.g. 0.2 for small, fast models.", low=0, high=1)
    prefetch: int = option(2, "Batches each worker prepares ahead.", low=1, high=1024)
    max_corrupt: float = option(0.05, "Fraction of undecodable files skipped before the run fails.", low=0, high=1)
    dummy_images: int = option(10_000, "Images per epoch of the dummy source.", low=1, high=10**9)
    epochs: int = option(0, "Measure this many whole epochs of the dataset instead of --steps.", low=0, high=10**6)


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
    path = os.path.expandvars(os.path.expanduser(str(text)))  # expanded as a volume's path is
    if os.path.isdir(path):  # a folder's path alone: its class folders of images
        return "folder", path
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
    mode = spec.opts.augment
    if mode == "gpu" and device.type != "cuda":
        raise UserError("--augment gpu needs a CUDA GPU (this run is on the CPU): use --augment cpu")
    if mode == "auto":
        return "gpu" if device.type == "cuda" else "cpu"
    return mode


def workers(spec, world: int = 1) -> int:
    """Workers per process for images. Where they decode the JPEGs (the CPU path, or a share of
    each batch beside the GPU) decoding is the slow part, so they get every core of this process's
    share but one, which the training loop needs to launch its kernels (docs/performance.md, "the
    CPU path on every core"). Workers that only read files for the GPU to decode need fewer."""
    if spec.opts.workers is not None:
        return spec.opts.workers
    cores = os.cpu_count() or 1
    if spec.opts.decode == "cpu" or spec.opts.cpu_share > 0:
        return decoding_workers(cores, world)
    return min(8, per_process(cores, world))


def check(spec, device: torch.device, shape: tuple[int, ...] | None = None) -> list[str]:
    """Validate the data options before anything runs; returns warnings for the user.

    For a volume, `shape` (the model's input, channels first) is the training patch: the volume
    is opened and must hold it."""
    kind, arg = parse_source(spec.opts.data)
    decode = spec.opts.decode
    if kind == "volume":
        _check_volume(spec, device, arg, shape)
    if decode != "cpu" and kind != "folder":
        raise UserError(f"--decode {decode} needs a JPEG folder (--data folder:PATH)")
    if decode != "cpu":
        from dlbench.data import decoders

        decoders.choose(decode, decoders.facts_for(device, decode))
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
    if spec.opts.workers is not None:
        return spec.opts.workers
    share = per_process(os.cpu_count() or 1, world)
    return share if augment == "cpu" else min(8, share)


def make_loader(spec, device: torch.device, train: bool = True, *, batch: int | None = None,
                shape: tuple[int, ...] | None = None, rank: int = 0, world: int = 1, target: str | None = None):
    """The loader the spec asks for; `batch` overrides spec.batch (smooth reads one image per step).

    `target` is what a volume source makes from its labels (the model's task: affinities or mask)."""
    from dlbench.data import images

    kind, arg = parse_source(spec.opts.data)
    batch = batch or spec.batch
    shape = tuple(shape or spec.input_shape or (3, 224, 224))
    if kind == "synthetic":
        return images.SyntheticImages(batch, shape, device, spec.seed + rank, spec.channels_last)
    if kind == "volume":
        return _volume_loader(spec, device, arg, batch, shape, rank, world, target)
    config = images.ImageConfig(
        size=(shape[-2], shape[-1]), batch=batch, train=train, workers=workers(spec, world),
        prefetch=spec.opts.prefetch, seed=spec.seed, max_corrupt=spec.opts.max_corrupt, rank=rank, world=world,
        cpu_share=spec.opts.cpu_share,
    )
    if kind == "dummy":
        dataset = images.DummyImages(spec.opts.dummy_images, config)
        _check_enough(len(dataset), config, "dummy_images")
        return images.HostLoader(images.data_loader(dataset, config, device), None)
    items, _ = images.scan_folder(Path(arg))
    _check_enough(len(items), config, arg)
    corrupt = images.Corrupt(len(items), config.max_corrupt)
    if spec.opts.decode != "cpu":
        from dlbench.data import decoders

        decoder = decoders.choose(spec.opts.decode, decoders.facts_for(device, spec.opts.decode))
        dataset = images.FolderImages(items, config, decode=False)
        host = images.HostLoader(images.data_loader(dataset, config, device, images.collate_bytes), corrupt)
        return images.DeviceDecoder(host, config, device, decoder)
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
