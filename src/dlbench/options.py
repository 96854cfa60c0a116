"""Typed options: every setting a user can give, declared once with its default, help, unit
and bounds. The command line (`dlbench run <workload>`), the suite schema and validation are
all generated from these declarations, so a setting is checked in one place whichever way it
arrives (a flag, a suite file, a stored spec).

    @dataclass(frozen=True)
    class MyOptions(Options):
        sigma: float = option(0.25, "Noise standard deviation.", low=0)

A field's type decides the check: bool, int, float (finite), str, a shape (tuple of
ints, given as '3x224x224'), a list of texts, each optionally None.
`choices` and `parse` (a function that raises UserError on a bad value, e.g. a shape
parser) check strings; `low`/`high` bound numbers. Commands other than `dlbench run` declare
their parameters the same way (`argument` for a positional one, `flag` and `short` where the
flag is not the field's name).
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Union

from dlbench.errors import UserError
from dlbench.units import parse_shape, suggest


# Upper bounds shared by the options of every layer: far beyond any real run, low enough that a typo (an extra digit or two,
# seconds given as milliseconds) is refused rather than run for days.
MAX_BATCH = 2**24
MAX_STEPS = 10**7
MAX_SECONDS = 7 * 86400.0  # warm-up and measurement
MAX_TIMEOUT_S = 30 * 86400.0
MAX_GPUS = 1024
MAX_REPEAT = 100  # fresh processes of one benchmark (--repeat, a suite entry's repeat)
MAX_SEED = 2**32 - 1  # workloads derive seeds from it (seed * 1000 + rank) that must stay within 64 bits


@dataclass(frozen=True)
class Meta:
    help: str
    unit: str | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the bound `low` itself is refused
    choices: tuple[str, ...] | None = None
    parse: Callable[[Any], Any] | None = None  # checks a string (shapes, counts): raises UserError
    argument: bool = False  # a positional parameter of its command, not a --flag
    flag: str | None = None  # the flag when it is not the field's name (`--list` for list_only)
    short: str | None = None  # a one-letter alias such as -o


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxtuple = 4
_SHOWN.maxlevel = 2


def shown(value: Any) -> str:
    """A value as error messages quote it: bounded, so a crafted suite or record cannot make a
    message huge (YAML aliases can nest lists exponentially)."""
    try:
        return _SHOWN.repr(value)
    except ValueError:  # an integer beyond Python's digit limit for str()
        return "a number of more than 4000 digits"


def option(default: Any, help: str, **meta: Any) -> Any:
    """A typed option's field: default, help text and checks (see `Meta`)."""
    return dataclasses.field(default=default, metadata={"dlbench": Meta(help, **meta)})


@dataclass(frozen=True)
class Field:
    """One declared option, as the command line and the validation see it."""
    name: str
    kind: type  # bool, int, float, str, tuple (a shape) or list (of texts)
    optional: bool  # None is a valid value
    default: Any
    meta: Meta

    @property
    def flag(self) -> str:
        if self.meta.argument:
            return self.name.upper()
        return self.meta.flag or "--" + self.name.replace("_", "-")

    def help(self) -> str:
        return f"{self.meta.help} Unit: {self.meta.unit}." if self.meta.unit else self.meta.help

    def check(self, value: Any) -> Any:
        """The value if it is valid for this option (ints widen to floats), else a UserError."""
        if value is None and self.optional:
            return None
        value = self._typed(value)
        if self.kind in (int, float):
            self._bounded(value)
        if self.meta.choices is not None and value not in self.meta.choices:
            raise UserError(f"{self.flag} must be one of {', '.join(self.meta.choices)}, got {shown(value)}"
                            f"{suggest(str(value), list(self.meta.choices))}")
        if self.meta.parse is not None:
            self.meta.parse(value)
        return value

    def _typed(self, value: Any) -> Any:
        if self.kind is tuple:
            return parse_shape(value)
        if self.kind is list:
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return list(value)
            raise UserError(f"{self.flag} must be a list of texts, got {shown(value)}")
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            raise UserError(f"{self.flag} must be true or false, got {shown(value)}")
        if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else self.kind):
            what = {int: "an integer", float: "a number", str: "text"}[self.kind]
            raise UserError(f"{self.flag} must be {what}, got {shown(value)}")
        if self.kind is float:
            if not math.isfinite(value):
                raise UserError(f"{self.flag} must be a finite number, got {shown(value)}")
            return float(value)
        return value

    def _bounded(self, value: float) -> None:
        low, high = self.meta.low, self.meta.high
        unit = f" {self.meta.unit}" if self.meta.unit else ""
        if low is not None and (value < low or (self.meta.low_open and value == low)):
            sign = ">" if self.meta.low_open else "≥"
            raise UserError(f"{self.flag} must be {sign} {low:g}{unit}, got {shown(value)}")
        if high is not None and value > high:
            raise UserError(f"{self.flag} must be ≤ {high:g}{unit}, got {shown(value)}")


def _kind(annotation: Any) -> tuple[type, bool]:
    """(bool|int|float|str, whether None is allowed) of a field annotation."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        kind, optional = _kind(kinds[0])
        return kind, len(kinds) < len(args)
    origin = typing.get_origin(annotation)
    return (origin if origin in (tuple, list) else annotation), False


def fields_of(cls: type) -> list[Field]:
    """The declared options of a dataclass, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("dlbench")
        if meta is None:
            continue
        kind, optional = _kind(hints[f.name])
        out.append(Field(f.name, kind, optional, f.default, meta))
    return out


def check_fields(obj: Any) -> None:
    """Validate every declared option of a dataclass instance in place (ints widen to floats)."""
    for f in fields_of(type(obj)):
        object.__setattr__(obj, f.name, f.check(getattr(obj, f.name)))


@dataclass(frozen=True)
class Options:
    """Base of a workload's options: declared fields, checked on construction."""

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def fields(cls) -> list[Field]:
        return fields_of(cls)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in cls.fields()]

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> "Options":
        """From the options a spec sets; an unknown key is a UserError that names close ones."""
        known = cls.names()
        for key in data:
            if key not in known:
                hint = f"; known: {', '.join(known)}" if known else " (it takes none)"
                raise UserError(f"{where}has no option {shown(key)}{suggest(str(key), known)}{hint}")
        return cls(**data)

    def items(self) -> Iterator[tuple[str, Any]]:
        for name in self.names():
            yield name, getattr(self, name)
