"""Reading a result's profile (measure/profile.py's summary) against the machine's ceilings.

Each class is placed on the roofline of the machine `dlbench system` measured: the matmul classes
against the matmul ceiling for their precision, the classes that stream memory against the
device copy ceiling, host copies against the pinned transfer rates. Bound by compute where a
class's arithmetic intensity (FLOP per byte) is past the ridge of the two ceilings, by memory
otherwise. The doctor turns the placements into sentences with numbers and advice (diagnose/breakdown.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.results.measurement import ClassTime, Measurement, ProfileSummary
from dlbench.results.record import Result
from dlbench.system.records import ceiling_name

CLASS_LABELS = {
    "tensor_core": "tensor-core conv/matmul", "matmul": "other conv/matmul",
    "elementwise": "elementwise passes", "reduction": "reductions and pooling", "other": "other kernels",
    "d2d": "device copies and fills", "h2d": "host-to-device copies", "d2h": "device-to-host copies",
    "communication": "communication (NCCL)", "idle": "GPU idle",
}
MEMORY_CEILING = {"elementwise": "copy_gbs", "reduction": "copy_gbs", "other": "copy_gbs", "d2d": "copy_gbs",
                  "h2d": "h2d_pinned_gbs", "d2h": "d2h_pinned_gbs"}
COMPUTE = ("tensor_core", "matmul")


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
