"""The command line answers without torch: help, the version, argument checks, suites and every
command that reads the store import none of torch, torchvision, matplotlib or pandas (importing
torch alone takes seconds; benchmarks/cli_latency.py times the commands). Each command runs in
a fresh process, since a test process has long imported everything."""

import importlib
import json
import subprocess
import sys

import pytest
from conftest import make_result

from dlbench import workloads
from dlbench.results.store import Store
from dlbench.workloads.builtin import BUILTIN

HEAVY = ("torch", "torchvision", "matplotlib", "pandas")  # numpy is allowed: reports use it

RUN_MAIN = f"""
import contextlib, io, json, sys
from dlbench import cli
sys.argv = ["dlbench", *sys.argv[1:]]
code = 0
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
    try:
        cli.main()
    except SystemExit as exit:
        code = exit.code
lines = err.getvalue().strip().splitlines()
print(json.dumps([code, [name for name in {HEAVY!r} if name in sys.modules], lines[-1] if lines else ""]))
"""


def _main(*args: str, db) -> tuple[int, list[str], str]:
    """(exit status, heavy modules imported, last line on stderr) of `dlbench --db DB args`."""
    done = subprocess.run([sys.executable, "-c", RUN_MAIN, "--db", str(db), *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode in (0, 1, 2), done.stderr
    code, loaded, last = json.loads(done.stdout.strip().splitlines()[-1])
    return code, loaded, last


@pytest.fixture
def full_store(tmp_path):
    store = Store(tmp_path / "full.db")
    store.add(make_result())
    store.add(make_result(system={"host": "node2", "gpus": [{"name": "NVIDIA H100"}]},
                          metrics={"forward_ms": 7.0, "backward_ms": 14.0, "total_ms": 21.0}))
    return tmp_path / "full.db"


@pytest.fixture
def empty_store(tmp_path):
    Store(tmp_path / "empty.db")
    return tmp_path / "empty.db"


ANSWERS = [
    (("--help",), 0, ""),
    (("--version",), 0, ""),
    (("run", "fwdbwd", "--help"), 0, ""),
    (("run", "volume", "--help"), 0, ""),
    (("run", "train", "--help"), 0, ""),
    (("suite", "--list"), 0, ""),
    (("compare", "--help"), 0, ""),
    (("models",), 0, ""),
]
USAGE_ERRORS = [
    (("run", "fwdbwd", "--model", "nosuchmodel", "--device", "cpu"), "unknown model 'nosuchmodel'"),
    (("run", "fwdbwd", "--nosuch"), "No such option: --nosuch"),
    (("run", "fwdbwd", "--batch", "0"), "--batch must be ≥ 1"),
    (("run", "fwdbwd", "--steps", "many"), "Invalid value for '--steps'"),
    (("run", "volume", "--block", "3"), "--block must be ZxYxX"),
    (("run", "converge", "--data", "/nonexistent/seg"), "/nonexistent/seg"),
    (("suite", "jade", "--device", "bogus"), "bad device 'bogus'"),
    (("run", "nosuchworkload"), "unknown workload 'nosuchworkload'"),
]


@pytest.mark.parametrize(("args", "code", "_"), ANSWERS, ids=[" ".join(a) for a, _, _ in ANSWERS])
def test_help_version_and_listings_import_no_torch(args, code, _, tmp_path):
    assert _main(*args, db=tmp_path / "none.db")[:2] == (code, [])


@pytest.mark.parametrize(("args", "needle"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_are_found_without_torch(args, needle, tmp_path):
    code, loaded, last = _main(*args, db=tmp_path / "results.db")
    assert (code, loaded) == (2, []), last
    assert last.startswith("error: ") and needle in last, last
    assert not (tmp_path / "results.db").exists()  # nothing stored


@pytest.mark.parametrize("args", [("results",), ("report",), ("export",), ("compare", "node1", "node2"),
                                  ("report", "--format", "csv")], ids=" ".join)
def test_reading_a_store_imports_no_torch(args, full_store):
    rows = len(Store(full_store).results())
    code, loaded, last = _main(*args, db=full_store)
    assert (code, loaded) == (0, []), last
    assert len(Store(full_store).results()) == rows


@pytest.mark.parametrize("args", [("results",), ("report",), ("export",)], ids=" ".join)
def test_an_empty_store_is_read_without_torch(args, empty_store):
    assert _main(*args, db=empty_store) == (0, [], "")


def test_each_builtin_workload_declares_code_that_exists():
    # The declarations name their code by module and function; a wrong name would surface only when run.
    for name, declared in BUILTIN.items():
        assert workloads.get(name) is declared
        module = importlib.import_module(f"dlbench.workloads.{name}")
        for part in ("run", "describe", "preflight"):
            called = getattr(declared, part)
            if called is not workloads.no_preflight:
                target, _, function = called.__qualname__.rpartition(".")
                assert callable(getattr(importlib.import_module(target), function)), (name, part)
        assert callable(module.run) and callable(module.describe)


def test_torchvision_classifiers_known_by_name_are_torchvision_s():
    from dlbench.models import registry

    import torchvision
    import torchvision.models as tvm

    if torchvision.__version__.split("+")[0].split(".")[:2] != registry.TORCHVISION_RELEASE.split("."):
        pytest.skip(f"the list is of torchvision {registry.TORCHVISION_RELEASE}, not {torchvision.__version__}")
    assert registry.TORCHVISION_CLASSIFIERS == tuple(tvm.list_models(module=tvm))


def test_the_volume_output_types_are_the_prediction_store_s():
    from dlbench.data.prediction_store import DTYPES
    from dlbench.workloads.builtin import OUTPUT_DTYPES

    assert OUTPUT_DTYPES == tuple(DTYPES)
