"""fwdbwd: the cnn-benchmarks method (seed 004).

Model in training mode; forward on a random batch, backward from a random upstream
gradient; forward and backward timed separately. No loss and no optimizer, so the
figures are the network's own compute.
"""

from __future__ import annotations

import torch

from dlbench.figures import add, ms, sig
from dlbench.measure.loop import Progress, run_steps
from dlbench.models import registry
from dlbench.results.measurement import Data, Measurement, Phase, Stats, Throughput, Window, combine
from dlbench.results.stats import summarize
from dlbench.workloads import optimize
from dlbench.workloads.runtime import built_model, random_input


def primary_output(out):
    """The main logits of models that return extras in training mode (Inception's aux heads)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    return out[0]


def run(spec, device: torch.device, progress: Progress):
    entry = registry.resolve(spec.model)
    shape = spec.input_shape or entry.input_shape
    torch.manual_seed(spec.seed)
    model = built_model(entry, shape, device, spec.channels_last).train()
    x = random_input(spec.batch, shape, device, spec.channels_last, spec.seed)
    grad = torch.randn_like(primary_output(model(x)))

    def loss(out) -> torch.Tensor:  # what backward from `grad` computes, as a scalar for the check
        return (primary_output(out).float() * grad).sum()

    if spec.optimize in optimize.STEP_LEVELS:
        graphs, optimized = optimize.capture_step(spec, model, x, loss)
        step = graphs.step
    else:
        model, optimized = optimize.prepare(spec, model, x, loss=loss)

        def step(timer) -> None:
            out = primary_output(model(x))
            timer.mark("forward")
            out.backward(grad)
            timer.mark("backward")
            model.zero_grad(set_to_none=True)

    measured = run_steps(step, device, warmup=spec.warmup, warmup_seconds=spec.warmup_seconds,
                         steps=spec.steps, min_seconds=spec.min_seconds, progress=progress, profile=spec.profile,
                         profile_trace=spec.profile_trace)
    samples = measured.samples
    samples["total"] = [f + b for f, b in zip(samples["forward"], samples["backward"])]
    stats = {phase: summarize(values) for phase, values in samples.items()}
    window = sum(samples["step"])
    per_s = spec.batch * len(samples["step"]) / window
    own = Measurement(
        throughput=Throughput(per_s, "img/s"),
        window=Window(steps=len(samples["step"]), warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s,
                      total_ms=stats["total"]["median"] * 1e3),
        phases={phase: Phase(phase, stats[phase]["median"] * 1e3) for phase in ("forward", "backward")},
        stats={name: Stats.read(s) for name, s in stats.items()},
        data=Data(input_shape=[spec.batch, *shape], images_per_s=per_s))
    return combine(own, Measurement.read(optimized), measured.common_metrics(spec.batch, "img")), samples


def describe(m: Measurement) -> str:
    """Forward + backward = total as seed 004 adds them (medians of each phase), then the median
    of the per-step totals, which is not their sum."""
    forward, backward = ms(m.phase_ms("forward")), ms(m.phase_ms("backward"))
    return (f"forward {forward} + backward {backward} = {add(forward, backward)} ms (phase medians; median forward + "
            f"backward {ms(m.window.total_ms)} ms), {sig(m.data.images_per_s)} img/s")
