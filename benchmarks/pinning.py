"""How long a volume run's page-locked buffers take to make, three ways, on one GPU:

  alloc     torch.empty(..., pin_memory=True): cudaHostAlloc, under the driver's lock, each size
            rounded up to a power of two by torch's host allocator
  register  plain memory of the exact size, its pages touched by torch's CPU threads, then
            registered with cudaHostRegister (what dlbench does)
  untouched plain memory registered as it is: the driver touches the pages itself

For each: seconds to make the set, bytes requested, the host-to-device and device-to-host copy
rates from one buffer, and the longest a thread launching small kernels beside it had to wait.

  python3 benchmarks/pinning.py                       # the 7.5 Gvox run's set: 10 tiles, 10 outputs
  python3 benchmarks/pinning.py --tiles 4 --outputs 4 --ways register,alloc
"""

from __future__ import annotations

import argparse
import threading
import time

import torch

TILE = 232 * 1664 * 896  # the tile of block 200x1536x768 with the 16x64x64 halo, uint8
OUTPUT = 200 * 1536 * 768  # the block, one channel, uint8


def alloc(numel: int) -> torch.Tensor:
    return torch.empty(numel, dtype=torch.uint8, pin_memory=True)


def register(numel: int, touch: bool = True) -> torch.Tensor:
    buffer = torch.zeros(numel, dtype=torch.uint8) if touch else torch.empty(numel, dtype=torch.uint8)
    error = torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), numel, 0)
    if error != torch.cuda.cudart().cudaError.success:
        raise RuntimeError(f"cudaHostRegister: {error}")
    return buffer


WAYS = {"alloc": alloc, "register": register, "untouched": lambda n: register(n, touch=False)}


class Launches:
    """A thread launching small kernels, each followed by a synchronize: the longest gap between two."""

    def __init__(self) -> None:
        self.longest, self.count, self._stop = 0.0, 0, threading.Event()
        self._x = torch.zeros(1024, device="cuda")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            self._x.add_(1)
            torch.cuda.synchronize()
            now = time.perf_counter()
            self.longest, self.count, last = max(self.longest, now - last), self.count + 1, now

    def stop(self) -> tuple[float, int]:
        self._stop.set()
        self._thread.join()
        return self.longest, self.count


def rate(host: torch.Tensor, device: torch.Tensor, to_device: bool) -> float:
    for _ in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        (device.copy_(host, non_blocking=True) if to_device else host.copy_(device, non_blocking=True))
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return host.numel() / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=10)
    parser.add_argument("--outputs", type=int, default=10)
    parser.add_argument("--ways", default="register,alloc,untouched")
    args = parser.parse_args()
    torch.empty(1, device="cuda")  # the context, outside every figure
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {torch.get_num_threads()} CPU threads, "
          f"{args.tiles} x {TILE / 1e6:.0f} MB + {args.outputs} x {OUTPUT / 1e6:.0f} MB")
    print(f"{'way':10} {'made in [s]':>11} {'GB':>6} {'H2D GB/s':>9} {'D2H GB/s':>9} {'longest launch wait [ms]':>25}")
    for way in args.ways.split(","):
        make = WAYS[way]
        launches = Launches()
        time.sleep(0.2)
        start = time.perf_counter()
        buffers = [make(TILE) for _ in range(args.tiles)] + [make(OUTPUT) for _ in range(args.outputs)]
        made = time.perf_counter() - start
        longest, _ = launches.stop()
        device = torch.empty(TILE, dtype=torch.uint8, device="cuda")
        h2d, d2h = rate(buffers[0], device, True), rate(buffers[0], device, False)
        gb = sum(b.numel() for b in buffers) / 1e9
        print(f"{way:10} {made:11.2f} {gb:6.2f} {h2d:9.1f} {d2h:9.1f} {longest * 1e3:25.1f}", flush=True)
        if way != "alloc":  # unregistered before freed: freed first, its addresses could be handed out again
            for buffer in buffers:
                torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())
        del buffers, device


if __name__ == "__main__":
    main()
