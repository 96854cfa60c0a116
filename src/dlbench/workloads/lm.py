"""lm-train and lm-infer: a decoder-only transformer language model (models/gpt.py; GPT-2 small by
default) trained and generating text.

lm-train: each step takes `batch` random windows of `context` + 1 ids (`data`; from a token file the
copy to the device is `h2d`), runs the model on the first `context` and the cross-entropy against the
next ids (`forward`), backward (`backward`) and AdamW (`optimizer`). Throughput is tokens/s, batch x
context tokens a step over the measured time; the FLOPs of a step are counted and set against the
measured ceiling of the precision that ran, as for every workload. `--optimize graphs` and `max`
capture the whole step in CUDA graphs (the model compiled inside at `max`) with one process, as
train does; with several processes the model is wrapped in DistributedDataParallel.

lm-infer: each step is one request: `batch` prompts of `prompt` ids (`data`), their prefill in one
forward pass that fills the KV cache and predicts the first new token (`prefill`), then
`new_tokens` - 1 decode steps, one token for every sequence each (`decode`, one sample per decode
step). The headline is decode tokens/s (generated tokens over the decode steps' time); the prefill's
tokens/s, the latency of the prefill and of each decode step (avg, p50/p90/p95/p99) are reported
beside it. The optimisation levels apply to the prefill and the decode step each (both have fixed
shapes: the cache has a fixed length, and a step attends to the positions up to its own).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from dlbench.data import tokens
from dlbench.errors import UserError
from dlbench.figures import ms, percent, sig
from dlbench.measure.loop import Progress
from dlbench.models.gpt import GPT, Decode, KVCache, Prefill, cache_dtype
from dlbench.models.gpt_config import CONFIGS, GPTConfig, is_language_model, parse_name
from dlbench.results.measurement import PHASES as KNOWN_PHASES
from dlbench.results.measurement import Data, Latency, Measurement, Stats, Throughput, Training, Window, combine
from dlbench.results.stats import latency_ms
from dlbench.workloads import distributed, optimize
from dlbench.workloads.pipeline import metrics_from_ranks, phase_line, rank_payload

TRAIN_PHASES = ("data", "h2d", "forward", "backward", "optimizer")
INFER_PHASES = ("data", "prefill", "decode")
TRAIN_METHOD = "tokens (batch x context per step) over total measured time"
DECODE_METHOD = "generated tokens (batch x (new tokens - 1) per request) over the decode steps' time"
BETAS, WEIGHT_DECAY = (0.9, 0.95), 0.1  # GPT-2's AdamW, as nanoGPT trains it


def config(spec) -> GPTConfig:
    """The spec's model, which must be one of the language models."""
    if not is_language_model(spec.model):
        raise UserError(f"{spec.workload} runs a language model: --model {', '.join(CONFIGS)}, or one of them with "
                        f"other sizes (e.g. gpt2:layers=6,context=512); got {spec.model!r}")
    return parse_name(spec.model)


def train_context(spec, model: GPTConfig) -> int:
    context = spec.opts.context or model.context
    if context > model.context:
        raise UserError(f"--context {context} is longer than {spec.model}'s {model.context} positions; for longer "
                        f"sequences give the model more, e.g. --model {spec.model.partition(':')[0]}:context={context}")
    return context


def request_length(spec, model: GPTConfig) -> int:
    """Positions a request fills: the prompt and the tokens generated after it."""
    length = spec.opts.prompt + spec.opts.new_tokens
    if length > model.context:
        raise UserError(f"--prompt {spec.opts.prompt} and --new-tokens {spec.opts.new_tokens} need {length} positions; "
                        f"{spec.model} has {model.context}")
    return length


def sequence_length(spec, model: GPTConfig) -> int:
    """The ids one window of the token source holds: a training sequence and its next ids, or a prompt."""
    if spec.workload == "lm-infer":
        request_length(spec, model)
        return spec.opts.prompt
    return train_context(spec, model) + 1


def preflight(spec, device: torch.device | None = None) -> list[str]:
    """The sizes, and a token file read whole (every id within the model's vocabulary), before anything runs."""
    model = config(spec)
    length = sequence_length(spec, model)
    if spec.opts.data:
        tokens.open_tokens(spec.opts.data, model.vocab, length)
    return []


def _source(spec, model: GPTConfig, length: int, group) -> tokens.TokenSource:
    return tokens.source(spec.opts.data, model.vocab, length, spec.batch, group.device, spec.seed, group.rank,
                         spec.opts.zipf)


