"""Blockwise prediction on one GPU: the model alone vs dlbench `volume` end to end vs a plain loop.

All three run in this process on the same generated volume; dlbench and the model alone on the
same tiles (block + 2 x halo; 32x384x384 + 2 x 16x64x64 = 64x512x512 by default, or what
`--block auto` chose, precision and layout included), the plain loop on --plain-block:

  model alone   random tile already on the GPU, forward only, as
                many forward passes as the volume has blocks (a sustained run, like end to
                end). Reported two ways: per whole block (the model's own rate), and the
                volume's voxels over the time for all its tiles: the ceiling for end to end,
                since blocks cut at the far border cost a whole tile each
  dlbench       `volume` workload: reader threads, pinned memory, side-stream copies, writer
                threads, zarr output with completion record (bf16, channels-last-3d), at
                each optimisation level of --levels (eager by default)
  plain loop    read tile, .to(device), forward (fp16 autocast), .cpu(), write; one block
                after the other, for --plain-seconds (the loop the issue quotes at 21 Mvox/s)

Prints Mvox/s for each, the time for the generated volume (the seed's 1.9 gigavoxel
200x3072x3072 by default) and hours for 8.1 teravoxel on 1 GPU. The 8-GPU column says "not
measured": one GPU measures no scaling, and its rate x 8 would assume perfect scaling; hours on
8 GPUs come from `dlbench run volume --gpus N` (N >= 2), from the rate per GPU measured there.

  python benchmarks/volume_predict.py                      # the full benchmark, one H200, < 8 min
  python benchmarks/volume_predict.py --shape 40x1024x1024 # quicker
  python benchmarks/volume_predict.py --block auto         # dlbench chooses block, layout, half type
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dlbench.data.blocking import Blocking
from dlbench.data.generate_volume import generate
from dlbench.data.prediction_store import PredictionStore
from dlbench.data.volumes import open_volume
from dlbench.launch.environment import prepare
from dlbench.models import registry
from dlbench.spec import BenchmarkSpec
from dlbench.units import parse_shape
from dlbench.launch.execute import execute
from dlbench.workloads.runtime import resolve_device
from dlbench.workloads.volume import with_kernels

PLATYNEREIS = 8.1e12


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--shape", default="200x3072x3072", help="generated volume ZxYxX (default: the seed's 1.9 Gvox)")
    p.add_argument("--block", default="32x384x384", help="output block ZxYxX of dlbench and the model alone, or 'auto'")
    p.add_argument("--plain-block", default="32x384x384", help="output block ZxYxX of the plain loop")
    p.add_argument("--precision", default="bf16", help="dlbench's precision (with --block auto it may choose the other "
                                                       "half type)")
    p.add_argument("--halo", default="16x64x64", help="halo ZxYxX on each side")
    p.add_argument("--model", default="unet3d", help="registry model")
    p.add_argument("--readers", type=int, default=min(8, os.cpu_count() or 1), help="dlbench's reader threads")
    p.add_argument("--kernels", default="auto", help="dlbench's --kernels (auto, fused, pytorch); the model alone "
                                                     "runs with what dlbench ran")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu (cpu only to try the script)")
    p.add_argument("--workdir", default=None, help="local disk folder for the volume and outputs (default: a temp dir)")
    p.add_argument("--model-iters", type=int, default=0, help="timed forward passes for the model alone "
                   "(default: one per block of the volume)")
    p.add_argument("--levels", default="eager", help="dlbench --optimize levels to run, comma-separated")
    p.add_argument("--plain-seconds", type=float, default=60.0, help="how long the plain loop runs (it extrapolates)")
    p.add_argument("--gpus-extrapolate", type=int, default=8, help="GPU count for the second hours column (not "
                   "measured by this one-GPU benchmark: `dlbench run volume --gpus N` measures it)")
    p.add_argument("--keep", action="store_true", help="keep the generated volume and outputs")
    return p.parse_args()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_alone(name: str, blocking: Blocking, device: torch.device, iters: int, precision: str = "bf16",
                channels_last: bool = True, kernels: str = "pytorch") -> float:
    """Seconds per forward pass on a random tile already on the device, with the run's kernels."""
    torch.manual_seed(0)
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
    model, _ = with_kernels(registry.build(name).to(device).eval().to(memory_format=fmt), kernels, device)
    x = torch.rand((1, 1, *blocking.tile), device=device).contiguous(memory_format=fmt)
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
        for _ in range(3):
            model(x)
        sync(device)
        start = time.perf_counter()
        for _ in range(iters):
            model(x)
        sync(device)
    seconds = (time.perf_counter() - start) / iters
    del model, x
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return seconds


def dlbench_volume(args, volume: str, output: str, level: str) -> tuple[dict, dict]:
    """The run's metrics and its spec as recorded (what --block auto chose)."""
    spec = BenchmarkSpec(workload="volume", model=args.model, batch=1, precision=args.precision, channels_last=True,
                         device=args.device, warmup=2, optimize=level,
                         options={"input": volume, "output": output, "block": args.block, "halo": args.halo,
                                  "dtype": "uint8", "readers": args.readers, "writers": 4, "queue": 8,
                                  "overwrite": True, "kernels": args.kernels})
    result = execute(spec, {})
    if result.status != "ok":
        raise SystemExit(f"dlbench volume failed: {result.status} {result.error}")
    for phase in ("wait", "read", "compute", "write", "step"):  # where the time of few, large tiles goes
        print(f"  {phase} per block [s]: " + " ".join(f"{v:.3f}" for v in result.samples.get(phase, [])), flush=True)
    return result.metrics, result.spec


