"""Image input pipelines. Every loader is an endless iterable of (inputs, targets):

- `SyntheticImages`: one random batch made on the device, handed out again and again.
- `dummy`: random uint8 images made on the CPU, through the real transforms, in DataLoader workers.
- `folder`: an ImageFolder of JPEGs decoded on the CPU in DataLoader workers (pinned memory,
  prefetching), or read as bytes there and decoded on the device (`DeviceDecoder`, nvjpeg on a GPU).

Host pipelines hand over uint8 batches; `to_device` copies them and normalises on the device
(a quarter of the bytes over PCIe). Corrupt files are skipped and counted; too many is an error
that names them.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import (BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler,
                              SequentialSampler, default_collate)

from dlbench import vision  # noqa: F401 - before torchvision: a mismatched pair fails in one line

from dlbench.data.decoders import CUDA, HARDWARE, HardwareDecode
from dlbench.data.jpeg_cpu import EVAL_RESIZE, decode_crop
from dlbench.data.prefetch import DevicePrefetch
from dlbench.errors import UserError

EXTENSIONS = (".jpg", ".jpeg", ".png")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG")


@dataclass
class ImageConfig:
    size: tuple[int, int]  # (height, width) of the crops
    batch: int
    train: bool
    workers: int
    prefetch: int
    seed: int
    max_corrupt: float  # fraction of the files that may be corrupt before the run fails
    cpu_share: float = 0.0  # device decoding: the share of the images the workers decode instead
    rank: int = 0
    world: int = 1


@dataclass
class Corrupt:
    """Files skipped because they could not be decoded."""

    total_files: int
    limit: float
    paths: list[str] = field(default_factory=list)

    def add(self, paths: list[str]) -> None:
        self.paths.extend(p for p in dict.fromkeys(paths) if p not in self.paths)
        allowed = max(0, math.floor(self.limit * self.total_files))
        if len(self.paths) > allowed:
            shown = ", ".join(Path(p).name for p in self.paths[:5])
            more = f" and {len(self.paths) - 5} more" if len(self.paths) > 5 else ""
            raise UserError(f"{len(self.paths)} of {self.total_files} images could not be decoded "
                            f"(more than {self.limit:.0%} allowed): {shown}{more}")


# ---------------------------------------------------------------- synthetic


class SyntheticImages:
    """Random inputs made once on the device: measures the model with no input cost."""

    def __init__(self, batch: int, shape: tuple[int, ...], device: torch.device, seed: int,
                 channels_last: bool = False) -> None:
        generator = torch.Generator(device=device).manual_seed(seed)
        inputs = torch.randn((batch, *shape), device=device, generator=generator)  # never zeros: they run faster
        self.inputs = inputs.contiguous(memory_format=torch.channels_last) if channels_last and inputs.dim() == 4 else inputs
        self.images = 0
        self.corrupt: Corrupt | None = None

    def __iter__(self) -> Iterator[tuple[torch.Tensor, None]]:
        while True:
            yield self.inputs, None  # targets come from the workload, shaped like the model's output

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- host pipelines


def transforms(config: ImageConfig) -> v2.Transform:
    """Standard ImageNet transforms on uint8 tensors (normalisation happens on the device)."""
    # imported here: transforms.v2 imports all of torch._dynamo (seconds), which a run on synthetic data never needs
    from torchvision.transforms import v2

    if config.train:
        return v2.Compose([v2.RandomResizedCrop(config.size, antialias=True), v2.RandomHorizontalFlip()])
    return v2.Compose([v2.Resize(int(min(config.size) / EVAL_RESIZE), antialias=True), v2.CenterCrop(config.size)])


def scan_folder(root: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(path, class index) for every image in root/<class>/, and the class names."""
    if not root.exists():
        raise UserError(f"dataset folder {root} does not exist")
    if not root.is_dir():
        raise UserError(f"dataset {root} is not a folder (expected class folders of JPEG files)")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    items = []
    for index, name in enumerate(classes):
        for dirpath, _, files in os.walk(root / name):
            items += [(os.path.join(dirpath, f), index) for f in sorted(files) if f.lower().endswith(EXTENSIONS)]
    if not items:
        what = "is empty" if not any(root.iterdir()) else "holds no .jpg/.jpeg/.png files in class folders"
        raise UserError(f"dataset folder {root} {what} (expected {root}/<class>/<image>.jpg; "
                        f"`dlbench data images {root} --n 1000` writes such a dataset)")
    _check_some_are_images(root, [p for p, _ in items[:: max(1, len(items) // 32)]])
    return items, classes


def _check_some_are_images(root: Path, sample: list[str]) -> None:
    for path in sample:
        with open(path, "rb") as f:
            if f.read(4).startswith(_MAGIC):
                return
    raise UserError(f"dataset folder {root}: none of {len(sample)} files checked is a JPEG or PNG image")


class FolderImages(Dataset):
    """Decoded, transformed uint8 images; a file that fails to decode is replaced by the next one.

    With `decode=False` the files come as bytes for the device to decode, except a `cpu_share`
    of them (chosen by index, the same in every epoch), which are decoded here as usual."""

    def __init__(self, items: list[tuple[str, int]], config: ImageConfig, decode: bool = True) -> None:
        self.items, self.decode, self.cpu_share = items, decode, config.cpu_share
        self.size, self.train = config.size, config.train

    def _on_cpu(self, index: int) -> bool:
        # Knuth's multiplicative hash spreads the chosen indices evenly over the dataset.
        return self.decode or (index * 2654435761) % 2**32 < self.cpu_share * 2**32

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Any, int, list[str]]:
        # Never raises: a worker's exception would reach the user as a traceback. Bad files are
        # reported with the batch, and the main process decides whether there are too many.
        bad: list[str] = []
        for attempt in range(min(len(self.items), 16)):
            path, label = self.items[(index + attempt) % len(self.items)]
            try:
                data = _read_bytes(path)
                if self._on_cpu(index):
                    sample = decode_crop(data, self.size, self.train)  # at reduced size where the crop allows
                else:
                    sample = (torch.frombuffer(bytearray(data), dtype=torch.uint8), path)
                return sample, label, bad
            except Exception:  # noqa: BLE001 - any undecodable file is skipped and counted
                bad.append(path)
        return None, -1, bad


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(_MAGIC):
        raise ValueError(f"{path} is not a JPEG or PNG file")
    return data


def _read(path: str) -> torch.Tensor:
    """The file as a uint8 tensor, as the device's decoder takes it."""
    return torch.frombuffer(bytearray(_read_bytes(path)), dtype=torch.uint8)


class DummyImages(Dataset):
    """Random photo-sized uint8 images made on the CPU: the pipeline's cost without decoding."""

    def __init__(self, length: int, config: ImageConfig) -> None:
        self.length, self.seed = length, config.seed
        self.transform = transforms(config)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, list[str]]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = torch.randint(0, 256, (3, 375, 500), dtype=torch.uint8, generator=generator)
        return self.transform(image), index % 1000, []


def _good(batch: list) -> tuple[tuple, tuple, list[str]]:
    bad = [p for _, _, paths in batch for p in paths]
    kept = [(sample, label) for sample, label, _ in batch if sample is not None] or [(None, -1)]
    samples, labels = zip(*kept)
    return samples, labels, bad


def _collate(batch: list) -> tuple[Any, torch.Tensor, list[str]]:
    samples, labels, bad = _good(batch)
    if samples[0] is None:
        return None, torch.tensor(labels), bad
    return default_collate(samples), torch.tensor(labels), bad


@dataclass
class Encoded:
    """A batch of encoded files in one buffer: one tensor crosses from a worker to the main
    process instead of one per file (each costs a shared-memory handle). Images the worker
    decoded itself come along as one uint8 batch; labels list the encoded files first."""

    data: torch.Tensor
    sizes: list[int]
    decoded: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.sizes) + (len(self.decoded) if self.decoded is not None else 0)

    def files(self) -> list[torch.Tensor]:
        return list(torch.split(self.data, self.sizes)) if self.sizes else []

    def pin_memory(self) -> "Encoded":  # called by the DataLoader's pinning thread
        decoded = self.decoded.pin_memory() if self.decoded is not None else None
        return Encoded(self.data.pin_memory(), self.sizes, decoded)


def collate_bytes(batch: list) -> tuple[Encoded | None, torch.Tensor, list[str], list[str]]:
    """Encoded files packed into one buffer, then the images decoded in the worker; the files'
    paths come along to name corrupt ones."""
    samples, labels, bad = _good(batch)
    if samples[0] is None:
        return None, torch.tensor(labels), bad, []
    encoded = [(s, label) for s, label in zip(samples, labels) if isinstance(s, tuple)]
    decoded = [(s, label) for s, label in zip(samples, labels) if not isinstance(s, tuple)]
    files = [data for (data, _), _ in encoded]
    packed = Encoded(torch.cat(files) if files else torch.empty(0, dtype=torch.uint8), [len(f) for f in files],
                     default_collate([s for s, _ in decoded]) if decoded else None)
    return packed, torch.tensor([label for _, label in encoded + decoded]), bad, [path for (_, path), _ in encoded]


class EpochBatches(Sampler):
    """The sampler's batches (last partial one dropped), epoch after epoch without end: one
    DataLoader iterator serves every epoch, so the workers start on the next epoch's batches
    while this one's last are consumed. A DataLoader iterator ends with its epoch, and the next
    dispatches nothing until then: the step waits a whole batch's decoding (256 images in one
    worker) at every boundary, every epoch when there are more workers than batches."""

    def __init__(self, sampler: Sampler, batch: int) -> None:
        self.sampler, self.batch, self.epoch = sampler, batch, 0

    def __len__(self) -> int:  # one epoch's batches
        return len(self.sampler) // self.batch

    def __iter__(self) -> Iterator[list[int]]:
        while len(self):  # no whole batch: nothing, rather than an endless loop of empty epochs
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.epoch)
            yield from BatchSampler(self.sampler, self.batch, drop_last=True)
            self.epoch += 1


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)  # N workers x all cores each would oversubscribe the CPU


