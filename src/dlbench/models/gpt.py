"""A decoder-only transformer language model with GPT-2's architecture (configurations in
models/gpt_config.py): token and learned position embeddings, pre-LayerNorm blocks of causal
self-attention (`F.scaled_dot_product_attention`) and a GELU MLP, a final LayerNorm, and the output
layer tied to the token embedding. No dropout: a benchmark times the model, not its regulariser.

`GPT(config)(ids)` gives the logits of every position (training). Incremental decoding keeps each
layer's keys and values in a `KVCache` of fixed length, so every call has the same shapes (what CUDA
graphs and a compiled model need): `Prefill` runs a prompt, fills the cache's first positions and
gives the logits of its last position; `Decode` runs one token per sequence at the cache's position
`pos` (a tensor on the device, which the caller moves on) and attends to every position up to it.
Both are modules of one tensor in and one out, so the optimisation levels (workloads/optimize.py)
apply to them as to any model; a call never moves `pos` itself, so repeating one gives the same.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.models.gpt_config import GPTConfig


class Attention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.c_attn = nn.Linear(config.width, 3 * config.width)
        self.c_proj = nn.Linear(config.width, config.width)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as (batch, heads, time, head width)."""
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        heads = (b, t, self.heads, c // self.heads)
        return q.view(heads).transpose(1, 2), k.view(heads).transpose(1, 2), v.view(heads).transpose(1, 2)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        b, h, t, d = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(b, t, h * d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def prefill(self, x: torch.Tensor, cache: "LayerCache") -> torch.Tensor:
        """Causal attention over the prompt, its keys and values written to the cache's first positions."""
        q, k, v = self._split(x)
        cache.write(torch.arange(x.shape[1], device=x.device), k, v)
        return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def decode(self, x: torch.Tensor, cache: "LayerCache", pos: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """One position: its key and value written at `pos`, attention over the positions `visible`."""
        q, k, v = self._split(x)
        cache.write(pos, k, v)
        return self._merge(F.scaled_dot_product_attention(q, cache.keys, cache.values, attn_mask=visible))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.width, 4 * config.width)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.width, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.width)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.width)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig = GPTConfig()) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab, config.width)
        self.wpe = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.width)
        self.lm_head = nn.Linear(config.width, config.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the projections into the residual
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.wte(ids) + self.wpe(positions)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (batch, time, vocab) of ids (batch, time)."""
        x = self._embed(ids, torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self._head(x)

    def prefill(self, ids: torch.Tensor, cache: "KVCache") -> torch.Tensor:
        """The logits (batch, vocab) of the prompt's last position; its keys and values fill the cache."""
        x = self._embed(ids, torch.arange(ids.shape[1], device=ids.device))
        for i, block in enumerate(self.blocks):
            x = x + block.attn.prefill(block.ln_1(x), cache.layers[i])
            x = x + block.mlp(block.ln_2(x))
        return self._head(x[:, -1])

    def decode(self, ids: torch.Tensor, cache: "KVCache") -> torch.Tensor:
        """The logits (batch, vocab) of one token per sequence (ids: batch x 1) at position `cache.pos`."""
        pos = cache.pos
        visible = (torch.arange(cache.length, device=ids.device) <= pos).view(1, 1, 1, -1)
        x = self._embed(ids, pos)
        for i, block in enumerate(self.blocks):
            x = x + block.attn.decode(block.ln_1(x), cache.layers[i], pos, visible)
            x = x + block.mlp(block.ln_2(x))
        return self._head(x[:, -1])


class LayerCache(nn.Module):
    """One layer's keys and values, (batch, heads, length, head width) each."""

    def __init__(self, shape: tuple[int, ...], device: torch.device | str, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("keys", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("values", torch.zeros(shape, device=device, dtype=dtype), persistent=False)

    def write(self, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keys and values (batch, heads, len(positions), head width) at `positions`, in place: an indexed
        write into the buffer, which a compiled model keeps in place too (no copy of the whole cache)."""
        self.keys[:, :, positions] = k.to(self.keys.dtype)
        self.values[:, :, positions] = v.to(self.values.dtype)


class KVCache(nn.Module):
    """Each layer's keys and values for `batch` sequences of up to `length` positions, and `pos`, the
    position the next `Decode` call writes (a one-element tensor on the device)."""

    def __init__(self, config: GPTConfig, batch: int, length: int, device: torch.device | str,
                 dtype: torch.dtype) -> None:
        super().__init__()
        if length > config.context:
            raise ValueError(f"a cache of {length} positions is longer than the model's {config.context}")
        shape = (batch, config.heads, length, config.head_width)
        self.length = length
        self.layers = nn.ModuleList(LayerCache(shape, device, dtype) for _ in range(config.layers))
        self.register_buffer("pos", torch.zeros(1, device=device, dtype=torch.long), persistent=False)


class Prefill(nn.Module):
    """`GPT.prefill` as a module of one tensor: prompt ids (batch, time) -> last logits (batch, vocab)."""

    def __init__(self, model: GPT, cache: KVCache) -> None:
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.prefill(ids, self.cache)


class Decode(nn.Module):
    """`GPT.decode` as a module of one tensor: ids (batch, 1) -> logits (batch, vocab) at `cache.pos`."""

    def __init__(self, model: GPT, cache: KVCache) -> None:
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.decode(ids, self.cache)


def cache_dtype(model: GPT, device: torch.device) -> torch.dtype:
    """The type the attention's keys and values have as the model runs: autocast's where it is on."""
    try:
        enabled = torch.is_autocast_enabled(device.type)
    except TypeError:  # torch < 2.4
        enabled = torch.is_autocast_enabled()
    if enabled:
        getter = getattr(torch, "get_autocast_dtype", None)
        return getter(device.type) if getter else torch.get_autocast_gpu_dtype()
    return next(model.parameters()).dtype


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding with the cache: the prompt's ids followed by `new_tokens` more (a reference
    for tests and a user's check; the workload times these calls one by one)."""
    batch, length = prompt.shape
    cache = KVCache(model.config, batch, length + new_tokens, prompt.device, cache_dtype(model, prompt.device))
    ids = [prompt, model.prefill(prompt, cache).argmax(-1, keepdim=True)]
    cache.pos.fill_(length)
    for _ in range(new_tokens - 1):
        ids.append(model.decode(ids[-1], cache).argmax(-1, keepdim=True))
        cache.pos.add_(1)
    return torch.cat(ids, dim=1)
