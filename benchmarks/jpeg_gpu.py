"""Real JPEGs against synthetic data on one GPU, and the GPU decoders side by side.

    python benchmarks/jpeg_gpu.py --folder DIR [--large DIR2] [--rounds 3] [--steps 60]
        [--optimize eager,max] [--workers 16] [--gpus 2] [--json out.json]

1. **Same images.** 64 files of the folder decoded by Pillow (the CPU path's library), by
   torchvision's nvjpeg on the SMs and by the GPU's hardware decoders (nvImageCodec): the mean and
   99.9th-percentile absolute difference of each pair, in 8-bit levels.
2. **Decoders alone.** Batches of 256 files decoded back to back by each GPU decoder: img/s, and
   the SM time the decoding takes per image, measured as the time a fixed matrix product takes
   longer while decoding runs beside it on another stream.
3. **Training.** `dlbench run train --model resnet50 --batch 256 --precision bf16
   --channels-last` as a user types it, each run a fresh process, the arms interleaved with the
   order turning each round: synthetic data; the folder with `--decode hardware` (the hardware
   decoders, through nvImageCodec); the folder with `--decode gpu` (nvjpeg on the SMs), for each
   --workers. With --large, the large-photo folder too. Prints each arm's img/s per round, the
   median and its ratio to synthetic. With --cpu-decode, `--decode cpu` arms too (the workers
   decode), for each --workers.

nvImageCodec travels as wheels: install them into a folder and put it in NVIMGCODEC_SITE (the
hardware arms add it to PYTHONPATH; the others leave it out). The figures of 2026-11-28 in
docs/performance.md were measured when `--decode gpu` itself chose the hardware decoders where
nvImageCodec imported: the same two paths, asked for by the path instead of the flag.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SITE = os.environ.get("NVIMGCODEC_SITE", "")
TRAIN = ["train", "--model", "resnet50", "--batch", "256", "--precision", "bf16", "--channels-last"]


def files(folder: Path, n: int) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:n]


def same_images(folder: Path) -> None:
    import numpy as np
    import torch
    from PIL import Image

    from dlbench.data.decoders import HardwareDecode
    from dlbench.data.images import cuda_decode

    device = torch.device("cuda", 0)
    paths = files(folder, 64)
    pillow = [np.asarray(Image.open(p).convert("RGB")).transpose(2, 0, 1).astype(np.int16) for p in paths]
    raw = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in paths]
    cuda = [t.cpu().numpy().astype(np.int16) for t in cuda_decode(raw, device)]
    decoded = {"pillow": pillow, "nvjpeg-cuda": cuda}
    try:
        decoded["nvimgcodec-hardware"] = [t.cpu().numpy().astype(np.int16) for t in HardwareDecode(device)(raw)]
    except Exception as error:  # noqa: BLE001 - reported, the rest still runs
        print(f"hardware decode failed: {type(error).__name__}: {error}")
    names = list(decoded)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            diffs = np.concatenate([np.abs(x - y).ravel() for x, y in zip(decoded[a], decoded[b])])
            shapes = all(x.shape == y.shape for x, y in zip(decoded[a], decoded[b]))
            print(f"same images  {a:20s} {b:20s} shapes {'equal' if shapes else 'DIFFER'}  "
                  f"mean |d| {diffs.mean():.3f}  99.9% {np.percentile(diffs, 99.9):.0f}  max {diffs.max()}")


def decoders_alone(folder: Path, seconds: float = 4.0) -> dict:
    import torch

    from dlbench.data.decoders import HardwareDecode
    from dlbench.data.images import cuda_decode

    device = torch.device("cuda", 0)
    raw = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in files(folder, 256)]
    arms = {"nvjpeg-cuda": lambda: cuda_decode(raw, device)}
    try:
        hardware = HardwareDecode(device)
        arms["nvimgcodec-hardware"] = lambda: hardware(raw)
    except Exception as error:  # noqa: BLE001
        print(f"no hardware decoder: {type(error).__name__}: {error}")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)

    def matmuls(n: int = 100) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            a @ a
        torch.cuda.synchronize()
        return time.perf_counter() - start

    matmuls(5)
    out = {}
    for name, decode in arms.items():
        decode()
        torch.cuda.synchronize()
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            decode()
            count += len(raw)
        torch.cuda.synchronize()
        rate = count / (time.perf_counter() - start)
        side = torch.cuda.Stream(device)
        alone, beside, decoded = [], [], 0
        for _ in range(5):  # the matrix products alone, then while a thread keeps the decoder busy
            alone.append(matmuls())
            stop = threading.Event()

            def loop() -> None:
                nonlocal decoded
                with torch.cuda.stream(side):
                    while not stop.is_set():
                        decode()
                        decoded += len(raw)
            thread = threading.Thread(target=loop)
            thread.start()
            time.sleep(0.2)
            beside.append(matmuls())
            stop.set()
            thread.join()
        slower = statistics.median(beside) / statistics.median(alone)
        out[name] = {"img_s": rate, "matmul_slowdown": slower}
        print(f"decoder alone  {name:20s} {rate:8,.0f} img/s   bf16 matrix products beside it: {slower:.3f}x as long")
    return out


def run_train(args: list[str], site: bool, db: Path, result: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([SITE] if site and SITE else []))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dlbench", "run", *TRAIN, *args, "--db", str(db),
                           "--results-file", str(result)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0 or not result.exists():
        print(proc.stdout[-1500:], proc.stderr[-1500:])
        return {"throughput": None, "wall_s": wall}
    record = json.loads(result.read_text())
    line = next((x for x in proc.stdout.splitlines() if x.startswith(("ok ", "error "))), "")
    decoder, wait = re.search(r"JPEGs decoded by (\S+)", line), re.search(r"data wait ([\d.]+)%", line)
    if record.get("status") != "ok":
        print(line, proc.stderr[-1500:])
    return {"throughput": record.get("throughput"), "wall_s": wall, "decoder": decoder and decoder[1],
            "data_share": wait and float(wait[1]) / 100, "status": record.get("status"), "line": line}


def training(folders: dict[str, Path], rounds: int, steps: int, workers: list[str], levels: list[str],
             cuda: bool = True, gpus: int = 1, hardware: bool = True, shares: tuple[str, ...] = ("0",),
             cpu: bool = False) -> list[dict]:
    common = ["--steps", str(steps), "--warmup", "15", "--gpus", str(gpus)]
    arms = []
    for level in levels:
        opt = ["--optimize", level]
        arms.append((f"synthetic {level}", common + opt, False))
        for label, folder in folders.items():
            for n in workers:  # "default": dlbench's own choice
                data = ["--data", f"folder:{folder}"] + ([] if n == "default" else ["--workers", n])
                name = f"{label} {n} workers"
                if cpu:
                    arms.append((f"{name} cpu {level}", common + opt + data, False))
                if hardware:
                    arms.append((f"{name} hardware {level}", common + opt + data + ["--decode", "hardware"], True))
                for share in shares if cuda else ():
                    extra, label_share = (["--cpu-share", share], f" cpu share {share}") if float(share) else ([], "")
                    arms.append((f"{name} nvjpeg-cuda{label_share} {level}",
                                 common + opt + data + ["--decode", "gpu"] + extra, False))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "jpeg.db"
        for r in range(rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for name, args, site in order:
                out = run_train(args, site, db, Path(tmp) / f"{r}-{len(rows)}.json")
                out.update(arm=name, round=r)
                rows.append(out)
                tp = out["throughput"]
                print(f"round {r} {name:32s} {tp and f'{tp:,.0f}'} img/s  decoder {out.get('decoder')}  "
                      f"data share {out.get('data_share')}  wall {out['wall_s']:.0f} s", flush=True)
    return rows


def table(rows: list[dict]) -> None:
    by = {}
    for row in rows:
        if row["throughput"]:
            by.setdefault(row["arm"], []).append(row["throughput"])
    print("\n| arm | img/s, each run | median | of synthetic |\n| --- | --- | ---: | ---: |")
    for arm, values in by.items():
        level = arm.split()[-1]
        base = statistics.median(by.get(f"synthetic {level}", [float("nan")]))
        med = statistics.median(values)
        print(f"| {arm} | {' / '.join(f'{v:,.0f}' for v in values)} | {med:,.0f} | {med / base:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--large", type=Path, help="a folder of large photos (data images --size 2048x1536)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", default="default", help="loader workers, comma-separated (default: dlbench's)")
    parser.add_argument("--no-cuda", action="store_true", help="leave out the nvjpeg-on-the-SMs arms")
    parser.add_argument("--optimize", default="eager", help="levels, comma-separated (default eager)")
    parser.add_argument("--skip-checks", action="store_true", help="only the training runs")
    parser.add_argument("--checks-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-hardware", action="store_true", help="leave out the hardware decoders' arms")
    parser.add_argument("--cpu-shares", default="0",
                        help="with nvjpeg: shares of each batch the loader workers decode, comma-separated (default 0)")
    parser.add_argument("--cpu-decode", action="store_true", help="add arms that decode on the CPU (--decode cpu)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs each training run uses (its img/s are all GPUs')")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out: dict = {}
    if args.checks_only:  # in a process of its own, so that no CUDA context sits beside the runs
        sys.path.insert(0, SITE)
        same_images(args.folder)
        print("DECODERS " + json.dumps(decoders_alone(args.folder)))
        return
    if not args.skip_checks:
        checks = subprocess.run([sys.executable, __file__, "--folder", str(args.folder), "--checks-only"],
                                capture_output=True, text=True)
        print(checks.stdout, checks.stderr[-3000:])
        found = [line for line in checks.stdout.splitlines() if line.startswith("DECODERS ")]
        out["decoders"] = json.loads(found[0][9:]) if found else None
    folders = {"folder": args.folder, **({"large": args.large} if args.large else {})}
    out["training"] = training(folders, args.rounds, args.steps, args.workers.split(","), args.optimize.split(","),
                               not args.no_cuda, args.gpus, not args.no_hardware, tuple(args.cpu_shares.split(",")),
                               args.cpu_decode)
    table(out["training"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
