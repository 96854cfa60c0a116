"""Where the GPU-decode input pipeline spends its time, stage by stage, without a model.

    PYTHONPATH=src python benchmarks/decode_pipeline.py [--images 8000] [--batch 256] [--workers 8]

Rates (img/s) of: the DataLoader delivering encoded files (pinned and not), plus nvjpeg
decoding, plus the batched crop/resize/flip; each stage synchronised, on the main thread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from dlbench.data import images
from dlbench.data.generate import generate
from dlbench.launch.environment import prepare


def rate(batches, stage, n: int, batch: int) -> float:
    it = iter(batches)
    stage(next(it))  # first batch: worker start-up, nvjpeg handles
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        stage(next(it))
    torch.cuda.synchronize()
    return n * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda")
    root = Path(tempfile.mkdtemp(prefix="dlbench-jpeg-"))
    generate(root, args.images, workers=16)
    items, _ = images.scan_folder(root)
    config = images.ImageConfig(size=(224, 224), batch=args.batch, train=True, workers=args.workers, prefetch=2,
                                seed=0, max_corrupt=0.05)
    dataset = images.FolderImages(items, config, decode=False)
    rows = []
    for pinned in (True, False):
        cpu = torch.device("cuda" if pinned else "cpu")  # data_loader pins for a CUDA device
        host = images.HostLoader(images.data_loader(dataset, config, cpu, images.collate_bytes), None)
        decoder = images.DeviceDecoder(host, config, device)
        rows.append((f"encoded files only (pinned={pinned})", rate(host.batches(), lambda b: None, args.batches, args.batch)))
        rows.append((f"+ nvjpeg decode (pinned={pinned})",
                     rate(host.batches(), lambda b: decoder._decode(b[0].files(), b[3]), args.batches, args.batch)))
        rows.append((f"+ crop/resize/flip (pinned={pinned})",
                     rate(host.batches(), lambda b: decoder.decode_batch(b[0].files(), b[3]), args.batches, args.batch)))
        rows.append((f"DeviceDecoder thread (pinned={pinned})", rate(decoder, lambda b: None, args.batches, args.batch)))
        decoder.close()
    print(f"GPU: {torch.cuda.get_device_name()}; batch {args.batch}, {args.workers} workers")
    print("| stage | img/s |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value:,.0f} |")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
