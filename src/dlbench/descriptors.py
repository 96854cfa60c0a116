"""Output of C code and child processes, sent to a file for a block: they write to file
descriptors 1 and 2, which Python's sys.stdout and sys.stderr do not cover."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def redirected(path: Path) -> Iterator[None]:
    """File descriptors 1 and 2, and sys.stdout and sys.stderr, appended to `path` for the block.
    C code and child processes write to the descriptors; Python code to the objects, which a live
    display may have replaced with its own."""
    _flush(sys.stdout, sys.stderr)
    saved = [os.dup(fd) for fd in (1, 2)]
    streams = sys.stdout, sys.stderr
    try:
        with open(path, "a", encoding="utf-8", errors="replace", buffering=1) as log:
            for fd in (1, 2):
                os.dup2(log.fileno(), fd)
            sys.stdout = sys.stderr = log
            try:
                yield
            finally:
                _flush(log)
                sys.stdout, sys.stderr = streams
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def _flush(*streams) -> None:
    for stream in streams:
        with contextlib.suppress(Exception):
            stream.flush()
    # what C code printed through stdio must reach the descriptor it was meant for
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)
