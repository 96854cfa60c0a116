"""Depth slabs on one GPU: the same output, their cost, and the rate of tiles past 32-bit indexing.

The isotropic 3D U-Net alone (fused kernels, channels-last-3d, a random tile already on the GPU):

  1. equality: a tile under the bound run in one call per layer and in depth slabs (the bound
     lowered to force them): the largest difference, relative to the output's largest value
  2. cost: the same tile both ways, ms a tile
  3. large tiles: tiles spanning the seed volume's whole depth (200 + 2 x 16 halo), split where
     they must be; Mvox/s of computed voxels, and of the seed volume's output (200x3072x3072 at
     this tile: its kept share); the first again with slabs half as deep, and with cuDNN timing
     its algorithms for each slab's shape (cudnn.benchmark)

  python benchmarks/volume_slabs.py [--precision fp16] [--seconds 3] [--tiles 136x744x640,232x1152x1152]
"""

from __future__ import annotations

import argparse
import math

import torch

from volume_kernels import timed

from dlbench.data.blocking import Blocking
from dlbench.models import fused, registry, slabs
from dlbench.units import parse_shape

SEED, HALO = (200, 3072, 3072), (16, 64, 64)


def build(name: str, limit: int, device) -> torch.nn.Module:
    torch.manual_seed(0)
    model = registry.build(name).to(device).eval().to(memory_format=torch.channels_last_3d)
    model, _ = fused.fuse(model)
    return slabs.split(model, limit)[0]


def tile_input(tile, device) -> torch.Tensor:
    return torch.rand((1, 1, *tile), device=device).contiguous(memory_format=torch.channels_last_3d)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="unet3d")
    p.add_argument("--precision", default="fp16", choices=("fp16", "bf16"))
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--small", default="136x744x640", help="a tile under the bound (the earlier auto choice)")
    p.add_argument("--forced", type=int, default=2**29, help="the bound lowered to this for the equality and cost rows")
    p.add_argument("--tiles", default="232x1664x896,232x1152x1152", help="large tiles, comma-separated")
    args = p.parse_args()
    device = torch.device("cuda")
    dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
    small = parse_shape(args.small)
    x = tile_input(small, device)
    whole_s, want = timed(build(args.model, slabs.INDEX_LIMIT, device), x, dtype, args.seconds)
    slab_s, got = timed(build(args.model, args.forced, device), x, dtype, args.seconds)
    diff = float((got.float() - want.float()).abs().max() / want.float().abs().max())
    equal = torch.equal(got, want)
    del x, want, got
    print(f"equality on {args.small}: {'the same to the bit' if equal else f'largest difference {diff:.2e} of the largest output'}")
    print("| tile | split | ms a tile | computed Mvox/s | seed volume: tiles | kept | output Mvox/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    rows = [(small, "no", whole_s), (small, f"forced (bound {args.forced:,})", slab_s)]
    large = [(parse_shape(t), "where needed", slabs.INDEX_LIMIT, False) for t in filter(None, args.tiles.split(","))]
    if large:  # the first large tile again: slabs half as deep, and cuDNN timing its algorithms for each shape
        large += [(large[0][0], f"bound {args.forced:,}", args.forced, False),
                  (large[0][0], "where needed, cudnn.benchmark", slabs.INDEX_LIMIT, True)]
    for tile, split, limit, benchmark in large:
        torch.cuda.empty_cache()
        torch.backends.cudnn.benchmark = benchmark
        try:
            seconds, _ = timed(build(args.model, limit, device), tile_input(tile, device), dtype, args.seconds)
        except torch.cuda.OutOfMemoryError:
            print(f"| {'x'.join(map(str, tile))} | {split} | out of memory | | | | |")
            continue
        rows.append((tile, split, seconds))
    for tile, split, seconds in rows:
        blocking = Blocking(SEED, tuple(min(t - 2 * h, s) for t, h, s in zip(tile, HALO, SEED)), HALO)
        output = math.prod(SEED) / (len(blocking) * seconds) / 1e6
        print(f"| {'x'.join(map(str, tile))} | {split} | {seconds * 1e3:.1f} | {math.prod(tile) / seconds / 1e6:.0f} "
              f"| {len(blocking)} | {blocking.kept:.1%} | {output:.0f} |")
    print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB of "
          f"{torch.cuda.get_device_properties(device).total_memory / 2**30:.1f}")


if __name__ == "__main__":
    main()
