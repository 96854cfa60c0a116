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
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dlbench.data import augment as aug
from dlbench.data.targets import TARGETS, make_target
from dlbench.data.volumes import LABEL_KEY, Volume, check_fits, open_pair
from dlbench.errors import UserError


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


def make_patch_loader(path_key: str, patch: tuple, batch: int, target: str, workers: int, augment: bool,
                      seed: int, label_key: str = LABEL_KEY, pin_memory: bool | None = None) -> DataLoader:
    """An endless loader of (raw [B,1,Z,Y,X] float32, target [B,C,Z,Y,X] float32) batches.

    Checks the data in this process first, so a bad path, key or patch size is one UserError
    and not a crash inside a worker. `target` is 'affinities' (3 channels) or 'mask' (1).
    """
    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; choose {' or '.join(TARGETS)}")
    patch = tuple(int(p) for p in patch)
    if len(patch) != 3:
        raise UserError(f"patch must have 3 sizes (ZxYxX), got {'x'.join(map(str, patch))}")
    raw, labels = open_pair(path_key, label_key)
    check_fits(raw, patch)
    raw.close()
    labels.close()
    dataset = PatchDataset(path_key, patch, target, augment, seed, label_key)
    pin = torch.cuda.is_available() if pin_memory is None else pin_memory
    # Spawned workers: tensorstore and HDF5 hold threads and handles that must not be forked.
    extra = {"prefetch_factor": 4, "persistent_workers": True, "multiprocessing_context": "spawn"} if workers > 0 else {}
    return DataLoader(dataset, batch_size=batch, num_workers=workers, pin_memory=pin, **extra)
