"""The isotropic 3D U-Net alone on tiles of several sizes, precisions and layouts: what block
size and kernels blockwise prediction could reach on this GPU.

For each setting: milliseconds per tile, the tile's voxels per second, the *output* voxels per
second that a block of this tile keeps with the given halo (tile rate x kept share: the
ceiling of end-to-end prediction), TFLOP/s and peak memory. Then the GPU kernels of one
setting, summed by name, to see where the time goes.

  python benchmarks/volume_tiles.py [--halo 16x64x64] [--model unet3d] [--seconds 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from kernels import print_tile_profile

from dlbench.measure.flops import count_flops
from dlbench.models import registry
from dlbench.units import parse_shape

TILES = ["64x512x512", "96x640x640", "96x768x768", "128x896x896", "160x1152x1152"]


def measure(model, tile, batch, dtype, channels_last, seconds):
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.rand((batch, 1, *tile), device="cuda").contiguous(memory_format=fmt)
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        for _ in range(2):
            model(x)
        torch.cuda.synchronize()
        n, start = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - start < seconds:
            model(x)
            n += 1
            if n % 2 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / n, torch.cuda.max_memory_allocated() / 2**30


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="unet3d")
    p.add_argument("--halo", default="16x64x64")
    p.add_argument("--tiles", default=",".join(TILES))
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--profile", default="64x512x512")
    args = p.parse_args()
    halo = parse_shape(args.halo)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = registry.build(args.model).cuda().eval()
    with torch.no_grad():  # 'same' convolutions: FLOPs grow with the voxels
        per_voxel = count_flops(lambda: model(torch.rand((1, 1, 16, 64, 64), device="cuda"))) / (16 * 64 * 64)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print("| tile | batch | precision | layout | ms/tile | tile Mvox/s | kept | output Mvox/s | TFLOP/s | peak GiB |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    settings = [(t, 1, d, cl) for t in args.tiles.split(",") for d in ("bf16", "fp16") for cl in (True, False)]
    settings += [("64x512x512", 2, "bf16", True), ("96x640x640", 2, "bf16", True)]
    for text, batch, precision, cl in settings:
        tile = parse_shape(text)
        voxels = batch * torch.Size(tile).numel()
        block = [t - 2 * h for t, h in zip(tile, halo)]
        kept = torch.Size(block).numel() / torch.Size(tile).numel()
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        try:
            flops = per_voxel * voxels
            seconds, peak = measure(model, tile, batch, dtype, cl, args.seconds)
        except Exception as error:  # noqa: BLE001
            print(f"| {text} | {batch} | {precision} | {'cl3d' if cl else 'ncdhw'} | failed: "
                  f"{str(error).splitlines()[0][:120]} |")
            torch.cuda.empty_cache()
            continue
        rate = voxels / seconds / 1e6
        print(f"| {text} | {batch} | {precision} | {'cl3d' if cl else 'ncdhw'} | {seconds * 1e3 / batch:.1f} | "
              f"{rate:.0f} | {kept:.2f} | {rate * kept:.0f} | {flops / seconds / 1e12:.0f} | {peak:.1f} |", flush=True)
        torch.cuda.empty_cache()
    tile = parse_shape(args.profile)
    x = torch.rand((1, 1, *tile), device="cuda").contiguous(memory_format=torch.channels_last_3d)
    model = model.to(memory_format=torch.channels_last_3d)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        print_tile_profile(lambda: model(x), f"{args.profile} bf16 cl3d", calls=3, top=15)

if __name__ == "__main__":
    main()
