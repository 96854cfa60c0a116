"""The Result record: one benchmark's outcome, versioned so stores from any release merge."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from dlbench.results.titles import legacy_title

# 2: status 'timeout' and the suite-run id `run`; records of schema 1 load unchanged.
# 3: `title`, the model's display name, so reading records needs no model registry; records of
#    schema 1 and 2 get theirs from results/titles.py when read.
SCHEMA_VERSION = 3
FORMAT = "dlbench-result"
STATUSES = ("ok", "oom", "error", "timeout", "interrupted")


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
        """Rebuild a record; raises ValueError when `data` is not a dlbench result."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a dlbench result record")
        if not isinstance(data.get("schema"), int) or data["schema"] > SCHEMA_VERSION:
            raise ValueError(f"result schema {data.get('schema')!r} is newer than this dlbench understands ({SCHEMA_VERSION})")
        known = {f.name for f in dataclasses.fields(cls)}
        missing = {"id", "spec", "system", "status"} - set(data)
        if missing:
            raise ValueError(f"result record lacks {', '.join(sorted(missing))}")
        if data["status"] not in STATUSES:
            raise ValueError(f"unknown result status {data['status']!r}")
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


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    """An older record in the current schema."""
    if data["schema"] < 3:
        spec = data["spec"] if isinstance(data["spec"], dict) else {}
        data = {**data, "schema": SCHEMA_VERSION, "title": legacy_title(spec.get("model", ""))}
    return data


def system_label(system: dict[str, Any], device: str) -> str:
    """How reports name the machine a result ran on: the GPU, or 'CPU: <model>'."""
    if str(device).startswith("cuda") and system.get("gpus"):
        index = int(str(device).partition(":")[2] or 0)
        gpus = system["gpus"]
        return gpus[min(index, len(gpus) - 1)]["name"]
    cpu = system.get("cpu", {})
    cores = f" ({cpu['cores']} cores)" if cpu.get("cores") else ""
    return f"CPU: {cpu.get('model', 'unknown')}{cores}"
