"""volume: blockwise prediction of a volume that need not fit in memory (seed 000/001 prediction).

The volume is cut into output blocks (`data/blocking.py`); each block's input tile carries a
halo and is reflect-padded at the border; the model's output is cropped to the block and
written as whole chunks of a zarr/N5 output. The tile pipeline (`volume_pipeline.py`) overlaps
reads, copies, the forward and writes.

The blocks left to do are dealt out in turn over torchrun ranks. A completion record in the
output makes `resume` skip finished blocks, with any number of processes. The measurement is
the whole volume, after a short warm-up on the first tile, which is reported on its own. One
step is one tile: its FLOPs are counted once, and TFLOP/s, the GPU monitor's figures and energy
come from the same code as every workload's.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import os
import shutil
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from dlbench import scratch
from dlbench.data.blocking import Block, Blocking
from dlbench.data.prediction_store import FINGERPRINT, PRECISIONS, PredictionStore, chunks_for
from dlbench.data.volumes import DamagedVolume, Volume, fingerprint, open_volume
from dlbench.errors import BenchmarkFailed, UserError
from dlbench.figures import fixed, percent, sig
from dlbench.options import shown
from dlbench.measure.flops import count_flops
from dlbench.measure.loop import Progress, common_metrics, mean_step, synchronize
from dlbench.measure.monitor import Monitor, MonitorData
from dlbench.measure.profile import compact, profile_steps
from dlbench.models import fused, registry, slabs
from dlbench.results.measurement import Measurement, Run, Throughput, Volume as VolumeFigures, Window, combine
from dlbench.units import hours_for, parse_shape
from dlbench.workloads import Planned, block_choice, distributed, optimize, tuning
from dlbench.workloads.builtin import CPU_VOLUME, SEED_VOLUME, VolumeOptions, parse_voxels
from dlbench.workloads.runtime import is_oom, precision as in_precision, resolve_device
from dlbench.workloads.volume_pipeline import (NONFINITE_HINT, NonFinite, Pipeline, buffer_count,
                                               count_nonfinite, forward, host_dtype, make_buffers, nonfinite_voxels,
                                               read_host_tile, scale, to_input)


def generated_shape(text: str, device: torch.device) -> tuple[int, ...]:
    if text == "auto":
        text = SEED_VOLUME if device.type == "cuda" else CPU_VOLUME
    return parse_shape(text)


# ---------------------------------------------------------------- model


def load_model(name: str, device: torch.device, channels_last: bool, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = registry.resolve(name).build().to(device)
    with contextlib.suppress(NotImplementedError):  # torch.export modules have no train/eval switch
        model = model.eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    return model


def fusable(asked: str, device: torch.device) -> bool:
    """Whether the fused kernels will run; --kernels fused where they cannot is the user's error.
    Triton is imported only where the kernels were not turned off."""
    if asked == "pytorch":
        return False
    can = device.type == "cuda" and fused.available()
    if asked == "fused" and not can:
        raise UserError("--kernels fused needs a CUDA GPU and Triton; use --kernels pytorch (or auto)")
    return can


def with_kernels(model: torch.nn.Module, asked: str, device: torch.device) -> tuple[torch.nn.Module, VolumeFigures]:
    """The model with dlbench's fused kernels where asked (for auto: where they can run) and where
    they apply, and its 3D convolutions in depth slabs past 32-bit indexing (models.slabs)."""
    count = 0
    if fusable(asked, device):
        model, count = fused.fuse(model)
    model, slabbed = slabs.split(model)
    return model, VolumeFigures(kernels="fused" if count else "pytorch", slab_layers=slabbed, fused_layers=count or None)


# ---------------------------------------------------------------- the workload


@contextlib.contextmanager
def _input(opts: VolumeOptions, seed: int, group: distributed.Group, progress: Progress) -> Iterator[str]:
    """The input's PATH[:KEY]; without one, a synthetic volume generated in a temporary folder."""
    if opts.input:
        yield opts.input
        return
    from dlbench.data.generate_volume import generate

    shape = generated_shape(opts.volume_shape, group.device)
    folder = scratch.make("volume") if group.rank == 0 else None
    try:
        if group.rank == 0:
            generate(Path(folder) / "volume.zarr", shape, "zarr", seed=seed, labels=False,
                     workers=min(16, os.cpu_count() or 1), progress=lambda d, t: progress("generate", d, t))
        folder = group.broadcast(folder)
        yield str(Path(folder) / "volume.zarr")
    finally:
        group.barrier()
        if group.rank == 0 and folder:
            shutil.rmtree(folder, ignore_errors=True)


