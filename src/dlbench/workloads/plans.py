"""What a training run will compute, for the estimate of its time (suites/estimate.py), read from the
spec and the model registry alone: no torch, so that planning a suite (launch/suiterun.py) stays
as quick as its listing. Volume's and converge's plans need their model's geometry and live in their
modules (workloads/volume.py, converge.py `planned`).
"""

from __future__ import annotations

from dlbench.models import registry
from dlbench.units import parse_zyx
from dlbench.workloads import Planned


# A 3D training step on a CPU (small patches, their backward) reaches less of the matmul ceiling than
# the 2D nets' half: unet3d-aniso at patch 8x64x64 ran at 0.022-0.024 TFLOP/s on the 2-core EPYC against
# fp32 ceilings of 0.054-0.138 TFLOP/s, measured by a first run or by `dlbench system` (2026-11-28).
TRAIN3D_CPU_EFFICIENCY = 0.25


def train(spec) -> Planned | None:
    """A 3D model's training (workloads/train.py): the patch (or the spec's input) after the model's
    channels at --batch per process, a step three forward passes (forward, then backward at twice its
    cost), the counted first warm-up step, --warmup then --steps steps, each phase at least its
    seconds. A volume's patches are read by the workers while the steps run (milliseconds each beside
    seconds of a 3D step), and synthetic data is made on the device: neither adds to the time. None
    for other training, whose step is the spec's own input, and for --epochs (its steps are the
    dataset's length)."""
    channels, *default = registry.resolve(spec.model).input_shape
    if len(default) != 3 or spec.opts.epochs:
        return None
    patch = parse_zyx(spec.opts.patch, "--patch") if spec.opts.patch else tuple(spec.input_shape or default)[-3:]
    return Planned((spec.batch, channels, *patch), spec.steps, spec.warmup, spec.precision, passes=3.0,
                   warmup_seconds=spec.warmup_seconds, min_seconds=spec.min_seconds,
                   cpu_efficiency=TRAIN3D_CPU_EFFICIENCY)
