"""How much a decoding thread beside a training loop costs it: a plain ResNet-50 training loop
(batch 256, bf16, channels-last) timed alone and with a thread that decodes a JPEG folder's files
and crops them on the GPU on its own stream, as fast as it can up to one batch a training step
(two ahead at most), in several variants; each line says how many images the thread decoded, which
can be fewer than the loop trained on (the loop never waits for it):

  cuda           nvjpeg on the SMs (torchvision), the whole batch at once, then the crops
  hardware       the hardware decoders (nvImageCodec), the whole batch at once, then the crops
  hardware/64    the same in chunks of 64 files
  decode only    the hardware decoders without the crops
  crops only     the crops of a batch decoded once beforehand
  +switch 0.5ms  Python's thread switch interval at 0.5 ms instead of 5 ms
  waited: X      variant X in a thread that the loop waits for, a batch every step, as `dlbench
                 run` does
  process: X     variant X in a process of its own on the same GPU (its own interpreter and CUDA
                 context), each batch's crops copied into one of three buffers the loop allocated
                 and shared (CUDA IPC), handed over by index, one for every step (the loop waits
                 for it): no thread in the loop's process

    PYTHONPATH=src:benchmarks python3 benchmarks/decode_beside.py FOLDER [--steps 40]
"""

import argparse
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from dlbench.data.images import cuda_decode, random_crop_boxes, resized_crops
from plain import mean_seconds, resnet50_train_step


def variants_for(folder: Path, device: torch.device):
    """The side work of each variant, and a batch of files decoded once for 'crops only'."""
    paths = sorted(p for p in folder.rglob("*.jpg"))[:256]
    raw = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in paths]
    from dlbench.data.decoders import HardwareDecode
    hardware = HardwareDecode(device)
    decoded = hardware(raw)
    rng = np.random.default_rng(0)

    def crops(images):
        sizes = np.array([i.shape[-2:] for i in images])
        return resized_crops(images, random_crop_boxes(sizes, rng), (224, 224), rng.random(len(images)) < 0.5)

    def chunked(n):
        return lambda: crops([im for i in range(0, 256, n) for im in hardware(raw[i:i + n])])

    return {
        "cuda": lambda: crops(cuda_decode(raw, device)),
        "hardware": lambda: crops(hardware(raw)),
        "hardware/64": chunked(64),
        "decode only": lambda: hardware(raw),
        "crops only": lambda: crops(decoded),
    }


def decoding_process(folder: Path, variant: str, buffers: list[torch.Tensor], free, ready, stop) -> None:
    """A process that fills the loop's buffers with `variant`'s batches, one for each free index."""
    device = buffers[0].device
    torch.cuda.set_device(device)
    work = variants_for(folder, device)[variant]
    while not stop.is_set():
        try:
            k = free.get(timeout=0.1)
        except queue.Empty:
            continue
        out = work()
        if isinstance(out, torch.Tensor):  # "decode only" hands over nothing
            buffers[k].copy_(out)
        torch.cuda.current_stream(device).synchronize()
        ready.put(k)


def beside_a_process(folder: Path, variant: str, step, steps: int) -> tuple[float, float]:
    """(training img/s, img/s decoded beside it) with `variant` in a process of its own."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    buffers = [torch.empty(256, 3, 224, 224, dtype=torch.uint8, device="cuda") for _ in range(3)]
    free, ready, stop = context.Queue(), context.Queue(), context.Event()
    for k in range(len(buffers)):
        free.put(k)
    child = context.Process(target=decoding_process, args=(folder, variant, buffers, free, ready, stop), daemon=True)
    child.start()
    free.put(ready.get(timeout=300))  # started: the first batch came
    handed = [0]

    def paced() -> None:
        k = ready.get()
        step()
        free.put(k)
        handed[0] += 256
    start = time.perf_counter()
    seconds = mean_seconds(paced, 3, steps)
    took = time.perf_counter() - start
    stop.set()
    child.join(timeout=30)
    return 256 / seconds, handed[0] / took


def beside_a_thread(work, step, steps: int, device: torch.device, *, waits: bool,
                    switch_s: float | None) -> tuple[float, float]:
    """(training img/s, img/s decoded beside it) with `work` (None: nothing) in a thread on its own
    stream, up to a batch a step and two ahead at most; `waits`: the loop waits for each batch;
    `switch_s`: Python's thread switch interval meanwhile."""
    stop, count, tokens, ready = threading.Event(), [0], threading.Semaphore(2), threading.Semaphore(0)
    side = torch.cuda.Stream(device)

    def loop() -> None:
        with torch.cuda.stream(side):
            while not stop.is_set():
                if not tokens.acquire(timeout=0.1):
                    continue
                work()
                side.synchronize()
                count[0] += 256
                ready.release()

    def paced() -> None:
        if waits:
            ready.acquire()
        step()
        tokens.release()
    before = sys.getswitchinterval()
    if switch_s:
        sys.setswitchinterval(switch_s)
    thread = threading.Thread(target=loop, daemon=True) if work else None
    if thread:
        thread.start()
        time.sleep(0.5)
    start = time.perf_counter()
    seconds = mean_seconds(paced, 3, steps)
    took = time.perf_counter() - start
    stop.set()
    if thread:
        thread.join()
    sys.setswitchinterval(before)
    return 256 / seconds, count[0] / took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", default="hardware,decode only,cuda",
                        help="the variants also run in a process of their own (comma-separated; '' for none)")
    parser.add_argument("--waited", default="",
                        help="variants run in a thread that the loop waits for, a batch every step, as "
                             "`dlbench run` does (comma-separated)")
    parser.add_argument("--threads", default="all",
                        help="the variants run in a thread beside the loop (comma-separated; 'all'; '' for none)")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", 0)
    variants = variants_for(args.folder, device)
    in_processes = [v for v in args.processes.split(",") if v]
    step = resnet50_train_step(256)
    mean_seconds(step, 10, 10)
    threaded = [*variants.items(), ("hardware +switch 0.5ms", variants["hardware"])]
    if args.threads != "all":
        threaded = [(name, work) for name, work in threaded if name in args.threads.split(",")]
    threaded += [(f"waited: {v}", variants[v]) for v in args.waited.split(",") if v]
    results: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for variant in in_processes:
            name = f"process: {variant}"
            rate, decoded = beside_a_process(args.folder, variant, step, args.steps)
            results.setdefault(name, []).append(rate)
            print(f"round {r} {name:24s} {rate:7,.0f} img/s   beside it {decoded:7,.0f} img/s handed over", flush=True)
        for name, work in [("alone", None), *threaded]:
            rate, decoded = beside_a_thread(work, step, args.steps, device, waits=name.startswith("waited: "),
                                            switch_s=0.0005 if name.endswith("0.5ms") else None)
            results.setdefault(name, []).append(rate)
            print(f"round {r} {name:24s} {rate:7,.0f} img/s   beside it {decoded:7,.0f} img/s decoded", flush=True)
    base = statistics.median(results["alone"])
    print("\n| beside the loop | training img/s | of alone |\n| --- | ---: | ---: |")
    for name, values in results.items():
        print(f"| {name} | {' / '.join(f'{v:,.0f}' for v in values)} | {statistics.median(values) / base:.3f} |")


if __name__ == "__main__":
    main()
