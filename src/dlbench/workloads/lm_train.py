"""lm_train: training steps of a decoder-only transformer language model (models/gpt.py; GPT-2 small
by default).

Each step takes `batch` random windows of `context` + 1 token ids (`data`; from a token file the copy
to the device is `h2d`), runs the model on the first `context` ids of each and the cross-entropy
against the next ones (`forward`), backward (`backward`) and AdamW (`optimizer`), as GPT-2 is
trained. Throughput is tokens/s: batch x context tokens a step over the measured time. The step's
FLOPs are counted and set against the measured ceiling of the precision that ran, as for every
workload. `--optimize graphs` and `max` capture the whole step in CUDA graphs (the model compiled
inside at `max`) with one process, as train does; with several processes the model is wrapped in
DistributedDataParallel and every rank's steps are gathered into one result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlbench.figures import percent, sig
from dlbench.measure.loop import Progress
from dlbench.results.measurement import Measurement, Training, Window, combine
from dlbench.workloads import distributed, optimize
from dlbench.workloads.lm import built, config, data_record, in_tokens, preflight, token_source, train_context
from dlbench.workloads.pipeline import metrics_from_ranks, phase_line, rank_payload

__all__ = ["run", "describe", "preflight"]

PHASES = ("data", "h2d", "forward", "backward", "optimizer")
METHOD = "tokens (batch x context per step) over total measured time"
BETAS, WEIGHT_DECAY = (0.9, 0.95), 0.1  # GPT-2's AdamW, as nanoGPT trains it


def make_optimizer(spec, params, capturable: bool = False) -> torch.optim.Optimizer:
    """AdamW, fused at --optimize max on a GPU; `capturable` where its step is captured in a CUDA graph."""
    params = list(params)
    kwargs = optimize.optimizer_kwargs(spec, params)
    if capturable:
        kwargs["capturable"] = True
    return torch.optim.AdamW(params, lr=spec.opts.lr, betas=BETAS, weight_decay=WEIGHT_DECAY, **kwargs)


def split(window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A window of ids as the model's input and its targets, the next id at each position."""
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def run(spec, device: torch.device, progress: Progress):
    model_config = config(spec)
    context = train_context(spec, model_config)
    with distributed.process_group(device) as group:
        device = group.device
        source = token_source(spec, model_config, group)
        model = built(model_config, device, spec.seed).train()
        example, targets = split(source.take(spec.batch, context + 1))
        scaler = torch.amp.GradScaler(device.type) if spec.precision == "fp16" and device.type == "cuda" else None
        # One process without loss scaling: the whole step is captured (as workloads/train.py does).
        captured = spec.optimize in optimize.STEP_LEVELS and group.world == 1 and scaler is None
        if captured:
            optimizer = make_optimizer(spec, model.parameters(), capturable=True)
            graphs, optimized = optimize.capture_step(spec, model, example, lambda out: loss_of(out, targets),
                                                      optimizer)
        else:
            model, optimized = optimize.prepare(spec, model, example, loss=lambda out: loss_of(out, targets))
            model = distributed.wrap(model, group)
            optimizer = make_optimizer(spec, model.parameters())

        def step(timer) -> None:
            x, y = split(source.take(spec.batch, context + 1, timer))
            loss = loss_of(model(x), y)
            timer.mark("forward")
            (scaler.scale(loss) if scaler else loss).backward()
            timer.mark("backward")
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            timer.mark("optimizer")

        def captured_step(timer) -> None:
            window = source.take(spec.batch, context + 1, timer)
            example.copy_(window[:, :-1])
            targets.copy_(window[:, 1:])
            graphs.step(timer)

        measured = distributed.measure(captured_step if captured else step, spec, group, progress)
        per_step = spec.batch * context
        ranks = group.gather(rank_payload(measured.samples, per_step, source.host_waits))
        communication = distributed.communication_facts(group, model)
    figures, samples = metrics_from_ranks(ranks, PHASES)
    figures = in_tokens(figures, figures.throughput.value, METHOD)
    own = Measurement(window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=data_record(spec, source, [spec.batch, context]),
                      training=Training(task="language", optimizer="adamw",
                                        communication=communication.stored() if communication else None))
    return combine(figures, own, Measurement.read(optimized), measured.common_metrics(per_step, "tok")), samples


def describe(m: Measurement) -> str:
    procs = f" on {m.run.processes} processes" if (m.run.processes or 1) > 1 else ""
    return (f"{sig(m.throughput.value)} tok/s{procs}; {phase_line(m, PHASES)}; data wait "
            f"{percent(m.phase_share('data'))} of the time)")
