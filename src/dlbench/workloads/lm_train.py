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
from dlbench.workloads.runtime import backward_and_step, grad_scaler

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


def _training_setup(spec, model, example: torch.Tensor, targets: torch.Tensor, scaler, group):
    """(the model to step, its optimizer, the optimisation record, the captured step's graphs or None).
    One process without loss scaling captures the whole step (as workloads/train.py does)."""

    def loss(out: torch.Tensor) -> torch.Tensor:  # the check's: on the example's targets
        return loss_of(out, targets)

    if spec.optimize in optimize.STEP_LEVELS and group.world == 1 and scaler is None:
        optimizer = make_optimizer(spec, model.parameters(), capturable=True)
        graphs, optimized = optimize.capture_step(spec, model, example, loss, optimizer)
        return model, optimizer, optimized, graphs
    model, optimized = optimize.prepare(spec, model, example, loss=loss)
    model = distributed.wrap(model, group)
    return model, make_optimizer(spec, model.parameters()), optimized, None


def run(spec, device: torch.device, progress: Progress):
    model_config = config(spec)
    context = train_context(spec, model_config)
    with distributed.process_group(device) as group:
        source = token_source(spec, model_config, group)
        example, targets = split(source.take(spec.batch, context + 1))
        scaler = grad_scaler(spec, group.device)
        model, optimizer, optimized, graphs = _training_setup(spec, built(model_config, group.device, spec.seed).train(),
                                                       example, targets, scaler, group)

        def step(timer) -> None:
            x, y = split(source.take(spec.batch, context + 1, timer))
            backward_and_step(loss_of(model(x), y), optimizer, scaler, timer)

        def captured_step(timer) -> None:  # the graphs read their input and targets from fixed tensors
            window = source.take(spec.batch, context + 1, timer)
            example.copy_(window[:, :-1])
            targets.copy_(window[:, 1:])
            graphs.step(timer)

        measured = distributed.measure(step if graphs is None else captured_step, spec, group, progress)
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
