"""This machine's start-up time and speed, for the guesses of suites/estimate.py (`dlbench suite
NAME --list` for specs never run here): an empty worker run, which costs what every isolated
run costs besides its steps, and a plain matmul's FLOP rate, both in a child process
(`python -m dlbench.launch.speed SPEC.json RESULT.json`)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from dlbench.suites.estimate import Machine

# A benchmark of next to no work, run like any other: its wall time is what every isolated run
# costs besides its steps (interpreter, imports, the machine's fingerprint, monitor, record).
_EMPTY_RUN = {"workload": "fwdbwd", "model": "resnet18", "batch": 2, "input_shape": [3, 32, 32], "device": "cpu",
              "warmup": 0, "warmup_seconds": 0.0, "steps": 1, "min_seconds": 0.0}


@lru_cache(maxsize=1)
def machine() -> Machine:
    """This machine's start-up time and speed, measured once (several seconds) for the guesses.
    Both are measured in a child process: a suite's own process must never hold a GPU context,
    or every benchmark of the suite would run beside it (and the monitor would see it)."""
    with tempfile.TemporaryDirectory(prefix="dlbench-estimate-") as folder:
        spec_file = Path(folder) / "spec.json"
        spec_file.write_text(json.dumps({"spec": _EMPTY_RUN}), encoding="utf-8")
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dlbench.launch.speed", str(spec_file),
                               str(Path(folder) / "r.json")], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
    found = _last_json(proc.stdout)
    return Machine(max(0.0, wall - found.get("rates_s", 0.0)), found.get("rates", {}))


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}


def _matmul_rate(kind: str) -> float:
    import torch

    n = 2048 if kind == "cuda" else 512
    a = torch.randn(n, n, device=kind)
    torch.mm(a, a)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.2:
        torch.mm(a, a)
        count += 1
        if kind == "cuda":
            torch.cuda.synchronize()
    return 2 * n**3 * count / (time.perf_counter() - start)


def _rates() -> dict[str, float]:
    import torch

    kinds = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    rates = {}
    for kind in kinds:
        try:
            rates[kind] = _matmul_rate(kind)
        except Exception:  # noqa: BLE001 - a kind that cannot multiply is guessed from the others
            continue
    return rates


def main(argv: list[str]) -> int:
    """The child of `machine()`: an empty worker run (what every isolated run costs), then the
    matmul rates, printed as one JSON line with the seconds they took."""
    from dlbench.launch import worker

    worker.main(argv)
    start = time.perf_counter()
    rates = _rates()
    print(json.dumps({"rates": rates, "rates_s": time.perf_counter() - start}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