def preflight(spec) -> list[str]:
    """The checks a user can fail, before anything runs: the input opens, the block fits it, the output is new."""
    opts = spec.opts
    fusable(opts.kernels, resolve_device(spec.device))
    volume = open_volume(opts.input) if opts.input else None
    try:
        if volume is not None and not opts.allow_nonfinite:
            check_sample(volume)
        if volume is not None and opts.block != "auto":
            Blocking(volume.shape, parse_shape(opts.block), parse_shape(opts.halo))
        if opts.output:  # --resume reads the input again, to tell whether it changed
            PredictionStore(opts.output).check_new(opts.resume, opts.overwrite, volume)
    finally:
        if volume is not None:
            volume.close()
    return []


SAMPLE = (16, 256, 256)  # the corner of the input looked at for NaN and Inf before the run (at most 4 MB)


def check_sample(volume: Volume) -> None:
    """NaN or Inf in a corner of the input is the user's to fix before anything runs; the rest of
    the volume is checked tile by tile as the run reads it."""
    box = tuple(slice(0, min(n, s)) for n, s in zip(SAMPLE, volume.shape))
    try:
        found = count_nonfinite(volume.read(box)) if np.issubdtype(volume.dtype, np.floating) else 0
    except DamagedVolume as error:  # found before the run: the user's to fix
        raise UserError(str(error)) from None
    if found:
        where = ", ".join(f"{axis} 0-{b.stop}" for axis, b in zip("zyx", box))
        raise UserError(f"input {volume.name} holds {nonfinite_voxels(found)} in the part checked before the run "
                        f"({where}): {NONFINITE_HINT}")


def _warmup(model, blocking: Blocking, volume: Volume, device, channels_last: bool, repeats: int,
            nonfinite: NonFinite) -> tuple[int, float, float]:
    """Run a tile `repeats` times: compilation (the fused kernels') and autotuning stay out of the
    measurement. They depend on the tile's shape and type only, so the forward runs on random values
    made on the device while the first tile is read on a thread beside it, for its NaN and Inf
    check before the output is made (the run reads it again, in its window)."""
    with ThreadPoolExecutor(1, "dlbench-first-read") as pool:
        first = pool.submit(read_host_tile, blocking, volume, blocking[0], nonfinite=nonfinite, counted=False)
        try:
            tile = torch.rand(blocking.tile, device=device)
            start = time.perf_counter()
            channels = 0
            for _ in range(max(1, repeats)):
                channels = forward(model, to_input(tile, channels_last), blocking.tile).shape[0]
            synchronize(device)
            total = time.perf_counter() - start
        finally:
            first.result()  # the check's error first: a model that fails on a tile with NaN is the input's fault
    return channels, total, total / max(1, repeats)


def _warmup_checked(name: str, model, blocking: Blocking, volume: Volume, device, channels_last: bool, repeats: int,
                    nonfinite: NonFinite):
    """The warm-up; a user's model file that cannot run this tile (an export for another shape) is a user error."""
    try:
        return _warmup(model, blocking, volume, device, channels_last, repeats, nonfinite)
    except (UserError, BenchmarkFailed, torch.cuda.OutOfMemoryError):  # the input's fault, or the memory's
        raise
    except Exception as error:  # noqa: BLE001
        if not name.endswith(registry.MODEL_FILES) or is_oom(error):
            raise
        tile = "x".join(map(str, blocking.tile))
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise UserError(f"model file {name} fails on a 1x1x{tile} tile ({first}): save it for this tile shape "
                        f"or with dynamic shapes") from None


def _compiled(model) -> bool:
    dynamo = sys.modules.get("torch._dynamo")  # not imported: nothing was compiled, and no import is needed to say so
    return dynamo is not None and isinstance(model, dynamo.eval_frame.OptimizedModule)


def tile_flops(model, tile: tuple[int, ...], device, channels_last: bool) -> int:
    """The model's FLOPs for one tile, counted once: every block runs the same tile shape. On a CPU
    they are counted on a copy on the meta device, by shapes alone: there one tile's forward takes
    minutes, and the count needs none of it. A model that cannot run there is counted as it runs."""
    if device.type == "cpu" and not _compiled(model):
        try:
            with warnings.catch_warnings():  # moving a copy reads .grad of its (inference) parameters: no news
                warnings.simplefilter("ignore", UserWarning)
                meta = copy.deepcopy(model).to("meta")
            return _count_flops(meta, tile, torch.device("meta"), channels_last)
        except Exception:  # noqa: BLE001 - custom or exported code that needs real tensors
            pass
    return _count_flops(model, tile, device, channels_last)