def data_loader(dataset: Dataset, config: ImageConfig, device: torch.device, collate=_collate) -> DataLoader:
    if config.world > 1:
        sampler = DistributedSampler(dataset, config.world, config.rank, shuffle=config.train, seed=config.seed)
    else:
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(config.seed)) if config.train \
            else SequentialSampler(dataset)
    workers = config.workers
    return DataLoader(dataset, batch_sampler=EpochBatches(sampler, config.batch), num_workers=workers,
                      collate_fn=collate, pin_memory=device.type == "cuda",
                      prefetch_factor=config.prefetch if workers else None,
                      persistent_workers=workers > 0, worker_init_fn=_worker_init if workers else None)


class HostLoader:
    """Cycles a DataLoader for as many steps as asked; counts skipped files."""

    def __init__(self, loader: DataLoader, corrupt: Corrupt | None) -> None:
        self.loader, self.corrupt = loader, corrupt
        self.images = len(loader.dataset)

    def __len__(self) -> int:
        return len(self.loader)

    def batches(self) -> Iterator[tuple]:
        """The DataLoader's batches, without end (`EpochBatches` runs the epochs)."""
        for batch in self.loader:
            if batch[2] and self.corrupt is not None:
                self.corrupt.add(batch[2])
            if batch[0] is None or len(batch[0]) == 0:
                raise UserError(f"no file of a whole batch could be decoded, e.g. {batch[2][0]}")
            yield batch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for inputs, targets, *_ in self.batches():
            yield inputs, targets

    def close(self) -> None:
        iterator = getattr(self.loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()


# ---------------------------------------------------------------- device decoding


class DeviceDecoder:
    """JPEG bytes from DataLoader workers, decoded and cropped on the device ahead of the step
    by a background thread on its own CUDA stream (`DevicePrefetch`). The images the workers
    decoded themselves (`cpu_share`) are copied in and joined to the batch.

    Why share: nvjpeg runs in this one thread, one batch at a time (torchvision's decoder is
    one per process, behind a lock), which bounds the rate it decodes at. A model that trains
    faster than that can hand the overflow to the CPU workers."""

    def __init__(self, host: HostLoader, config: ImageConfig, device: torch.device, decoder: str = CUDA) -> None:
        self.host, self.config, self.device, self.decoder = host, config, device, decoder
        self._decode_files = HardwareDecode(device) if decoder == HARDWARE else functools.partial(cuda_decode, device=device)
        self.corrupt = host.corrupt
        self.images = host.images
        self._rng = np.random.default_rng(config.seed)
        self._prefetch = DevicePrefetch(self._batches, device, config.prefetch, "dlbench-decode")

    def __len__(self) -> int:
        return len(self.host)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self._prefetch)

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for encoded, targets, _, paths in self.host.batches():
            parts = [self.decode_batch(encoded.files(), paths)] if encoded.sizes else []
            if encoded.decoded is not None:
                parts.append(encoded.decoded.to(self.device, non_blocking=True))
            yield torch.cat(parts) if len(parts) > 1 else parts[0], targets.to(self.device, non_blocking=True)

    def decode_batch(self, encoded: list[torch.Tensor], paths: list[str]) -> torch.Tensor:
        """Decode a batch on the device (skipping corrupt files), then crop, resize and flip it
        in a few batched kernels. The random boxes are drawn for the whole batch at once in
        numpy: drawn per image with torch they cost ~1,500 tiny operations a batch, run by this
        thread while it competes with the training loop for the interpreter."""
        images = self._decode(encoded, paths)
        sizes = np.array([image.shape[-2:] for image in images], dtype=np.int64)
        if self.config.train:
            boxes, flips = random_crop_boxes(sizes, self._rng), self._rng.random(len(images)) < 0.5
        else:
            boxes, flips = center_boxes(sizes, self.config.size), np.zeros(len(images), dtype=bool)
        return resized_crops(images, boxes, self.config.size, flips)

    def _decode(self, encoded: list[torch.Tensor], paths: list[str]) -> list[torch.Tensor]:
        try:
            return list(self._decode_files(encoded))
        except RuntimeError:
            pass
        images, bad = [], []  # a file spoilt the batch: find it and stand a good image in for it
        for data, path in zip(encoded, paths):
            try:
                images.append(self._decode_files([data])[0])
            except RuntimeError:
                bad.append(path)
        if self.corrupt is not None:
            self.corrupt.add(bad)
        if not images:
            raise UserError(f"no file of a whole batch could be decoded, e.g. {paths[0]}")
        return images + [images[i % len(images)] for i in range(len(bad))]

    def close(self) -> None:
        self._prefetch.close()
        self.host.close()


