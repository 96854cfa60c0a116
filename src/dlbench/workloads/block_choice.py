"""`--block auto` and `--precision auto`: the output block, memory layout and precision that
predict a volume fastest on this machine, with an output that agrees with fp32.

Precision: on a GPU, `auto` runs a probe tile of the volume in fp32, fp16 and bf16; a half type
whose output differs from fp32's by at most AGREEMENT of fp32's largest output magnitude may
run, and the fastest of those is taken (fp32 where none agrees). The measured differences are
kept in the record.

Block: the model's time grows with a tile's voxels at about one rate, whatever the tile's shape,
so the blocking whose tiles (block + 2 x halo, the same for cut blocks) hold the fewest voxels in
all is the first candidate (on N GPUs: counting the tiles of the busiest rank N times). Blocks are
the volume split into equal parts along each axis, ranked by the voxels their tiles hold; the
first whose tile fits is taken. The GPU's memory bounds a tile: the bytes a forward takes per
voxel are measured on two small tiles, and the candidate's own forward pass is measured. cuDNN's
32-bit indexing bounds it too (no convolution may produce 2^31 elements or more: past it cuDNN
fails, at worst with an illegal memory access, which ends the process); dlbench's 3D convolutions
run in depth slabs past it (models.slabs), and the bound is computed, never tried, for the
convolutions that do not.
The rate per voxel is not the same everywhere, though (cuDNN chooses its algorithm by shape, and
in fp32 a smaller tile can run several times faster than a larger one), so the candidate is timed
against the default block and a blocking of about a quarter of its tile, and the fastest over the
whole volume wins.

The timed probe also compares channels-last-3d with the default layout and, for a half-precision
run, fp16 with bf16 (both give the output within rounding).
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
from dlbench.models import slabs
from dlbench.workloads.runtime import is_oom, precision as in_precision

INDEX_LIMIT = slabs.INDEX_LIMIT  # elements of one convolution output (cuDNN's 32-bit indexing)
MEMORY_SHARE = 0.7  # of the GPU's memory one forward may take: the pipeline's next tile and the allocator's slack
CPU_TILE = 64 * 384 * 384  # without a GPU: a tile this large at most (~6 GB for unet3d in fp32), no probe
HALF = ("fp16", "bf16")
DEFAULT_BLOCK = (32, 384, 384)  # volume's --block before auto; a candidate auto must beat
AGREEMENT = 0.01  # a half type may run where its output is within 1% of fp32's largest output magnitude
# Operators that index with 32 bits: cuDNN's convolutions, and the 3D upsampling of the anisotropic net.
_INDEXED = {torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d,
            torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
            torch.nn.functional.conv_transpose3d, torch.nn.functional.interpolate}
PROBE_TILES = ((32, 128, 128), (64, 128, 128))  # the bytes per voxel of a forward: the slope between these


@dataclass
class Choice:
    block: tuple[int, ...]
    precision: str
    channels_last: bool
    why: str
    probes: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)  # --precision auto: each half type against fp32


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


def plans(shape: tuple[int, ...], halo: tuple[int, ...], max_tile: int, world: int = 1) -> list[Blocking]:
    """Blockings whose tiles hold at most `max_tile` voxels, the fewest computed voxels first
    (ties: fewer, larger tiles first)."""
    found = [Blocking(shape, block, halo) for block in _grid(shape, halo, max_tile)]
    return sorted(found, key=lambda b: (computed(b, world), len(b)))


def computed(blocking: Blocking, world: int = 1) -> int:
    """Voxels the model computes for the whole volume: every tile in full, cut blocks too; on
    `world` GPUs as long as the busiest one takes (9 tiles on 2 GPUs cost as much as 10)."""
    return rounds(blocking, world) * world * math.prod(blocking.tile)


def rounds(blocking: Blocking, world: int = 1) -> int:
    """Tiles on the busiest of `world` GPUs."""
    return -(-len(blocking) // world)


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
    """Records the largest output of a 32-bit-indexed operator, in elements per input voxel; those
    inside depth slabs keep under the bound by themselves."""

    def __init__(self, voxels: int) -> None:
        super().__init__()
        self.voxels, self.width, self.seen = voxels, 0.0, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _INDEXED and isinstance(out, torch.Tensor):
            self.seen = True
            if not slabs.active():
                self.width = max(self.width, out.numel() / self.voxels)
        return out


def convolution_width(model: torch.nn.Module, device: torch.device) -> float:
    """Elements of the model's largest 32-bit-indexed output per input voxel: 0 where every
    convolution runs in depth slabs, 64 for a model whose convolutions cannot be seen, such as a
    TorchScript file (a wide guess, so the bound holds)."""
    tile = (8, 32, 32)
    mode = _Widest(math.prod(tile))
    with torch.no_grad(), mode:
        model(torch.rand((1, 1, *tile), device=device))
    return mode.width if mode.seen else 64.0


def largest_tile(width: float) -> int | None:
    """The most voxels a tile may hold under 32-bit indexing; None: no bound."""
    return int((INDEX_LIMIT - 1) // width) if width else None


def describe(choice: Choice) -> str:
    layout = "channels-last-3d" if choice.channels_last else "default layout"
    return f"block {'x'.join(map(str, choice.block))}, {choice.precision}, {layout} ({choice.why})"


def choose(shape: tuple[int, ...], halo: tuple[int, ...], precision: str, channels_last: bool,
           model: torch.nn.Module, device: torch.device, *, block: tuple[int, ...] | None = None,
           sample: torch.Tensor | None = None, timer: Callable[..., float] | None = None, world: int = 1) -> Choice:
    """The block (`block` if given, else the fastest candidate), layout and precision for a run that
    asked for `precision` ('auto' too) on `world` GPUs. `sample` is a probe tile of the volume,
    [1, 1, Z, Y, X] on the device, for the agreement of half precision with fp32;
    `timer(tile, precision, channels_last)` gives seconds per tile (default: a short measurement of
    `model` on the GPU). The caller puts the model in the layout chosen (set_layout)."""
    if device.type != "cuda":
        return _on_cpu(shape, halo, precision, channels_last, block)
    checks = agreement(model, sample, device) if precision == "auto" else []
    timer = timer or _Timer(model, device)
    if block is not None:
        return _probe([Blocking(shape, block, halo)], precision, channels_last, timer, checks, "given", world)
    sized = _precisions(precision, checks)[0]  # the probed precisions take as much memory as this one
    width = convolution_width(model, device)
    by_memory = int(_memory_for_a_forward(device) / bytes_per_voxel(model, device, sized))
    by_index = largest_tile(width)
    ranked = plans(shape, halo, min(by_memory, by_index or by_memory), world)
    fitting = next((plan for plan in ranked if _fits(model, plan.tile, device, sized)), None)
    if fitting is None:
        raise UserError("--block auto found no block that fits this GPU's memory for this halo; give --block")
    bound = (f"largest convolution output {sig(math.prod(fitting.tile) * width / 1e9)}e9 elements of "
             f"{sig(INDEX_LIMIT / 1e9)}e9" if by_index and by_index <= by_memory else
             f"tiles of at most {sig(by_memory / 1e6)} Mvox in {percent(MEMORY_SHARE)} of the GPU's memory")
    return _probe(_candidates(fitting, shape, halo, world), precision, channels_last, timer, checks, bound, world)


def _on_cpu(shape, halo, precision: str, channels_last: bool, block) -> Choice:
    """Cheap on a CPU: no probe; fp32 for 'auto' (a CPU has no fast half precision)."""
    ran = "fp32" if precision == "auto" else precision
    if block is not None:
        return Choice(tuple(block), ran, channels_last, "given; no GPU: not timed")
    plan = plans(shape, halo, CPU_TILE)
    chosen = plan[0].block if plan else tuple(min(8, s) for s in shape)
    return Choice(chosen, ran, channels_last, "no GPU: the fewest computed voxels in tiles of at most "
                                              f"{sig(CPU_TILE / 1e6)} Mvox, not timed")


def _candidates(fitting: Blocking, shape, halo, world: int = 1) -> list[Blocking]:
    """The blocking with the fewest computed voxels that fits, the default block, and the best
    blocking whose tiles hold about a quarter of the first's: timed, since the rate per voxel
    depends on the tile (and on the precision) more than the voxel count says."""
    found = [fitting]
    default = tuple(min(b, s) for b, s in zip(DEFAULT_BLOCK, shape))
    quarter = plans(shape, halo, math.prod(fitting.tile) // 4, world)
    for plan in ([Blocking(shape, default, halo)] if len(default) == len(shape) else []) + quarter[:1]:
        if plan.block not in [f.block for f in found]:
            found.append(plan)
    return found


def agreement(model: torch.nn.Module, sample: torch.Tensor | None, device: torch.device) -> list[dict]:
    """For fp16 and bf16: the largest and mean difference of the output from fp32's on `sample`,
    relative to fp32's largest output magnitude, and whether it is within AGREEMENT."""
    if sample is None:
        return []
    set_layout(model, False)
    with torch.no_grad():
        with in_precision("fp32", device):
            want = model(sample).float()
        scale = float(want.abs().max()) or 1.0
        checks = []
        for p in HALF:
            with in_precision(p, device):
                diff = (model(sample).float() - want).abs()
            worst, mean = float(diff.max()) / scale, float(diff.mean()) / scale
            checks.append({"precision": p, "max_diff": worst, "mean_diff": mean, "agrees": worst <= AGREEMENT})
    return checks