def padded_tile(volume, blocking: Blocking, block) -> np.ndarray:
    """What a hand-written loop does: read the part of the tile inside the volume, np.pad the rest."""
    begin = [b - h for b, h in zip(block.begin, blocking.halo)]
    end = [b + t for b, t in zip(begin, blocking.tile)]
    box = tuple(slice(max(b, 0), min(e, s)) for b, e, s in zip(begin, end, blocking.shape))
    return np.pad(volume.read(box), [(x.start - b, e - x.stop) for x, b, e in zip(box, begin, end)], mode="reflect")


def plain_loop(args, volume_path: str, output: str, blocking: Blocking, device: torch.device) -> tuple[float, int]:
    """Read, .to(device), forward (fp16), .cpu(), write: one block at a time. Returns (Mvox/s, blocks done)."""
    torch.manual_seed(0)
    model = registry.build(args.model).to(device).eval()
    volume = open_volume(volume_path)
    store = PredictionStore(output)
    store.create({"plain": True}, (1, *blocking.shape), (1, *blocking.block), "uint8", resume=False, overwrite=True)
    store.open()
    voxels, done = 0, 0
    start = time.perf_counter()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16, enabled=device.type == "cuda"):
        for block in blocking:
            tile = padded_tile(volume, blocking, block).astype(np.float32) / 255.0
            y = model(torch.from_numpy(tile)[None, None].to(device))[0]
            y = y[(slice(None), *blocking.crop(block))].float().clamp(0, 1).mul(255).round().to(torch.uint8).cpu()
            store.write_block(block.index, block.box, y[:1].numpy())
            voxels += int(np.prod(block.shape))
            done += 1
            if time.perf_counter() - start > args.plain_seconds:
                break
    seconds = time.perf_counter() - start
    volume.close()
    return voxels / seconds / 1e6, done


NOT_MEASURED = "not measured"  # hours on several GPUs: this benchmark runs one


def row(name: str, mvox: float, volume_voxels: int, gpus: int) -> list[str]:
    hours = PLATYNEREIS / (mvox * 1e6) / 3600
    several = f"{hours:8.2f}" if gpus == 1 else NOT_MEASURED
    return [name, f"{mvox:8.1f}", f"{volume_voxels / (mvox * 1e6):9.1f}", f"{hours:8.1f}", several]


def main() -> None:
    args = parse_args()
    device = resolve_device(args.device)
    shape = parse_shape(args.shape)
    halo = parse_shape(args.halo)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dlbench-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    volume = workdir / "volume.zarr"
    try:
        start = time.perf_counter()
        if not volume.exists():
            generate(volume, shape, "zarr", labels=False, workers=min(12, os.cpu_count() or 1))
        print(f"generated {args.shape} in {time.perf_counter() - start:.1f} s on {device}", flush=True)

        runs, ran = {}, {}
        for level in args.levels.split(","):
            runs[level], ran = dlbench_volume(args, str(volume), str(workdir / f"dlbench-{level}.zarr"), level)
            print(f"dlbench volume {level}: {runs[level]['mvox_per_s']:.1f} Mvox/s, {runs[level]['total_s']:.1f} s"
                  + (f"; --block auto: {runs[level]['block_choice']}" if "block_choice" in runs[level] else ""), flush=True)
        block = tuple(runs[level]["block"]) if args.block == "auto" else parse_shape(args.block)
        blocking = Blocking(shape, block, halo)
        precision, cl = ran.get("precision", args.precision), ran.get("channels_last", True)
        kernels = runs[level]["kernels"]
        per_tile = model_alone(args.model, blocking, device, args.model_iters or len(blocking), precision, cl, kernels)
        whole = np.prod(blocking.block) / per_tile / 1e6
        alone = np.prod(shape) / (per_tile * len(blocking)) / 1e6
        print(f"model alone ({precision}, {kernels} kernels): {per_tile * 1e3:.2f} ms a tile, {whole:.1f} Mvox/s of whole blocks, "
              f"{alone:.1f} Mvox/s over this volume's {len(blocking)} tiles (blocks {blocking.fill:.1%} filled)", flush=True)
        plain_blocking = Blocking(shape, parse_shape(args.plain_block), halo)
        plain, blocks = plain_loop(args, str(volume), str(workdir / "plain.zarr"), plain_blocking, device)
        print(f"plain loop: {plain:.1f} Mvox/s over {blocks} blocks", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    voxels = int(np.prod(shape))
    n = args.gpus_extrapolate
    header = ["method", "Mvox/s", f"{args.shape} [s]", "8.1 Tvox 1 GPU [h]", f"8.1 Tvox {n} GPUs [h]"]
    rows = [row(f"model alone, whole blocks ({precision})", whole, voxels, n),
            row("model alone, this volume's tiles", alone, voxels, n),
            *[row(f"dlbench volume {level} ({precision})", m["mvox_per_s"], voxels, n) for level, m in runs.items()],
            row(f"plain sync loop (fp16, block {args.plain_block})", plain, voxels, n)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    print(f"{args.model}, tile {'x'.join(map(str, blocking.tile))} (block {'x'.join(map(str, block))} + halo {args.halo}), "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}")
    for r in [header, *rows]:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)))
    if n > 1:
        print(f"8.1 Tvox on {n} GPUs: {NOT_MEASURED} on one GPU; `dlbench run volume --gpus N` (N >= 2) gives them "
              f"from the rate per GPU it measures")
    for level, metrics in runs.items():
        print(f"\ndlbench {level} end to end / model alone on the same tiles: {metrics['mvox_per_s'] / alone:.2f} "
              f"(target >= 0.9); "
              f"phases [s]: " + ", ".join(f"{k} {v:.1f}" for k, v in metrics["phase_s"].items() if k != "step")
              + f"; data-wait share {metrics['data_wait_share']:.1%}")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