def _tuned_flops(source: str) -> int | None:
    """A tile's FLOPs as the run that tuned this choice counted them (the same model and tile): counting
    again costs a forward under PyTorch's FLOP counter, whose first use imports torch's compiler."""
    tuned = tuning.current() if source == "tuned" else None
    return None if tuned is None else tuned.choice.get("tile_flops")


def _count_flops(model, tile: tuple[int, ...], device, channels_last: bool) -> int:
    x = to_input(torch.rand(tile, device=device), channels_last)
    return count_flops(lambda: forward(model, x, tile))


def _settings(spec, volume: Volume, blocking: Blocking, channels: int, dtype: str, precision: str) -> dict:
    """What the output depends on; --resume must match all of it."""
    return {"input": volume.name, "input_shape": list(volume.shape), "model": spec.model, "seed": spec.seed,
            "precision": precision, "block": list(blocking.block), "halo": list(blocking.halo),
            "channels": channels, "dtype": dtype, FINGERPRINT: fingerprint(volume)}


def _choose(opts: VolumeOptions, spec, store: PredictionStore, volume: Volume, halo, model, device,
            group: distributed.Group, nonfinite: NonFinite) -> tuple[block_choice.Choice, str]:
    """Block, precision and layout, and where they came from ("measured" here: a tuning to keep;
    "tuned" earlier; "given"): what an
    output being resumed was written with; the block and precision given when both are; what an
    earlier run tuned for this input on this machine (workloads/tuning.py); else what rank 0's probe
    chooses (every rank predicts with the same)."""
    block = None if opts.block == "auto" else parse_shape(opts.block)
    stored = store.settings() if opts.resume else None
    if stored and stored.get("halo") == list(halo) and block in (None, tuple(stored["block"])):
        precision = stored["precision"] if spec.precision == "auto" else spec.precision
        cl = spec.channels_last or bool(stored.get("channels_last"))  # the layout --block auto chose for it
        block_choice.set_layout(model, cl)
        return block_choice.Choice(tuple(stored["block"]), precision, cl, "as the output being resumed"), "given"
    if block is not None and spec.precision != "auto":
        return block_choice.Choice(block, spec.precision, spec.channels_last, "given"), "given"
    tuned = tuning.current()
    if tuned is not None:  # the launcher found it under this input's shape and dtype, this machine and versions
        # the user's own --block, --precision and --channels-last win over what an earlier run chose
        choice = block_choice.Choice(block or tuple(tuned.choice["block"]),
                                     tuned.choice["precision"] if spec.precision == "auto" else spec.precision,
                                     spec.channels_last or bool(tuned.choice["channels_last"]), tuned.said())
        block_choice.set_layout(model, choice.channels_last)
        return choice, "tuned"
    choice = None
    if group.rank == 0:
        sample = _sample(volume, halo, device, nonfinite) if spec.precision == "auto" and device.type == "cuda" else None
        choice = block_choice.choose(volume.shape, halo, spec.precision, spec.channels_last, model, device,
                                     block=block, sample=sample, world=group.world)
    choice = group.broadcast(choice)
    block_choice.set_layout(model, choice.channels_last)
    return choice, "measured"


def tuning_facts(spec) -> dict | None:
    """What --block auto and --precision auto choose from beyond the spec's general fields (the
    launcher's key for the tuning it keeps): the input's shape and type, the halo, the kernels.
    None where nothing is chosen."""
    opts = spec.opts
    if opts.block != "auto" and spec.precision != "auto":
        return None
    shape, dtype = _input_facts(spec)
    return {"input_shape": list(shape), "input_dtype": dtype, "block": opts.block,
            "halo": list(parse_shape(opts.halo)), "kernels": opts.kernels}


def _input_facts(spec) -> tuple[tuple[int, ...], str]:
    """The input's shape and type, read from its metadata; the generated volume's without --input."""
    if not spec.opts.input:
        return generated_shape(spec.opts.volume_shape, resolve_device(spec.device)), "uint8"
    volume = open_volume(spec.opts.input)
    try:
        return tuple(volume.shape), str(volume.dtype)
    finally:
        volume.close()


# Voxels one generating thread makes a second (2-core EPYC: 2.3 Mvox/s on 2 threads; H200 host: 1.9 Gvox
# in 31.4 s on 16): a stand-in for the estimate, the order of magnitude.
GENERATED_PER_THREAD = 2e6
# On a CPU a 3D U-Net's convolutions on a whole tile run at about a matmul's rate (unet3d, 56x256x256
# tiles on 2 EPYC cores: 102% of the measured fp32 ceiling), twice a 2D CNN's share of it.
CPU_EFFICIENCY = 1.0


