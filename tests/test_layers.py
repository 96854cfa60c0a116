"""Layers import downwards only (docs: DESIGN.md); checked in fresh processes, since a test
process has long imported everything."""

import subprocess
import sys

WORKLOADS = """
import importlib, sys
from dlbench import workloads
for name in workloads.names():
    workloads.get(name)
    importlib.import_module(f"dlbench.workloads.{name}")  # the code, which the declaration imports when run
print(sorted({name.split('.')[1] for name in sys.modules if name.startswith('dlbench.')}))
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_workloads_import_nothing_above_them():
    packages = _run(WORKLOADS)
    for above in ("spec", "suites", "launch", "report", "cli"):
        assert f"'{above}'" not in packages, packages


def test_optimisation_levels_agree_across_layers():
    from dlbench import spec
    from dlbench.report import optimize as report
    from dlbench.workloads import optimize

    assert spec.OPTIMIZE_LEVELS == optimize.LEVELS == report.LEVELS


def test_reading_results_needs_no_torch():
    # Reports run where results are gathered, often a laptop without torch.
    assert _run("import dlbench.report, sys; print('torch' in sys.modules)") == "False"


IMPORT_CLI = """
import os, sys
before = dict(os.environ)
import dlbench.cli
print('torch' in sys.modules, os.environ == before)
"""


def test_importing_the_command_line_loads_no_torch_and_sets_nothing():
    # `dlbench results` should answer at once, and an import should not change the environment.
    assert _run(IMPORT_CLI) == "False True"


READ_STORE = """
import contextlib, io, sys
from dlbench import cli
for command in ("results", "report"):
    sys.argv = ["dlbench", "--db", sys.argv[1], command]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        cli.main()
print('torch' in sys.modules)
"""


def test_reading_the_store_from_the_command_line_loads_no_torch(tmp_path):
    from conftest import make_result
    from dlbench.results.store import Store

    Store(tmp_path / "results.db").add(make_result())
    done = subprocess.run([sys.executable, "-c", READ_STORE, str(tmp_path / "results.db")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr
