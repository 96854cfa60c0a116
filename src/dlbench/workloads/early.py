"""CUDA's start and, with several processes, the process group's, begun before a benchmark needs them.

Creating a GPU's CUDA context and joining the NCCL group (the rendezvous, the communicator) take
seconds, waiting on the driver and the network, not on the interpreter. So `start(device)` begins
them on a thread as soon as torch is imported, beside what does not need them: the imports after
torch, the launcher's checks of the input, the workload's model built on the CPU and its first
reads, its warm-up. `distributed.process_group` takes the group made here (`joined`) at the run's
first collective instead of making its own; a process that never called `start` does everything
itself, where it needs it. Nothing here is measured: every benchmark's timed window
starts long after.
"""

from __future__ import annotations

import os
import threading
from typing import Any

_thread: threading.Thread | None = None
_made: dict[str, Any] = {}


def start(device: str, host_group: bool = False) -> None:
    """Begin CUDA on this process's GPU (and the process group under several ranks, a gloo one where
    `host_group`: `backend`) on a thread.
    `device` is the spec's (auto, cpu, cuda, cuda:N); a device that cannot be had starts nothing:
    the run says why where it checks it."""
    global _thread
    if _thread is not None:
        return
    # Imported here, in the calling thread: two threads importing one module at once can see it half made.
    import torch.distributed  # noqa: F401

    from dlbench.workloads import runtime  # noqa: F401

    _thread = threading.Thread(target=_begin, args=(device, host_group), name="dlbench-early-start", daemon=True)
    _thread.start()


def _begin(name: str, host_group: bool) -> None:
    import torch
    import torch.distributed as dist

    from dlbench.workloads.runtime import resolve_device

    try:
        device = resolve_device(name)
    except Exception:  # noqa: BLE001 - the run's own checks say what is wrong
        return
    _, world, local = from_environment()
    if device.type == "cuda":
        device = torch.device("cuda", local if world > 1 else device.index or 0)
        try:
            torch.cuda.init()
            # The first allocation creates the device's context, inside an operator, where torch lets
            # go of the interpreter lock (torch.cuda.set_device would hold it for the second it takes).
            torch.empty(1, device=device)
        except Exception:  # noqa: BLE001 - the run meets the same error where it uses the GPU
            return
    if world > 1 and not dist.is_initialized():
        try:
            kind = backend(device, host_group)
            # device_id: NCCL makes its communicator now, not at the first collective
            dist.init_process_group(kind, device_id=device if kind == "nccl" else None)
            _made["group"] = True
            # The first collective connects the ranks' GPUs (seconds under NCCL): done here, beside the
            # model's build and warm-up, not at the run's first barrier. Every rank's first collective.
            dist.barrier()
        except Exception as error:  # noqa: BLE001 - raised where the run joins the group
            _made["error"] = error


def from_environment() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) outside torchrun."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0))


def backend(device: Any, host: bool = False) -> str:
    """NCCL between GPUs, gloo on the CPU or for a group that carries no GPU tensors (`host`)."""
    return "nccl" if device.type == "cuda" and not host else "gloo"


def joined() -> bool:
    """Wait for what `start` began; whether it made the process group (which the caller then owns).
    An error in making it is raised here, where the run would have made the group itself."""
    if _thread is None:
        return False
    _thread.join()
    if "error" in _made:
        raise _made.pop("error")
    return bool(_made.pop("group", False))
