"""Named suites: YAML files that expand to BenchmarkSpecs.

A suite has `defaults` (keys of a spec), a `matrix` (each key a list; every combination
is one spec) and `specs` (explicit entries). Explicit entries and matrix values override
the defaults.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dlbench.errors import UserError
from dlbench.spec import BenchmarkSpec, suggest

_KEYS = {"name", "description", "defaults", "matrix", "specs"}


@dataclass
class Suite:
    name: str
    description: str
    specs: list[BenchmarkSpec]


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".yaml"))


def load(name_or_path: str, overrides: dict[str, Any] | None = None) -> Suite:
    """A built-in suite by name, or a suite file by path; `overrides` replace keys in every spec."""
    path = Path(name_or_path)
    if name_or_path in builtin_names():
        text = resources.files(__package__).joinpath(f"{name_or_path}.yaml").read_text(encoding="utf-8")
        source = name_or_path
    elif path.is_file():
        text, source = path.read_text(encoding="utf-8"), str(path)
    else:
        raise UserError(f"no suite named {name_or_path!r}{suggest(name_or_path, builtin_names())}; "
                        f"built-in suites: {', '.join(builtin_names())}, or give a YAML file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"suite {source} is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
    return parse(data, source, overrides or {})


def parse(data: Any, source: str, overrides: dict[str, Any]) -> Suite:
    if not isinstance(data, dict):
        raise UserError(f"suite {source} must be a mapping with keys {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise UserError(f"suite {source}: unknown key {unknown[0]!r}{suggest(unknown[0], sorted(_KEYS))}; "
                        f"known keys: {', '.join(sorted(_KEYS))}")
    defaults = _mapping(data.get("defaults") or {}, source, "defaults")
    matrix = _mapping(data.get("matrix") or {}, source, "matrix")
    explicit = data.get("specs") or []
    if not isinstance(explicit, list):
        raise UserError(f"suite {source}: 'specs' must be a list of mappings")
    entries: list[dict[str, Any]] = []
    if matrix:
        axes = {k: v if isinstance(v, list) else [v] for k, v in matrix.items()}
        for combination in itertools.product(*axes.values()):
            entries.append(dict(zip(axes, combination)))
    entries += [_mapping(e, source, "specs entry") for e in explicit]
    if not entries:
        raise UserError(f"suite {source} defines no benchmarks (give 'matrix' or 'specs')")
    specs = []
    for entry in entries:
        try:
            specs.append(BenchmarkSpec.from_dict({**defaults, **entry, **overrides}))
        except UserError as error:
            raise UserError(f"suite {source}: {error}") from None
        except TypeError as error:
            raise UserError(f"suite {source}: bad spec {entry}: {error}") from None
    return Suite(str(data.get("name") or Path(source).stem), str(data.get("description") or ""), specs)


def _mapping(value: Any, source: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"suite {source}: {what} must be a mapping, got {type(value).__name__}")
    return value
