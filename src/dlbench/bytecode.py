"""Python's bytecode for torch where the install keeps none.

Every process dlbench starts (a suite's workers, torchrun's ranks) imports torch, and with it
torchvision and torch._dynamo: some 2,000 modules. Where their folder holds no bytecode and
Python may not write it there (a read-only install: a container image, a cluster's shared
software tree; or PYTHONDONTWRITEBYTECODE set, as some images do), every process compiles them
all from source again: seconds each. Then the bytecode goes under dlbench's cache instead
(sys.pycache_prefix), through the environment to every child, so only the first process pays.
Nothing changes where bytecode beside the sources exists (a prefix would make Python compile
everything once more), nor where the user chose a prefix.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PACKAGE = "torch"  # the package whose bytecode decides; the prefix serves every module
PREFIX_ENV = "PYTHONPYCACHEPREFIX"
NO_WRITE_ENV = "PYTHONDONTWRITEBYTECODE"


def use_cache() -> Path | None:
    """Set the bytecode prefix for this process and its children where it is needed (see the module's
    docstring); the folder used, or None. Costs a few file-system calls: it runs before every command."""
    if os.environ.get(PREFIX_ENV) or sys.pycache_prefix:
        return None
    source = _package_source(PACKAGE)
    if source is None or _has_bytecode(source):
        return None
    if not sys.dont_write_bytecode and _writable(source.parent):
        return None  # Python writes it beside the sources itself, once
    from dlbench.paths import cache_folder

    try:
        folder = cache_folder("bytecode")
    except OSError:
        return None  # nowhere to keep it: each process compiles, as before
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    os.environ[PREFIX_ENV] = str(folder)
    # The prefix keeps bytecode out of the install, which is what the variable asks; children
    # that kept it would read the cache but never fill it.
    os.environ.pop(NO_WRITE_ENV, None)
    return folder


def _package_source(name: str) -> Path | None:
    """The package's __init__.py, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _has_bytecode(source: Path) -> bool:
    try:
        return Path(importlib.util.cache_from_source(str(source))).is_file()
    except (NotImplementedError, ValueError):
        return True  # no bytecode tag: an interpreter that caches nothing; leave it be


def _writable(folder: Path) -> bool:
    from dlbench.paths import read_only_reason

    return read_only_reason(folder) is None
