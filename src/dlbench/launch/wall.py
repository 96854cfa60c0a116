"""The time a user has waited: from the start of the process that the command started."""

from __future__ import annotations

import os
import time

_IMPORTED = time.monotonic()  # where /proc cannot tell: the first import of dlbench's launcher


def since_start() -> float:
    """Seconds since this process started (the interpreter's own start and imports included)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED
