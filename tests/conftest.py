import atexit
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from dlbench.commands.suite import NO_GPU
from dlbench.models import registry
from dlbench.results.record import Result

TINY = dict(workload="fwdbwd", model="resnet18", batch=2, input_shape=(3, 32, 32), device="cpu",
            warmup=1, warmup_seconds=0.0, steps=3, min_seconds=0.0)
# A JPEG whose first marker has length 0: libjpeg refuses it at once. Random bytes would do the same
# most of the time, but now and then libjpeg first prints a warning on stderr ("Corrupt JPEG data:
# 22 extraneous bytes before marker 0x4e"), which is not dlbench's to silence.
CORRUPT_JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 200


# No test writes into the real home: a command without --db stores into the user's data folder
# (paths.data_folder), so this session has a home of its own, and caches (the CLI's bytecode) go
# there too. Set here, at import, so that every process a test or a fixture starts inherits it.
_HOME = tempfile.mkdtemp(prefix="dlbench-tests-home-")
atexit.register(shutil.rmtree, _HOME, True)
os.environ.update(HOME=_HOME, XDG_DATA_HOME=os.path.join(_HOME, "data"), XDG_CACHE_HOME=os.path.join(_HOME, "cache"))
for _chosen in ("DLBENCH_DB", "DLBENCH_GLOBAL_DB"):  # a developer's own store is never the tests'
    os.environ.pop(_chosen, None)


@pytest.fixture(autouse=True)
def _own_data_folder(tmp_path_factory, monkeypatch) -> None:
    """Each test its own user's store: what one test stored is never another's history."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "results.db"


def cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Run the real `dlbench` entry point in a subprocess."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def make_result(**overrides) -> Result:
    """A crafted result, as a machine elsewhere might have stored it."""
    spec = {"workload": "fwdbwd", "model": "resnet50", "batch": 16, "input_shape": [3, 224, 224],
            "precision": "fp32", "device": "cuda"}
    spec.update(overrides.pop("spec", {}))
    system = {"host": "node1", "gpus": [{"name": "NVIDIA H200"}], "cudnn": "9.1.0",
              "cpu": {"model": "Xeon", "cores": 8}}
    system.update(overrides.pop("system", {}))
    metrics = {"device": spec["device"], "forward_ms": 5.0, "backward_ms": 10.0, "total_ms": 15.0,
               "input_shape": [spec["batch"], *spec["input_shape"]], "images_per_s": 1000.0}
    metrics.update(overrides.pop("metrics", {}))
    overrides.setdefault("title", registry.title(spec["model"]))
    # to the microsecond, so records made one after the other are in that order even within a
    # second (the store's own stamps are to the second); a test that wants another order says so
    if overrides.get("started") is None:
        overrides["started"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
    return Result(spec=spec, system=system, metrics=metrics, **overrides)


def export_line(**changes) -> str:
    """One export line of a crafted result with fields changed (`metrics__forward_ms=1e308`)."""
    record = make_result().to_dict()
    for key, value in changes.items():
        target, _, inner = key.partition("__")
        if inner:
            record[target][inner] = value
        else:
            record[target] = value
    return json.dumps(record)


def scripted(module):
    """`module` as TorchScript: torch deprecates it, but many users' model files are TorchScript, and
    dlbench loads them (models/registry.py `load_model_file`); the deprecation is torch's, not a test's."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.script(module)


def assert_user_error(proc: subprocess.CompletedProcess, *needles: str, started: bool = False) -> None:
    """Exit 2, one line on stderr that says what is wrong, and no traceback. `started`: the error was
    found mid-run, so the run's estimate, said before it started, stands above the error."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    # the first line of `run`, `suite` and `system` (repeated every 5 s), said before torch loads, and the
    # plain command's choice of suite on a machine without a GPU
    while lines and ("loading torch" in lines[0] or lines[0].startswith(NO_GPU)) and not lines[0].startswith("error: "):
        lines = lines[1:]
    if started:
        assert len(lines) == 2 and ": about " in lines[0], proc.stderr
        lines = lines[1:]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def in_triton_interpreter(code: str) -> None:
    """Run `code` in a subprocess with Triton's CPU interpreter (TRITON_INTERPRET must be set before
    triton loads); it prints "ok" when its checks pass."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
