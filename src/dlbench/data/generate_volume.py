"""Write an EM-like volume with labels in the CREMI layout, slab by slab.

Cells are boxes in coordinates bent by a smooth random warp field, so their walls curve;
walls are dark membranes (label 0), cell interiors get their own grey level, a smooth
texture and voxel noise. Everything in a slab derives from the seed and the slab's position,
so the volume never has to be held in memory and the same seed gives the same bytes.

The volume is written under a name of its own (PATH.partial) and renamed to PATH once complete:
a generation that dies leaves no truncated volume at PATH, and one with --overwrite keeps the old
volume until the new one is whole.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from dlbench.data.volumes import LABEL_KEY, RAW_KEY
from dlbench.errors import UserError
from dlbench.measure.memory import available_memory
from dlbench.paths import remove
from dlbench.units import parse_zyx

FORMATS = ("hdf5", "zarr", "n5")
CELL = (10, 48, 48)  # mean cell size in voxels (z, y, x): anisotropic like CREMI
WARP_STEP = (16, 96, 96)  # control-point spacing of the warp and texture fields
WARP_AMPLITUDE = (4.0, 20.0, 20.0)

Progress = Callable[[int, int], None]

# Memory a slab takes while it is computed, per voxel: the interpolated warp (three float32 fields
# and their temporaries), the cell ids, the float noise: the peak tracemalloc sees over one slab.
SLAB_BYTES_PER_VOXEL = 41
DONE_BYTES_PER_VOXEL = 5  # a computed slab waiting to be written: raw uint8 and labels uint32
MEMORY_SHARE = 0.75  # of the memory available, the most the slabs in flight may take


def default_chunks(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(min(s, c) for s, c in zip(shape, (8, 256, 256)))  # type: ignore[return-value]


class _Fields:
    """Low-resolution random fields, interpolated on demand for any slab."""

    def __init__(self, shape: tuple[int, int, int], seed: int) -> None:
        self.shape = shape
        rng = np.random.default_rng(seed)
        grid = tuple(s // step + 2 for s, step in zip(shape, WARP_STEP))
        self.warp = rng.uniform(-1, 1, (3, *grid)).astype(np.float32)
        self.texture = rng.normal(0, 1, grid).astype(np.float32)
        self.offsets = rng.uniform(0, 1, 3).astype(np.float32)

    @staticmethod
    def _axis(start: int, stop: int, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.arange(start, stop, dtype=np.float32) / step
        lo = np.floor(pos).astype(np.intp)
        return lo, lo + 1, (pos - lo).astype(np.float32)

    def sample(self, field: np.ndarray, z0: int, z1: int) -> np.ndarray:
        """Trilinear interpolation of `field` (..., gz, gy, gx) on planes z0:z1 at full resolution."""
        out = field
        for axis, (start, stop, step) in enumerate(((z0, z1, WARP_STEP[0]), (0, self.shape[1], WARP_STEP[1]),
                                                      (0, self.shape[2], WARP_STEP[2]))):
            lo, hi, w = self._axis(start, stop, step)
            ax = out.ndim - 3 + axis
            shape = [1] * out.ndim
            shape[ax] = -1
            w = w.reshape(shape)
            out = np.take(out, lo, axis=ax) * (1 - w) + np.take(out, hi, axis=ax) * w
        return out


def _labels(fields: _Fields, z0: int, z1: int) -> np.ndarray:
    """Cell ids for planes z0:z1 before membranes are drawn."""
    warp = fields.sample(fields.warp, z0, z1)
    _, ny, nx = (s // c + 2 for s, c in zip(fields.shape, CELL))
    index = []
    for axis, (start, stop) in enumerate(((z0, z1), (0, fields.shape[1]), (0, fields.shape[2]))):
        shape = [1, 1, 1]
        shape[axis] = -1
        coord = np.arange(start, stop, dtype=np.float32).reshape(shape) + warp[axis] * WARP_AMPLITUDE[axis]
        index.append(np.floor(coord / CELL[axis] + fields.offsets[axis] + 1).astype(np.uint32))
    return (index[0] * ny + index[1]) * nx + index[2] + 1


def slab(fields: _Fields, z0: int, z1: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw (uint8) and labels (uint32, 0 on membranes) for planes z0:z1."""
    ids = _labels(fields, z0, min(z1 + 1, fields.shape[0]))
    membrane = np.zeros((z1 - z0, *fields.shape[1:]), dtype=bool)
    core = ids[: z1 - z0]
    membrane[:, 1:, :] |= core[:, 1:, :] != core[:, :-1, :]
    membrane[:, :, 1:] |= core[:, :, 1:] != core[:, :, :-1]
    if ids.shape[0] > z1 - z0:
        membrane |= ids[1:] != core
    else:
        membrane[:-1] |= ids[1:] != ids[:-1]
    labels = np.where(membrane, 0, core).astype(np.uint32)
    rng = np.random.default_rng([seed, z0])
    # Cell grey levels from a hash of the id, so a cell keeps its level across slabs.
    level = ((core.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(70)).astype(np.float32) + 140.0
    raw = level + 12.0 * fields.sample(fields.texture, z0, z1)
    raw += rng.normal(0.0, 10.0, raw.shape).astype(np.float32)
    raw[membrane] = 45.0 + rng.normal(0.0, 8.0, int(membrane.sum())).astype(np.float32)
    return np.clip(raw, 0, 255).astype(np.uint8), labels


class _Writer:
    """Creates the two datasets in one format and writes z-slabs into them."""

    def __init__(self, path: Path, fmt: str, shape: tuple[int, int, int], chunks: tuple[int, int, int],
                 labels: bool) -> None:
        self.fmt, self.labels = fmt, labels
        if fmt == "hdf5":
            import h5py

            self.file = h5py.File(path, "w")
            self.raw = self.file.create_dataset(RAW_KEY, shape, dtype="uint8", chunks=chunks)
            self.lab = self.file.create_dataset(LABEL_KEY, shape, dtype="uint32", chunks=chunks) if labels else None
            self.file[RAW_KEY].attrs["resolution"] = [40.0, 4.0, 4.0]
        else:
            self.raw = self._create(path, RAW_KEY, shape, chunks, "uint8")
            self.lab = self._create(path, LABEL_KEY, shape, chunks, "uint32") if labels else None

    def _create(self, path: Path, key: str, shape, chunks, dtype: str):
        import tensorstore as ts

        full = (path / key).resolve()
        if self.fmt == "zarr":
            for parent in [path, *[path / p for p in Path(key).parents if str(p) != "."]]:
                parent.mkdir(parents=True, exist_ok=True)
                (parent / ".zgroup").write_text('{"zarr_format": 2}')
            spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(full)},
                    "metadata": {"shape": list(shape), "chunks": list(chunks), "dtype": np.dtype(dtype).str,
                                 "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}}}
        else:
            path.mkdir(parents=True, exist_ok=True)
            (path / "attributes.json").write_text('{"n5": "2.0.0"}')
            spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(full)},
                    "metadata": {"dimensions": list(shape), "blockSize": list(chunks), "dataType": dtype,
                                 "compression": {"type": "raw"}}}
        return ts.open(spec, create=True, delete_existing=True).result()

    def write(self, z0: int, raw: np.ndarray, labels: np.ndarray) -> None:
        box = slice(z0, z0 + raw.shape[0])
        if self.fmt == "hdf5":
            self.raw[box] = raw
            if self.lab is not None:
                self.lab[box] = labels
            return
        futures = [self.raw[box].write(raw)]
        if self.lab is not None:
            futures.append(self.lab[box].write(labels))
        for future in futures:
            future.result()

    def close(self) -> None:
        if self.fmt == "hdf5":
            self.file.close()