def _built(model: GPTConfig, device: torch.device, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(model).to(device)


def make_optimizer(spec, params, capturable: bool = False) -> torch.optim.Optimizer:
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


def _data(spec, source: tokens.TokenSource, shape: list[int]) -> Data:
    path = str(tokens.token_path(spec.opts.data)) if spec.opts.data else None
    return Data(source=source.kind, path=path, input_shape=shape, batch_per_process=spec.batch)


def _tokens(figures: Measurement, value: float, method: str) -> Measurement:
    """`figures` of metrics_from_ranks counted in tokens: the throughput in tok/s, no image counts."""
    return dataclasses.replace(figures, throughput=Throughput(value, "tok/s", method),
                               data=dataclasses.replace(figures.data, images=None, images_per_s=None),
                               phases={k: v for k, v in figures.phases.items() if k in KNOWN_PHASES})


# ---------------------------------------------------------------- lm-train


def train(spec, device: torch.device, progress: Progress):
    model_config = config(spec)
    context = train_context(spec, model_config)
    with distributed.process_group(device) as group:
        device = group.device
        source = _source(spec, model_config, context + 1, group)
        model = _built(model_config, device, spec.seed).train()
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
    figures, samples = metrics_from_ranks(ranks, TRAIN_PHASES)
    figures = _tokens(figures, figures.throughput.value, TRAIN_METHOD)
    own = Measurement(window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=_data(spec, source, [spec.batch, context]),
                      training=Training(task="language", optimizer="adamw",
                                        communication=communication.stored() if communication else None))
    return combine(figures, own, Measurement.read(optimized), measured.common_metrics(per_step, "tok")), samples


def describe_train(m: Measurement) -> str:
    procs = f" on {m.data.processes} processes" if (m.data.processes or 1) > 1 else ""
    return (f"{sig(m.throughput.value)} tok/s{procs}; {phase_line(m, TRAIN_PHASES)}; data wait "
            f"{percent(m.phase_share('data'))} of the time)")


# ---------------------------------------------------------------- lm-infer


def _both(prefill: dict[str, Any], decode: dict[str, Any]) -> dict[str, Any]:
    """The optimisation records of the prefill and the decode step as one: compile times added,
    each check's figures named by what they checked."""
    joined = {**prefill, **decode}
    if "compile_s" in prefill:
        joined["compile_s"] = prefill["compile_s"] + decode.get("compile_s", 0.0)
    for key in ("check_error", "check_noise", "check_allowed"):
        if key in prefill:
            joined[key] = {**{f"prefill {k}": v for k, v in prefill[key].items()},
                           **{f"decode {k}": v for k, v in decode.get(key, {}).items()}}
    return joined


def infer(spec, device: torch.device, progress: Progress):
    model_config = config(spec)
    prompt, new = spec.opts.prompt, spec.opts.new_tokens
    length = request_length(spec, model_config)
    batch = spec.batch
    with distributed.process_group(device) as group:
        device = group.device
        source = _source(spec, model_config, prompt, group)
        model = _built(model_config, device, spec.seed).eval()
        with torch.no_grad():
            cache = KVCache(model_config, batch, length, device, cache_dtype(model, device))
            ids = source.take(batch, prompt)
            prefill, prefill_optimized = optimize.prepare(spec, Prefill(model, cache), ids)
            first = prefill(ids).argmax(-1, keepdim=True)
            cache.pos.fill_(prompt)
            decode, decode_optimized = optimize.prepare(spec, Decode(model, cache), first)

        def request(timer) -> None:
            ids = source.take(batch, prompt, timer, h2d_phase=False)
            token = prefill(ids).argmax(-1, keepdim=True)
            cache.pos.fill_(prompt)
            timer.mark("prefill")
            for _ in range(new - 1):
                token = decode(token).argmax(-1, keepdim=True)
                cache.pos.add_(1)
                timer.mark("decode")

        with torch.no_grad():
            measured = distributed.measure(request, spec, group, progress)
        ranks = group.gather(rank_payload(measured.samples, batch * new, source.host_waits))
    figures, samples = metrics_from_ranks(ranks, INFER_PHASES)
    prefilled = sum(batch * prompt * len(r["samples"]["prefill"]) for r in ranks)
    decoded = sum(batch * len(r["samples"]["decode"]) for r in ranks)
    prefill_per_s = prefilled / max(sum(r["samples"]["prefill"]) for r in ranks)
    decode_per_s = decoded / max(sum(r["samples"]["decode"]) for r in ranks)
    figures = _tokens(figures, decode_per_s, DECODE_METHOD)
    per_step = latency_ms(samples["decode"])
    own = Measurement(latency=Latency(**{f"{name}_ms": value for name, value in per_step.items()}),
                      window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=_data(spec, source, [batch, prompt]),
                      extra={"prefill_tokens_per_s": prefill_per_s, "decode_tokens_per_s": decode_per_s,
                             "prompt_tokens": prompt, "new_tokens": new})
    optimized = _both(prefill_optimized, decode_optimized)
    # energy per generated token, the prefill's share included
    return combine(figures, own, Measurement.read(optimized), measured.common_metrics(batch * new, "tok")), samples


def describe_infer(m: Measurement) -> str:
    procs = f" on {m.data.processes} processes" if (m.data.processes or 1) > 1 else ""
    shape = m.data.input_shape or [None, None]
    prefill = m.stats.get("prefill") or Stats()
    return (f"prefill {sig(m.extra.get('prefill_tokens_per_s'))} tok/s ({ms(_ms(prefill.median))} ms median for "
            f"{shape[0]} x {shape[1]} tokens); decode {sig(m.throughput.value)} tok/s{procs}, per step avg "
            f"{ms(m.latency.avg_ms)} ms, p50 {ms(m.latency.p50_ms)}, p99 {ms(m.latency.p99_ms)} ms")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3
