"""The end of a process that imported torch, without the seconds of its teardown.

At a normal exit the interpreter and torch free each pinned and device buffer one at a time: for a
volume run's gigabytes of pinned tiles that is seconds after the result is stored, which the
operating system does at once when the process ends; torch's modules alone take most of a second
to unload. So where torch was imported, the exit handlers run, the output is flushed, and the
process ends there.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Callable, NoReturn


def leave(code: int, said: Callable[[int], None] | None = None) -> NoReturn:
    """Exit with `code`; quickly where this process imported torch, else as usual. `said(code)` is
    told last, once everything but the end itself is done (a rank tells its launcher)."""
    if "torch" not in sys.modules and said is None:
        sys.exit(code)
    atexit._run_exitfuncs()  # what the process registered to do at its end (logging's flush, stores)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say to it
            pass
    if said is not None:
        said(code)
    os._exit(code)