def planned(spec) -> Planned:
    """What a run of `spec` will compute, for its estimate: one tile a step, as many steps as the busiest
    rank's blocks, `warmup` forwards before them, and the input generated first where none is given.
    On a CPU the block is what --block auto will choose (not timed); on a GPU the probe's choice is not
    known before it runs, and the default block (the one it must beat) bounds the work."""
    opts = spec.opts
    device = resolve_device(spec.device)
    shape, halo = _input_facts(spec)[0], parse_shape(opts.halo)
    if opts.block != "auto":
        block = parse_shape(opts.block)
    elif device.type == "cuda":
        block = tuple(min(b, s) for b, s in zip(block_choice.DEFAULT_BLOCK, shape))
    else:
        block = block_choice.choose(shape, halo, spec.precision, spec.channels_last, None, device).block
    blocking = Blocking(shape, block, halo)
    on_gpu = device.type == "cuda"
    precision = spec.precision if spec.precision != "auto" else ("fp16" if on_gpu else "fp32")
    made = () if opts.input else (("generating the input", int(np.prod(shape)) / (
        GENERATED_PER_THREAD * min(16, os.cpu_count() or 1))),)
    return Planned((1, 1, *blocking.tile), block_choice.rounds(blocking, spec.gpus), max(1, spec.warmup), precision,
                   counted_free=not on_gpu, efficiency=None if on_gpu else CPU_EFFICIENCY, prepare=made)


def tuned_problem(spec, facts: dict, choice: dict) -> str | None:
    """What makes a remembered choice unusable for the run of `spec` (`facts`: `tuning_facts(spec)`), or
    None: a block that is no block of this input, a precision or layout that is none, a tile FLOP count
    that is no count, or a block or precision other than the one the user gave (such a row was edited:
    its key holds what the user gave)."""
    block, shape, precision = choice.get("block"), facts["input_shape"], choice.get("precision")
    fits = isinstance(block, list) and len(block) == len(shape) and all(
        type(b) is int and 1 <= b <= s for b, s in zip(block, shape))
    if not fits:
        return f"block {shown(block)} is no block of the {'x'.join(map(str, shape))} input"
    if facts["block"] != "auto" and tuple(block) != parse_shape(facts["block"]):
        return f"block {'x'.join(map(str, block))} is not the --block {facts['block']} given"
    if precision not in PRECISIONS:
        return f"precision {shown(precision)} is none of {', '.join(PRECISIONS)}"
    if spec.precision not in ("auto", precision):
        return f"precision {precision} is not the --precision {spec.precision} given"
    if type(choice.get("channels_last")) is not bool:
        return f"channels_last {shown(choice.get('channels_last'))} is not true or false"
    flops = choice.get("tile_flops")
    if flops is not None and (type(flops) is not int or flops < 0):
        return f"tile_flops {shown(flops)} is no count"
    return None


def _sample(volume: Volume, halo: tuple[int, ...], device, nonfinite: NonFinite) -> torch.Tensor:
    """A probe tile of the volume itself (the first tile of default-sized blocks) for --precision auto:
    agreement with fp32 is judged on the data the run predicts, not on noise."""
    blocking = Blocking(volume.shape, tuple(min(b, s) for b, s in zip(block_choice.DEFAULT_BLOCK, volume.shape)), halo)
    tile = read_host_tile(blocking, volume, blocking[0], nonfinite=nonfinite, counted=False)
    return to_input(scale(tile.to(device), volume.dtype), False)


class _InPrecision(torch.nn.Module):
    """The model in another precision than the run's (a choice of --block auto)."""

    def __init__(self, model: torch.nn.Module, mode: str) -> None:
        super().__init__()
        self.model, self.mode = model, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with in_precision(self.mode, x.device):
            return self.model(x)


def run(spec, device: torch.device, progress: Progress):
    opts = spec.opts
    # The process group is left last: the input and output folders are removed after a barrier.
    with distributed.process_group(device, spec.declared.host_group) as group, \
            _input(opts, spec.seed, group, progress) as input_key, \
            _output(opts, group) as output:
        return _predict(spec, opts, input_key, output, group, progress)


@contextlib.contextmanager
def _output(opts: VolumeOptions, group: distributed.Group) -> Iterator[str]:
    if opts.output:
        yield opts.output
        return
    folder = scratch.make("prediction") if group.rank == 0 else None
    folder = group.broadcast(folder)
    try:
        yield str(Path(folder) / "prediction.zarr")
    finally:
        group.barrier()
        if group.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


