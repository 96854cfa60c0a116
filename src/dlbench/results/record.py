"""The Result record: one benchmark's outcome, versioned so stores from any release merge."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from dlbench.options import shown
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Result":
        """Rebuild a record; raises ValueError when `data` is not a well-formed dlbench result
        (records arrive from other machines' export files, which anyone can edit)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a dlbench result record")
        schema = data.get("schema")
        if not isinstance(schema, int) or isinstance(schema, bool) or not 1 <= schema <= SCHEMA_VERSION:
            raise ValueError(f"result schema {shown(schema)} is not one this dlbench understands "
                             f"(1 to {SCHEMA_VERSION})")
        missing = {"id", "spec", "system", "status"} - set(data)
        if missing:
            raise ValueError(f"result record lacks {', '.join(sorted(missing))}")
        check_record(data)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in _migrate(data).items() if k in known})

    # Derived labels used by the store's index columns and by reports.
    @property
    def workload(self) -> str:
        return self.spec.get("workload", "")

    @property
    def model(self) -> str:
        return self.spec.get("model", "")

    @property
    def system_label(self) -> str:
        return system_label(self.system, self.metrics.get("device", self.spec.get("device", "")))


_ID = re.compile(r"[0-9A-Za-z_.-]{1,64}")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # names a folder under --slurm-dir: never '..' or '/'
MAX_LABEL = 256  # names that reports print in every row: model, workload, host, GPU, ...
_MAPPINGS = ("spec", "system", "metrics", "samples", "traces")
_TEXTS = ("error", "title", "suite", "run", "tag", "finished")


def check_record(data: dict[str, Any]) -> None:
    """The fields reports and the store rely on have the types they expect; ValueError if not."""
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
    _check_spec(data["spec"])
    _check_system(data["system"])
    _check_numbers(data.get("metrics", {}), data.get("samples", {}))


def _check_started(started: Any) -> None:
    try:
        dt.datetime.fromisoformat(started)
    except (TypeError, ValueError):
        raise ValueError(f"result field 'started' must be an ISO date and time, got {shown(started)}") from None


def _label(value: Any, what: str) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > MAX_LABEL):
        raise ValueError(f"{what} must be text of at most {MAX_LABEL} characters, got {shown(value)}")


def _check_spec(spec: dict[str, Any]) -> None:
    for key in ("workload", "model", "precision", "device"):
        _label(spec.get(key), f"spec {key!r}")
    batch = spec.get("batch")
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 0):
        raise ValueError(f"spec 'batch' must be a whole number, got {shown(batch)}")
    shape = spec.get("input_shape")
    if shape is not None and (not isinstance(shape, list) or not all(type(s) is int for s in shape)):
        raise ValueError(f"spec 'input_shape' must be a list of whole numbers, got {shown(shape)}")
    if not isinstance(spec.get("options", {}), dict):
        raise ValueError(f"spec 'options' must be a mapping, got {shown(spec['options'])}")


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


def _figure(value: Any) -> bool:
    """A number, or named numbers of one unit (a volume run's seconds per phase)."""
    return _number(value) or (isinstance(value, dict) and all(_number(v) for v in value.values()))


_UNITS = ("_ms", "_s", "_per_s", "_per_min", "throughput")  # metrics that reports compute with


def _check_numbers(metrics: dict[str, Any], samples: dict[str, Any]) -> None:
    for key, value in metrics.items():
        if str(key).endswith(_UNITS) and value is not None and not _figure(value):
            raise ValueError(f"metric {shown(key)} must be a number or a mapping of numbers, got {shown(value)}")
    for key, values in samples.items():
        if not isinstance(values, list) or not all(_number(v) for v in values):
            raise ValueError(f"samples {shown(key)} must be a list of numbers")


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    """An older record in the current schema."""
    if data["schema"] < 3:
        spec = data["spec"] if isinstance(data["spec"], dict) else {}
        data = {**data, "schema": SCHEMA_VERSION, "title": legacy_title(spec.get("model", ""))}
    return data


def system_label(system: dict[str, Any], device: str) -> str:
    """How reports name the machine a result ran on: the GPU, or 'CPU: <model>'."""
    if str(device).startswith("cuda") and system.get("gpus"):
        index = str(device).partition(":")[2]
        gpus = system["gpus"]
        return str(gpus[min(int(index) if index.isdigit() else 0, len(gpus) - 1)].get("name", "GPU"))
    cpu = system.get("cpu", {})
    cores = f" ({cpu['cores']} cores)" if cpu.get("cores") else ""
    return f"CPU: {cpu.get('model', 'unknown')}{cores}"
