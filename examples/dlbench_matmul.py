"""A dlbench plug-in: a model and a workload. `DLBENCH_PLUGINS=dlbench_matmul dlbench run matmul`."""
from dataclasses import dataclass, replace

import torch

from dlbench.measure.loop import run_steps
from dlbench.models.registry import ModelEntry, register as register_model
from dlbench.options import Options, option
from dlbench.results.measurement import Throughput
from dlbench.workloads import Workload, register

register_model(ModelEntry("tiny-cnn", "Tiny CNN", lambda: torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(10)), (3, 32, 32)))


@dataclass(frozen=True)
class MatmulOptions(Options):
    size: int = option(1024, "Rows and columns of the square matrices.", low=1, high=65536)


def run(spec, device, progress):
    a = torch.randn(spec.opts.size, spec.opts.size, device=device)
    measured = run_steps(lambda timer: torch.mm(a, a), device, warmup=spec.warmup, warmup_seconds=0.0,
                         steps=spec.steps, min_seconds=0.0, progress=progress)
    common = measured.common_metrics(items_per_step=1, unit="matmul")  # counted FLOPs and GPU monitor, as built-ins
    return replace(common, throughput=Throughput(common.utilisation.achieved_tflops, "TFLOP/s")), measured.samples


register(Workload("matmul", "Square matrix products in TFLOP/s.", run,
                  lambda m: f"{m.utilisation.flops_per_step:.3g} FLOP each",
                  MatmulOptions, general=("device", "warmup", "steps", "seed")))
