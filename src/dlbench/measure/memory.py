"""Memory this process can still take: the system's available memory, or less where its cgroup (a
container, a batch job's allocation) is limited, since exceeding that gets the process killed
whatever the machine has free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63


def available_memory(proc: str = "/proc", cgroups: str = "/sys/fs/cgroup") -> int | None:
    """Bytes, or None where nothing says (not Linux)."""
    known = [room for room in (_meminfo_available(proc), *_cgroup_room(proc, cgroups)) if room is not None]
    return min(known) if known else None


def _meminfo_available(proc: str) -> int | None:
    try:
        for line in Path(proc, "meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room(proc: str, root: str) -> Iterator[int]:
    """Limit less usage of each limited memory cgroup of this process: v2 and v1, at the path the
    process's cgroup file names (seen from the host) and at the root (seen from inside a container)."""
    paths = {""}
    try:
        for line in Path(proc, "self/cgroup").read_text(encoding="ascii").splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "" or "memory" in controllers.split(","):
                paths.add(path.strip("/"))
    except (OSError, ValueError):
        pass
    for path in sorted(paths):
        for base, limit_name, usage_name in ((Path(root), "memory.max", "memory.current"),
                                             (Path(root, "memory"), "memory.limit_in_bytes", "memory.usage_in_bytes")):
            limit, usage = _number(base / path / limit_name), _number(base / path / usage_name)
            if limit is not None and usage is not None and limit < UNLIMITED:
                yield max(0, limit - usage)


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):  # absent, or "max": no limit
        return None
