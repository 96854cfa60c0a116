"""Compilation as a phase of its own: seen while it runs, heard only in its log, done once.

A compile is one blocking call that can take minutes (autotuning at `--optimize max`), and
Inductor, Dynamo and Triton's autotuning talk while it runs, through logging, from C and from
subprocesses. So while a compile runs (`phase`):

- a thread reports `progress("<what>: <n> s", 0, 0)` every second; a total of 0 marks a phase
  of unknown length, which the views show by its name alone;
- file descriptors 1 and 2, and sys.stdout and sys.stderr, point at a log file under dlbench's
  cache (`<cache>/compile-logs`, see paths.cache_folder), which stays after the run and which the
  result names (`compile_log`); the live display writes to its own copy of the terminal
  (launch.inprocess), so it goes on being drawn.

Compiled artefacts outlive the run (`caches`): Inductor's cache folder is `<cache>/inductor`
(unless $TORCHINDUCTOR_CACHE_DIR names another) with its FX-graph, AOTAutograd and autotuning
caches on, and where torch has the mega-cache (torch.compiler.save_cache_artifacts, torch >= 2.7)
the artefacts of one compile are also kept as one file and loaded before the same compile runs
again, so that a cache folder that was emptied (or one on another node) costs no second compile.
The result says how warm the caches were (`compile_cache`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from dlbench.descriptors import redirected
from dlbench.paths import cache_folder

TICK_S = 1.0
KEEP_LOGS = 200  # the newest compile logs kept; older ones go when a new one is made
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
# Cache switches turned on for the run, each unless its environment variable says otherwise
# (torch 2.4 leaves the FX-graph cache off by default).
CACHE_SWITCHES = (("torch._inductor.config", "fx_graph_cache", "TORCHINDUCTOR_FX_GRAPH_CACHE"),
                  ("torch._inductor.config", "autotune_local_cache", "TORCHINDUCTOR_AUTOTUNE_LOCAL_CACHE"),
                  ("torch._functorch.config", "enable_autograd_cache", "TORCHINDUCTOR_AUTOGRAD_CACHE"))
# torch._dynamo.utils.counters: (group, prefix) of the hit and miss counts of each cache
COUNTERS = {"fx_graph": ("inductor", "fxgraph_cache"), "autograd": ("aot_autograd", "autograd_cache")}

ProgressFn = Callable[[str, int, int], None]
_loaded: set[Path] = set()  # mega-cache files loaded by this process (once is enough)


# ---------------------------------------------------------------- caches for the run


@contextlib.contextmanager
def caches() -> Iterator[Path]:
    """Inductor's caches on, in dlbench's cache folder, for the block; yields the folder."""
    own, saved = not _users_folder(), os.environ.get(INDUCTOR_ENV)
    folder = cache_folder("inductor") if own else Path(os.environ[INDUCTOR_ENV])
    if own:
        os.environ[INDUCTOR_ENV] = str(folder)
        _forget_cache_paths()
    try:
        with _switches_on():
            yield folder
    finally:
        if own:
            if saved is None:
                os.environ.pop(INDUCTOR_ENV, None)
            else:
                os.environ[INDUCTOR_ENV] = saved
            _forget_cache_paths()


def _users_folder() -> bool:
    """Whether $TORCHINDUCTOR_CACHE_DIR is the user's choice. Inductor writes its default there
    (in the temporary folder, which a reboot empties) as soon as something asks for it, and some
    imports do."""
    value = os.environ.get(INDUCTOR_ENV)
    if not value:
        return False
    import tempfile

    path = Path(value)
    return not (path.name.startswith("torchinductor_") and path.parent == Path(tempfile.gettempdir()))


def _switches_on() -> contextlib.ExitStack:
    import importlib

    stack = contextlib.ExitStack()
    for module, name, env in CACHE_SWITCHES:
        config = importlib.import_module(module)
        if hasattr(config, name) and env not in os.environ:
            stack.enter_context(config.patch(**{name: True}))
    return stack


def _forget_cache_paths() -> None:
    """Inductor remembers paths under its cache folder within a process; a new folder needs them forgotten."""
    utils = sys.modules.get("torch._inductor.utils")
    clear = getattr(utils, "clear_caches", None)
    if clear:
        clear()


def _counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {f"{name}_{kind}": int(counters[group][f"{prefix}_{kind}"])
            for name, (group, prefix) in COUNTERS.items() for kind in ("hit", "miss")}


def _warmth(before: dict[str, int], after: dict[str, int], loaded: int) -> dict[str, Any]:
    found: dict[str, Any] = {k: after[k] - before[k] for k in after}
    hits = sum(v for k, v in found.items() if k.endswith("_hit"))
    misses = sum(v for k, v in found.items() if k.endswith("_miss"))
    # None: no cache took part (a backend other than inductor)
    found["warm"] = None if hits + misses == 0 else misses == 0
    found["dir"] = os.environ.get(INDUCTOR_ENV)
    found["artifacts_loaded"] = loaded
    return found


def artefacts_file(key: str) -> Path:
    """Where the mega-cache of the compile named by `key` is kept."""
    import torch

    digest = hashlib.sha256(f"{torch.__version__}|{key}".encode()).hexdigest()[:24]
    return cache_folder("compile-artifacts") / f"{digest}.bin"


def _load_artefacts(path: Path) -> int:
    """Loads a kept mega-cache into Inductor's caches; the number of artefacts it held."""
    import torch

    load = getattr(torch.compiler, "load_cache_artifacts", None)
    if load is None or path in _loaded or not path.is_file():
        return 0
    _loaded.add(path)
    try:
        info = load(path.read_bytes())
    except Exception as error:  # noqa: BLE001 - a stale or broken cache file costs a compile, never the run
        print(f"dlbench: compile artefacts in {path} not loaded: {type(error).__name__}: {error}")
        return 0
    return _artefact_count(info)


