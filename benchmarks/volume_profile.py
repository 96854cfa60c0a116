"""Where the time of blockwise prediction goes: the model alone and dlbench `volume`, on the
same number of tiles, under torch.profiler and the GPU monitor.

For each: GPU kernel time per tile (all streams), kernels per tile, the share of the window
with no kernel running, the mean SM clock and power, and the kernels that account for the
difference between the two.

  python benchmarks/volume_profile.py [--shape 96x2048x2048] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kernels import kernels

from dlbench.data.blocking import Blocking
from dlbench.data.generate_volume import generate
from dlbench.launch.environment import prepare
from dlbench.measure.monitor import Monitor
from dlbench.models import registry
from dlbench.spec import BenchmarkSpec
from dlbench.units import parse_shape
from dlbench.launch.execute import execute


def model_alone(name: str, tile: tuple[int, ...], tiles: int):
    torch.manual_seed(0)
    model = registry.build(name).cuda().eval().to(memory_format=torch.channels_last_3d)
    x = torch.rand((1, 1, *tile), device="cuda").contiguous(memory_format=torch.channels_last_3d)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with Monitor("cuda") as monitor, profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(tiles):
                model(x)
            torch.cuda.synchronize()
    return prof, monitor.data.summary()


def pipeline(name: str, volume: Path, out: Path):
    spec = BenchmarkSpec(workload="volume", model=name, precision="bf16", channels_last=True, device="cuda", warmup=2,
                         options={"input": str(volume), "output": str(out), "dtype": "uint8", "readers": 8,
                                  "writers": 4, "queue": 8, "overwrite": True})
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = execute(spec, {})
    if result.status != "ok":
        raise SystemExit(f"dlbench volume failed: {result.error}")
    return prof, result.metrics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="96x2048x2048")
    p.add_argument("--model", default="unet3d")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dlbench-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    volume = work / "volume.zarr"
    if not volume.exists():
        generate(volume, parse_shape(args.shape), "zarr", labels=False, workers=12)
    blocking = Blocking(parse_shape(args.shape), (32, 384, 384), (16, 64, 64))
    n = len(blocking)
    start = time.perf_counter()
    prof_p, metrics = pipeline(args.model, volume, work / "out.zarr")
    print(f"pipeline: {metrics['mvox_per_s']:.1f} Mvox/s over {n} blocks ({time.perf_counter() - start:.0f} s with set-up)")
    prof_a, alone = model_alone(args.model, blocking.tile, n)
    rows = {}
    calls = {}
    for label, prof, mon in (("model alone", prof_a, alone), ("dlbench volume", prof_p, metrics)):
        k = kernels(prof)
        rows[label], calls[label] = k.seconds, k.calls
        print(f"{label:15s} kernel time {sum(k.seconds.values()) / n * 1e3:6.2f} ms/tile, busy {k.busy_s / n * 1e3:6.2f} "
              f"ms/tile, {sum(k.calls.values()) / n:5.0f} kernels/tile, idle {k.idle_share:.1%} of the window; SM clock "
              f"{mon.get('sm_clock_mean_mhz')} MHz mean (min {mon.get('sm_clock_min_mhz')}), power {mon.get('power_mean_w')} W, "
              f"throttle {mon.get('throttle_reasons')}")
    names = set(rows["model alone"]) | set(rows["dlbench volume"])
    diff = sorted(names, key=lambda k: -abs(rows["dlbench volume"].get(k, 0) - rows["model alone"].get(k, 0)))
    print("\nlargest differences, ms per tile (dlbench volume - model alone; the pipeline's figure includes"
          " its warm-up tiles), and the mean duration of one call in each [ms]:")
    for k in diff[:15]:
        a, b = rows["model alone"].get(k, 0) / n * 1e3, rows["dlbench volume"].get(k, 0) / n * 1e3
        ca, cb = calls["model alone"].get(k, 0), calls["dlbench volume"].get(k, 0)
        mean_a = rows["model alone"].get(k, 0) / ca * 1e3 if ca else 0.0
        mean_b = rows["dlbench volume"].get(k, 0) / cb * 1e3 if cb else 0.0
        print(f"  {b - a:+7.3f}  ({a:7.3f} -> {b:7.3f}; per call {mean_a:.3f} -> {mean_b:.3f}, calls {ca} -> {cb})  {k[:100]}")
    print("\nCUDA runtime calls on the host during dlbench volume (total ms, calls, longest ms):")
    api: dict[str, list[float]] = {}
    for e in prof_p.events():
        if not str(e.device_type).endswith("CUDA") and e.name.startswith("cuda"):
            api.setdefault(e.name, []).append((e.time_range.end - e.time_range.start) / 1e3)
    for name, d in sorted(api.items(), key=lambda kv: -sum(kv[1]))[:12]:
        print(f"  {sum(d):9.1f} ms {len(d):7d} calls, longest {max(d):7.2f} ms  {name}")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
