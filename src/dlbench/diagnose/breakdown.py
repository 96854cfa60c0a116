"""Where the step goes, from `--profile`: each class of kernels worth naming, placed under the
machine's ceilings (report/profile.py), as the doctor's sentences with numbers and advice, and how
long profiling took and whether its classes add up to the measured step.
"""

from __future__ import annotations

from dlbench.figures import ms, percent, sig
from dlbench.report.profile import CLASS_LABELS, COMPUTE, Placement, placements, profile_of
from dlbench.results.record import Result
from dlbench.workloads import declared

MIN_SHARE = 0.05  # classes below this share of the step are not named


def _rate(p: Placement) -> str:
    """'at 2.9 TB/s (68% of the copy ceiling)', or what is missing."""
    if p.cls in COMPUTE:
        if not p.flop_s:
            return "FLOP/s not known (no FLOP count)"
        text = f"at {sig(p.flop_s / 1e12)} TFLOP/s"
    else:
        if not p.bytes_s:
            return "bytes moved not measured (kernels without operator shapes, such as compiled or Triton ones)"
        text = f"at {sig(p.bytes_s / 1e12)} TB/s" if p.bytes_s >= 1e12 else f"at {sig(p.bytes_s / 1e9)} GB/s"
    if p.fraction is not None:
        return f"{text} ({percent(p.fraction)} of the measured {_ceiling_words(p.ceiling_name)})"
    return f"{text} (no measured ceiling: run `dlbench system`)"


def _ceiling_words(name: str | None) -> str:
    words = {"copy_gbs": "copy ceiling", "h2d_pinned_gbs": "pinned host-to-device rate",
             "d2h_pinned_gbs": "pinned device-to-host rate"}
    if name in words:
        return words[name]
    return f"{(name or '').removeprefix('matmul_').removesuffix('_tflops')} matmul ceiling"


def _advice(p: Placement, r: Result, on_cpu: bool) -> str:
    setup, level = r.setup, r.optimize
    if p.cls == "idle" and on_cpu:
        return "Python and the dispatcher between operators; `--optimize compile` removes much of it"
    if p.cls == "idle":
        if level in ("graphs", "max"):
            return "the GPU waits for the host or for data even with CUDA graphs; look at the data phases"
        return (f"launch-bound at batch {setup.batch}: the host does not launch kernels fast enough; "
                f"`--optimize graphs` (CUDA graphs) or a larger batch")
    if p.cls in ("elementwise", "reduction", "other"):
        fuse = ("`--kernels fused`, " if declared(r.workload).takes("kernels") else "") + "`--optimize compile`"
        done = level in ("compile", "max") or r.measured.volume.kernels == "fused"  # what ran, not what was asked
        return "memory-bound; " + ("already fused: what is left is the passes fusion cannot join" if done else
                                   f"fusing them ({fuse}) removes most of it")
    if p.cls == "matmul":
        if on_cpu:
            return "the model's convolutions and matmuls on the CPU cores"
        if setup.precision == "fp32":
            return "not on tensor cores: `--precision tf32` or `bf16` moves them there"
        return "convolutions or matmuls that did not use tensor cores (shapes, layouts); try `--channels-last`"
    if p.cls == "tensor_core":
        if p.fraction is not None and p.fraction < 0.5:
            levers = " or ".join(_tensor_core_levers(r))
            return ("the model's useful work, but far below the ceiling: small or badly shaped convolutions"
                    + (f"; {levers} feeds tensor cores better" if levers else ""))
        return "the model's useful work"
    if p.cls in ("h2d", "d2h"):
        return "copies not hidden behind compute: pinned memory and copies on a side stream hide them"
    if p.cls == "communication":
        return "all-reduce time not overlapped with backward: larger gradient buckets or fewer, faster links"
    return "copies and fills inside the step; `--optimize compile` removes many of them"


def _tensor_core_levers(r: Result) -> list[str]:
    """What could feed the tensor cores better and has not been tried in this run: where the figure
    does not depend on a batch (a volume's tiles are its batch), `--block auto` times larger tiles,
    unless it already has."""
    workload, levers = declared(r.workload), []
    if not workload.batch_free:
        levers.append("a larger batch")
    elif workload.takes("block") and r.setup.options.get("block") != "auto":
        levers.append("`--block auto` (it times larger tiles)")
    if not r.setup.channels_last:
        levers.append("`--channels-last`")
    return levers


def classes(r: Result, record: Result | None, idle_advice: bool = True) -> list[tuple[str, str]]:
    """(name, evidence) for each class worth naming, the work that is not the model's math first:
    that is where time can be won. Without `idle_advice` the idle class gets none: the host was
    kept from launching work by something measured apart (a loader, other processes)."""
    profile = profile_of(r)
    if not profile:
        return []
    step = profile.step_s or 0.0
    found = [p for p in placements(r, record) if p.share >= MIN_SHARE]
    found.sort(key=lambda p: (p.cls in COMPUTE, -p.share))
    out = []
    for p in found:
        head = f"{percent(p.share)} of the step ({ms(p.seconds * 1e3)} of {ms(step * 1e3)} ms)"
        rate = "" if p.cls in ("idle", "communication") else f" {_rate(p)}"
        on_cpu = profile.device == "cpu"
        label = "outside operators (Python, dispatch)" if p.cls == "idle" and on_cpu else CLASS_LABELS.get(p.cls, p.cls)
        advice = f": {_advice(p, r, on_cpu)}" if idle_advice or p.cls != "idle" else ""
        out.append((f"profile: {label}", f"{head}{rate}{advice}"))
    return out


def profile_note(r: Result) -> str | None:
    """How long profiling took and whether the classes add up to the measured step (why not, if not)."""
    profile = r.measured.profiled
    if profile is not None and profile.error:
        return f"profile: the profiled steps failed ({profile.error}); the measured figures stand"
    if profile is None or profile.classes is None:
        return None
    text = f"profile: {profile.steps} extra steps after the measured ones took {sig(profile.wall_s or 0)} s"
    if len(profile.ranks) > 1:  # a rank that idles much more than the others waits for them
        idle = ", ".join(percent((rank or {}).get("shares", {}).get("idle", 0.0)) for rank in profile.ranks)
        text += f"; idle per rank {idle}"
    cover = profile.coverage
    if profile.adds_up and cover is not None:
        return f"{text}; the classes add up to {percent(cover)} of the measured step"
    if profile.adds_up:
        return text
    share = f" (the profiled step is {percent(cover)} of the measured one)" if cover else ""
    return f"{text}; the classes do not add up to the measured step{share}: {profile.note}"
