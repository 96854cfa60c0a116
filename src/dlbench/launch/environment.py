"""What a process that runs benchmarks sets up first, before it touches CUDA.

Every entry point that starts such a process calls `prepare()`: the command line
(`cli.main`), the worker of isolated and torchrun runs (`launch/worker.py`) and a SLURM job
(`slurm.run_job`). Importing dlbench changes nothing, so a program that only reads results or
embeds a workload keeps its own settings.
"""

from __future__ import annotations

import os
import sys
import warnings


def prepare() -> None:
    # dlbench feeds the GPU from side streams (JPEG decoding, deformation, volume copies). CUDA
    # funnels all streams through CUDA_DEVICE_MAX_CONNECTIONS hardware queues, 8 by default, and
    # a side stream that shares a queue with the training stream waits behind the work queued
    # there, so a decoding call can take as long as the steps queued ahead of it (docs/journal.md,
    # 2026-11-22/23). 32 is the most CUDA allows. It takes effect only if set before the
    # process creates its CUDA context, so first thing; a value the user set wins, and child
    # processes (isolated runs, torchrun ranks) inherit it.
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    # Autograd's device thread makes its first cuBLAS call before it has a CUDA context; PyTorch
    # sets the primary context and carries on. The warning says nothing about the benchmark.
    warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
    _tolerant_streams()


def _tolerant_streams() -> None:
    """Text the output's encoding cannot show (a tag in another script under PYTHONIOENCODING=ascii, or
    LC_ALL=C without UTF-8 mode) is printed with replacement characters, never ends the command."""
    for stream in (sys.stdout, sys.stderr):
        utf8 = (getattr(stream, "encoding", None) or "").lower().replace("-", "") == "utf8"
        if (not utf8 or getattr(stream, "errors", None) == "strict") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