@dataclasses.dataclass
class _Prepared:
    """What a run settles before its first block: the model as it will run, the blocks, the pipeline."""
    volume: Volume
    store: PredictionStore
    blocking: Blocking
    choice: block_choice.Choice
    source: str  # where the choice came from: measured, tuned or given
    optimized: dict
    kernels: VolumeFigures
    pipeline: Pipeline
    channels: int  # the model's output channels
    flops: int
    warmup_s: float
    warmup_tile_s: float


def _predict(spec, opts: VolumeOptions, input_key: str, output: str, group: distributed.Group, progress: Progress):
    device = group.device
    ready = _prepare(spec, opts, input_key, output, group, progress)
    finished, redone, mine = _share_out(spec, opts, ready, group, progress)
    progress("predict", 0, len(mine))  # the first tile can take a minute on a CPU
    try:
        with Monitor(device) as monitor:  # clocks, power and throttling while the blocks run
            wall = ready.pipeline.run(mine, progress)
    except BenchmarkFailed as error:  # NaN or Inf, or a damaged part of the input
        raise type(error)(f"{error}{_kept(opts, ready.store, len(ready.blocking))}") from None
    profile = _profile(spec, ready.pipeline, mine, ready.flops, group, progress)
    voxels = sum(int(np.prod(b.shape)) for b in mine)
    ready.volume.close()
    samples = ready.pipeline.log.samples()
    waits = samples["wait"]
    per_rank = group.gather(_RankShare(voxels, wall, len(mine), waits[0] if waits else 0.0,
                                       {k: float(sum(v)) for k, v in samples.items()}, ready.pipeline.nonfinite.voxels))
    group.barrier()
    own = _metrics(opts, ready.volume, ready.blocking, per_rank, group.world, len(finished), ready.warmup_s,
                   ready.warmup_tile_s, ready.store, device, redone)
    return combine(own, *_choice_figures(spec, opts, ready),
                   _common_metrics(wall, len(mine), ready.flops, monitor.data, voxels, profile)), samples


