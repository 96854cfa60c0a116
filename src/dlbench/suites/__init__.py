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


# Bounds on what one suite, with its includes, may make the YAML reader build: a few hundred
# bytes can otherwise expand to billions of values through aliases, nest deeper than Python
# recurses, or include files by the million. Real suites are a few KB and far below each.
MAX_BYTES = 1_000_000  # of YAML, all files of one suite together
MAX_VALUES = 50_000  # lists, mappings and scalars, each alias counted as all it stands for
MAX_DEPTH = 100  # lists and mappings inside one another, through aliases too
MAX_INCLUDES = 100  # suite files read for one suite's includes, a file included twice counting twice


@dataclass
class _Reading:
    """What one `load` has read so far, over all its includes."""
    bytes: int = 0
    values: int = 0
    includes: int = 0


class _Refused(yaml.MarkedYAMLError):
    """YAML past a bound: refused while it is read, before anything is built from it."""


try:  # libyaml scans and parses several times faster than PyYAML's Python parser
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)


class _Loader(_Parser, yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """Safe YAML, composed in Python so that every value is counted as it is read (the bounds
    above), and without duplicate keys: PyYAML keeps the last of two equal keys silently, so a
    suite that sets `batch` twice would run something its author did not read."""

    # the Python composer, not libyaml's: only it lets each value be counted
    get_single_node = yaml.composer.Composer.get_single_node
    get_node = yaml.composer.Composer.get_node
    check_node = yaml.composer.Composer.check_node

    def __init__(self, stream: str, reading: _Reading) -> None:
        _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self.reading = reading
        self.depth = 0
        self.shapes: dict[int, tuple[int, int]] = {}  # id(node) → (values, depth) once it is complete

    def compose_node(self, parent, index):
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self.shapes:  # `&a [*a]`: a value that holds itself never ends
                raise _Refused(None, None, "an alias is used inside the value it names", mark)
            values, depth = self.shapes[id(node)]
            self._grow(values, self.depth + depth, mark)
            return node
        self.depth += 1
        self._grow(1, self.depth, mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        self.shapes[id(node)] = self._shape(node)
        return node

    def _grow(self, values: int, depth: int, mark) -> None:
        """Count `values` more; refuse past the bounds, as soon as they are passed."""
        self.reading.values += values
        if self.reading.values > MAX_VALUES:
            raise _Refused(None, None, f"it holds more than {MAX_VALUES:,} values (an alias counts as all the "
                                       f"values it stands for)", mark)
        if depth > MAX_DEPTH:
            raise _Refused(None, None, f"it nests lists and mappings more than {MAX_DEPTH} deep", mark)

    def _shape(self, node: yaml.Node) -> tuple[int, int]:
        """(values, depth) of a complete node, each alias in it counted as what it names."""
        if isinstance(node, yaml.ScalarNode):
            return 1, 1
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
        shapes = [self.shapes[id(c)] for c in children]
        return 1 + sum(v for v, _ in shapes), 1 + max((d for _, d in shapes), default=0)

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
    return _load(str(name_or_path), overrides or {}, (), None, _Reading())


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
                with open(path, "rb") as f:  # never more than the bound: the file could be huge or growing
                    data = f.read(MAX_BYTES + 1)
                if len(data) > MAX_BYTES:
                    raise UserError(f"suite {path} is more than {MAX_BYTES:,} bytes of YAML; at most {MAX_BYTES:,} "
                                    f"are allowed")
                return data.decode("utf-8"), str(path), str(path.resolve())
            except (OSError, UnicodeDecodeError) as error:
                raise UserError(f"cannot read suite file {path}: {error}") from None
    raise UserError(f"no suite named {ref!r}{suggest(ref, builtin_names())}; "
                    f"built-in suites: {', '.join(builtin_names())}, or give a YAML file")


def _load(ref: str, overrides: dict[str, Any], chain: tuple[tuple[str, str], ...], base: Path | None,
          reading: _Reading) -> Suite:
    if chain:
        reading.includes += 1
        if reading.includes > MAX_INCLUDES:
            raise UserError(f"suite {chain[0][1]} includes more than {MAX_INCLUDES} suite files in all (a file "
                            f"included twice counts twice); at most {MAX_INCLUDES} are allowed")
    text, source, identity = _locate(ref, base)
    if identity in (key for key, _ in chain):
        names = [shown for _, shown in chain] + [source]
        raise UserError(f"suite include cycle: {' -> '.join(names)}")
    reading.bytes += len(text.encode("utf-8"))
    if reading.bytes > MAX_BYTES:
        whole = f"suite {source}" if not chain else f"suite {chain[0][1]} with its includes"
        raise UserError(f"{whole} is more than {MAX_BYTES:,} bytes of YAML; at most {MAX_BYTES:,} are allowed")
    data = _read_yaml(text, source, reading)
    here = None if identity.startswith("builtin:") else Path(source).parent
    return parse(data, source, overrides, _chain=chain + ((identity, source),), _base=here, _reading=reading)


def _read_yaml(text: str, source: str, reading: _Reading) -> Any:
    loader = _Loader(text, reading)
    try:
        return loader.get_single_data()
    except _Refused as error:
        mark = error.problem_mark
        raise UserError(f"suite {source} is refused at line {mark.line + 1}: {error.problem}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or error
        if "maximum nesting depth" in str(problem):  # libyaml's own bound, which it reaches reading ahead
            raise UserError(f"suite {source} is refused{where}: it nests lists and mappings more than "
                            f"{MAX_DEPTH} deep") from None
        raise UserError(f"suite {source} is not valid YAML{where}: {problem}") from None
    except RecursionError:  # the bounds keep YAML from this; a last guard all the same
        raise UserError(f"suite {source} nests too deeply to be read") from None
    finally:
        loader.dispose()


def parse(data: Any, source: str, overrides: dict[str, Any], *, _chain: tuple[tuple[str, str], ...] = (),
          _base: Path | None = None, _reading: _Reading | None = None) -> Suite:
    if not isinstance(data, dict):
        raise UserError(f"suite {source} must be a mapping with keys {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(data) - _KEYS, key=str)
    if unknown:
        raise UserError(f"suite {source}: unknown key {shown(unknown[0])}{suggest(str(unknown[0]), sorted(_KEYS))}; "
                        f"known keys: {', '.join(sorted(_KEYS))}")
    timeout = _timeout(data.get("timeout"), source)
    reading = _reading or _Reading()
    included = [_load(ref, overrides, _chain, _base, reading) for ref in _includes(data.get("include"), source)]
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
