"""The Result record: one benchmark's outcome, versioned so stores from any release merge."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import statistics
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

from dlbench.figures import Odd
from dlbench.options import MAX_BATCH, shown
from dlbench.results.machine import Machine
from dlbench.results.measurement import Group, Measurement, Run, nested_problem
from dlbench.results.titles import legacy_title

# 2: status 'timeout' and the suite-run id `run`; records of schema 1 load unchanged.
# 3: `title`, the model's display name, so reading records needs no model registry; records of
#    schema 1 and 2 get theirs from results/titles.py when read.
SCHEMA_VERSION = 3
FORMAT = "dlbench-result"
STATUSES = ("ok", "oom", "error", "timeout", "interrupted")
FAILED = ("error", "oom", "timeout")  # a benchmark that ran and measured nothing: its command exits 1


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Setup:
    """A stored spec's general settings, typed, as reports read them. A setting that a record lacks
    (stored before it existed) or holds in no usable form (edited by hand, or `tamed`) reads as
    the spec's default."""
    batch: int | None = None
    input_shape: list[int] | None = None  # without the batch
    precision: str = "fp32"
    channels_last: bool = False
    gpus: int = 1  # processes, one per GPU
    optimize: str | None = None  # None: the spec does not say (see Result.optimize)
    options: dict[str, Any] = field(default_factory=dict)  # the workload's settings

    @classmethod
    def read(cls, spec: dict[str, Any]) -> "Setup":
        gpus, options = spec.get("gpus"), spec.get("options")
        return cls(batch=spec.get("batch"), input_shape=spec.get("input_shape"),
                   precision=spec.get("precision") or "fp32", channels_last=bool(spec.get("channels_last")),
                   gpus=gpus if type(gpus) is int and gpus >= 1 else 1, optimize=spec.get("optimize") or None,
                   options=options if isinstance(options, dict) else {})


def as_typed(text: str) -> str:
    """Command-line text as typed: under a locale that is not UTF-8 (LC_ALL=C without UTF-8 mode) Python
    keeps the bytes of a non-ASCII argument as lone surrogates, which neither SQLite nor a UTF-8
    terminal takes; terminals send UTF-8, so those bytes are read as UTF-8."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return text.encode("utf-8", "replace").decode("utf-8")


@dataclass
class Result:
    spec: dict[str, Any]
    system: dict[str, Any]
    status: str = "ok"
    metrics: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    traces: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    title: str | None = None  # how reports name the model (ResNet-50); None in system records
    suite: str | None = None
    run: str | None = None  # suite-run id: every result of one `dlbench suite` run (and its resumes)
    tag: str | None = None
    started: str = field(default_factory=now)
    finished: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schema: int = SCHEMA_VERSION
    format: str = FORMAT

    def __post_init__(self) -> None:
        if isinstance(self.tag, str):
            self.tag = as_typed(self.tag)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # The fields whose stored values were not valid figures, as `tamed` found them (never stored).
    odd: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, strict: bool = True) -> "Result":
        """Rebuild a record; raises ValueError when `data` is not a well-formed dlbench result
        (records arrive from other machines' export files, which anyone can edit). `strict`
        checks every value too (imports); without it only the structure reading relies on
        (records already stored, whose odd values reports mark instead: see `tamed`)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a dlbench result record")
        schema = data.get("schema")
        if not isinstance(schema, int) or isinstance(schema, bool) or not 1 <= schema <= SCHEMA_VERSION:
            raise ValueError(f"result schema {shown(schema)} is not one this dlbench understands "
                             f"(1 to {SCHEMA_VERSION})")
        missing = {"id", "spec", "system", "status"} - set(data)
        if missing:
            raise ValueError(f"result record lacks {', '.join(sorted(missing))}")
        check_record(data, strict=strict)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in _migrate(data).items() if k in known})

    @property
    def measured(self) -> Measurement:
        """The metrics as typed records (results/measurement.py), read once for this metrics mapping (and
        again after `add` or a new mapping): a report asks each result for them many times, and reading
        them is most of its time on a large store. So figures change through `add`, never by writing
        into `metrics` in place."""
        cached = self.__dict__.get("_measured")
        if cached is not None and cached[0] is self.metrics:
            return cached[1]
        found = Measurement.read(self.metrics)
        self.__dict__["_measured"] = (self.metrics, found)
        return found

    @property
    def machine(self) -> Machine:
        """The machine it ran on (`system`), typed, read once for this mapping as `measured` is."""
        cached = self.__dict__.get("_machine")
        if cached is not None and cached[0] is self.system:
            return cached[1]
        found = Machine.read(self.system)
        self.__dict__["_machine"] = (self.system, found)
        return found

    def add(self, *parts: Measurement | Group) -> None:
        """Write the figures set in `parts` into the stored metrics."""
        self.__dict__.pop("_measured", None)
        for part in parts:
            self.metrics.update(part.to_metrics())

    @property
    def setup(self) -> Setup:
        """The spec's general settings, typed."""
        return Setup.read(self.spec)

    @property
    def optimize(self) -> str:
        """The optimisation level the run ran at: its spec's, else its run record's (records stored
        before the spec held it), else eager."""
        return self.setup.optimize or Run.read(self.metrics).optimize or "eager"

    # Derived labels used by the store's index columns and by reports.
    @property
    def workload(self) -> str:
        return self.spec.get("workload", "")

    @property
    def model(self) -> str:
        return self.spec.get("model", "")

    @property
    def system_label(self) -> str:
        return system_label(self.system, self.device)

    @property
    def device(self) -> str:
        """Where it ran (see `run_device`)."""
        return run_device(Run.read(self.metrics).device, self.spec, self.system)