def _precisions(precision: str, checks: list[dict]) -> tuple[str, ...]:
    """The precisions to time: the half types that agree for 'auto' (else fp32), both half types for
    a half-precision run (they give the output within rounding), the precision asked otherwise."""
    if precision == "auto":
        return tuple(c["precision"] for c in checks if c["agrees"]) or ("fp32",)
    return HALF if precision in HALF else (precision,)


def _probe(candidates: list[Blocking], precision: str, channels_last: bool, timer, checks: list[dict],
           block_reason: str, world: int = 1) -> Choice:
    """Precision and layout timed on the first candidate's tile; then each candidate blocking in
    that precision and layout; the fastest over the whole volume is chosen."""
    first = candidates[0]
    probes = _timed([(first, p, layout) for p in _precisions(precision, checks) for layout in (True, False)], timer,
                    world)
    best = max(probes, key=lambda r: r["mvox_per_s"])
    probes += _timed([(plan, best["precision"], best["channels_last"]) for plan in candidates[1:]], timer, world)
    fastest = max((r for r in probes if (r["precision"], r["channels_last"]) == (best["precision"], best["channels_last"])),
                  key=lambda r: r["mvox_per_s"])
    plan = next(c for c in candidates if list(c.block) == fastest["block"])
    why = "; ".join(filter(None, [_block_why(plan, probes, fastest, block_reason),
                                  _precision_why(precision, channels_last, probes, fastest, checks)]))
    return Choice(plan.block, fastest["precision"], fastest["channels_last"], why, probes, checks)


