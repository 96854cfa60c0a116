"""lm_infer: text generation with a decoder-only transformer language model (models/gpt.py; GPT-2
small by default), greedy, with a KV cache.

Each step is one request: `batch` prompts of `prompt` token ids (`data`), their prefill in one
forward pass that fills the KV cache and predicts the first new token (`prefill`), then
`new_tokens` - 1 decode steps, one token for every sequence each (`decode`: one sample per decode
step). The headline is decode tokens/s (the decode steps' tokens over their time); the prefill's
tokens/s and the latency of the prefill (`stats`) and of each decode step (`Latency`: avg,
p50/p90/p95/p99) stand beside it. The optimisation levels apply to the prefill and to the decode
step each: both have fixed shapes (the cache has a fixed length, and a decode step attends to the
positions up to its own), so they compile and capture as any model. With several processes each
rank generates for its own prompts and the figures are gathered.
"""

from __future__ import annotations

from typing import Any

import torch

from dlbench.figures import ms, sig
from dlbench.measure.loop import Progress
from dlbench.models.gpt import Decode, KVCache, Prefill, cache_dtype
from dlbench.results.measurement import Latency, Measurement, Stats, Window, combine
from dlbench.results.stats import latency_ms
from dlbench.workloads import distributed, optimize
from dlbench.workloads.lm import built, config, data_record, in_tokens, preflight, request_length, token_source
from dlbench.workloads.pipeline import metrics_from_ranks, rank_payload
from dlbench.workloads.runtime import casts_kept

__all__ = ["run", "describe", "preflight"]

PHASES = ("data", "prefill", "decode")
METHOD = "generated tokens (batch x (new tokens - 1) per request) over the decode steps' time"


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


def run(spec, device: torch.device, progress: Progress):
    model_config = config(spec)
    prompt, new, batch = spec.opts.prompt, spec.opts.new_tokens, spec.batch
    length = request_length(spec, model_config)
    with distributed.process_group(device) as group, casts_kept(device):
        device = group.device
        source = token_source(spec, model_config, group)
        model = built(model_config, device, spec.seed).eval()
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
    figures, samples = metrics_from_ranks(ranks, PHASES)
    prefill_per_s = (sum(batch * prompt * len(r["samples"]["prefill"]) for r in ranks)
                     / max(sum(r["samples"]["prefill"]) for r in ranks))
    decode_per_s = (sum(batch * len(r["samples"]["decode"]) for r in ranks)
                    / max(sum(r["samples"]["decode"]) for r in ranks))
    figures = in_tokens(figures, decode_per_s, METHOD)
    per_step = latency_ms(samples["decode"])
    own = Measurement(latency=Latency(**{f"{name}_ms": value for name, value in per_step.items()}),
                      window=Window(warmup_steps=measured.warmup_steps, warmup_s=measured.warmup_s),
                      data=data_record(spec, source, [batch, prompt]),
                      extra={"prefill_tokens_per_s": prefill_per_s, "decode_tokens_per_s": decode_per_s,
                             "prompt_tokens": prompt, "new_tokens": new})
    optimized = _both(prefill_optimized, decode_optimized)
    # energy per generated token (`tok`), the prefill's share included
    return combine(figures, own, Measurement.read(optimized), measured.common_metrics(batch * new, "tok")), samples


def describe(m: Measurement) -> str:
    procs = f" on {m.run.processes} processes" if (m.run.processes or 1) > 1 else ""
    batch, prompt = (m.data.input_shape or [None, None])[:2]
    prefill = m.stats.get("prefill") or Stats()
    median = prefill.median * 1e3 if prefill.median is not None else None
    return (f"prefill {sig(m.extra.get('prefill_tokens_per_s'))} tok/s ({ms(median)} ms median for {batch} x "
            f"{prompt} tokens); decode {sig(m.throughput.value)} tok/s{procs}, per step avg {ms(m.latency.avg_ms)} "
            f"ms, p50 {ms(m.latency.p50_ms)}, p99 {ms(m.latency.p99_ms)} ms")
