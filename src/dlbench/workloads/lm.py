"""What the language-model workloads share (lm_train.py, lm_infer.py): the model the spec names (one
of models/gpt_config.py's), the sizes checked against it, the token source (data/tokens.py), and
their figures counted in tokens.
"""

from __future__ import annotations

import dataclasses

import torch

from dlbench.data import tokens
from dlbench.errors import UserError
from dlbench.models.gpt import GPT
from dlbench.models.gpt_config import CONFIGS, GPTConfig, is_language_model, parse_name
from dlbench.results.measurement import PHASES as KNOWN_PHASES
from dlbench.results.measurement import Data, Measurement, Throughput


def config(spec) -> GPTConfig:
    """The spec's model, which must be one of the language models."""
    if not is_language_model(spec.model):
        raise UserError(f"{spec.workload} runs a language model: --model {', '.join(CONFIGS)}, or one of them with "
                        f"other sizes (e.g. gpt2:layers=6,context=512); got {spec.model!r}")
    return parse_name(spec.model)


def train_context(spec, model: GPTConfig) -> int:
    """Tokens per training sequence: --context, at most the model's positions."""
    context = spec.opts.context or model.context
    if context > model.context:
        raise UserError(f"--context {context} is longer than {spec.model}'s {model.context} positions; for longer "
                        f"sequences give the model more, e.g. --model {spec.model.partition(':')[0]}:context={context}")
    return context


def request_length(spec, model: GPTConfig) -> int:
    """Positions a generation request fills: the prompt and the tokens generated after it."""
    length = spec.opts.prompt + spec.opts.new_tokens
    if length > model.context:
        raise UserError(f"--prompt {spec.opts.prompt} and --new-tokens {spec.opts.new_tokens} need {length} positions; "
                        f"{spec.model} has {model.context}")
    return length


def window_length(spec, model: GPTConfig) -> int:
    """The ids one window of the token source holds: a training sequence and its next ids, or a prompt."""
    if hasattr(spec.opts, "prompt"):
        request_length(spec, model)
        return spec.opts.prompt
    return train_context(spec, model) + 1


def preflight(spec, device: torch.device | None = None) -> list[str]:
    """The sizes, and a token file read whole (every id within the model's vocabulary), before anything runs."""
    model = config(spec)
    length = window_length(spec, model)
    if spec.opts.data:
        tokens.open_tokens(spec.opts.data, model.vocab, length)
    return []


def token_source(spec, model: GPTConfig, group) -> tokens.TokenSource:
    """The spec's token ids on this rank's device; each rank draws its own windows."""
    return tokens.source(spec.opts.data, model.vocab, window_length(spec, model), spec.batch, group.device, spec.seed,
                         group.rank, spec.opts.zipf)


def built(model: GPTConfig, device: torch.device, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(model).to(device)


def data_record(spec, source: tokens.TokenSource, shape: list[int]) -> Data:
    path = str(tokens.token_path(spec.opts.data)) if spec.opts.data else None
    return Data(source=source.kind, path=path, input_shape=shape, batch_per_process=spec.batch)


def in_tokens(figures: Measurement, value: float, method: str) -> Measurement:
    """`figures` of pipeline.metrics_from_ranks counted in tokens: the throughput in tok/s, no image counts,
    the phases a record knows (the others' statistics stay in `stats`)."""
    return dataclasses.replace(figures, throughput=Throughput(value, "tok/s", method),
                               data=dataclasses.replace(figures.data, images=None, images_per_s=None),
                               phases={k: v for k, v in figures.phases.items() if k in KNOWN_PHASES})