def _artefact_count(info) -> int:
    groups = getattr(info, "artifacts", None)
    if not isinstance(groups, dict):  # torch 2.7 kept one list per kind
        groups = {k: v for k, v in vars(info).items() if isinstance(v, list)} if info is not None else {}
    return sum(len(v) for v in groups.values())


def _save_artefacts(path: Path) -> None:
    import torch

    save = getattr(torch.compiler, "save_cache_artifacts", None)
    if save is None:
        return
    try:
        saved = save()
        if saved:
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(saved[0])
            os.replace(tmp, path)
    except Exception as error:  # noqa: BLE001 - as for loading
        print(f"dlbench: compile artefacts not kept in {path}: {type(error).__name__}: {error}")


# ---------------------------------------------------------------- the phase


@contextlib.contextmanager
def ticking(progress: ProgressFn, what: str, every_s: float | None = None) -> Iterator[None]:
    """`progress("<what>: <n> s", 0, 0)` at once and every `every_s` (TICK_S) seconds until the
    block ends: the block is one call that reports nothing itself."""
    start, stop, every_s = time.monotonic(), threading.Event(), every_s or TICK_S

    def tick() -> None:
        while True:
            progress(f"{what}: {time.monotonic() - start:.0f} s", 0, 0)
            if stop.wait(every_s):
                return

    thread = threading.Thread(target=tick, name="dlbench-compile-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def new_log(title: str) -> Path:
    """A new log file's path under dlbench's cache; the oldest logs beyond KEEP_LOGS go."""
    folder = cache_folder("compile-logs")
    logs = sorted(folder.glob("*.log"), key=_modified)
    for old in logs[:max(0, len(logs) - KEEP_LOGS + 1)]:
        with contextlib.suppress(OSError):
            old.unlink()
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", title).strip("_")[:80]
    return folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{os.getpid()}.log"


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by another run
        return 0.0


@contextlib.contextmanager
def phase(what: str, progress: ProgressFn, title: str = "", key: str | None = None) -> Iterator[dict[str, Any]]:
    """The block as a phase named `what` with its elapsed time; with a `key` (a torch.compile,
    named by what decides its code), its output goes to a new log and its cache is used. Yields
    the metrics it adds, filled in when the block ends: compile_log, compile_cache."""
    found: dict[str, Any] = {}
    if key is None:
        with ticking(progress, what):
            yield found
        return
    log = new_log(title or what)
    found["compile_log"] = str(log)
    before, kept = _counts(), artefacts_file(key)
    try:
        with ticking(progress, what), redirected(log):
            print(f"dlbench: {what} of {title}, {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
            loaded = _load_artefacts(kept)
            yield found
            _save_artefacts(kept)
    except Exception as error:
        if hasattr(error, "add_note"):  # Python >= 3.11: the stored error says where to look
            error.add_note(f"compiler output: {log}")
        raise
    found["compile_cache"] = _warmth(before, _counts(), loaded)