TORCHVISION_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def cuda_decode(data: torch.Tensor | list[torch.Tensor], device: torch.device) -> Any:
    """torchvision's nvjpeg decode, its deprecation warning silenced: torchvision deprecated its
    decoders in 0.29, and this is the one call that still runs one (`--decode gpu`): on an H200 it
    kept training faster than the hardware decoders' path (data/decoders.py says by how much), and
    the default, `--decode cpu`, does not use it. The filter is added before each call rather than
    around it: the call runs in the decoding thread, and `warnings.catch_warnings` swaps the filters
    of every thread."""
    from torchvision.io import ImageReadMode, decode_jpeg

    _silence_torchvision_decoding()
    return decode_jpeg(data, device=device, mode=ImageReadMode.RGB)


def _silence_torchvision_decoding() -> None:
    # at each batch, not once: filters reset since (as pytest does for each test) would let it through;
    # adding a filter that is there already moves it to the front, and the list does not grow
    warnings.filterwarnings("ignore", TORCHVISION_DEPRECATION, DeprecationWarning, r"torchvision\.io")


SCALE = (0.08, 1.0)  # RandomResizedCrop's defaults: share of the area, and aspect ratio
RATIO = (3 / 4, 4 / 3)


def random_crop_boxes(sizes: np.ndarray, rng: np.random.Generator, attempts: int = 10) -> np.ndarray:
    """RandomResizedCrop's boxes for images of `sizes` (N x (height, width)), as N x (x1, y1,
    x2, y2) pixel edges: up to `attempts` random boxes each, the first that fits is kept, else
    the largest centred box within the ratio limits (torchvision's rule)."""
    n = len(sizes)
    height, width = sizes[:, :1].astype(np.float64), sizes[:, 1:].astype(np.float64)
    target = height * width * rng.uniform(*SCALE, (n, attempts))
    ratio = np.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1]), (n, attempts)))
    w, h = np.rint(np.sqrt(target * ratio)), np.rint(np.sqrt(target / ratio))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.argmax(axis=1)
    w, h = w[np.arange(n), first], h[np.arange(n), first]
    height, width = height[:, 0], width[:, 0]
    top = np.floor(rng.random(n) * (height - h + 1))
    left = np.floor(rng.random(n) * (width - w + 1))
    missed = ~fits.any(axis=1)
    if missed.any():
        aspect = width / height
        fw = np.where(aspect > RATIO[1], np.rint(height * RATIO[1]), width)
        fh = np.where(aspect < RATIO[0], np.rint(width / RATIO[0]), height)
        w, h = np.where(missed, fw, w), np.where(missed, fh, h)
        top = np.where(missed, (height - h) // 2, top)
        left = np.where(missed, (width - w) // 2, left)
    return np.stack([left, top, left + w, top + h], axis=1)


def center_boxes(sizes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The eval transform's boxes: resize the short side to size / 0.875, centre-crop `size`."""
    height, width = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    scale = int(min(size) / EVAL_RESIZE) / np.minimum(height, width)
    h, w = size[0] / scale, size[1] / scale
    top, left = (height - h) / 2, (width - w) / 2
    return np.stack([left, top, left + w, top + h], axis=1)


PADDED_ELEMENTS = 2**28  # a padded chunk's size: roi_align indexes in 32 bits, and 1 GiB of floats is plenty


def resized_crops(images: list[torch.Tensor], boxes: np.ndarray, size: tuple[int, int], flips: np.ndarray) -> torch.Tensor:
    """Crop each uint8 CHW image to its box, resize to `size` and flip where asked: one batch.

    The images are padded into one tensor and cut out with roi_align, whose adaptive sampling
    (ceil(box / output) points a pixel) averages like an antialiased resize when shrinking. Large
    photos go in chunks: 256 of 2048x1536 padded as floats are 2.4 billion elements, past what
    roi_align can index (an illegal memory access), and 9.7 GB.
    """
    padded = images[0].shape[0] * max(i.shape[-2] for i in images) * max(i.shape[-1] for i in images)
    step = max(1, PADDED_ELEMENTS // padded)
    if step >= len(images):
        return _resized_crops(images, boxes, size, flips)
    return torch.cat([_resized_crops(images[i:i + step], boxes[i:i + step], size, flips[i:i + step])
                      for i in range(0, len(images), step)])


def _resized_crops(images: list[torch.Tensor], boxes: np.ndarray, size: tuple[int, int], flips: np.ndarray) -> torch.Tensor:
    from torchvision.ops import roi_align

    device = images[0].device
    height, width = max(i.shape[-2] for i in images), max(i.shape[-1] for i in images)
    # One kernel pads the whole batch with zeros; boxes stop half a pixel short of each image's
    # far edges, so no bilinear sample reaches into the padding.
    with warnings.catch_warnings():  # nested tensors are a prototype; this use is their stable core
        warnings.simplefilter("ignore", UserWarning)
        nested = torch.nested.nested_tensor(images)
    # Converted before padding: padding a nested tensor of uint8 is several times slower than of float.
    batch = nested.float().to_padded_tensor(0.0, (len(images), images[0].shape[0], height, width))
    sizes = np.array([image.shape[-2:] for image in images], dtype=np.float64)
    boxes = np.array(boxes, dtype=np.float64)
    rois = np.column_stack([np.arange(len(images)), boxes[:, :2], np.minimum(boxes[:, 2:], sizes[:, ::-1] - 0.5)])
    rois = torch.from_numpy(rois.astype(np.float32)).to(device, non_blocking=True)
    out = roi_align(batch, rois, output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    flips = torch.from_numpy(np.asarray(flips, dtype=bool)).to(device, non_blocking=True)
    out = torch.where(flips[:, None, None, None], out.flip(-1), out)
    return out.round_().clamp_(0, 255).to(torch.uint8)


# ---------------------------------------------------------------- the device side


@functools.lru_cache(maxsize=None)
def _normalisation(device: torch.device, inference: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / 255 - mean) / std as x * scale - shift; made once per device, not copied every step."""
    scale = torch.tensor([1 / (255 * s) for s in STD], device=device).view(1, 3, 1, 1)
    shift = torch.tensor([m / s for m, s in zip(MEAN, STD)], device=device).view(1, 3, 1, 1)
    return scale, shift


def to_device(inputs: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a uint8 batch to the device (non-blocking from pinned memory) and normalise it there."""
    # a batch already there is used as it is (what .to would return): under the FLOP counter .to goes
    # through a path whose first call imports all of torch._dynamo (seconds), even for no copy
    x = inputs if inputs.device == device else inputs.to(device, non_blocking=True)
    if x.dtype == torch.uint8:
        scale, shift = _normalisation(device, torch.is_inference_mode_enabled())  # inference tensors stay there
        x = x.float().mul_(scale).sub_(shift)
    return x
