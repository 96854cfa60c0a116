"""The all-reduce of a run on several GPUs: a path that NCCL settings made slower (its cost the loss the
parts measured before it leave), what the gradients' all-reduce should cost at the bandwidth
`dlbench system` measured, and with --profile how much of the NCCL kernels ran under compute.
"""

from __future__ import annotations

from dlbench.diagnose.check import Check, Context, Found, Kind
from dlbench.figures import ms, percent, sig
from dlbench.report import profile
from dlbench.results.record import Result

# NCCL settings that take a faster transport away
TRANSPORT_OFF = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC", "NCCL_NET": "Socket",
                 "NCCL_IB_DISABLE": "1"}

DEGRADED = Kind("degraded all-reduce path")


def degraded_path(r: Result) -> str | None:
    comm = r.measured.training.all_reduce
    off = [f"{k}={v}" for k, v in comm.nccl_settings.items() if TRANSPORT_OFF.get(k) == str(v)]
    if not off:
        return None
    links = [n for n in comm.nvlinks_active or [] if n]
    fast = []
    if links:
        fast.append(f"NVLink is up ({min(links)} links per GPU)")
    if comm.peer_access:
        fast.append("the GPUs reach each other directly")
    over = "over sockets" if {"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"} <= set(off) else "on a slower path"
    return f"all-reduce {over}: {' and '.join(off)} {'is' if len(off) == 1 else 'are'} set" + (
        f"; {', '.join(fast)}" if fast else "")


def allreduce_seconds(r: Result, record: Result | None) -> float | None:
    """What the gradients' all-reduce should cost a step at the bandwidth `dlbench system` measured."""
    nbytes, world = r.measured.training.all_reduce.gradient_bytes, r.setup.gpus
    busbw = record.measured.system.allreduce_busbw_gbs if record else None
    if not nbytes or not busbw or world < 2:
        return None
    return nbytes * 2 * (world - 1) / world / (busbw * 1e9)


def communication_note(r: Result, record: Result | None) -> str | None:
    expected = allreduce_seconds(r, record)
    if expected is None or record is None:
        return None
    nbytes = r.measured.training.all_reduce.gradient_bytes or 0
    return (f"all-reduce of {nbytes / 1e6:,.0f} MB of gradients a step should take "
            f"{ms(expected * 1e3)} ms at the all-reduce bandwidth `dlbench system` measured "
            f"({sig(record.measured.system.allreduce_busbw_gbs)} GB/s)")


def nccl_profile_note(r: Result) -> str | None:
    """With --profile on several GPUs: the all-reduce kernels' time a step, and how much of it ran
    under compute (the profile's communication class counts only the exposed part)."""
    profiled = profile.profile_of(r)
    comm = (profiled.classes or {}).get("communication") if profiled else None
    if r.setup.gpus < 2 or comm is None or not comm.kernel_seconds:
        return None
    total, exposed = comm.kernel_seconds, comm.seconds
    return (f"profile: NCCL kernels ran {ms(total * 1e3)} ms a step, {percent(max(0.0, 1 - exposed / total))} of it "
            f"under compute; {ms(exposed * 1e3)} ms exposed ({percent(comm.share)} of the step)")


def _all_reduce(ctx: Context) -> Found:
    """The degraded path's cause, with the rest of the loss where there is a comparison (none where the
    parts measured account for it all); the all-reduce's notes."""
    path = degraded_path(ctx.run)
    rest = None if ctx.lost is None else ctx.lost - ctx.explained
    if path and (rest is None or rest > 0):
        yield DEGRADED(f"{path}; unset them to let NCCL use the fast path", rest)
    yield from (note for note in (communication_note(ctx.run, ctx.record), nccl_profile_note(ctx.run)) if note)


ALL_REDUCE = Check("the all-reduce", "NCCL settings that take a transport away, NVLink and peer access (NVML, CUDA); "
                   "the gradient bytes and `dlbench system`'s all-reduce bandwidth; the profile's NCCL kernels",
                   _all_reduce, (DEGRADED,), rest=True)
