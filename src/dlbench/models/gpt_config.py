"""The decoder-only language models' configurations and registry names (see models/gpt.py), without
torch: a name is parsed and checked before anything runs; the model is built by models/gpt.py.

Names: gpt2 (GPT-2 small, 124 M parameters), gpt2-medium, gpt2-large, gpt2-xl, each optionally with
settings that change its sizes: 'gpt2:layers=2,heads=2,width=32,vocab=97,context=16'.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from dlbench.errors import UserError
from dlbench.models.registry import ModelEntry, built, register, register_family

TASK = "language"  # what a registry entry of these models says its output is: next-token logits


@dataclass(frozen=True)
class GPTConfig:
    """GPT-2's shapes: pre-LayerNorm blocks, GELU MLP of 4 x width, learned positions, the token
    embedding tied to the output layer."""
    layers: int = 12
    heads: int = 12
    width: int = 768
    vocab: int = 50257
    context: int = 1024  # positions the model has (its longest sequence)

    @property
    def head_width(self) -> int:
        return self.width // self.heads


# GPT-2's four sizes (Radford et al. 2019, as released).
CONFIGS = {
    "gpt2": GPTConfig(),
    "gpt2-medium": GPTConfig(layers=24, heads=16, width=1024),
    "gpt2-large": GPTConfig(layers=36, heads=20, width=1280),
    "gpt2-xl": GPTConfig(layers=48, heads=25, width=1600),
}
TITLES = {"gpt2": "GPT-2 small", "gpt2-medium": "GPT-2 medium", "gpt2-large": "GPT-2 large", "gpt2-xl": "GPT-2 XL"}
LIMITS = {"layers": 1024, "heads": 1024, "width": 65536, "vocab": 2**24, "context": 2**20}
SETTINGS = tuple(f.name for f in fields(GPTConfig))


def parse_name(name: str) -> GPTConfig:
    """'gpt2', 'gpt2-medium', ... or any of them with ':layers=2,heads=2,...' -> its configuration."""
    family, _, settings = str(name).partition(":")
    if family not in CONFIGS:
        raise UserError(f"unknown language model {family!r}: use {', '.join(CONFIGS)}")
    changes: dict[str, int] = {}
    for item in filter(None, settings.split(",")):
        key, _, value = (part.strip() for part in item.partition("="))
        if key not in SETTINGS or not value.isdigit() or not 1 <= int(value) <= LIMITS[key]:
            raise UserError(f"bad model setting {item!r} in {name!r}: use "
                            f"{', '.join(f'{k}=N' for k in SETTINGS)}, each a positive integer")
        changes[key] = int(value)
    config = replace(CONFIGS[family], **changes)
    if config.width % config.heads:
        raise UserError(f"model {name!r}: width {config.width} is not a multiple of heads {config.heads}")
    if config.vocab < 2 or config.context < 2:
        raise UserError(f"model {name!r}: vocab and context must be at least 2")
    return config


def entry_for(name: str) -> ModelEntry:
    """A registry entry for any of the names (with or without settings): its input is a sequence of
    `context` token ids."""
    config = parse_name(name)
    family, _, settings = name.partition(":")
    title = TITLES[family] if not settings else f"{TITLES[family]} ({settings})"
    return ModelEntry(name, title, built("dlbench.models.gpt", "GPT", config), (config.context,), TASK)


def is_language_model(name: str) -> bool:
    return str(name).partition(":")[0] in CONFIGS


for _family in CONFIGS:
    register_family(_family, entry_for)
    register(entry_for(_family))
