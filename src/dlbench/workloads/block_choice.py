"""`--block auto`: the output block, memory layout and half-precision type that predict a
volume fastest on this machine.

The model's time grows with a tile's voxels at one rate: the isotropic unet3d ran 388 Mvox/s
on 64x512x512 tiles and 386 on 96x768x768 (one H200, fp16 or bf16 alike), so the fastest
blocking is the one whose tiles (block + 2 x halo, the same for cut blocks) hold the fewest
voxels in all, and a batch of small tiles gains nothing over one tile of their size. Blocks
are therefore the volume split into equal parts along each axis, ranked by the voxels their
tiles hold, and the first whose tile fits is taken. Two things bound a tile: the GPU's memory
(a real forward pass, measured) and cuDNN's 32-bit indexing: no convolution may produce 2^31
elements or more (a 128x896x896 tile of unet3d, 3.3e9 elements, failed on an H200 with an
illegal memory access, which ends the process, so this bound is computed, never tried).

On that tile, a timed probe then compares channels-last-3d with the default layout and, for a
half-precision run, fp16 with bf16 (both give the output within rounding); the fastest is used.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from dlbench.data.blocking import Blocking
from dlbench.errors import UserError
from dlbench.figures import percent, sig
from dlbench.workloads.runtime import is_oom, precision as in_precision

INDEX_LIMIT = 2**31  # elements of one convolution output (cuDNN's 32-bit indexing)
MEMORY_SHARE = 0.7  # of the GPU's memory one forward may take: the pipeline's next tile and the allocator's slack
CPU_TILE = 32 * 256 * 256  # without a GPU: a tile this large at most, no probe
HALF = ("fp16", "bf16")
_CONVOLUTIONS = {torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d,
                 torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
                 torch.nn.functional.conv_transpose3d}


@dataclass
class Choice:
    block: tuple[int, ...]
    precision: str
    channels_last: bool
    why: str
    probes: list[dict] = field(default_factory=list)


def axis_blocks(size: int, step: int = 8, spacing: float = 1.03) -> list[int]:
    """Block sizes along one axis, largest first: the axis split in equal parts, rounded up to a
    multiple of `step` (convolution kernels prefer it), at most the axis, neighbours at least
    `spacing` apart (a huge axis has thousands of splits)."""
    sizes = sorted({min(size, -(-(-(-size // parts)) // step) * step) for parts in range(1, size + 1)}, reverse=True)
    kept = sizes[:1]
    for s in sizes[1:]:
        if kept[-1] >= spacing * s:
            kept.append(s)
    return kept


def plans(shape: tuple[int, ...], halo: tuple[int, ...], max_tile: int) -> list[Blocking]:
    """Blockings whose tiles hold at most `max_tile` voxels, the fewest computed voxels first
    (ties: fewer, larger tiles first)."""
    found = [Blocking(shape, block, halo) for block in _grid(shape, halo, max_tile)]
    return sorted(found, key=lambda b: (computed(b), len(b)))


def computed(blocking: Blocking) -> int:
    """Voxels the model computes for the whole volume: every tile in full, cut blocks too."""
    return len(blocking) * math.prod(blocking.tile)


def _grid(shape: tuple[int, ...], halo: tuple[int, ...], max_tile: int):
    """For each block depth and height, the few widest blocks whose tile fits: for a given depth
    and height, wider blocks mean fewer tiles."""
    zs, ys, xs = (axis_blocks(s) for s in shape)
    for z in zs:
        for y in ys:
            room = max_tile // ((z + 2 * halo[0]) * (y + 2 * halo[1])) - 2 * halo[2]
            for x in [x for x in xs if x <= room][:3]:
                yield (z, y, x)


class _Widest(TorchFunctionMode):
    """Records the largest convolution output, in elements per input voxel."""

    def __init__(self, voxels: int) -> None:
        super().__init__()
        self.voxels, self.width = voxels, 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _CONVOLUTIONS and isinstance(out, torch.Tensor):
            self.width = max(self.width, out.numel() / self.voxels)
        return out


def convolution_width(model: torch.nn.Module, device: torch.device) -> float:
    """Elements of the model's largest convolution output per input voxel (64 for a model whose
    convolutions cannot be seen, such as a TorchScript file: a wide guess, so the bound holds)."""
    tile = (8, 32, 32)
    mode = _Widest(math.prod(tile))
    with torch.no_grad(), mode:
        model(torch.rand((1, 1, *tile), device=device))
    return mode.width or 64.0


def largest_tile(width: float) -> int:
    return int((INDEX_LIMIT - 1) // max(width, 1.0))


def describe(choice: Choice) -> str:
    layout = "channels-last-3d" if choice.channels_last else "default layout"
    return f"block {'x'.join(map(str, choice.block))}, {choice.precision}, {layout} ({choice.why})"


def choose(shape: tuple[int, ...], halo: tuple[int, ...], precision: str, channels_last: bool,
           model: torch.nn.Module, device: torch.device, timer: Callable[..., float] | None = None) -> Choice:
    """The block, layout and half-precision type for `--block auto`; `timer(tile, precision,
    channels_last)` gives seconds per tile (default: a short measurement of `model` on the GPU).
    The caller puts the model in the layout chosen (set_layout)."""
    if device.type != "cuda":
        plan = plans(shape, halo, CPU_TILE)
        block = plan[0].block if plan else tuple(min(8, s) for s in shape)
        return Choice(block, precision, channels_last, "no GPU: the fewest computed voxels in tiles of at most "
                                                       f"{sig(CPU_TILE / 1e6)} Mvox, not timed")
    width = convolution_width(model, device)
    timer = timer or _Timer(model, device)
    for plan in plans(shape, halo, largest_tile(width)):
        if _fits(model, plan.tile, device):
            return _probe(plan, precision, channels_last, timer, width)
    raise UserError("--block auto found no block that fits this GPU's memory for this halo; give --block")


def set_layout(model: torch.nn.Module, channels_last: bool) -> torch.nn.Module:
    """The model (changed in place) in channels-last-3d or the default layout."""
    return model.to(memory_format=torch.channels_last_3d if channels_last else torch.contiguous_format)


def _fits(model: torch.nn.Module, tile: tuple[int, ...], device: torch.device) -> bool:
    total = torch.cuda.get_device_properties(device).total_memory
    try:
        torch.cuda.reset_peak_memory_stats(device)
        with torch.no_grad():
            model(torch.rand((1, 1, *tile), device=device))
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) < MEMORY_SHARE * total
    except Exception as error:  # noqa: BLE001
        if not is_oom(error):
            raise
        return False
    finally:
        torch.cuda.empty_cache()


def _probe(plan: Blocking, precision: str, channels_last: bool, timer, width: float) -> Choice:
    precisions = HALF if precision in HALF else (precision,)
    probes = []
    for p in precisions:
        for layout in (True, False):
            seconds = timer(plan.tile, p, layout)
            probes.append({"precision": p, "channels_last": layout, "tile_s": seconds,
                           "mvox_per_s": math.prod(plan.shape) / (len(plan) * seconds) / 1e6})
    best = max(probes, key=lambda r: r["mvox_per_s"])
    asked = next(r for r in probes if r["precision"] == precision and r["channels_last"] == channels_last)
    gain = best["mvox_per_s"] / asked["mvox_per_s"] - 1
    sign = "+" if gain >= 0 else ""
    why = (f"{len(plan)} tiles of {'x'.join(map(str, plan.tile))}, {percent(plan.kept)} of computed voxels kept; "
           f"largest convolution output {sig(math.prod(plan.tile) * width / 1e9)}e9 elements of "
           f"{sig(INDEX_LIMIT / 1e9)}e9; probe "
           f"{sig(best['mvox_per_s'])} Mvox/s, {sign}{percent(gain)} over the precision and layout asked")
    return Choice(plan.block, best["precision"], best["channels_last"], why, probes)


class _Timer:
    """Seconds per tile on the GPU: one untimed forward (cuDNN's autotuning), then two timed.
    Model and input both take the layout: a convolution runs channels-last if either is."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device

    def __call__(self, tile: tuple[int, ...], precision: str, channels_last: bool) -> float:
        fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
        model = set_layout(self.model, channels_last)
        x = torch.rand((1, 1, *tile), device=self.device).contiguous(memory_format=fmt)
        with torch.no_grad(), in_precision(precision, self.device):
            model(x)
            torch.cuda.synchronize(self.device)
            start = time.perf_counter()
            for _ in range(2):
                model(x)
            torch.cuda.synchronize(self.device)
        return (time.perf_counter() - start) / 2