def _prepare(spec, opts: VolumeOptions, input_key: str, output: str, group: distributed.Group,
             progress: Progress) -> _Prepared:
    """Open the input and output, choose the block, build and warm the model, make the pipeline."""
    device = group.device
    volume = open_volume(input_key)
    store = PredictionStore(output)
    try:
        store.check_new(opts.resume, opts.overwrite, volume)
    except UserError:
        volume.close()
        raise
    halo = parse_shape(opts.halo)
    nonfinite = NonFinite(volume, opts.allow_nonfinite)
    model, kernels = with_kernels(load_model(spec.model, device, spec.channels_last, spec.seed), opts.kernels, device)
    progress("choose block", 0, 1)
    choice, source = _choose(opts, spec, store, volume, halo, model, device, group, nonfinite)
    cl, precision = choice.channels_last, choice.precision
    if precision != spec.precision:
        model = _InPrecision(model, precision)
    blocking = Blocking(volume.shape, choice.block, halo)
    most = -(-len(blocking) // group.world)  # the most blocks this rank will run
    # The tiles' page-locked buffers are made from here on, beside the model's warm-up; the outputs'
    # once the warm-up has shown the model's channels.
    tiles = make_buffers(buffer_count(opts.queue, most), int(np.prod(blocking.tile)), host_dtype(volume.dtype), device)
    ran = spec if precision == spec.precision else dataclasses.replace(spec, precision=precision)
    model, optimized = optimize.prepare(ran, model, to_input(torch.rand(blocking.tile, device=device), cl))
    progress("warm-up", 0, 1)
    channels, warmup_s, warmup_tile_s = _warmup_checked(spec.model, model, blocking, volume, device, cl, spec.warmup,
                                                        nonfinite)
    pipeline = Pipeline(blocking, volume, store, model, device, channels=channels, dtype=opts.dtype, channels_last=cl,
                        readers=opts.readers, writers=opts.writers, queue=opts.queue, most=most, nonfinite=nonfinite,
                        tiles=tiles)
    flops = _tuned_flops(source)
    if flops is None:
        progress("count FLOPs", 0, 1)
        flops = tile_flops(model, blocking.tile, device, cl)
    return _Prepared(volume, store, blocking, choice, source, optimized, kernels, pipeline, channels, flops, warmup_s,
                     warmup_tile_s)


def _share_out(spec, opts: VolumeOptions, ready: _Prepared, group: distributed.Group,
               progress: Progress) -> tuple[set[int], list[str], list[Block]]:
    """Create (or reopen) the output; the blocks done (their chunks checked where resumed), why any
    marked done is predicted again, and this rank's share of the blocks not yet done."""
    store, blocking = ready.store, ready.blocking
    if group.rank == 0:
        store.create({**_settings(spec, ready.volume, blocking, ready.channels, opts.dtype, ready.choice.precision),
                      "channels_last": ready.choice.channels_last},
                     (ready.channels, *ready.volume.shape), (ready.channels, *chunks_for(blocking.block)), opts.dtype,
                     opts.resume, opts.overwrite)
    group.barrier()
    store.open()
    # Rank 0's reading of the completion record for every rank: a rank that read it later could
    # see blocks another rank had written meanwhile, and share out another list.
    checked = None
    if group.rank == 0:
        progress("check output", 0, 1)
        checked = store.check_done(list(blocking)) if opts.resume else (store.done(), [])
    finished, redone = group.broadcast(checked)
    return finished, redone, [blocking[i] for i in share(len(blocking), finished, group.rank, group.world)]


def _choice_figures(spec, opts: VolumeOptions, ready: _Prepared) -> list[Measurement]:
    """The optimisation's and kernels' figures, and what `--block auto` / `--precision auto` chose."""
    choice, cl, precision = ready.choice, ready.choice.channels_last, ready.choice.precision
    parts = [Measurement.read(ready.optimized), Measurement(volume=ready.kernels)]
    if opts.block == "auto" or spec.precision == "auto":
        parts.append(Measurement(volume=VolumeFigures(
            block_choice=block_choice.describe(choice), block_probe=choice.probes,
            choice_asked={"block": opts.block, "precision": spec.precision}), run=Run(
            # the launcher keeps a measured choice for the next run on this input (launch/tuning.py)
            tuned={"block": list(choice.block), "precision": precision, "channels_last": cl, "tile_flops": ready.flops}
            if ready.source == "measured" else None,
            tuned_from=tuning.current().source() if ready.source == "tuned" else None),
            settled={"precision": precision, "channels_last": cl}))
    if choice.checks:
        parts.append(Measurement(volume=VolumeFigures(precision_check=choice.checks)))
    return parts


def _kept(opts: VolumeOptions, store: PredictionStore, blocks: int) -> str:
    """What a run stopped by NaN or Inf leaves: no output of its own, or the blocks of a named one
    that were written (all from finite tiles), which --resume completes."""
    if not opts.output:
        return ""
    return (f"; {len(store.done())} of {blocks} blocks are written to {store.path}, the rest is not (the output is "
            f"incomplete: once the input is fixed, --resume completes it)")


def share(count: int, finished: set[int], rank: int, world: int) -> list[int]:
    """This rank's blocks: the unfinished ones dealt out in turn, so every rank gets as many as the
    others or one fewer, however an interrupted run left them (dealing out all blocks and then
    skipping the finished ones could leave one rank all the work of a resumed run)."""
    remaining = [i for i in range(count) if i not in finished]
    return remaining[rank::world]


def _profile(spec, pipeline: Pipeline, blocks: list[Block], flops: int, group: distributed.Group,
             progress: Progress) -> dict | None:
    """--profile: that many more tiles through the device part of the pipeline under the profiler,
    their tiles read beforehand (the run reads ahead on its own threads). Every rank gathers."""
    if not spec.profile:
        return None
    summary = None
    if blocks:
        progress("profile", 0, spec.profile)
        chosen = [blocks[i % len(blocks)] for i in range(spec.profile)]
        tiles = {b.index: read_host_tile(pipeline.blocking, pipeline.volume, b, pin=pipeline.cuda) for b in chosen}
        queue = itertools.cycle([(b, tiles[b.index]) for b in chosen])  # profiling runs a few more
        trace = distributed.rank_path(spec.profile_trace, group.rank) if spec.profile_trace and group.distributed \
            else spec.profile_trace
        summary = profile_steps(lambda: pipeline.replay(*next(queue)), pipeline.device, spec.profile,
                                measured_step_s=_device_time_per_tile(pipeline.log.samples()), flops_per_step=flops,
                                trace_path=trace)
    ranks = group.gather(compact(summary) if summary else None)
    if summary and group.distributed:
        summary["ranks"] = ranks
    return summary


def _device_time_per_tile(samples: dict[str, list[float]]) -> float | None:
    """What a profiled tile is compared with: its copy in, compute and copy out one after the other,
    as the profile runs them. The pipeline's step (one tile's turn of the host loop) is not it:
    the host runs ahead of the GPU, and its copies overlap the next tile's compute."""
    means = [mean_step(samples.get(phase)) for phase in ("copy_in", "compute", "copy_out")]
    return sum(means) if all(m is not None for m in means) else mean_step(samples.get("step"))


def _common_metrics(wall: float, tiles: int, flops: int, monitor: MonitorData, voxels: int,
                    profile: dict | None) -> Measurement:
    """What every workload reports, one tile a step: FLOPs and TFLOP/s, this rank's GPU during
    the run (clocks, power, throttling), its energy per block and per Mvox. A tile's step is the
    run's wall time over its tiles, as the Mvox/s count it: the host loop's turns are not tiles
    (it runs ahead of the GPU by the queue, so its turns sum to less than the run, and a rate
    from them reads too high)."""
    steps = [wall / tiles] * tiles if tiles else []
    return common_metrics(steps, flops, monitor, voxels / 1e6 / tiles if tiles else 0.0, "mvox", profile)


@dataclasses.dataclass(frozen=True)
class _RankShare:
    """What one rank did, gathered on every rank to make the run's figures."""
    voxels: int
    wall: float  # seconds from its first block to its last
    blocks: int
    first_wait: float  # seconds the GPU waited for its first tile
    phases: dict[str, float]  # seconds in each phase of the pipeline, summed over its tiles
    nonfinite: int  # NaN or Inf voxels let through (--allow-nonfinite)


def _metrics(opts, volume: Volume, blocking: Blocking, per_rank: list[_RankShare], world: int, skipped: int,
             warmup_s: float, warmup_tile_s: float, store: PredictionStore, device: torch.device,
             redone: list[str] | None = None) -> Measurement:
    voxels = sum(r.voxels for r in per_rank)
    wall = max(r.wall for r in per_rank) or float("nan")
    mvox_s = voxels / wall / 1e6 if voxels else 0.0
    # Once per volume the GPU waits for its first tile; the rate after it is stored and told beside the
    # run's rate, but the hours follow the run's rate, the one every view prints beside them.
    first = max(r.first_wait for r in per_rank)
    sustained = voxels / (wall - first) / 1e6 if voxels and wall > first else mvox_s
    target = parse_voxels(opts.extrapolate)
    phases = {k: sum(r.phases[k] for r in per_rank) for k in per_rank[0].phases}
    compute = phases.get("compute") or float("nan")
    return Measurement(
        throughput=Throughput(mvox_s, "Mvox/s"),
        window=Window(total_s=wall, warmup_s=warmup_s),
        run=Run(processes=world),
        volume=VolumeFigures(
            mvox_per_s=mvox_s, voxels=voxels, blocks=sum(r.blocks for r in per_rank), blocks_skipped=skipped,
            blocks_redone=len(redone) if redone else None, redone_why=redone[:3] if redone else None,
            blocks_per_rank=[r.blocks for r in per_rank],
            volume_shape=list(volume.shape), volume_voxels=int(np.prod(volume.shape)),
            block=list(blocking.block), halo=list(blocking.halo), tile=list(blocking.tile),
            block_fill=blocking.fill, kept_share=blocking.kept,
            output=str(store.path), dtype=opts.dtype,
            phase_s=phases, data_wait_share=phases.get("wait", 0.0) / (wall * world) if voxels else 0.0,
            model_mvox_per_s=voxels / compute / 1e6 if voxels else None,
            warmup_tile_s=warmup_tile_s, first_tile_wait_s=first, sustained_mvox_per_s=sustained,
            nonfinite_voxels=sum(r.nonfinite for r in per_rank) if opts.allow_nonfinite else None,
            extrapolate_voxels=target, **_hours(target, mvox_s, world, device)))


EXTRAPOLATED = 8  # the GPU count the publications give hours for


def _hours(target: float, mvox_s: float, world: int, device: torch.device) -> dict:
    """Hours for `target` voxels at `mvox_s`, the run's rate over its whole window (the Mvox/s the run
    line and the report print beside the hours: `units.hours_for`, one definition in every view).
    `extrapolate_hours` maps a GPU count to hours, and
    `extrapolate_hours_basis` says for each how it was got. The run's own GPU count is measured.
    On N >= 2 GPUs, 8 GPUs are added at 8 x the rate per GPU measured on N: the
    scaling loss measured at N kept, none assumed beyond it. A run on one GPU gives one GPU only:
    it measured no scaling, and 8 x its rate would assume perfect scaling. A CPU run gives its
    own rate under "1" (GPU counts would be made up)."""
    def at(rate: float, gpus: int = 1) -> float | None:
        return hours_for(target, rate, gpus)

    if device.type != "cuda":
        return {"extrapolate_hours": {"1": at(mvox_s)},
                "extrapolate_hours_basis": {"1": f"measured on this CPU ({world} processes)" if world > 1
                                            else "measured on this CPU"}}
    hours = {str(world): at(mvox_s)}
    basis = {str(world): f"measured on {world} GPU{'s' if world > 1 else ''}"}
    if world >= 2 and world != EXTRAPOLATED:
        hours[str(EXTRAPOLATED)] = at(mvox_s / world, EXTRAPOLATED)
        basis[str(EXTRAPOLATED)] = f"extrapolated: {EXTRAPOLATED} x the rate per GPU measured on {world} GPUs"
    return {"extrapolate_hours": hours, "extrapolate_hours_basis": basis}


def _measured_hours(m: Measurement, on_gpu: bool) -> tuple[str, float | None]:
    """The hours at a result's own rate and the GPU count they are for ("1" on a CPU), computed again
    from the stored rate: results stored before held them at the rate after the first tile."""
    v = m.volume
    hours = _hours(v.extrapolate_voxels or 0, v.mvox_per_s or 0, m.run.processes or 1,
                   torch.device("cuda" if on_gpu else "cpu"))["extrapolate_hours"]
    world = str(m.run.processes or 1)
    key = world if on_gpu and world in hours else "1"
    return key, hours.get(key)


ROUGH = 1e5  # an extrapolation to more than this many times the voxels run is a rough figure, and says so


def _scaled(v) -> str:
    """Where the hours come from a small run (a CPU's 24x128x128 scaled twenty million-fold), say so."""
    factor = (v.extrapolate_voxels or 0) / v.voxels if v.voxels else 0
    return f" (rough: this run's volume scaled {sig(factor, 2)}-fold)" if factor > ROUGH else ""


def describe(m: Measurement) -> str:
    """Voxels, seconds and Mvox/s; the hours for the extrapolated volume at the run's measured rate
    on its GPUs (or this CPU), and on 8 GPUs where a run on several extrapolated them."""
    v = m.volume
    on_gpu = str(m.device or "cuda").startswith("cuda")
    key, hours = _measured_hours(m, on_gpu)
    where = (f"{key} GPU{'s' if key != '1' else ''}" if on_gpu else "this CPU")
    tvox = sig((v.extrapolate_voxels or 0) / 1e12)
    sustained = v.sustained_mvox_per_s
    after = (f" at its {sig(v.mvox_per_s)} Mvox/s (after the first tile's {sig(v.first_tile_wait_s)} s it ran at "
             f"{sig(sustained)} Mvox/s)" if sustained and sustained > 1.01 * v.mvox_per_s else "")
    extra = f", {tvox} Tvox in {fixed(hours, 1)} h on {where}{after}{_scaled(v)}" if hours else ""
    basis = v.extrapolate_hours_basis or {}
    eight = _hours(v.extrapolate_voxels or 0, v.mvox_per_s or 0, m.run.processes or 1,
                   torch.device("cuda"))["extrapolate_hours"].get(str(EXTRAPOLATED)) if on_gpu else None
    if on_gpu and eight and key != str(EXTRAPOLATED) and "extrapolated" in basis.get(str(EXTRAPOLATED), ""):
        extra += f" ({fixed(eight, 1)} h on {EXTRAPOLATED} GPUs, extrapolated from the rate per GPU on {key})"
    fill = 1.0 if v.block_fill is None else v.block_fill
    cut = (f"; the far border cuts blocks: {percent(1 - fill)} of the model's work is outside the volume"
           if fill < 0.95 else "")
    asked = v.choice_asked or {}
    chosen = (f"; asked --block {asked.get('block', 'auto')} --precision {asked.get('precision', '?')}, ran "
              f"{v.block_choice}" if v.block_choice else "")
    ranks = v.blocks_per_rank or []
    nonfinite = (f"; the input held {nonfinite_voxels(v.nonfinite_voxels)}, predicted as they are "
                 f"(--allow-nonfinite)" if v.nonfinite_voxels else "")
    shared = f" over {len(ranks)} processes: {'/'.join(map(str, ranks))}" if len(ranks) > 1 else ""
    why = v.redone_why or []
    more = f"; {v.blocks_redone - len(why)} more" if v.blocks_redone and v.blocks_redone > len(why) else ""
    redone = (f", {v.blocks_redone} of them predicted again though marked done ({'; '.join(why)}{more})"
              if v.blocks_redone else "")
    return (f"{sig(v.voxels / 1e6)} Mvox in {sig(m.window.total_s)} s = {sig(v.mvox_per_s)} Mvox/s "
            f"({v.blocks} blocks{shared}{redone}, {v.blocks_skipped} already done){extra}{cut}{chosen}"
            f"{nonfinite}")
