"""Named suites: YAML files that expand to BenchmarkSpecs.

A suite has `defaults` (keys of a spec), a `matrix` (each key a list; every combination
is one spec), `specs` (explicit entries), `include` (other suites, by built-in name or
path, whose specs run first) and `timeout` (seconds; the default for specs without one).
Explicit entries and matrix values override the defaults. A matrix axis whose values are
mappings sets several keys per value (e.g. a data source with its path); its name is then
only a label. Identical specs are kept once.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dlbench.errors import UserError
from dlbench.options import MAX_REPEAT, fields_of, shown
from dlbench.spec import BenchmarkSpec
from dlbench.units import suggest

_KEYS = {"name", "description", "include", "timeout", "defaults", "matrix", "specs"}
_GENERAL = {f.name for f in dataclasses.fields(BenchmarkSpec)}
MAX_SPECS = 10_000  # a matrix beyond this is a mistake (an axis too many), not a plan anyone runs


class _Loader(yaml.SafeLoader):
    """YAML without duplicate keys: PyYAML keeps the last of two equal keys silently, so a
    suite that sets `batch` twice would run something its author did not read."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {shown(key)}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


@dataclass
class Suite:
    name: str
    description: str
    specs: list[BenchmarkSpec]
    repeats: dict[str, int] = field(default_factory=dict)  # spec_key → runs asked for, each in a fresh process

    def runs(self, spec: BenchmarkSpec) -> int:
        """How many times `spec` runs: its entry's `repeat`, else once."""
        return self.repeats.get(spec_key(spec), 1)


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".yaml"))


def load(name_or_path: str, overrides: dict[str, Any] | None = None) -> Suite:
    """A built-in suite by name, or a suite file by path; `overrides` replace keys in every spec."""
    return _load(str(name_or_path), overrides or {}, (), None)


def spec_key(spec: BenchmarkSpec | dict[str, Any]) -> str:
    """What makes two specs (or a spec and a stored result's spec) the same benchmark; the
    time limit is left out because it does not change what is measured."""
    data = json.loads(json.dumps(spec if isinstance(spec, dict) else spec.to_dict(), default=str))
    data.pop("timeout", None)
    if data.get("optimize", "eager") == "eager":  # results stored before the field existed are eager
        data.pop("optimize", None)
    return json.dumps(data, sort_keys=True)


def title(spec: BenchmarkSpec) -> str:
    """spec.label() plus what the label leaves out: GPU count and workload options."""
    parts = [spec.label()]
    if spec.gpus > 1:
        parts.append(f"{spec.gpus} GPUs")
    parts += [f"{k}={v}" for k, v in sorted(spec.options.items())]
    return " ".join(parts)


def _locate(ref: str, base: Path | None) -> tuple[str, str, str]:
    """(text, source shown in messages, identity for cycle detection) of a suite reference."""
    candidates = [base / ref] if base is not None and not Path(ref).is_absolute() else []
    candidates.append(Path(ref))
    if ref in builtin_names():
        text = resources.files(__package__).joinpath(f"{ref}.yaml").read_text(encoding="utf-8")
        return text, ref, f"builtin:{ref}"
    for path in candidates:
        if path.is_file():
            try:
                return path.read_text(encoding="utf-8"), str(path), str(path.resolve())
            except (OSError, UnicodeDecodeError) as error:
                raise UserError(f"cannot read suite file {path}: {error}") from None
    raise UserError(f"no suite named {ref!r}{suggest(ref, builtin_names())}; "
                    f"built-in suites: {', '.join(builtin_names())}, or give a YAML file")


def _load(ref: str, overrides: dict[str, Any], chain: tuple[tuple[str, str], ...], base: Path | None) -> Suite:
    text, source, identity = _locate(ref, base)
    if identity in (key for key, _ in chain):
        names = [shown for _, shown in chain] + [source]
        raise UserError(f"suite include cycle: {' -> '.join(names)}")
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"suite {source} is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
    here = None if identity.startswith("builtin:") else Path(source).parent
    return parse(data, source, overrides, _chain=chain + ((identity, source),), _base=here)