_ID = re.compile(r"[0-9A-Za-z_.-]{1,64}")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # names a folder under --slurm-dir: never '..' or '/'
MAX_LABEL = 256  # names that reports print in every row: model, workload, host, GPU, ...
_MAPPINGS = ("spec", "system", "metrics", "samples", "traces")
_TEXTS = ("error", "title", "suite", "run", "tag", "finished")


def check_record(data: dict[str, Any], *, strict: bool = True) -> None:
    """The fields reports and the store rely on have the types they expect; with `strict`, every
    value is also one a report can show (see `check_values`). ValueError naming the field if not."""
    _check_depth(data)
    if not isinstance(data["id"], str) or not _ID.fullmatch(data["id"]):
        raise ValueError(f"bad result id {shown(data['id'])}: 1 to 64 letters, digits, '.', '_' or '-'")
    if data["status"] not in STATUSES:
        raise ValueError(f"unknown result status {shown(data['status'])}")
    for key in _MAPPINGS:
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"result field {key!r} must be a mapping, got {shown(data[key])}")
    for key in _TEXTS:
        if not isinstance(data.get(key), (str, type(None))):
            raise ValueError(f"result field {key!r} must be text, got {shown(data[key])}")
    if data.get("run") is not None and not RUN_ID.fullmatch(str(data["run"])):
        raise ValueError(f"bad suite-run id {shown(data['run'])}: letters, digits, '.', '_' and '-'")
    _label(data.get("title"), "result 'title'")
    _check_started(data.get("started", ""))
    if not isinstance(data["spec"].get("options", {}), dict):
        raise ValueError(f"spec 'options' must be a mapping, got {shown(data['spec']['options'])}")
    for key in ("workload", "model", "precision", "device"):
        _label(data["spec"].get(key), f"spec {key!r}")
    _check_system(data["system"])
    if strict:
        check_values(data)


def _check_started(started: Any) -> None:
    try:
        dt.datetime.fromisoformat(started)
    except (TypeError, ValueError):
        raise ValueError(f"result field 'started' must be an ISO date and time, got {shown(started)}") from None


def _label(value: Any, what: str) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > MAX_LABEL):
        raise ValueError(f"{what} must be text of at most {MAX_LABEL} characters, got {shown(value)}")


MAX_DEPTH = 32  # a spec, metric or trace nests a few levels; 950 levels made every reader recurse out


