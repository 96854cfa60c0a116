"""The quantities people type and plan with: shapes, counts, rates, names.

One parser per kind of quantity, so a flag, a suite file and a report read '3x224x224' or
'8.1T' the same way. Plain Python only: every layer may import this module, and it imports
nothing of dlbench but its errors.
"""

from __future__ import annotations

import difflib
import re

from dlbench.errors import UserError

SECONDS_PER_DAY = 86_400.0
SEED003_ITERATIONS = 40_000  # seed 003: "5-fold cross-validation training for 40,000 iterations"
_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgtp]?)\s*(?:vox)?\s*")


def parse_shape(text: str | list | tuple) -> tuple[int, ...]:
    """'3x224x224' (or a list of ints) -> (3, 224, 224)."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    else:
        parts = str(text).lower().replace("×", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise UserError(f"bad shape {text!r}: expected sizes joined by 'x', e.g. 3x224x224") from None
    if not shape or any(s <= 0 for s in shape):
        raise UserError(f"bad shape {text!r}: every size must be a positive integer")
    return shape


def parse_zyx(text: str | list | tuple, what: str) -> tuple[int, int, int]:
    """'32x384x384' -> (32, 384, 384): a volume's size, blocks, halos, chunks and patches.
    `what` names the flag or key in the UserError."""
    shape = parse_shape(text)
    if len(shape) != 3:
        raise UserError(f"{what} must be ZxYxX (3 sizes), got {'x'.join(map(str, shape))}")
    return shape  # type: ignore[return-value]


def parse_count(text: str | float | int, option: str) -> float:
    """'8.1T' -> 8.1e12 (decimal suffixes K, M, G, T, P). A count that is not a positive number
    is a UserError naming `option`, the flag or key it came from."""
    match = _COUNT.fullmatch(str(text).lower())
    count = float(match.group(1)) * _SUFFIX.get(match.group(2), 1.0) if match else 0.0
    if not 0 < count < 1e30:  # 1e30: far beyond any volume; '1e999' would be infinite
        raise UserError(f"bad {option} {str(text)[:80]!r}: give a voxel count like 8.1T, 500G or 1.9e9")
    return count


def suggest(name: str, known: list[str]) -> str:
    """' (did you mean a, b?)' for the known names close to `name`, else ''."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def positive(*values: float | None) -> bool:
    """Whether every value is there and above zero: a rate needs both of its inputs."""
    return all(v is not None and v > 0 for v in values)


def iters_per_min(iterations: float | None, seconds: float | None) -> float | None:
    """Seed 000/001: 1001 iterations in 1754.2 s -> 34.2 iterations per minute."""
    return 60.0 * iterations / seconds if positive(iterations, seconds) else None


def days_to(iterations: float | None, per_min: float | None) -> float | None:
    """Days to reach `iterations` at `per_min` iterations per minute (seed 001: 100k iterations)."""
    return iterations / per_min * 60.0 / SECONDS_PER_DAY if positive(iterations, per_min) else None


def hours_for(voxels: float | None, mvox_s: float | None, gpus: int = 1) -> float | None:
    """Hours to predict `voxels` at `mvox_s` per GPU on `gpus` GPUs (prediction scales linearly)."""
    return voxels / (mvox_s * 1e6 * gpus) / 3600.0 if positive(voxels, mvox_s, gpus) else None