def _timed(runs: list[tuple[Blocking, str, bool]], timer, world: int = 1) -> list[dict]:
    """Each (blocking, precision, layout) timed in two rounds, the faster kept: the second round runs
    after every setting has compiled its kernels and tuned its algorithms (on a freshly started GPU
    the first round alone can rank a setting below one that is much slower).
    The rate is per GPU over the whole volume, the busiest GPU's tiles setting the time."""
    first = [timer(plan.tile, p, cl) for plan, p, cl in runs]
    seconds = [min(a, timer(plan.tile, p, cl)) for a, (plan, p, cl) in zip(first, runs)]
    return [{"block": list(plan.block), "precision": p, "channels_last": cl, "tile_s": t,
             "mvox_per_s": math.prod(plan.shape) / (rounds(plan, world) * world * t) / 1e6}
            for t, (plan, p, cl) in zip(seconds, runs)]


def _block_why(plan: Blocking, probes: list[dict], fastest: dict, reason: str) -> str:
    text = (f"{len(plan)} tiles of {'x'.join(map(str, plan.tile))}, {percent(plan.kept)} of computed voxels kept; "
            f"{reason}")
    others = [r for r in probes if r is not fastest and (r["precision"], r["channels_last"]) ==
              (fastest["precision"], fastest["channels_last"]) and r["block"] != fastest["block"]]
    if others:
        text += "; probe " + ", ".join(f"{'x'.join(map(str, r['block']))} {sig(r['mvox_per_s'])}"
                                       for r in [fastest, *others]) + " Mvox/s"
    return text


