"""Read 3D volumes from HDF5 (h5py), zarr and N5 (tensorstore); the format comes from the path.

A volume is named `PATH[:KEY]`; the key is the dataset inside the container and defaults to
the CREMI layout's raw data (`volumes/raw`). Every way a user can get this wrong ends in one
UserError line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.errors import BenchmarkFailed, UserError

RAW_KEY = "volumes/raw"
LABEL_KEY = "volumes/labels/neuron_ids"
_SUFFIX = {".h5": "hdf5", ".hdf5": "hdf5", ".hdf": "hdf5", ".zarr": "zarr", ".n5": "n5"}
_SPLIT = re.compile(r"^(.*?\.(?:h5|hdf5|hdf|zarr|n5)):(.+)$", re.IGNORECASE)


def split_path_key(path_key: str, default_key: str = RAW_KEY) -> tuple[Path, str]:
    """'data.h5:volumes/raw' -> (Path('data.h5'), 'volumes/raw'); no key -> the default."""
    text = str(path_key)
    match = _SPLIT.match(text)
    if match:
        return Path(match.group(1)), match.group(2).strip("/")
    if ":" in text and not Path(text).exists() and len(text.split(":", 1)[0]) > 1:
        path, key = text.rsplit(":", 1)
        return Path(path), key.strip("/")
    return Path(text), default_key


def detect_format(path: Path) -> str:
    """hdf5, zarr or n5 from the suffix, else from what the directory holds."""
    suffix = path.suffix.lower()
    if suffix in _SUFFIX:
        return _SUFFIX[suffix]
    if path.is_dir():
        if (path / "attributes.json").exists():
            return "n5"
        if any((path / name).exists() for name in (".zgroup", ".zarray", "zarr.json")):
            return "zarr"
    if path.is_file():
        with open(path, "rb") as f:
            if f.read(8) == b"\x89HDF\r\n\x1a\n":
                return "hdf5"
    raise UserError(f"cannot tell the format of {path}: name it .h5/.hdf5, .zarr or .n5")


class DamagedVolume(BenchmarkFailed):
    """A part of the input cannot be read: a chunk that does not decode, a file it lives in gone."""


@dataclass
class Volume:
    """One 3D dataset; `read` returns a numpy array for a box of slices. A part that cannot be read
    raises DamagedVolume naming the file and the chunk: the readers' own errors name neither."""

    path: Path
    key: str
    format: str
    shape: tuple[int, ...]
    dtype: np.dtype
    handle: Any

    def read(self, box: tuple[slice, ...]) -> np.ndarray:
        try:
            if self.format == "hdf5":
                return np.asarray(self.handle[box])
            return self.handle[box].read().result()
        except (OSError, ValueError, RuntimeError) as error:
            raise self.damaged(box, error) from None

    def read_into(self, box: tuple[slice, ...], out: np.ndarray, where: tuple[slice, ...]) -> None:
        """`box` read into `out[where]` (`out` a pinned tile buffer, say), decoded straight into it
        where the types match: by h5py's read_direct, or tensorstore's threads for zarr and N5."""
        if out.dtype != self.dtype or (self.format == "hdf5" and not out.flags.c_contiguous):
            out[where] = self.read(box)
            return
        try:
            if self.format == "hdf5":
                self.handle.read_direct(out, box, where)
            else:
                import tensorstore as ts

                ts.array(out[where], copy=False, write=True).write(self.handle[box]).result()
        except (OSError, ValueError, RuntimeError) as error:
            raise self.damaged(box, error) from None

    def damaged(self, box: tuple[slice, ...], error: Exception) -> DamagedVolume:
        """The error for a box that could not be read, naming the file and the chunk that failed."""
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        named = re.search(r'local file "([^"]+)"', text)  # tensorstore names the chunk's file
        if named:
            where = f"chunk file {named.group(1)}"
            text = text[named.end():].strip('": ') or text
        else:
            where = f"{self.path}, {self._bad_chunk(box)}"
        return DamagedVolume(f"input {self.name} cannot be read at {_span(box)}: {where} is damaged or missing "
                             f"({text}); repair or regenerate the input")

    def _bad_chunk(self, box: tuple[slice, ...]) -> str:
        """The first HDF5 chunk of `box` that fails to read, looked for once a read has failed
        (h5py's error names no chunk); else what the dataset's data lives in."""
        external = [name for name, _, _ in self.handle.external or []]
        if external:
            return f"its external file{'s' if len(external) > 1 else ''} {', '.join(external)}"
        chunks = self.handle.chunks
        if chunks is None:
            return "its contiguous data"
        ranges = [range(b.start // c * c, b.stop, c) for b, c in zip(box, chunks)]
        for corner in np.ndindex(*map(len, ranges)):
            start = [r[i] for r, i in zip(ranges, corner)]
            chunk = tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, chunks, self.shape))
            try:
                self.handle[chunk]
            except (OSError, ValueError, RuntimeError):
                index = ",".join(str(s // c) for s, c in zip(start, chunks))
                return f"chunk {index} ({_span(chunk)})"
        return "a chunk"

    @property
    def name(self) -> str:
        return f"{self.path}:{self.key}"

    @property
    def location(self) -> Path:
        """Where its data lies on disk: an HDF5 file, or the dataset's folder in a zarr/N5 tree."""
        return self.path if self.format == "hdf5" else self.path / self.key

    def close(self) -> None:
        if self.format == "hdf5":
            self.handle.file.close()


def _span(box: tuple[slice, ...]) -> str:
    return ", ".join(f"{axis} {b.start}-{b.stop}" for axis, b in zip("zyx", box))


SAMPLES = 7  # boxes read along each of two diagonals for the fingerprint
SAMPLE_BOX = (4, 64, 64)


def fingerprint(volume: Volume) -> dict:
    """A cheap identity of the input's contents, kept with an output so that --resume never completes
    it from other data: where it is, its shape and type, its file's (or dataset folder's) size and
    modification time, and a hash of a few boxes spread over the volume (a volume regenerated in
    place changes them all)."""
    stat = os.stat(volume.location)
    digest = hashlib.sha256()
    box = tuple(min(b, s) for b, s in zip(SAMPLE_BOX, volume.shape))
    for i in range(SAMPLES):
        for flip in (False, True):  # the main diagonal and one across it
            start = [(s - b) * i // (SAMPLES - 1) for s, b in zip(volume.shape, box)]
            if flip:
                start[1] = volume.shape[1] - box[1] - start[1]
            digest.update(np.ascontiguousarray(volume.read(tuple(slice(a, a + b) for a, b in zip(start, box)))))
    return {"path": os.path.realpath(volume.location), "shape": list(volume.shape), "dtype": str(volume.dtype),
            "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sample_sha256": digest.hexdigest()[:32]}


def _hdf5_keys(path: Path) -> list[str]:
    import h5py

    keys: list[str] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: keys.append(name) if isinstance(obj, h5py.Dataset) else None)
    return keys


def _store_keys(path: Path) -> list[str]:
    """Datasets in a zarr (v2 or v3) or N5 directory tree."""
    keys = []
    for root, _, files in os.walk(path):
        rel = Path(root).relative_to(path).as_posix()
        if ".zarray" in files or _is_array_json(Path(root), files):
            keys.append("" if rel == "." else rel)
    return sorted(keys)


def _is_array_json(root: Path, files: list[str]) -> bool:
    for name in ("zarr.json", "attributes.json"):
        if name in files:
            try:
                meta = json.loads((root / name).read_text())
            except (OSError, ValueError):
                return False
            return meta.get("node_type") == "array" or "dimensions" in meta
    return False


def list_keys(path: Path, fmt: str | None = None) -> list[str]:
    fmt = fmt or detect_format(path)
    return _hdf5_keys(path) if fmt == "hdf5" else _store_keys(path)


def _missing_key(path: Path, key: str, fmt: str) -> UserError:
    try:
        keys = list_keys(path, fmt)
    except Exception:  # noqa: BLE001 - only for the message
        keys = []
    present = ", ".join(keys) if keys else "none"
    return UserError(f"{path} has no dataset {key!r}; datasets present: {present}")


def _open_hdf5(path: Path, key: str) -> Volume:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as error:
        raise UserError(f"cannot read {path} as HDF5: {str(error).splitlines()[0]}") from None
    if key not in f or not isinstance(f[key], h5py.Dataset):
        f.close()
        raise _missing_key(path, key, "hdf5")
    data = f[key]
    missing = _missing_sources(path, data)
    if missing:
        f.close()
        raise UserError(f"{path}:{key} keeps its data in {missing}, which does not exist: put it back, or give "
                        f"the volume with its data inside the file")
    return Volume(path, key, "hdf5", tuple(data.shape), data.dtype, data)


def _missing_sources(path: Path, data) -> str | None:
    """The first file outside `path` that holds part of the dataset and is missing: an external
    raw file (its read fails partway through the run) or a virtual dataset's source (read as
    the fill value, without a word, where it is missing)."""
    prefix = os.environ.get("HDF5_EXTFILE_PREFIX") or data.id.get_access_plist().get_efile_prefix().decode()
    base = Path(prefix.replace("${ORIGIN}", str(path.parent.resolve()))) if prefix else Path.cwd()
    for name, _, _ in data.external or []:
        found = base / os.fsdecode(name)
        if not found.exists():
            return f"external file {found}"
    for source in data.virtual_sources() if data.is_virtual else []:
        name = source.file_name
        if name != "." and not any((where / name).exists() for where in (path.parent, Path.cwd())):
            return f"virtual source file {name}"
    return None


def _zarr_driver(path: Path) -> str:
    return "zarr3" if (path / "zarr.json").exists() and not (path / ".zarray").exists() else "zarr"


def ts_spec(path: Path, fmt: str, key: str = "") -> dict:
    """The tensorstore spec for a zarr/N5 dataset `key` under directory `path`."""
    full = path / key if key else path
    driver = "n5" if fmt == "n5" else _zarr_driver(full)
    return {"driver": driver, "kvstore": {"driver": "file", "path": str(full.resolve())}}


def _open_store(path: Path, key: str, fmt: str) -> Volume:
    import tensorstore as ts

    if not path.is_dir():
        raise UserError(f"cannot read {path} as {fmt}: not a directory")
    if key and not (path / key).is_dir():
        raise _missing_key(path, key, fmt)
    try:
        handle = ts.open(ts_spec(path, fmt, key), read=True).result()
    except Exception as error:  # noqa: BLE001 - tensorstore raises ValueError for everything
        if not (path / key).exists() or key not in _store_keys(path):
            raise _missing_key(path, key, fmt) from None
        raise UserError(f"cannot read {path}:{key} as {fmt}: {str(error).splitlines()[0]}") from None
    return Volume(path, key, fmt, tuple(handle.shape), np.dtype(handle.dtype.numpy_dtype), handle)


NUMBERS = "iuf"  # the dtype kinds of intensities: integers and floats
_KINDS = {"b": "booleans", "c": "complex numbers", "S": "byte strings", "U": "strings", "O": "objects or strings",
          "V": "compound records", "M": "dates", "m": "time spans"}


def open_volume(path_key: str, default_key: str = RAW_KEY, ndim: int = 3, kinds: str = NUMBERS) -> Volume:
    """Open `PATH[:KEY]` for reading; checks that it exists, has `ndim` dimensions and holds values
    of `kinds` (numpy's dtype kinds: intensities are integers or floats)."""
    path, key = split_path_key(path_key, default_key)
    if not path.exists():
        raise UserError(f"volume {path} does not exist")
    fmt = detect_format(path)
    volume = _open_hdf5(path, key) if fmt == "hdf5" else _open_store(path, key, fmt)
    problem = _shape_problem(volume, ndim) or _dtype_problem(volume, kinds)
    if problem:
        volume.close()
        raise UserError(f"{volume.name} {problem}")
    return volume


def _shape_problem(volume: Volume, ndim: int) -> str | None:
    if len(volume.shape) == ndim:
        return None
    return f"has {len(volume.shape)} dimensions ({'x'.join(map(str, volume.shape))}); expected {ndim} (ZxYxX)"


def _dtype_problem(volume: Volume, kinds: str) -> str | None:
    """Why the values cannot be read as a volume: strings, records and the like reached the run as an
    error deep in the reader (h5py's), not as the user's mistake."""
    if volume.dtype.kind in kinds:
        return None
    held = _KINDS.get(volume.dtype.kind, "values that are not numbers")
    if volume.format == "hdf5" and _hdf5_strings(volume.dtype):
        held = "strings"
    wanted = "integers or floats" if kinds == NUMBERS else "integers, floats or booleans"
    return f"holds {held} (dtype {volume.dtype}); a volume must hold {wanted}"


def _hdf5_strings(dtype: np.dtype) -> bool:
    import h5py

    return h5py.check_string_dtype(dtype) is not None


def open_pair(path_key: str, label_key: str = LABEL_KEY) -> tuple[Volume, Volume]:
    """Raw and labels from the same container; their shapes must agree."""
    raw = open_volume(path_key)
    labels = open_volume(f"{raw.path}:{label_key}", label_key, kinds=NUMBERS + "b")
    if raw.shape != labels.shape:
        raise UserError(f"raw {raw.name} is {'x'.join(map(str, raw.shape))} but labels {labels.name} are "
                        f"{'x'.join(map(str, labels.shape))}: they must have the same shape")
    return raw, labels


def check_fits(volume: Volume, patch: tuple[int, ...], what: str = "patch") -> None:
    if any(p > s for p, s in zip(patch, volume.shape)):
        raise UserError(f"{what} {'x'.join(map(str, patch))} is larger than the volume {volume.name} "
                        f"({'x'.join(map(str, volume.shape))})")
