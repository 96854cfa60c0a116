"""dlbench's lm_train and lm_infer against plain hand-written PyTorch loops of the same model, in one
process, interleaved (plain, dlbench, plain, ...) so that clock and thermal drift hit both alike.

    PYTHONPATH=src python benchmarks/lm_plain.py [--levels eager,max] [--rounds 3] [--batch 16]
        [--infer-batches 1,16] [--prompt 512] [--new-tokens 128] [--plain-mode max-autotune] [--json FILE]

Training: GPT-2 small (models/gpt.py, --model), bf16 autocast, AdamW (lr 6e-4, betas 0.9/0.95, weight
decay 0.1), --batch sequences of the model's 1024 tokens a step on random token windows of a stream on
the GPU, --steps timed steps after --warmup ones. The plain loop is the one a user writes (nanoGPT's);
at level eager the model as built with the default (foreach) AdamW, at max torch.compile(model,
mode=--plain-mode) with fused AdamW. dlbench runs `lm_train` through the same code as `dlbench run`
(launch/execute.py), at --optimize eager and max.

Inference: at each of --infer-batches, --prompt tokens prefilled, then --new-tokens - 1 greedy decode
steps with the KV cache (the model's own `Prefill` and `Decode` modules, as `lm_infer` runs them);
the plain loop times the prefill and the decode steps with CUDA events, all requests under one
autocast (each weight cast once), at max both modules compiled with torch.compile(mode=--plain-mode).
dlbench runs `lm_infer`.

Prints a markdown table: tokens/s of each (the median over --rounds), dlbench over plain (the target
is >= 0.98) and each side's spread over the rounds ((max - min) / median). A step's FLOPs are counted
by the first dlbench run of each configuration and handed to the later ones, as the launcher does.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from dlbench.launch.environment import prepare
from dlbench.launch.execute import execute
from dlbench.models.gpt import GPT, Decode, KVCache, Prefill
from dlbench.models.gpt_config import parse_name
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from plain import mean_seconds

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TARGET = 0.98
STREAM = 1 << 22  # token ids of the plain loops' stream on the GPU


def _fresh() -> None:
    """Nothing of the last run left: its memory given back, its compiled code forgotten (the next
    compile reads Inductor's caches)."""
    gc.collect()
    torch.cuda.empty_cache()
    torch._dynamo.reset()


def _compiled(module: torch.nn.Module, mode: str) -> torch.nn.Module:
    return torch.compile(module, mode=None if mode == "default" else mode)


def plain_train(args, level: str) -> float:
    """Tokens/s of the plain training loop."""
    config = parse_name(args.model)
    torch.manual_seed(0)
    model = GPT(config).cuda().train()
    fused = level == "max"
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  **({"fused": True} if fused else {}))
    run = _compiled(model, args.plain_mode) if level != "eager" else model
    data = torch.randint(1, config.vocab, (STREAM,), device="cuda")
    offsets = torch.arange(config.context + 1, device="cuda")
    dtype = DTYPES[args.precision]

    def step() -> None:
        starts = torch.randint(0, STREAM - config.context - 1, (args.batch, 1), device="cuda")
        window = data[starts + offsets]
        x, y = window[:, :-1].contiguous(), window[:, 1:].contiguous()
        with torch.autocast("cuda", dtype=dtype):
            logits = run(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    warmup = args.warmup + (3 if level != "eager" else 0)  # compiling, then cudagraph recording
    return args.batch * config.context / mean_seconds(step, warmup, args.steps)


def plain_infer(args, level: str, batch: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of the plain generation loop."""
    config = parse_name(args.model)
    torch.manual_seed(0)
    model = GPT(config).cuda().eval()
    dtype = DTYPES[args.precision]
    prompt, new = args.prompt, args.new_tokens
    cache = KVCache(config, batch, prompt + new, "cuda", dtype)
    prefill, decode = Prefill(model, cache), Decode(model, cache)
    compiled = level != "eager"
    if compiled:
        prefill, decode = _compiled(prefill, args.plain_mode), _compiled(decode, args.plain_mode)
    graphs = compiled and args.plain_mode in ("reduce-overhead", "max-autotune")
    data = torch.randint(1, config.vocab, (STREAM,), device="cuda")
    offsets = torch.arange(prompt, device="cuda")
    times: list[tuple[torch.cuda.Event, torch.cuda.Event, torch.cuda.Event]] = []

    def call(module, x):
        if graphs:  # a new step for CUDA graph trees: the last call's output is no longer read
            torch.compiler.cudagraph_mark_step_begin()
        return module(x)

    def request(timed: bool) -> None:
        ids = data[torch.randint(0, STREAM - prompt, (batch, 1), device="cuda") + offsets]
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if timed else []
        if timed:
            marks[0].record()
        token = call(prefill, ids).argmax(-1, keepdim=True)
        cache.pos.fill_(prompt)
        if timed:
            marks[1].record()
        for _ in range(new - 1):
            token = call(decode, token).argmax(-1, keepdim=True)
            cache.pos.add_(1)
        if timed:
            marks[2].record()
            times.append(tuple(marks))

    # one autocast around all requests, as around a server's generation loop: each weight is cast once
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        for _ in range(args.warmup + (3 if compiled else 0)):
            request(False)
        for _ in range(args.infer_steps):
            request(True)
        torch.cuda.synchronize()
    prefill_s = sum(a.elapsed_time(b) for a, b, _ in times) / 1e3
    decode_s = sum(b.elapsed_time(c) for _, b, c in times) / 1e3
    return batch * prompt * len(times) / prefill_s, batch * (new - 1) * len(times) / decode_s


class Dlbench:
    """dlbench's runs, through launch/execute.py as `dlbench run` runs them; each configuration's FLOPs
    counted once."""

    def __init__(self, args) -> None:
        self.args, self.flops, self.system = args, {}, fingerprint()

    def run(self, workload: str, level: str, batch: int, steps: int, **options) -> dict:
        a = self.args
        spec = BenchmarkSpec.from_dict({"workload": workload, "model": a.model, "batch": batch,
                                        "precision": a.precision, "device": "cuda", "warmup": a.warmup,
                                        "warmup_seconds": 0.0, "steps": steps, "min_seconds": 0.0, "optimize": level,
                                        **options})
        key = (workload, level, batch)
        result = execute(spec, self.system, flops=self.flops.get(key))
        if result.status != "ok":
            sys.exit(f"dlbench {spec.label()} ended with {result.status}: {result.error}")
        self.flops.setdefault(key, result.measured.utilisation.flops_per_step)
        return result.metrics


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2", help="a language model of `dlbench models` (default gpt2)")
    parser.add_argument("--levels", default="eager,max", help="--optimize levels, eager and/or max (default both)")
    parser.add_argument("--rounds", type=int, default=3, help="plain/dlbench pairs per configuration (median)")
    parser.add_argument("--batch", type=int, default=16, help="training sequences per step (default 16)")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per run (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps or requests per run (default 5)")
    parser.add_argument("--infer-batches", default="1,16", help="generation batches (default 1,16)")
    parser.add_argument("--infer-steps", type=int, default=10, help="timed requests per inference run (default 10)")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--precision", default="bf16", choices=tuple(DTYPES))
    parser.add_argument("--plain-mode", default="max-autotune", choices=("default", "reduce-overhead", "max-autotune"),
                        help="torch.compile's mode for the plain loops at max (default max-autotune: autotuned "
                             "matmuls and CUDA graphs, what dlbench's max compiles)")
    parser.add_argument("--skip", default="", help="leave out: train and/or infer")
    parser.add_argument("--json", type=Path, help="write every run's figures here after each run")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    levels = [level.strip() for level in args.levels.split(",") if level.strip()]
    batches = [int(b) for b in args.infer_batches.split(",") if b.strip()]
    skip = {s.strip() for s in args.skip.split(",")}
    ours = Dlbench(args)
    runs: list[dict] = []
    start = time.perf_counter()
    figures: dict[tuple[str, str], dict[str, list[float]]] = {}  # (what, level) -> side -> tok/s per round

    def add(what: str, level: str, side: str, value: float) -> None:
        figures.setdefault((what, level), {"plain": [], "dlbench": []})[side].append(value)
        runs.append({"what": what, "level": level, "side": side, "tok_s": value,
                     "at_s": round(time.perf_counter() - start, 1)})
        print(f"[{time.perf_counter() - start:5.0f} s] {what}, {level}, {side}: {value:,.0f} tok/s", file=sys.stderr,
              flush=True)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1))

    for level in levels:
        for i in range(args.rounds):
            if "train" not in skip:
                what = f"train, batch {args.batch}"
                _fresh()
                add(what, level, "plain", plain_train(args, level))
                _fresh()
                add(what, level, "dlbench", ours.run("lm_train", level, args.batch, args.steps)["throughput"])
            if "infer" in skip:
                continue
            for batch in batches:
                _fresh()
                prefilled, decoded = plain_infer(args, level, batch)
                add(f"prefill, batch {batch}", level, "plain", prefilled)
                add(f"decode, batch {batch}", level, "plain", decoded)
                _fresh()
                m = ours.run("lm_infer", level, batch, args.infer_steps, prompt=args.prompt, new_tokens=args.new_tokens)
                add(f"prefill, batch {batch}", level, "dlbench", m["prefill_tokens_per_s"])
                add(f"decode, batch {batch}", level, "dlbench", m["decode_tokens_per_s"])

    print(f"\n{args.model}, {args.precision} autocast, {torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"training {args.batch} x {parse_name(args.model).context} tokens a step; generation {args.prompt} prompt "
          f"tokens, {args.new_tokens - 1} decode steps; plain at max: torch.compile mode {args.plain_mode}; "
          f"{args.rounds} rounds, medians\n")
    print("| run | level | plain tok/s | dlbench tok/s | dlbench / plain | spread plain | spread dlbench |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (what, level), sides in figures.items():
        plain, dl = statistics.median(sides["plain"]), statistics.median(sides["dlbench"])
        ratio = dl / plain
        mark = "" if ratio >= TARGET else f" (below {TARGET})"
        print(f"| {what} | {level} | {plain:,.0f} | {dl:,.0f} | {ratio:.3f}{mark} | {_spread(sides['plain']):.1%} | "
              f"{_spread(sides['dlbench']):.1%} |")


if __name__ == "__main__":
    prepare()  # before any CUDA work, as the dlbench command does
    main()
