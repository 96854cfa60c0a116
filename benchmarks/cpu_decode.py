"""Is dlbench's CPU image pipeline slower than the usual PIL one? One thread, one image at a time.

Per image, in one process with one torch thread (as in a DataLoader worker), over the same
generated JPEGs (read into memory first, so the disk is not timed):

  torchvision decode                        decode_image (libjpeg-turbo), RGB
  dlbench: decode + RandomResizedCrop/flip  decode_image, then v2 transforms on the uint8 tensor
  PIL decode                                Image.open(...).convert("RGB")
  PIL + RandomResizedCrop/flip + tensor     the torchvision ImageNet reference recipe's CPU part

Then dlbench's DataLoader alone (no model) at each of --workers, batch 256, pinned when there
is a GPU: how the per-image rate scales with worker processes on this machine's cores.

    PYTHONPATH=src python benchmarks/cpu_decode.py [--images 200] [--loader-images 4096] [--workers 4,8,16]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import torch
import torchvision.transforms as T
from PIL import Image
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2

from dlbench.data import images
from dlbench.data.generate import generate
from dlbench.launch.environment import prepare


def per_image_ms(files: list[bytes], work) -> float:
    for data in files[:10]:
        work(data)
    start = time.perf_counter()
    for data in files:
        work(data)
    return (time.perf_counter() - start) / len(files) * 1e3


def loader_rate(root: Path, workers: int, batches: int) -> float:
    """img/s of dlbench's CPU-decoding DataLoader alone, after one batch per worker of warm-up."""
    items, _ = images.scan_folder(root)
    config = images.ImageConfig(size=(224, 224), batch=256, train=True, workers=workers, prefetch=2, seed=0,
                                max_corrupt=0.05)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    host = images.HostLoader(images.data_loader(images.FolderImages(items, config), config, device), None)
    delivered = host.batches()
    try:
        for _ in range(workers):
            next(delivered)
        start = time.perf_counter()
        for _ in range(batches):
            next(delivered)
        return batches * 256 / (time.perf_counter() - start)
    finally:
        host.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--loader-images", type=int, default=4096, help="JPEGs for the DataLoader runs (0: skip them)")
    p.add_argument("--workers", type=lambda t: [int(x) for x in t.split(",")], default=[4, 8, 16])
    args = p.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="dlbench-cpu-decode-")) / "images"
    generate(root, args.images, classes=10)
    files = [path.read_bytes() for path in sorted(root.glob("*/*.jpg"))]
    tensors = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in files]
    ours = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    pil = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    rows = {
        "torchvision decode": per_image_ms(tensors, lambda t: decode_image(t, mode=ImageReadMode.RGB)),
        "dlbench: decode + RandomResizedCrop/flip": per_image_ms(
            tensors, lambda t: ours(decode_image(t, mode=ImageReadMode.RGB))),
        "PIL decode": per_image_ms(files, lambda d: Image.open(io.BytesIO(d)).convert("RGB")),
        "PIL + RandomResizedCrop/flip + tensor": per_image_ms(
            files, lambda d: pil(Image.open(io.BytesIO(d)).convert("RGB"))),
    }
    print(f"{len(files)} JPEGs, one thread\n| pipeline | ms per image | img/s per worker |\n|---|---:|---:|")
    for name, ms in rows.items():
        print(f"| {name} | {ms:.2f} | {1e3 / ms:,.0f} |")
    if args.loader_images:
        folder = root.parent / "loader"
        generate(folder, args.loader_images, classes=10)
        print("\n| DataLoader workers | img/s | img/s per worker |\n|---:|---:|---:|")
        for workers in args.workers:
            rate = loader_rate(folder, workers, batches=2 * workers + 8)
            print(f"| {workers} | {rate:,.0f} | {rate / workers:,.0f} |")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