def _precision_why(asked: str, channels_last: bool, probes: list[dict], fastest: dict, checks: list[dict]) -> str:
    parts = [f"{c['precision']} {'agrees with fp32 within' if c['agrees'] else 'differs from fp32 by'} "
             f"{percent(c['max_diff'])}" for c in checks]
    text = (f"--precision auto: {', '.join(parts)} (at most {percent(AGREEMENT)} of the largest output allowed)"
            if checks else "")
    same = [r for r in probes if r["block"] == fastest["block"]]
    asked_probe = next((r for r in same if r["precision"] == asked and r["channels_last"] == channels_last), None)
    if asked_probe is not None and len(same) > 1:
        gain = fastest["mvox_per_s"] / asked_probe["mvox_per_s"] - 1
        text += ("; " if text else "") + (f"probe {sig(fastest['mvox_per_s'])} Mvox/s, {'+' if gain >= 0 else ''}"
                                          f"{percent(gain)} over the precision and layout asked")
    elif len(same) > 1:
        text += f"; probe {sig(fastest['mvox_per_s'])} Mvox/s, the fastest of {len(same)} precisions and layouts"
    return text


def set_layout(model: torch.nn.Module, channels_last: bool) -> torch.nn.Module:
    """The model (changed in place) in channels-last-3d or the default layout."""
    return model.to(memory_format=torch.channels_last_3d if channels_last else torch.contiguous_format)


def _peak(model: torch.nn.Module, tile: tuple[int, ...], device: torch.device, precision: str) -> int | None:
    """The most memory a forward on `tile` in `precision` holds at once, channels-last-3d (the
    layout timed first); None where it runs out."""
    try:
        x = torch.rand((1, 1, *tile), device=device).contiguous(memory_format=torch.channels_last_3d)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.no_grad(), in_precision(precision, device):
            set_layout(model, True)(x)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    except Exception as error:  # noqa: BLE001
        if not is_oom(error):
            raise
        return None
    finally:
        torch.cuda.empty_cache()


def bytes_per_voxel(model: torch.nn.Module, device: torch.device, precision: str) -> float:
    """Memory a forward takes per tile voxel: the difference between two small tiles' peaks (the
    weights and the convolutions' workspaces are in both)."""
    small, large = (_peak(model, t, device, precision) or 0 for t in PROBE_TILES)
    return max((large - small) / (math.prod(PROBE_TILES[1]) - math.prod(PROBE_TILES[0])), 1.0)


def _fits(model: torch.nn.Module, tile: tuple[int, ...], device: torch.device, precision: str) -> bool:
    peak = _peak(model, tile, device, precision)
    return peak is not None and peak < _memory_for_a_forward(device)


def _memory_for_a_forward(device: torch.device) -> float:
    return MEMORY_SHARE * torch.cuda.get_device_properties(device).total_memory


class _Timer:
    """Seconds per tile on the GPU: one untimed forward (cuDNN's autotuning), then two timed, or
    one where a forward takes over a second (a large fp32 tile: the probe must stay short).
    Model and input both take the layout: a convolution runs channels-last if either is."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device

    def __call__(self, tile: tuple[int, ...], precision: str, channels_last: bool) -> float:
        fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
        model = set_layout(self.model, channels_last)
        x = torch.rand((1, 1, *tile), device=self.device).contiguous(memory_format=fmt)
        with torch.no_grad(), in_precision(precision, self.device):
            first = self._time(model, x, 1)
            return first if first > 1.0 else self._time(model, x, 2)

    def _time(self, model, x: torch.Tensor, repeats: int) -> float:
        torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        for _ in range(repeats):
            model(x)
        torch.cuda.synchronize(self.device)
        return (time.perf_counter() - start) / repeats
