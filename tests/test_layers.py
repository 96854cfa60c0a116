"""Layers import downwards only (docs: DESIGN.md); checked in fresh processes, since a test
process has long imported everything."""

import ast
import subprocess
import sys
from pathlib import Path

import dlbench

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
    for above in ("spec", "suites", "launch", "report", "diagnose", "cli"):
        assert f"'{above}'" not in packages, packages


def test_optimisation_levels_agree_across_layers():
    from dlbench import spec
    from dlbench.report import optimize as report
    from dlbench.workloads import optimize

    assert spec.OPTIMIZE_LEVELS == optimize.LEVELS == report.LEVELS


def test_reading_results_needs_no_torch():
    # Reports and the doctor run where results are gathered, often a laptop without torch.
    assert _run("import dlbench.report, sys; print('torch' in sys.modules)") == "False"
    assert _run("import pkgutil, importlib, sys, dlbench.diagnose as d\n"
                "for m in pkgutil.iter_modules(d.__path__): importlib.import_module(f'dlbench.diagnose.{m.name}')\n"
                "print('torch' in sys.modules)") == "False"


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


# The layers from the bottom (docs/architecture.md): a module imports only from its own layer
# and from the layers below it. An import inside a function counts as much as one at the top,
# since it runs the same code when it is called.
LAYERS = [
    {"__init__", "errors", "units", "options", "paths", "scratch", "vision", "figures", "shorten", "plugins", "bytecode",
     "descriptors", "cores"},
    {"results"},  # the record, its typed measurement and the store
    {"measure", "models", "data"},
    {"system"},
    {"workloads"},
    {"spec"},
    {"suites", "report"},
    {"diagnose"},  # the doctor: references, history, causes, verdicts
    {"launch"},
    {"commands"},
    {"cli", "__main__"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _imported(tree: ast.AST) -> list[tuple[str, int]]:
    """The dlbench packages a module imports, wherever the import stands: (package, line)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from dlbench import cli` names the package in the alias, `from dlbench.cli import x` in the module
            modules = [f"dlbench.{a.name}" for a in node.names] if node.module == "dlbench" else [node.module]
        else:
            continue
        found += [(m.split(".")[1], node.lineno) for m in modules if m.startswith("dlbench.")]
    return found


def test_no_module_imports_a_layer_above_it():
    root = Path(dlbench.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        layer = parts[0] if len(parts) > 1 else path.stem
        assert layer in RANK, f"{layer} is in no layer of LAYERS"
        wrong += [f"{path.relative_to(root)}:{line} imports dlbench.{package}"
                  for package, line in _imported(ast.parse(path.read_text(encoding="utf-8")))
                  if RANK.get(package, -1) > RANK[layer]]
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_sees_imports_inside_functions():
    tree = ast.parse("def f():\n    from dlbench.launch import worker\n    import dlbench.cli\nfrom dlbench import suites\n")
    assert sorted(_imported(tree)) == [("cli", 3), ("launch", 2), ("suites", 4)]


def _module_imports(path: Path, root: Path) -> tuple[str, set[str]]:
    """A module's name and the dlbench modules it imports (a name imported from a package counts as
    its submodule where one of that name exists)."""
    name = ".".join(("dlbench", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {f"{node.module}.{a.name}" if _is_module(root, f"{node.module}.{a.name}") else node.module
                      for a in node.names}
    return name, {m for m in found if m.startswith("dlbench.") and m != name}


def _is_module(root: Path, name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (root / relative).with_suffix(".py").exists() or (root / relative / "__init__.py").exists()


def test_no_two_modules_import_each_other_round_a_circle():
    # A package's submodules may read its own declarations (workloads/builtin.py the `Workload` type
    # of workloads/__init__.py): the package is their common ground, not a circle.
    root = Path(dlbench.__file__).parent
    graph = dict(_module_imports(path, root) for path in root.rglob("*.py"))
    graph = {m: {i for i in imports if i in graph and not m.startswith(f"{i}.")} for m, imports in graph.items()}
    circles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                circles.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in state:
                visit(other, [*path, other])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "\n".join(circles)
