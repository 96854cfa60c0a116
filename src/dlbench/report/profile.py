"""Reading a result's profile (measure/profile.py's summary) against the machine's ceilings.

Each class is placed on the roofline of the machine `dlbench system` measured: the matmul classes
against the matmul ceiling for their precision, the classes that stream memory against the
device copy ceiling, host copies against the pinned transfer rates. Bound by compute where a
class's arithmetic intensity (FLOP per byte) is past the ridge of the two ceilings, by memory
otherwise. `causes` turns the placement into the doctor's sentences with numbers and advice.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.figures import ms, percent, sig
from dlbench.results.measurement import ClassTime, Measurement, ProfileSummary
from dlbench.results.record import Result
from dlbench.system.records import ceiling_name
from dlbench.workloads import declared

CLASS_LABELS = {
    "tensor_core": "tensor-core conv/matmul", "matmul": "other conv/matmul",
    "elementwise": "elementwise passes", "reduction": "reductions and pooling", "other": "other kernels",
    "d2d": "device copies and fills", "h2d": "host-to-device copies", "d2h": "device-to-host copies",
    "communication": "communication (NCCL)", "idle": "GPU idle",
}
MEMORY_CEILING = {"elementwise": "copy_gbs", "reduction": "copy_gbs", "other": "copy_gbs", "d2d": "copy_gbs",
                  "h2d": "h2d_pinned_gbs", "d2h": "d2h_pinned_gbs"}
COMPUTE = ("tensor_core", "matmul")
MIN_SHARE = 0.05  # classes below this share of the step are not named as causes


@dataclass
class Placement:
    cls: str
    share: float
    seconds: float
    flop_s: float | None = None  # achieved
    bytes_s: float | None = None
    ceiling: float | None = None  # in the same unit as the achieved figure it is compared with
    ceiling_name: str | None = None
    fraction: float | None = None  # achieved over the ceiling
    intensity: float | None = None  # FLOP per byte, where both are known
    bound: str | None = None  # 'compute' or 'memory'


def profile_of(r: Result) -> ProfileSummary | None:
    return profile_in(r.measured)


def profile_in(m: Measurement) -> ProfileSummary | None:
    """The profile's summary where it has its classes (not where the profiled steps failed)."""
    p = m.profiled
    return p if p is not None and p.classes is not None else None


def measured_ceiling(record: Result | None, name: str) -> float | None:
    """What a system record measured for the ceiling `name` (a field of `System`: ceiling_name's
    names, copy_gbs, h2d_pinned_gbs, ...)."""
    return getattr(record.measured.system, name, None) if record else None


def compute_ceiling(cls: str, precision: str, record: Result | None) -> tuple[float | None, str]:
    """FLOP/s the machine reaches for a class (tensor cores: the run's precision, else fp32)."""
    # Tensor-core kernels in an fp32 run are TF32 ones; the other matmuls run at the plain fp32 rate.
    name = ceiling_name(("tf32" if precision == "fp32" else precision) if cls == "tensor_core" else "fp32")
    value = measured_ceiling(record, name)
    return (value * 1e12 if value else None), name


def memory_ceiling(cls: str, record: Result | None) -> tuple[float | None, str]:
    name = MEMORY_CEILING.get(cls, "copy_gbs")
    value = measured_ceiling(record, name)
    return (value * 1e9 if value else None), name


def place(cls: str, entry: ClassTime, precision: str, record: Result | None) -> Placement:
    """Where one class sits under the ceilings; fields stay None where a figure is missing."""
    p = Placement(cls, entry.share, entry.seconds, entry.flop_s, entry.bytes_s)
    if entry.flops and entry.bytes:
        p.intensity = entry.flops / entry.bytes
    if cls in COMPUTE:
        p.ceiling, p.ceiling_name = compute_ceiling(cls, precision, record)
        p.bound = "compute"
        bandwidth = memory_ceiling(cls, record)[0]
        if p.intensity is not None and p.ceiling and bandwidth and p.intensity < p.ceiling / bandwidth:
            p.bound = "memory"
        if p.flop_s and p.ceiling:
            p.fraction = p.flop_s / p.ceiling
    elif cls in MEMORY_CEILING:
        p.ceiling, p.ceiling_name = memory_ceiling(cls, record)
        p.bound = "memory"
        if p.bytes_s and p.ceiling:
            p.fraction = p.bytes_s / p.ceiling
    return p


def placements(r: Result, record: Result | None) -> list[Placement]:
    """Every class of the result's profile, largest share first; [] without a profile."""
    profile = profile_of(r)
    if not profile:
        return []
    precision = r.setup.precision
    out = [place(cls, entry, precision, record) for cls, entry in profile.classes.items()]
    return sorted(out, key=lambda p: -p.share)


# ---- the doctor's sentences --------------------------------------------------------------

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


def causes(r: Result, record: Result | None, idle_advice: bool = True) -> list[tuple[str, str]]:
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
