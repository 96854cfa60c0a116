"""fwdbwd: the cnn-benchmarks method (seed 004).

Model in training mode; forward on a random batch, backward from a random upstream
gradient; forward and backward timed separately. No loss and no optimizer, so the
figures are the network's own compute.
"""

from __future__ import annotations

import torch

from dlbench.figures import add, ms, sig
from dlbench.measure.loop import Progress, run_steps
from dlbench.measure.stats import summarize
from dlbench.models import registry
from dlbench.workloads import optimize
from dlbench.workloads.runtime import memory_format, random_input


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
    model = entry.build().to(device).train()
    model = model.to(memory_format=memory_format(spec.channels_last, len(shape) + 1))
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
    metrics = {
        "input_shape": [spec.batch, *shape],
        "forward_ms": stats["forward"]["median"] * 1e3,
        "backward_ms": stats["backward"]["median"] * 1e3,
        "total_ms": stats["total"]["median"] * 1e3,
        "images_per_s": spec.batch * len(samples["step"]) / window,
        "throughput": spec.batch * len(samples["step"]) / window,
        "throughput_unit": "img/s",
        "steps": len(samples["step"]),
        "warmup_steps": measured.warmup_steps,
        "warmup_s": measured.warmup_s,
        "stats": stats,
        **optimized,
        **measured.common_metrics(spec.batch, "img"),
    }
    return metrics, samples


def describe(metrics: dict) -> str:
    """Forward + backward = total as seed 004 adds them (medians of each phase), then the median
    of the per-step totals, which is not their sum."""
    forward, backward = ms(metrics["forward_ms"]), ms(metrics["backward_ms"])
    return (f"forward {forward} + backward {backward} = {add(forward, backward)} ms (phase medians; median step "
            f"{ms(metrics['total_ms'])} ms), {sig(metrics['images_per_s'])} img/s")
