"""Read 3D volumes from HDF5 (h5py), zarr and N5 (tensorstore); the format comes from the path.

A volume is named `PATH[:KEY]`; the key is the dataset inside the container and defaults to
the CREMI layout's raw data (`volumes/raw`). Every way a user can get this wrong ends in one
UserError line.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.errors import UserError

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


@dataclass
class Volume:
    """One 3D dataset; `read` returns a numpy array for a box of slices."""

    path: Path
    key: str
    format: str
    shape: tuple[int, ...]
    dtype: np.dtype
    handle: Any

    def read(self, box: tuple[slice, ...]) -> np.ndarray:
        if self.format == "hdf5":
            return np.asarray(self.handle[box])
        return self.handle[box].read().result()

    def read_into(self, box: tuple[slice, ...], out: np.ndarray, where: tuple[slice, ...]) -> None:
        """`box` read into `out[where]` (`out` a pinned tile buffer, say), decoded straight into it
        where the types match: by h5py's read_direct, or tensorstore's threads for zarr and N5."""
        if out.dtype != self.dtype or (self.format == "hdf5" and not out.flags.c_contiguous):
            out[where] = self.read(box)
        elif self.format == "hdf5":
            self.handle.read_direct(out, box, where)
        else:
            import tensorstore as ts

            ts.array(out[where], copy=False, write=True).write(self.handle[box]).result()

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
    return Volume(path, key, "hdf5", tuple(data.shape), data.dtype, data)


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
