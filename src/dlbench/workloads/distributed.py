"""Several processes (one per GPU) running one benchmark together (launch/ranks.py starts them).

`process_group` joins the group of the ranks' environment (NCCL on GPUs, gloo on the CPU or where
only objects are exchanged) and leaves it at the end; its `Group` holds the collectives the
workloads use (barrier, broadcast, gather, agree, all_sum), each a no-op with one process. `wrap`
puts a model under DistributedDataParallel; `measure` runs warm-up and measurement with step
counts every rank agrees on (a rank that stopped on its own clock would leave the others waiting
in an all-reduce), and gathers what each rank's monitor saw of its own GPU (`watched`). With one
process all of it reduces to plain `run_steps`.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from dlbench.measure.loop import Measured, Progress, run_steps, synchronize
from dlbench.measure.monitor import MonitorData
from dlbench.measure.profile import compact
from dlbench.measure.timer import NullTimer
from dlbench.results.measurement import Communication, RankGpu
from dlbench.workloads import early
from dlbench.workloads.early import backend, from_environment


def _joined() -> None:
    pass


@dataclass(frozen=True)
class Group:
    rank: int
    world: int
    device: torch.device
    join: Callable[[], None] = _joined  # waits for the process group, at the first collective

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.distributed:
            self.join()
            dist.barrier()

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.distributed:
            return obj
        self.join()
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, payload: Any) -> list[Any]:
        """Every rank's payload, in rank order (just [payload] with one process)."""
        if not self.distributed:
            return [payload]
        self.join()
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, payload)
        return out

    def agree(self, value: int) -> int:
        """The largest of every rank's `value` (for a flag: true on every rank if true on any)."""
        if not self.distributed:
            return value
        self.join()
        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over ranks, in place."""
        if self.distributed:
            self.join()
            dist.all_reduce(tensor)
        return tensor


@contextlib.contextmanager
def process_group(device: torch.device, host: bool = False) -> Iterator[Group]:
    """The group of this run's processes (gloo where `host`: see backend), left at the end; the one
    `early.start` made, where it did.
    It is joined at the first collective: until then the run builds and warms its model while the
    group is still being made on early's thread."""
    rank, world, local = from_environment()
    if world == 1:
        yield Group(0, 1, device)
        return
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    owned: list[bool] = []  # once joined: whether this run made the group, and so leaves it

    def join(make: bool = True) -> None:
        if not owned:
            made_early = early.joined()
            owned.append(made_early or (make and not dist.is_initialized()))
            if make and not dist.is_initialized():
                dist.init_process_group(backend(device, host))

    try:
        yield Group(rank, world, device, join)
    finally:
        with contextlib.suppress(Exception):  # the body's error, if any, is the one to see
            join(make=False)  # a group made early and never used is left too; none is made to be left
        if owned and owned[0]:
            dist.destroy_process_group()


def wrap(model: torch.nn.Module, group: Group) -> torch.nn.Module:
    if not group.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    group.join()
    ids = [group.device.index] if group.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def measure(step: Callable, spec, group: Group, progress: Progress, steps: int | None = None) -> Measured:
    """Warm-up and measurement as the spec asks; `steps` fixes the measured count (whole epochs)."""
    min_seconds = 0.0 if steps else spec.min_seconds
    steps = steps or spec.steps
    profiling = {"profile": spec.profile, "profile_trace": spec.profile_trace}
    if not group.distributed:
        return run_steps(step, group.device, warmup=spec.warmup, warmup_seconds=spec.warmup_seconds,
                         steps=steps, min_seconds=min_seconds, progress=progress, **profiling)
    null = NullTimer()
    start = time.perf_counter()
    first = max(1, spec.warmup)
    for i in range(first):
        step(null)
        progress("warm-up", i + 1, first)
    synchronize(group.device)
    per_step = max((time.perf_counter() - start) / first, 1e-6)
    extra = group.agree(math.ceil(max(0.0, spec.warmup_seconds - per_step * first) / per_step))
    for _ in range(extra):
        step(null)
    synchronize(group.device)
    warmup_s = time.perf_counter() - start
    count = group.agree(max(steps, math.ceil(min_seconds / per_step)))
    # Every rank profiles as many steps (their all-reduces pair up); each writes its own trace.
    if spec.profile_trace:
        profiling["profile_trace"] = rank_path(spec.profile_trace, group.rank)
    measured = run_steps(step, group.device, warmup=0, warmup_seconds=0.0, steps=count, min_seconds=0.0,
                         progress=progress, **profiling)
    measured.warmup_steps, measured.warmup_s = first + extra, warmup_s
    measured.rank_gpus = group.gather(watched(group, measured.monitor))
    if measured.profile:
        measured.profile["ranks"] = [compact(p) for p in group.gather(measured.profile)]
    return measured


def watched(group: Group, data: MonitorData | None) -> dict[str, Any]:
    """This rank's GPU over the measured window as its own monitor saw it, stored with every other
    rank's in rank 0's result: the ranks wait for each other every step, so a neighbour or a low
    clock on any one GPU slows the run, not only on rank 0's."""
    gpu = group.device.index if group.device.type == "cuda" else None
    reason = None if data is None or data.available else data.reason
    summary = data.summary() if data is not None else {}
    return RankGpu.watched(group.rank, gpu, os.getpid(), socket.gethostname(), summary, reason).stored()


def rank_path(path: str, rank: int) -> str:
    """`trace.json` -> `trace.rank1.json`: one file per process."""
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}.rank{rank}.{suffix}" if dot and "/" not in suffix else f"{path}.rank{rank}"


def communication_facts(group: Group, model: torch.nn.Module) -> Communication | None:
    """What decides how fast the gradients' all-reduce can be, recorded with a multi-GPU result:
    the bytes each step reduces, the NCCL settings in the environment (NCCL_P2P_DISABLE and its
    kind change the transport), NCCL's version, whether the GPUs reach each other directly, and
    their active NVLinks as NVML reports them. None with one process."""
    if not group.distributed:
        return None
    group.join()
    facts = Communication(
        gradient_bytes=sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
        nccl_settings={k: v[:200] for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        backend=dist.get_backend())
    if group.device.type != "cuda":
        return facts
    from dlbench.measure import nvml

    count = torch.cuda.device_count()
    version = None
    with contextlib.suppress(Exception):
        version = ".".join(map(str, torch.cuda.nccl.version()))
    found, _ = nvml.all_device_facts(list(range(count)))
    return replace(
        facts, nccl_version=version, nvlinks_active=[f.get("nvlinks_active") for f in found],
        peer_access=all(torch.cuda.can_device_access_peer(a, b) for a in range(count) for b in range(count) if a != b))
