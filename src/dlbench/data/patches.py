"""Random training patches from a raw/label volume: sampling, augmentation, targets, batching.

`make_patch_loader` is what a training workload calls for `--data PATH[:KEY] --patch ZxYxX`.
Every worker process opens the volume itself (h5py and tensorstore handles do not cross
processes) and draws from its own random stream, so workers never repeat each other's
patches and a seed gives the same sequence of batches.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dlbench.data import augment as aug
from dlbench.data.prefetch import DevicePrefetch
from dlbench.data.targets import OFFSETS, TARGETS, make_target
from dlbench.data.volumes import LABEL_KEY, Volume, check_fits, open_pair
from dlbench.errors import UserError
from dlbench.units import parse_zyx


def normalize(raw: np.ndarray) -> np.ndarray:
    """uint8/uint16 EM intensities to float32 in [0, 1]; float data is passed through."""
    if np.issubdtype(raw.dtype, np.integer):
        return raw.astype(np.float32) / float(np.iinfo(raw.dtype).max)
    return raw.astype(np.float32, copy=False)


class PatchDataset(IterableDataset):
    """An endless stream of (raw [1,Z,Y,X] float32, target [C,Z,Y,X] float32) patches."""

    def __init__(self, path_key: str, patch: tuple[int, int, int], target: str, augment: bool, seed: int,
                 label_key: str = LABEL_KEY) -> None:
        self.path_key, self.patch, self.target = path_key, tuple(patch), target
        self.augment, self.seed, self.label_key = augment, seed, label_key
        self._volumes: tuple[Volume, Volume] | None = None

    def _open(self) -> tuple[Volume, Volume]:
        if self._volumes is None:
            self._volumes = open_pair(self.path_key, self.label_key)
        return self._volumes

    def sample(self, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        raw_volume, label_volume = self._open()
        start = [int(rng.integers(0, s - p + 1)) for s, p in zip(raw_volume.shape, self.patch)]
        box = tuple(slice(b, b + p) for b, p in zip(start, self.patch))
        raw, labels = normalize(raw_volume.read(box)), label_volume.read(box)
        if self.augment:
            raw, labels = aug.augment(raw, labels, rng)
        return torch.from_numpy(np.ascontiguousarray(raw))[None], torch.from_numpy(make_target(labels, self.target))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        rng = np.random.default_rng([self.seed, worker])
        while True:
            yield self.sample(rng)


def check_source(path_key: str, patch: tuple, label_key: str = LABEL_KEY) -> tuple[int, int, int]:
    """Open raw and labels and check the patch fits: every bad path, key or shape is one UserError."""
    patch = parse_zyx(patch, "patch")
    raw, labels = open_pair(path_key, label_key)
    try:
        check_fits(raw, patch)
    finally:
        raw.close()
        labels.close()
    return patch


def make_patch_loader(path_key: str, patch: tuple, batch: int, target: str, workers: int, augment: bool,
                      seed: int, label_key: str = LABEL_KEY, pin_memory: bool | None = None,
                      dataset_type: type[PatchDataset] = PatchDataset) -> DataLoader:
    """An endless loader of (raw [B,1,Z,Y,X] float32, target [B,C,Z,Y,X] float32) batches.

    Checks the data in this process first, so a bad path, key or patch size is one UserError
    and not a crash inside a worker. `target` is 'affinities' (3 channels) or 'mask' (1).
    """
    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; choose {' or '.join(TARGETS)}")
    patch = check_source(path_key, patch, label_key)
    dataset = dataset_type(path_key, patch, target, augment, seed, label_key)
    pin = torch.cuda.is_available() if pin_memory is None else pin_memory
    # Spawned workers: tensorstore and HDF5 hold threads and handles that must not be forked.
    extra = {"prefetch_factor": 4, "persistent_workers": True, "multiprocessing_context": "spawn"} if workers > 0 else {}
    return DataLoader(dataset, batch_size=batch, num_workers=workers, pin_memory=pin, **extra)


# ---------------------------------------------------------------- augmentation on the device



def _label_tensor(labels: np.ndarray) -> torch.Tensor:
    """Labels as a signed integer tensor of the same width (at least 32 bits). Viewing uint32/uint64
    as signed keeps equality and zero, which is all affinities and masks need."""
    if labels.dtype.itemsize < 4:
        labels = labels.astype(np.int32)
    elif labels.dtype.kind == "u":
        labels = labels.view(np.int32 if labels.dtype.itemsize == 4 else np.int64)
    return torch.from_numpy(np.ascontiguousarray(labels))


class RawLabelDataset(PatchDataset):
    """Un-augmented (raw [1,Z,Y,X], labels [Z,Y,X] int) patches: augmentation and targets happen
    on the device, so the workers only read. uint8 raw stays uint8 (a quarter of the bytes to
    copy) and is normalised on the device."""

    def sample(self, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        raw_volume, label_volume = self._open()
        start = [int(rng.integers(0, s - p + 1)) for s, p in zip(raw_volume.shape, self.patch)]
        box = tuple(slice(b, b + p) for b, p in zip(start, self.patch))
        raw = raw_volume.read(box)
        raw = raw if raw.dtype == np.uint8 else normalize(raw)
        return torch.from_numpy(np.ascontiguousarray(raw))[None], _label_tensor(label_volume.read(box))


def _reflect_nearest(coord: torch.Tensor, size: int) -> torch.Tensor:
    """Nearest voxel index for voxel coordinates, reflected into [0, size-1] like grid_sample's
    reflection padding with align_corners=True."""
    if size == 1:
        return torch.zeros_like(coord, dtype=torch.long)
    period = 2 * (size - 1)
    c = torch.remainder(coord.abs(), period)
    c = torch.where(c > size - 1, period - c, c)
    return c.round().long().clamp_(0, size - 1)


def device_elastic(raw: torch.Tensor, labels: torch.Tensor, generator: torch.Generator,
                   spacing=aug.ELASTIC_SPACING, sigma=aug.ELASTIC_SIGMA) -> tuple[torch.Tensor, torch.Tensor]:
    """aug.elastic on the tensors' device: raw [1,Z,Y,X] trilinear, labels [Z,Y,X] nearest (exact
    for any integer ids, by index gathering), one smooth random field for both."""
    shape = tuple(labels.shape)
    device = raw.device
    coarse = tuple(max(2, -(-s // step) + 1) for s, step in zip(shape, spacing))
    field = torch.randn((1, 3, *coarse), device=device, generator=generator)
    field *= torch.tensor(sigma, dtype=torch.float32, device=device).view(1, 3, 1, 1, 1)
    shift = F.interpolate(field, size=shape, mode="trilinear", align_corners=True)[0]
    axes = [torch.arange(s, dtype=torch.float32, device=device) for s in shape]
    coords = [shift[a] + axes[a].view([-1 if i == a else 1 for i in range(3)]) for a in range(3)]
    grid = torch.stack([coords[a] * (2.0 / max(shape[a] - 1, 1)) - 1.0 for a in (2, 1, 0)], dim=-1)[None]
    out_raw = F.grid_sample(raw[None], grid, mode="bilinear", padding_mode="reflection", align_corners=True)[0]
    index = [_reflect_nearest(coords[a], shape[a]) for a in range(3)]
    flat = (index[0] * shape[1] + index[1]) * shape[2] + index[2]
    out_labels = labels.reshape(-1)[flat.reshape(-1)].view(shape)
    return out_raw, out_labels


def device_flips(raw: torch.Tensor, labels: torch.Tensor, choices: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """aug.flips for raw [1,Z,Y,X] and labels [Z,Y,X]: random flips per axis, random xy transpose.
    `choices` is a CPU generator: drawing on the host never waits for the device."""
    draws = torch.rand(4, generator=choices).tolist()
    axes = [a for a in range(3) if draws[a] < 0.5]
    if axes:
        raw, labels = raw.flip([a + 1 for a in axes]), labels.flip(axes)
    if labels.shape[1] == labels.shape[2] and draws[3] < 0.5:
        raw, labels = raw.transpose(2, 3), labels.transpose(1, 2)
    return raw.contiguous(), labels.contiguous()


def device_affinities(labels: torch.Tensor, offsets=OFFSETS) -> torch.Tensor:
    """targets.affinities for a [Z,Y,X] integer tensor, on its device: float32 [len(offsets),Z,Y,X]."""
    out = torch.zeros((len(offsets), *labels.shape), dtype=torch.float32, device=labels.device)
    for channel, offset in enumerate(offsets):
        here = tuple(slice(max(-o, 0), s - max(o, 0)) for o, s in zip(offset, labels.shape))
        there = tuple(slice(max(o, 0), s - max(-o, 0)) for o, s in zip(offset, labels.shape))
        out[(channel, *here)] = ((labels[here] == labels[there]) & (labels[here] != 0)).float()
    return out


def device_target(labels: torch.Tensor, target: str) -> torch.Tensor:
    if target == "affinities":
        return device_affinities(labels)
    if target == "mask":
        return (labels != 0).float()[None]
    raise ValueError(f"unknown target {target!r}")


def device_augment(raw: torch.Tensor, labels: torch.Tensor, target: str, generator: torch.Generator,
                   choices: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch (raw [B,1,Z,Y,X], labels [B,Z,Y,X]) on the device -> (raw, target [B,C,Z,Y,X]).
    `generator` (on the device) draws the displacement fields, `choices` (CPU) the flips."""
    if raw.dtype == torch.uint8:
        raw = raw.float().div_(255.0)
    raws, targets = [], []
    for r, lab in zip(raw, labels):
        r, lab = device_flips(*device_elastic(r, lab, generator), choices)
        raws.append(r)
        targets.append(device_target(lab, target))
    return torch.stack(raws), torch.stack(targets)


