"""Where one loader worker's time goes per image, and what the real loader reaches per core.

    python benchmarks/jpeg_worker.py FOLDER [--images 200] [--runs 3] [--batch 32] [--size 224]

FOLDER is a JPEG folder (`python -m dlbench data images DIR --n 500`, `--size 2048x1536` for large
photos). Every stage runs on one thread over the same files (read from the page cache), and is
timed per image; then the whole path runs through the real loader (`data/images.py`) with one
worker process, for the per-core rate the loader reaches. "torchvision" is the path before
DCT-scaled decoding (decode_image + v2.RandomResizedCrop, as the workers ran it); "pillow" is
the path the workers run now (`data/jpeg_cpu.py`). Prints one line per stage: img/s per core,
the median of the runs and their spread (min-max).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import default_collate

from dlbench.data import images
from dlbench.data.jpeg_cpu import decode_crop

warnings.filterwarnings("ignore", images.TORCHVISION_DEPRECATION, DeprecationWarning)  # the "before" path uses it


def _rate(fn, items: list, runs: int) -> list[float]:
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        for item in items:
            fn(item)
        rates.append(len(items) / (time.perf_counter() - start))
    return rates


class Torchvision(images.FolderImages):
    """The workers' path before: torchvision's decoder, then v2's crop and resize of the full image."""

    def __init__(self, items, config) -> None:
        super().__init__(items, config)
        self.transform = images.transforms(config)

    def __getitem__(self, index: int):
        from torchvision.io import ImageReadMode, decode_image

        path, label = self.items[index % len(self.items)]
        data = images._read(path)
        return self.transform(decode_image(data, mode=ImageReadMode.RGB)), label, []


def _loader_rate(dataset, config, batches: int) -> float:
    """Images a second through a DataLoader with one worker, after its first batch."""
    loader = images.HostLoader(images.data_loader(dataset, config, torch.device("cpu")), None)
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    rate = batches * config.batch / (time.perf_counter() - start)
    loader.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()
    from torchvision.io import ImageReadMode, decode_image
    from PIL import Image
    import io

    torch.set_num_threads(1)
    items, _ = images.scan_folder(Path(args.folder))
    items = items[: args.images]
    paths = [p for p, _ in items]
    files = [images._read_bytes(p) for p in paths]
    tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    size = (args.size, args.size)
    config = images.ImageConfig(size=size, batch=args.batch, train=True, workers=1, prefetch=2, seed=0, max_corrupt=0)
    decoded = [decode_image(t, mode=ImageReadMode.RGB) for t in tensors[:50]]
    crops = [decode_crop(f, size, True) for f in files[: args.batch]]
    transform = images.transforms(config)

    def full_pillow(data: bytes) -> None:
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB")

    stages = {
        "read": (images._read_bytes, paths),
        "decode, torchvision (full size)": (lambda t: decode_image(t, mode=ImageReadMode.RGB), tensors),
        "decode, pillow (full size)": (full_pillow, files),
        "crop+resize, torchvision v2 (of a decoded image)": (transform, decoded),
        "decode+crop+resize, torchvision": (lambda t: transform(decode_image(t, mode=ImageReadMode.RGB)), tensors),
        "decode+crop+resize, pillow full size": (lambda f: decode_crop(f, size, True, limit=1), files),
        "decode+crop+resize, pillow DCT-scaled": (lambda f: decode_crop(f, size, True), files),
    }
    batch = default_collate(crops)
    stages["collate"] = (lambda _: default_collate(crops), [None] * 20)  # a batch each: per image below
    if torch.cuda.is_available():
        stages["pin"] = (lambda _: batch.pin_memory(), [None] * 20)
    per_batch = {"collate", "pin"}
    batches = max(4, 2 * len(items) // args.batch)
    loaders = {f"loader, 1 worker, {name}": dataset
               for name, dataset in (("torchvision", Torchvision(items, config)), ("pillow", images.FolderImages(items, config)))}
    print(f"{args.folder}: {len(items)} images, crops {args.size}x{args.size}, {args.runs} runs interleaved, one thread")
    rates: dict[str, list[float]] = {name: [] for name in [*stages, *loaders]}
    for _ in range(args.runs):  # every stage once a run: a shared machine's load moves them alike
        for name, (fn, data) in stages.items():
            rates[name] += [r * (args.batch if name in per_batch else 1) for r in _rate(fn, data, 1)]
        for name, dataset in loaders.items():
            rates[name].append(_loader_rate(dataset, config, batches))
    for name, values in rates.items():
        _report(name + (" (per image)" if name in per_batch else ""), values)
    if not torch.cuda.is_available():
        print(f"{'pin':48s} not measured: no GPU")


def _report(name: str, rates: list[float]) -> None:
    print(f"{name:48s} {statistics.median(rates):8.0f} img/s per core  ({min(rates):.0f}-{max(rates):.0f})")


if __name__ == "__main__":
    main()
