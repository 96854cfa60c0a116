"""Temporary folders of runs (an isolated run's files, torchrun's, a generated input volume, a
prediction output), named after the process that made them, so that the next run removes
those a killed run left behind.

A process killed with SIGKILL (by the user, the out-of-memory killer or a job scheduler)
cannot remove its folders; a generated volume can hold gigabytes. A folder is stale when
the process named in it no longer exists and it belongs to this user; a folder of a live
process, another user's, or one made by an older dlbench (no process in its name) is left
alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

_NAME = re.compile(r"dlbench-[a-z]+-(\d+)-")


def _prefix(kind: str) -> str:
    return f"dlbench-{kind}-{os.getpid()}-"


@contextlib.contextmanager
def folder(kind: str) -> Iterator[Path]:
    """A temporary folder, removed on exit (or by the next run if this process is killed)."""
    with tempfile.TemporaryDirectory(prefix=_prefix(kind)) as path:
        yield Path(path)


def make(kind: str) -> str:
    """A temporary folder the caller removes (or the next run, if this process is killed)."""
    return tempfile.mkdtemp(prefix=_prefix(kind))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clean_stale(root: str | os.PathLike | None = None) -> list[Path]:
    """Remove the temporary folders whose process is gone; returns what was removed."""
    removed = []
    for entry in Path(root or tempfile.gettempdir()).glob("dlbench-*"):
        match = _NAME.match(entry.name)
        try:
            mine = entry.lstat().st_uid == os.getuid()
        except OSError:
            continue
        if match and mine and entry.is_dir() and not entry.is_symlink() and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