class VolumeLoader:
    """What the workloads iterate: (raw, target) batches of patches, endless.

    `augment` is 'cpu' (elastic + flips + targets in the workers), 'gpu' (workers only read; the
    batch is copied to `device` and deformed there with grid_sample) or 'none' (targets only).
    With 'gpu' a background thread copies and deforms the next batches on a stream of its own
    (`DevicePrefetch`) while the current step computes, so they cost the step almost nothing.
    Like the image loaders it has `images` (0: endless), `corrupt` (None) and `close()`.
    """

    images = 0
    corrupt = None
    PREFETCH = 2  # batches deformed ahead of the step

    def __init__(self, loader: DataLoader, device: torch.device, augment: str, target: str, seed: int) -> None:
        self.loader, self.device, self.augment, self.target = loader, device, augment, target
        self.generator = torch.Generator(device=device).manual_seed(seed) if augment == "gpu" else None
        self.choices = torch.Generator().manual_seed(seed)
        self._prefetch = DevicePrefetch(self._deformed, device, self.PREFETCH, "dlbench-augment")

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self.loader if self.generator is None else self._prefetch)

    def _deformed(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for raw, labels in self.loader:
            raw, labels = raw.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
            yield device_augment(raw, labels, self.target, self.generator, self.choices)

    def close(self) -> None:
        self._prefetch.close()
        iterator = getattr(self.loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()


def make_volume_loader(path_key: str, patch: tuple, batch: int, target: str, workers: int, augment: str,
                       seed: int, device: torch.device, label_key: str = LABEL_KEY) -> VolumeLoader:
    """`make_patch_loader` for a training workload, with augmentation where `augment` says."""
    if augment not in ("cpu", "gpu", "none"):
        raise UserError(f"unknown augment {augment!r}: use cpu, gpu or none")
    dataset_type = RawLabelDataset if augment == "gpu" else PatchDataset
    loader = make_patch_loader(path_key, patch, batch, target, workers, augment == "cpu", seed, label_key,
                               pin_memory=device.type == "cuda", dataset_type=dataset_type)
    return VolumeLoader(loader, device, augment, target, seed)