def parse(data: Any, source: str, overrides: dict[str, Any], *,
          _chain: tuple[tuple[str, str], ...] = (), _base: Path | None = None) -> Suite:
    if not isinstance(data, dict):
        raise UserError(f"suite {source} must be a mapping with keys {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(data) - _KEYS, key=str)
    if unknown:
        raise UserError(f"suite {source}: unknown key {shown(unknown[0])}{suggest(str(unknown[0]), sorted(_KEYS))}; "
                        f"known keys: {', '.join(sorted(_KEYS))}")
    timeout = _timeout(data.get("timeout"), source)
    included = [_load(ref, overrides, _chain, _base) for ref in _includes(data.get("include"), source)]
    specs = [s for suite in included for s in suite.specs]
    repeats = {key: n for suite in included for key, n in suite.repeats.items()}
    for entry in _entries(data, source, bool(specs)):
        spec = _spec({k: v for k, v in entry.items() if k != "repeat"}, source, overrides)
        specs.append(spec)
        if "repeat" in entry:
            repeats[spec_key(spec)] = _repeat(entry["repeat"], source)
    if len(specs) > MAX_SPECS:
        raise UserError(f"suite {source} expands to {len(specs):,} benchmarks with its includes; at most "
                        f"{MAX_SPECS:,} are allowed")
    if timeout is not None:
        specs = [s if s.timeout is not None else dataclasses.replace(s, timeout=timeout) for s in specs]
    unique = {spec_key(s): s for s in reversed(specs)}  # the first of identical specs wins
    ordered = [s for s in specs if unique.get(spec_key(s)) is s]
    return Suite(str(data.get("name") or Path(source).stem), str(data.get("description") or ""), ordered,
                 {k: n for k, n in repeats.items() if n > 1})


def _repeat(value: Any, source: str) -> int:
    """An entry's `repeat`: how many fresh processes run it (`dlbench run --repeat auto` has no suite form:
    a suite's length is known before it starts)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEAT:
        raise UserError(f"suite {source}: repeat must be a whole number of runs from 1 to {MAX_REPEAT}, "
                        f"got {shown(value)}")
    return value


def _entries(data: dict[str, Any], source: str, included: bool) -> list[dict[str, Any]]:
    defaults = _mapping(data.get("defaults") or {}, source, "defaults")
    matrix = _mapping(data.get("matrix") or {}, source, "matrix")
    explicit = data.get("specs") or []
    if not isinstance(explicit, list):
        raise UserError(f"suite {source}: 'specs' must be a list of mappings")
    entries: list[dict[str, Any]] = []
    if matrix:
        axes = {k: v if isinstance(v, list) else [v] for k, v in matrix.items()}
        if any(not values for values in axes.values()):
            raise UserError(f"suite {source}: matrix axis {shown(next(k for k, v in axes.items() if not v))} is empty")
        size = math.prod(len(values) for values in axes.values())
        if size + len(explicit) > MAX_SPECS:
            sizes = " x ".join(str(len(values)) for values in axes.values())
            raise UserError(f"suite {source}: the matrix expands to {size:,} benchmarks ({sizes}); at most "
                            f"{MAX_SPECS:,} are allowed")
        for combination in itertools.product(*axes.values()):
            entries.append(_combine(dict(zip(axes, combination))))
    entries += [_mapping(e, source, "specs entry") for e in explicit]
    if not entries and not included:
        raise UserError(f"suite {source} defines no benchmarks (give 'matrix', 'specs' or 'include')")
    return [{**defaults, **entry} for entry in entries]


def _combine(point: dict[str, Any]) -> dict[str, Any]:
    """One matrix point as spec keys: a mapping value on a label axis contributes all its keys."""
    entry: dict[str, Any] = {}
    for axis, value in point.items():
        if isinstance(value, dict) and axis not in _GENERAL:
            entry.update(value)
        else:
            entry[axis] = value
    return entry


def _spec(entry: dict[str, Any], source: str, overrides: dict[str, Any]) -> BenchmarkSpec:
    try:
        return BenchmarkSpec.from_dict({**entry, **overrides})
    except UserError as error:
        raise UserError(f"suite {source}: {error}") from None
    except TypeError as error:
        raise UserError(f"suite {source}: bad spec {shown(entry)}: {error}") from None


def _includes(value: Any, source: str) -> list[str]:
    if value is None:
        return []
    refs = [value] if isinstance(value, str) else value
    if not isinstance(refs, list) or not all(isinstance(r, str) and r for r in refs):
        raise UserError(f"suite {source}: 'include' must be a suite name or path, or a list of them")
    return refs


def _timeout(value: Any, source: str) -> float | None:
    """A suite's `timeout`, checked like a spec's."""
    field = next(f for f in fields_of(BenchmarkSpec) if f.name == "timeout")
    try:
        return field.check(value)
    except UserError as error:
        raise UserError(f"suite {source}: 'timeout' {str(error).partition(' ')[2]}") from None


def _mapping(value: Any, source: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"suite {source}: {what} must be a mapping, got {type(value).__name__}")
    return value
