"""dlbench beside timm's benchmark.py: ResNet-50 (timm's) training, bf16 autocast, channels-last,
batch 256, 224x224 images, on GPU 0, each tool as a user runs it (a process of its own per run),
eager and compiled (dlbench --optimize max against benchmark.py --torchcompile), rounds alternating. Prints img/s and
dlbench over benchmark.py. The size is given: benchmark.py's default is the model's test size,
288x288 for timm's resnet50, 1.65x the pixels of the 224x224 dlbench trains on.

timm ships benchmark.py in its repository, not in its wheel: give the script's path, or a folder of
benchmark-<version>.py (the one for the installed timm is taken, else benchmark-head.py).

    PYTHONPATH=src python benchmarks/timm_check.py --timm .runs/timm [--rounds 2] [--compiled]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {"model": "resnet50", "batch": 256, "size": 224}


def timm_script(given: str) -> Path:
    path = Path(given)
    if path.is_file():
        return path
    import timm

    exact = path / f"benchmark-{timm.__version__}.py"
    return exact if exact.exists() else path / "benchmark-head.py"


def quiet_gpu(wait: float = 60.0) -> None:
    """Wait until no process computes on a GPU: a run left behind by an earlier step would share
    the GPU with the one measured."""
    deadline = time.monotonic() + wait
    while True:
        busy = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.split()
        if not busy:
            return
        if time.monotonic() > deadline:
            sys.exit(f"GPUs still busy after {wait:.0f} s (processes {', '.join(busy)}): not measured")
        time.sleep(1)


def timm_rate(script: Path, steps: int, compiled: bool, work: Path) -> float:
    quiet_gpu()
    out = work / "timm.json"
    command = [sys.executable, str(script), "--bench", "train", "--model", SETTINGS["model"], "-b",
               str(SETTINGS["batch"]), "--img-size", str(SETTINGS["size"]), "--amp", "--amp-dtype", "bfloat16",
               "--channels-last", "--num-warm-iter", "20",
               "--num-bench-iter", str(steps), "--no-retry", "--results-format", "json", "--results-file", str(out)]
    if compiled:
        command.append("--torchcompile")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return float(json.loads(out.read_text())["train_samples_per_sec"])


def dlbench_rate(steps: int, compiled: bool, work: Path) -> float:
    quiet_gpu()
    db, out = work / "d.db", work / "d.jsonl"
    db.unlink(missing_ok=True)
    dl = [sys.executable, "-m", "dlbench", "--db", str(db)]
    subprocess.run([*dl, "run", "train", "--model", f"timm:{SETTINGS['model']}", "--batch", str(SETTINGS["batch"]),
                    "--precision", "bf16", "--channels-last", "--device", "cuda:0", "--warmup", "20",
                    "--warmup-seconds", "0", "--steps", str(steps), "--min-seconds", "0",
                    "--optimize", "max" if compiled else "eager"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*dl, "export", "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    # the store may hold a ceiling the run measured for its FLOP utilisation, after the run itself
    record = next(r for r in map(json.loads, out.read_text().splitlines()) if r["spec"].get("workload") == "train")
    if record["status"] != "ok":
        sys.exit(f"dlbench ended with {record['status']}: {record.get('error')}")
    return float(record["metrics"]["throughput"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timm", required=True, help="benchmark.py, or a folder of benchmark-<version>.py")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--compiled", action="store_true", help="also dlbench --optimize max against --torchcompile")
    args = parser.parse_args()
    script = timm_script(args.timm)
    size = f"{SETTINGS['size']}x{SETTINGS['size']}"
    print(f"timm's {script.name}; {SETTINGS['model']} train, batch {SETTINGS['batch']}, {size}, bf16, channels-last",
          flush=True)
    print("| level | round | benchmark.py [img/s] | dlbench [img/s] | dlbench / benchmark.py |\n| --- | ---: | ---: | ---: | ---: |")
    for compiled in (False, True) if args.compiled else (False,):
        ratios = []
        for n in range(1, args.rounds + 1):
            with tempfile.TemporaryDirectory() as folder:
                timm = timm_rate(script, args.steps, compiled, Path(folder))
                ours = dlbench_rate(args.steps, compiled, Path(folder))
            ratios.append(ours / timm)
            level = "max / --torchcompile" if compiled else "eager"
            print(f"| {level} | {n} | {timm:,.0f} | {ours:,.0f} | {ours / timm:.3f} |", flush=True)
        print(f"median ratio ({'compiled' if compiled else 'eager'}): {statistics.median(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
