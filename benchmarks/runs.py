"""The dlbench run the image benchmarks share: ResNet-50 training through `workloads.execute`,
as `dlbench run train` runs it (bf16 autocast, channels-last), in this process or in one of its
own. A script that uses it calls `dlbench.launch.environment.prepare()` before any CUDA work, as
the dlbench command does.
"""

from __future__ import annotations

import sys

from dlbench.launch import isolated
from dlbench.results.record import Result
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint, launcher_fingerprint
from dlbench.launch.execute import execute


def resnet50_train(steps: int, options: dict, *, batch: int = 256, warmup: int = 10, precision: str = "bf16",
                   **kw) -> dict:
    """The result's metrics; exits with the run's error if it did not end ok."""
    result = resnet50_result(steps, options, batch=batch, warmup=warmup, precision=precision, **kw)
    if result.status != "ok":
        sys.exit(f"dlbench train {options} ended with {result.status}: {result.error}")
    return result.metrics


def resnet50_result(steps: int, options: dict, *, batch: int = 256, warmup: int = 10, precision: str = "bf16",
                    optimize: str = "eager", profile: int = 0, profile_trace: str | None = None,
                    isolate: bool = False, timeout: float | None = None) -> Result:
    """The whole result, whatever its status. `isolate`: in a process of its own, as `dlbench run`
    runs it (a compiled level then shares no compiler state with this process)."""
    spec = BenchmarkSpec(workload="train", model="resnet50", batch=batch, precision=precision, channels_last=True,
                         device="cuda", warmup=warmup, warmup_seconds=0.0, steps=steps, min_seconds=0.0,
                         optimize=optimize, profile=profile, profile_trace=profile_trace, options=options)
    if isolate:
        result = isolated.run(spec, launcher_fingerprint(), isolated.Job(), timeout=timeout)
    else:
        result = execute(spec, fingerprint())
    if result.status == "ok":
        print(f"dlbench train {options or 'synthetic'} ({optimize}): {result.metrics['throughput']:,.0f} img/s",
              file=sys.stderr, flush=True)
    else:
        print(f"dlbench train {options or 'synthetic'} ({optimize}) ended with {result.status}: {result.error}",
              file=sys.stderr, flush=True)
    return result
