"""The kernel side of blockwise prediction: the isotropic 3D U-Net alone on one tile, eager and
with each change that keeps its output, and how much of the GPU's measured matmul ceiling it uses.

Variants (each on a copy of the same model, tile already on the GPU, channels-last-3d):
  eager                the model as built, cuDNN's heuristics choose each convolution
  benchmark            the same with cudnn.benchmark (cuDNN times its algorithms)
  padded io            the first convolution (1 input channel) and the head (1 output channel)
                       padded with zero channels to 8, so cuDNN can use tensor-core kernels
  fused relu           each 3x3x3 convolution, its bias and ReLU as one cuDNN call (cudnn_convolution_relu)
  bias+relu            each 3x3x3 convolution without bias (cuDNN), then its bias and ReLU in one
                       pass instead of two, compiled by torch.compile (dynamic shapes)
  fused bias+relu      the same with dlbench's Triton kernel, in place
  fused                that and dlbench's 2x2x2 max pooling without indices (`volume --kernels fused`)
  compile              torch.compile (inductor: ReLU, cat, sigmoid fused around cuDNN's convolutions)
  compile+padded io    both
and the output's relative error against eager at the same precision, then the kernels of the
best variant summed by name.

  python benchmarks/volume_kernels.py [--tile 136x744x640] [--precision fp16] [--seconds 3]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

from kernels import print_tile_profile

from dlbench.measure.flops import count_flops
from dlbench.models import fused as dlbench_fused, registry
from dlbench.system import ceilings
from dlbench.units import parse_shape

CL = torch.channels_last_3d


class PaddedIn(nn.Module):
    """A convolution of a 1-channel input, on the input written into `width` zero channels."""

    def __init__(self, conv: nn.Conv3d, width: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv3d(width, conv.out_channels, conv.kernel_size, padding=conv.padding).to(conv.weight.device)
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.weight[:, : conv.in_channels] = conv.weight
            self.conv.bias.copy_(conv.bias)
        self.width = width

    def forward(self, x):
        n, c, *space = x.shape
        wide = x.new_zeros((n, *space, self.width)).permute(0, 4, 1, 2, 3)  # channels-last by construction
        wide[:, :c] = x
        return self.conv(wide)


class PaddedOut(nn.Module):
    """A convolution to few output channels computed with `width` and cut."""

    def __init__(self, conv: nn.Conv3d, width: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv3d(conv.in_channels, width, conv.kernel_size, padding=conv.padding).to(conv.weight.device)
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.bias.zero_()
            self.conv.weight[: conv.out_channels] = conv.weight
            self.conv.bias[: conv.out_channels] = conv.bias
        self.out = conv.out_channels

    def forward(self, x):
        return self.conv(x)[:, : self.out]


class ConvReLU(nn.Module):
    """A convolution and its ReLU in one cuDNN call."""

    def __init__(self, conv: nn.Conv3d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
        c = self.conv
        return torch.cudnn_convolution_relu(x.to(dtype), c.weight.to(dtype), c.bias.to(dtype), c.stride,
                                            c.padding, c.dilation, c.groups)


class CompiledBiasReLU(nn.Module):
    """A convolution without its bias, then bias and ReLU in one pass (a compiled pointwise kernel):
    eager adds the bias in a pass of its own after cuDNN's convolution, and the ReLU in another."""

    def __init__(self, conv: nn.Conv3d, pointwise) -> None:
        super().__init__()
        self.conv, self.pointwise = conv, pointwise

    def forward(self, x):
        c = self.conv
        out = F.conv3d(x, c.weight, None, c.stride, c.padding, c.dilation, c.groups)
        return self.pointwise(out, c.bias.to(out.dtype))


def bias_relu(x, bias):
    return torch.relu(x + bias.view(1, -1, 1, 1, 1))


def padded_io(model):
    model = copy.deepcopy(model)
    model.encoders[0][0] = PaddedIn(model.encoders[0][0])
    model.head[0] = PaddedOut(model.head[0])
    return model.to(memory_format=CL)


def with_conv_relu(model, make):
    """Each 3x3x3 convolution and its ReLU replaced by `make(conv)`."""
    model = copy.deepcopy(model)
    for block in (*model.encoders, *model.decoders):
        for i in (0, 2):
            block[i] = make(block[i])
            block[i + 1] = nn.Identity()
    return model


def timed(run, x, dtype, seconds):
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        for _ in range(2):
            out = run(x)
        torch.cuda.synchronize()
        n, start = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - start < seconds:
            run(x)
            n += 1
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / n, out.float()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="unet3d")
    p.add_argument("--tile", default="136x744x640")
    p.add_argument("--precision", default="fp16", choices=("fp16", "bf16"))
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--profile", action="store_true", help="kernels of the fastest variant, summed by name")
    p.add_argument("--variants", default="eager,benchmark,padded io,fused relu,compile,compile+padded io")
    args = p.parse_args()
    tile = parse_shape(args.tile)
    dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
    torch.manual_seed(0)
    model = registry.build(args.model).cuda().eval().to(memory_format=CL)
    with torch.no_grad():
        per_voxel = count_flops(lambda: model(torch.rand((1, 1, 16, 64, 64), device="cuda"))) / (16 * 64 * 64)
    ceiling = ceilings.matmul(args.precision, torch.device("cuda")).value
    x = torch.rand((1, 1, *tile), device="cuda").contiguous(memory_format=CL)
    voxels = x.numel()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"tile {args.tile}, {args.precision}, {per_voxel / 1e3:.0f} kFLOP a voxel; measured {args.precision} "
          f"matmul ceiling {ceiling:.0f} TFLOP/s")
    print("| variant | ms/tile | tile Mvox/s | TFLOP/s | of ceiling | rel. error vs eager | first call [s] |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    makers = {"eager": lambda: model, "benchmark": lambda: model, "padded io": lambda: padded_io(model),
              "fused relu": lambda: with_conv_relu(model, ConvReLU), "compile": lambda: torch.compile(model),
              "bias+relu": lambda: with_conv_relu(model, lambda c: CompiledBiasReLU(c, torch.compile(bias_relu, dynamic=True))),
              "fused bias+relu": lambda: with_conv_relu(model, dlbench_fused.ConvBiasReLU),
              "fused": lambda: dlbench_fused.fuse(model)[0],
              "compile+padded io": lambda: torch.compile(padded_io(model))}
    reference, best = None, None
    for name in args.variants.split(","):
        torch.backends.cudnn.benchmark = name == "benchmark"
        try:
            start = time.perf_counter()
            run = makers[name]()
            with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
                run(x)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            seconds, out = timed(run, x, dtype, args.seconds)
        except Exception as error:  # noqa: BLE001
            print(f"| {name} | failed: {str(error).splitlines()[0][:150]} |", flush=True)
            continue
        reference = out if reference is None else reference
        error = float((out - reference).norm() / reference.norm())
        tflops = per_voxel * voxels / seconds / 1e12
        print(f"| {name} | {seconds * 1e3:.1f} | {voxels / seconds / 1e6:.0f} | {tflops:.0f} | {tflops / ceiling:.1%} | "
              f"{error:.1e} | {first:.1f} |", flush=True)
        if best is None or seconds < best[1]:
            best = (name, seconds, run)
        del out
        torch.cuda.empty_cache()
    if args.profile:
        torch.backends.cudnn.benchmark = True
        name, _, run = best
        with torch.autocast("cuda", dtype=dtype):
            print_tile_profile(lambda: run(x), name, calls=2, top=12)

if __name__ == "__main__":
    main()