def check(path: Path, shape: tuple[int, ...], fmt: str | None, chunks: tuple[int, ...] | None,
          overwrite: bool) -> tuple[str, tuple[int, int, int]]:
    """The format and chunks to use; a UserError for anything the user got wrong."""
    path = Path(path)
    fmt = fmt or {".h5": "hdf5", ".hdf5": "hdf5", ".zarr": "zarr", ".n5": "n5"}.get(path.suffix.lower(), "")
    if fmt not in FORMATS:
        raise UserError(f"unknown volume format {fmt!r}: choose hdf5, zarr or n5 (or name the file .h5, .zarr, .n5)")
    shape = parse_zyx(shape, "volume shape")
    chunks = parse_zyx(chunks or default_chunks(shape), "chunks")
    if path.exists() and not overwrite:
        raise UserError(f"{path} already exists: pass --overwrite to replace it")
    return fmt, chunks


def slab_workers(shape: tuple[int, ...], chunks: tuple[int, ...], asked: int, available: int | None) -> int:
    """Threads computing slabs: as many as asked, but no more than the memory available holds, each
    slab taking `slab_bytes` (an 8x6144x6144 slab: 14 GB)."""
    asked = max(1, asked)
    if available is None:
        return asked
    return max(1, min(asked, int(available * MEMORY_SHARE) // slab_bytes(shape, chunks)))


def slab_bytes(shape: tuple[int, ...], chunks: tuple[int, ...]) -> int:
    """The memory one slab takes, computed and waiting to be written."""
    voxels = min(chunks[0], shape[0]) * shape[1] * shape[2]
    return voxels * (SLAB_BYTES_PER_VOXEL + DONE_BYTES_PER_VOXEL)


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def generate(path: Path, shape: tuple[int, ...], fmt: str | None = None, *, chunks: tuple[int, ...] | None = None,
             seed: int = 0, labels: bool = True, workers: int = 1, overwrite: bool = False,
             progress: Progress | None = None) -> Path:
    """Write the volume; slabs are one chunk thick, computed by up to `workers` threads (fewer where
    memory is short: `slab_workers`), written in order."""
    path = Path(path)
    fmt, chunks = check(path, shape, fmt, chunks, overwrite)
    workers = slab_workers(shape, chunks, workers, available_memory())
    partial = partial_path(path)
    remove(partial)  # what a generation that died left
    try:
        _write(partial, fmt, shape, chunks, seed, labels, workers, progress)
    except BaseException:
        remove(partial)
        raise
    # The old volume is still there with --overwrite only (`check`): a file is replaced at once,
    # a folder removed first.
    if path.is_dir() or partial.is_dir():
        remove(path)
    os.replace(partial, path)
    return path


def _write(path: Path, fmt: str, shape, chunks, seed: int, labels: bool, workers: int,
           progress: Progress | None) -> None:
    fields = _Fields(shape, seed)
    writer = _Writer(path, fmt, shape, chunks, labels)
    starts = list(range(0, shape[0], chunks[0]))
    try:
        with ThreadPoolExecutor(workers) as pool:
            # At most `workers` slabs in flight, so memory stays bounded by the slab size.
            pending = []
            for i, z0 in enumerate(starts):
                pending.append((z0, pool.submit(slab, fields, z0, min(z0 + chunks[0], shape[0]), seed)))
                if len(pending) >= workers or i == len(starts) - 1:
                    for start, future in pending:
                        raw, lab = future.result()
                        writer.write(start, raw, lab)
                        del raw, lab
                        if progress:
                            progress(min(start + chunks[0], shape[0]), shape[0])
                    pending = []
    finally:
        writer.close()
