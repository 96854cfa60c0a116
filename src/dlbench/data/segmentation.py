"""2D segmentation data: a folder of images and masks, the DICE metric and k-fold splits.

Layout: `PATH/images/NAME.{tif,tiff,png}` and `PATH/masks/NAME.{tif,tiff,png}`, one mask per
image with the same stem. Masks are binary: 0 and 1, or 0 and 255 (a nonzero pixel is
class 1). `dlbench data seg` writes this layout; a user's own folder is read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # checking a folder (`run converge --data`) loads no torch
    import torch

from dlbench.errors import UserError

SUFFIXES = (".tif", ".tiff", ".png")
MASK_VALUES = ({0, 1}, {0, 255})
CLASSES = 2


@dataclass
class SegmentationSet:
    images: np.ndarray  # float32 (N, H, W), each image scaled to zero mean, unit variance
    masks: np.ndarray  # int64 (N, H, W) of class indices 0/1
    names: list[str]
    source: str

    def __len__(self) -> int:
        return len(self.names)


def _files(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix.lower() in SUFFIXES and not path.name.startswith("."):
            if path.stem in found:
                raise UserError(f"{folder}: two files named {path.stem!r} ({found[path.stem].name}, {path.name})")
            found[path.stem] = path
    return found


def _read(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if image.mode in ("RGB", "RGBA", "P", "LA"):
                image = image.convert("L")
            array = np.asarray(image)
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise UserError(f"cannot read {path}: {error}") from None
    if array.ndim != 2:
        raise UserError(f"{path}: expected a single-channel 2D image, got shape {array.shape}")
    return array


def image_size(path: Path) -> tuple[int, int]:
    """(height, width) of an image, from its header: its pixels stay unread."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return image.height, image.width
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise UserError(f"cannot read {path}: {error}") from None


def _normalise(image: np.ndarray) -> np.ndarray:
    x = image.astype(np.float32)
    return (x - x.mean()) / max(float(x.std()), 1e-6)


def _mask_classes(mask: np.ndarray, path: Path) -> np.ndarray:
    values = {int(v) for v in np.unique(mask)}
    if not any(values <= allowed for allowed in MASK_VALUES):
        shown = ", ".join(map(str, sorted(values)[:6])) + (", ..." if len(values) > 6 else "")
        raise UserError(f"mask {path} has label values {shown}; expected 0/1 or 0/255 (binary masks)")
    return (mask > 0).astype(np.int64)


def pairs(root: Path) -> list[tuple[str, Path, Path]]:
    """(name, image, mask) for every image; raises UserError on a missing or extra mask."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"segmentation data {root} does not exist (create one with `dlbench data seg {root}`)")
    for sub in ("images", "masks"):
        if not (root / sub).is_dir():
            raise UserError(f"segmentation data {root} has no '{sub}' folder (expected {root}/images and {root}/masks)")
    images, masks = _files(root / "images"), _files(root / "masks")
    if not images:
        raise UserError(f"{root}/images holds no .tif, .tiff or .png files")
    missing = sorted(set(images) - set(masks))
    if missing:
        raise UserError(f"image {images[missing[0]].name} has no mask in {root}/masks "
                        f"({len(missing)} image(s) without a mask)")
    orphans = sorted(set(masks) - set(images))
    if orphans:
        raise UserError(f"mask {masks[orphans[0]].name} has no image in {root}/images ({len(orphans)} mask(s) without an image)")
    return [(name, images[name], masks[name]) for name in images]


def load(root: str | Path) -> SegmentationSet:
    """Read and check the whole set; every problem is a UserError naming the file."""
    images, masks, names = [], [], []
    first: tuple[int, int] | None = None
    for name, image_path, mask_path in pairs(Path(root)):
        image, mask = _read(image_path), _read(mask_path)
        if image.shape != mask.shape:
            raise UserError(f"image {image_path.name} is {_size(image)} but its mask is {_size(mask)}")
        if first is None:
            first = image.shape
        elif image.shape != first:
            raise UserError(f"images differ in size: {names[0]} is {_size(images[0])}, {name} is {_size(image)}")
        images.append(_normalise(image))
        masks.append(_mask_classes(mask, mask_path))
        names.append(name)
    return SegmentationSet(np.stack(images), np.stack(masks), names, str(root))


def from_arrays(images: np.ndarray, masks: np.ndarray, source: str) -> SegmentationSet:
    """A set made in memory (the generator's uint8 images and 0/255 masks)."""
    names = [f"seg_{i:03d}" for i in range(len(images))]
    classes = np.stack([_mask_classes(m, Path(f"{source}/{n}")) for m, n in zip(masks, names)])
    return SegmentationSet(np.stack([_normalise(i) for i in images]), classes, names, source)


def _size(array: np.ndarray) -> str:
    return f"{array.shape[1]}x{array.shape[0]}"


def kfold(n: int, k: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """k (train, validation) index lists: the validation parts are disjoint and cover 0..n-1."""
    if k < 2:
        raise UserError(f"cross-validation needs at least 2 folds, got {k}")
    if n < k:
        raise UserError(f"{n} images cannot be split into {k} folds (each fold needs one validation image)")
    order = np.random.default_rng(seed).permutation(n).tolist()
    parts = [sorted(order[i::k]) for i in range(k)]
    return [(sorted(set(order) - set(part)), part) for part in parts]


def confusion(pred: torch.Tensor, target: torch.Tensor, classes: int = CLASSES) -> torch.Tensor:
    """Per class: [intersection, predicted, true] pixel counts, (classes, 3), on pred's device."""
    import torch

    rows = []
    for c in range(classes):
        p, t = pred == c, target == c
        rows.append(torch.stack([(p & t).sum(), p.sum(), t.sum()]))
    return torch.stack(rows).to(torch.float64)


def dice_from_counts(counts: torch.Tensor) -> list[float]:
    """DICE per class, 2|P n T| / (|P| + |T|); a class absent from both prediction and truth scores 1."""
    out = []
    for intersection, predicted, true in counts.tolist():
        total = predicted + true
        out.append(1.0 if total == 0 else 2.0 * intersection / total)
    return out
