"""GPU time of each stage of `--decode gpu`'s batched crop, and of other ways to do it.

Training with `--decode gpu` loses what the decoding stream's kernels take from the GPU, so
each stage's kernel time counts. One real batch of generated JPEGs is decoded with nvjpeg, then
each variant runs `--repeats` times, timed by CUDA events per stage:

  padded-u8    images packed (nested tensor), padded as uint8, converted to float, roi_align
  padded-f32   packed, converted to float packed, padded as float, roi_align
  slots        a zeroed float batch, each image copied into its slot (one copy per image)

and the flip (torch.where over the batch vs flipping the flipped images only). Every variant's
output is compared with the first.

    PYTHONPATH=src python benchmarks/crop_stages.py [--images 512] [--batch 256]
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.ops import roi_align

from dlbench.data import images
from dlbench.data.generate import generate
from dlbench.launch.environment import prepare


class Stages:
    def __init__(self) -> None:
        self.marks: list[tuple[str, torch.cuda.Event]] = []

    def mark(self, name: str) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.marks.append((name, event))

    def times(self) -> dict[str, float]:
        torch.cuda.synchronize()
        return {name: start.elapsed_time(end) for (_, start), (name, end) in zip(self.marks, self.marks[1:])}


def nested(decoded: list[torch.Tensor]) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor(decoded)


def padded_u8(decoded, shape, s: Stages) -> torch.Tensor:
    packed = nested(decoded)
    s.mark("pack")
    batch = packed.to_padded_tensor(0, shape)
    s.mark("pad")
    batch = batch.float()
    s.mark("float")
    return batch


def padded_f32(decoded, shape, s: Stages) -> torch.Tensor:
    packed = nested(decoded)
    s.mark("pack")
    packed = packed.float()
    s.mark("float")
    batch = packed.to_padded_tensor(0, shape)
    s.mark("pad")
    return batch


def slots(decoded, shape, s: Stages) -> torch.Tensor:
    batch = torch.zeros(shape, device=decoded[0].device)
    s.mark("zeros")
    for i, image in enumerate(decoded):
        batch[i, :, : image.shape[1], : image.shape[2]].copy_(image)
    s.mark("copy in")
    return batch


def crop(batch, rois, flips, size, s: Stages, flip: str) -> torch.Tensor:
    out = roi_align(batch, rois, output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    s.mark("roi_align")
    if flip == "where":
        out = torch.where(flips[:, None, None, None], out.flip(-1), out)
    else:
        index = flips.nonzero()[:, 0]
        out[index] = out[index].flip(-1)
    s.mark(f"flip ({flip})")
    out = out.round_().clamp_(0, 255).to(torch.uint8)
    s.mark("to uint8")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dlbench-crops-"))
    generate(root, args.images, workers=16)
    items, _ = images.scan_folder(root)
    files = [images._read(path) for path, _ in items[: args.batch]]
    decoded = decode_jpeg(files, device="cuda", mode=ImageReadMode.RGB)
    sizes = np.array([d.shape[-2:] for d in decoded])
    rng = np.random.default_rng(0)
    boxes = images.random_crop_boxes(sizes, rng)
    boxes = np.column_stack([np.arange(len(decoded)), boxes[:, :2], np.minimum(boxes[:, 2:], sizes[:, ::-1] - 0.5)])
    rois = torch.from_numpy(boxes.astype(np.float32)).cuda()
    flips = torch.from_numpy(rng.random(len(decoded)) < 0.5).cuda()
    shape = (len(decoded), 3, int(sizes[:, 0].max()), int(sizes[:, 1].max()))
    print(f"{len(decoded)} images, padded batch {shape}, {torch.cuda.get_device_name()}")

    reference = None
    for name, make in (("padded-u8", padded_u8), ("padded-f32", padded_f32), ("slots", slots)):
        for flip in ("where", "index"):
            totals: dict[str, list[float]] = {}
            for _ in range(args.repeats + 2):
                s = Stages()
                s.mark("start")
                out = crop(make(decoded, shape, s), rois, flips, (224, 224), s, flip)
                for stage, ms in s.times().items():
                    totals.setdefault(stage, []).append(ms)
            if reference is None:
                reference = out
            same = (out.int() - reference.int()).abs().max().item()
            stages = {k: float(np.median(v[2:])) for k, v in totals.items()}
            print(f"{name:10s} flip={flip:5s} total {sum(stages.values()):6.2f} ms  ("
                  + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()) + f"); max difference {same}")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