def _check_depth(data: Any) -> None:
    """No value nests deeper than MAX_DEPTH (walked without recursion, so any depth is safe to check)."""
    todo = [(data, 0)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"the record nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            todo.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)


def _check_system(system: dict[str, Any]) -> None:
    _label(system.get("host"), "system 'host'")
    gpus = system.get("gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise ValueError(f"system 'gpus' must be a list of mappings, got {shown(gpus)}")
    for gpu in gpus:
        _label(gpu.get("name"), "GPU 'name'")
    if not isinstance(system.get("cpu", {}), dict):
        raise ValueError(f"system 'cpu' must be a mapping, got {shown(system['cpu'])}")
    _label(system.get("cpu", {}).get("model"), "CPU 'model'")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Metrics that reports compute with, by the unit their name ends in, and the largest value a
# real run can give (years of milliseconds or seconds; a rate no machine reaches): 1e308
# ms is a typo or a forgery, and its arithmetic overflows the report's figures.
_UNITS = {"_per_s": 1e15, "_per_min": 1e15, "throughput": 1e15, "_ms": 1e11, "_s": 1e10}  # longest ends first
MAX_NUMBER = 1e21  # any other number in a record (FLOPs, bytes, voxels)
MAX_SAMPLE = 1e8  # per-step samples: seconds (or rates) of one step


def _unit_bound(key: object) -> float | None:
    return next((bound for end, bound in _UNITS.items() if str(key).endswith(end)), None)


def _finite(value: Any, bound: float = MAX_NUMBER) -> bool:
    return _number(value) and math.isfinite(value) and abs(value) <= bound


def _figure_problem(key: object, value: Any) -> str | None:
    """Why a metric is no valid figure, or None. A metric with a unit is a number from 0 to its
    bound, or named such numbers (a volume run's seconds per phase); every number anywhere
    else in the metrics is finite and at most MAX_NUMBER."""
    bound = _unit_bound(key)
    if bound is None:
        bad = next((v for v in _numbers(value) if not _finite(v)), None)
        return None if bad is None else f"must be finite and at most {MAX_NUMBER:g} in size, got {shown(bad)}"
    if value is None:
        return None
    values = list(value.values()) if isinstance(value, dict) else [value]
    if not all(_number(v) for v in values):
        return f"must be a number or a mapping of numbers, got {shown(value)}"
    bad = next((v for v in values if not (_finite(v, bound) and v >= 0)), None)
    return None if bad is None else f"must be a number from 0 to {bound:g}, got {shown(bad)}"


def _numbers(value: Any) -> Iterator[Any]:
    """The numbers in a value of bounded depth (see _check_depth)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif _number(value):
        yield value


def _samples_problem(values: Any) -> str | None:
    if not isinstance(values, list) or not all(_number(v) for v in values):
        return "must be a list of numbers"
    bad = next((v for v in values if not (_finite(v, MAX_SAMPLE) and v >= 0)), None)
    return None if bad is None else f"must be numbers from 0 to {MAX_SAMPLE:g}, got {shown(bad)}"


def _batch_problem(batch: Any) -> str | None:
    if batch is None or (type(batch) is int and 0 <= batch <= MAX_BATCH):
        return None
    return f"must be a whole number from 0 to {MAX_BATCH}, got {shown(batch)}"


def _shape_problem(shape: Any) -> str | None:
    if shape is None or (isinstance(shape, list) and len(shape) <= 8
                         and all(type(s) is int and 1 <= s <= 2**31 for s in shape)):
        return None
    return f"must be a list of at most 8 sizes from 1 to 2^31, got {shown(shape)}"


def _shape_problem_of(key: str, value: Any) -> str | None:
    """Why a nested figure (a list of processes, one mapping per rank) has not the shape its readers expect."""
    found = nested_problem(key, value)
    return None if found is None else f"{found}, got {shown(value)}"


# One step's time, however a workload names it, and the least a measured step takes in its unit: a
# record whose steps took no time (all 0, or under a nanosecond: no clock resolves that and no
# benchmark's step is that short) was not measured, and every ratio of it is 0 or infinite.
MIN_STEP_S = 1e-9
_STEP_TIMES = {"step_ms": MIN_STEP_S * 1e3, "total_ms": MIN_STEP_S * 1e3, "iteration_mean_s": MIN_STEP_S}


def _untimed(data: dict[str, Any]) -> str | None:
    """Why the record's step times cannot come from a measurement, or None."""
    steps = data.get("samples", {}).get("step")
    if steps and statistics.median(steps) < MIN_STEP_S:
        zeros = "all 0" if not any(steps) else f"of median {statistics.median(steps):g} s"
        return f"samples 'step' are {zeros} ({len(steps)} steps): a measured step takes at least {MIN_STEP_S:g} s"
    metrics = data.get("metrics", {})
    for key, least in _STEP_TIMES.items():
        if _number(metrics.get(key)) and metrics[key] < least:
            return f"metric {key!r} is {metrics[key]:g}: a measured step takes at least {least:g}"
    stats = metrics.get("stats")
    step = stats.get("step") if isinstance(stats, dict) else None
    median = step.get("median") if isinstance(step, dict) else None
    if _number(median) and median < MIN_STEP_S:
        return f"metric 'stats' gives a median step of {median:g} s: a measured step takes at least {MIN_STEP_S:g} s"
    return None


def check_values(data: dict[str, Any]) -> None:
    """Every value a report shows or computes with is one it can: a batch and shape of sane whole
    numbers, times and rates from 0 to their bound, finite numbers everywhere. ValueError if not."""
    spec = data["spec"]
    for key, problem in (("batch", _batch_problem), ("input_shape", _shape_problem)):
        found = problem(spec.get(key))
        if found:
            raise ValueError(f"spec {key!r} {found}")
    for key, value in data.get("metrics", {}).items():
        found = _figure_problem(key, value) or _shape_problem_of(key, value)
        if found:
            raise ValueError(f"metric {shown(key)} {found}")
    for key, values in data.get("samples", {}).items():
        found = _samples_problem(values)
        if found:
            raise ValueError(f"samples {shown(key)} {found}")
    found = _untimed(data)
    if found:
        raise ValueError(found)
    for field_name in ("system", "traces"):
        bad = next((v for v in _numbers(data.get(field_name, {})) if not _finite(v)), None)
        if bad is not None:
            raise ValueError(f"result field {field_name!r} holds {shown(bad)}: numbers must be finite and at most "
                             f"{MAX_NUMBER:g} in size")


def tamed(result: "Result") -> "Result":
    """The record as reports may read it: a stored value that is no valid figure (written by an
    older dlbench, or into the store by hand) becomes a marked NaN (`figures.Odd`, shown as `?`)
    where it is a figure, and is left out where it is not (samples, a batch, a shape, other
    metrics); `odd` names those fields. A record with none is returned as it is."""
    odd, metrics, samples, spec = [], dict(result.metrics), dict(result.samples), dict(result.spec)
    for key, value in result.metrics.items():
        if _figure_problem(key, value):
            metrics[key] = Odd() if _unit_bound(key) is not None else None
            odd.append(f"metrics.{key}")
        elif nested_problem(key, value):  # a text where a list of processes belongs: no reader could use it
            metrics[key] = None
            odd.append(f"metrics.{key}")
    for key, values in result.samples.items():
        if _samples_problem(values):
            del samples[key]
            odd.append(f"samples.{key}")
    for key, problem in (("batch", _batch_problem), ("input_shape", _shape_problem)):
        if problem(spec.get(key)):
            spec[key] = None
            odd.append(f"spec.{key}")
    if not odd:
        return result
    copy = dataclasses.replace(result, spec=spec, metrics=metrics, samples=samples)
    copy.odd = tuple(odd)
    return copy


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    """An older record in the current schema."""
    if data["schema"] < 3:
        spec = data["spec"] if isinstance(data["spec"], dict) else {}
        data = {**data, "schema": SCHEMA_VERSION, "title": legacy_title(spec.get("model", ""))}
    return data


def run_device(recorded: Any, spec: dict[str, Any], system: dict[str, Any]) -> str:
    """Where a run ran: the device it recorded, else the one its spec asked for ('auto' is the first GPU if
    the machine has one: a run stopped before it started records no device)."""
    device = str(recorded or spec.get("device") or "")
    if device == "auto":
        return "cuda" if system.get("gpus") else "cpu"
    return device


def system_label(system: dict[str, Any], device: str) -> str:
    """How reports name the machine a result ran on: the GPU, or 'CPU: <model>'."""
    if str(device).startswith("cuda") and system.get("gpus"):
        index = str(device).partition(":")[2]
        gpus = system["gpus"]
        return str(gpus[min(int(index) if index.isdigit() else 0, len(gpus) - 1)].get("name", "GPU"))
    cpu = system.get("cpu", {})
    cores = f" ({cpu['cores']} cores)" if cpu.get("cores") else ""
    return f"CPU: {cpu.get('model', 'unknown')}{cores}"
