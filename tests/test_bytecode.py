"""Where torch's install keeps no bytecode and Python may not write it there, the command keeps it
under dlbench's cache, for itself and every process it starts; elsewhere it changes nothing.
Each case runs the real entry point in a fresh interpreter, with a stand-in `torch` package
first on the path (the CLI's --version never imports torch) and a child process it starts."""

import importlib.util
import json
import os
import py_compile
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import dlbench

SRC = Path(dlbench.__file__).parent.parent
SCRIPT = """
import json, subprocess, sys
sys.argv = ["dlbench", "--version"]
from dlbench.__main__ import main
try:
    main()
except SystemExit:
    pass
import torch  # the stand-in, imported after the command set things up
child = subprocess.run([sys.executable, "-c", "import sys; print(sys.pycache_prefix, sys.flags.dont_write_bytecode)"],
                       capture_output=True, text=True)
print(json.dumps({"prefix": sys.pycache_prefix, "child": child.stdout.split()}))
"""


@pytest.fixture
def site(tmp_path):
    """A folder holding a stand-in `torch` package; made read-only by the tests that say so."""
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n", encoding="utf-8")
    yield package
    for folder in (package, package / "__pycache__"):
        if folder.exists():
            folder.chmod(0o755)


def read_only(folder: Path) -> None:
    folder.chmod(folder.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def start(package: Path, tmp_path: Path, *, no_write: bool = False, prefix: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    env.update(PYTHONPATH=os.pathsep.join([str(package.parent), str(SRC)]), DLBENCH_CACHE=str(tmp_path / "cache"))
    if no_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if prefix is not None:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def cached(folder: Path, source: Path) -> Path:
    """Where bytecode of `source` lands under the prefix `folder`: its folder's path, no __pycache__."""
    return folder / source.parent.relative_to("/") / Path(importlib.util.cache_from_source(str(source))).name


def test_a_read_only_install_gets_its_bytecode_under_the_cache(site, tmp_path):
    read_only(site)
    seen = start(site, tmp_path)
    folder = tmp_path / "cache" / "bytecode"
    assert seen == {"prefix": str(folder), "child": [str(folder), "0"]}  # children inherit it
    assert cached(folder, site / "__init__.py").is_file()  # the package's bytecode was written there
    assert cached(folder, SRC / "dlbench" / "cli.py").is_file()  # and so was every later import's
    assert not (site / "__pycache__").exists()


def test_bytecode_writing_turned_off_goes_to_the_cache_not_the_install(site, tmp_path):
    seen = start(site, tmp_path, no_write=True)
    folder = tmp_path / "cache" / "bytecode"
    assert seen == {"prefix": str(folder), "child": [str(folder), "0"]}
    assert cached(folder, site / "__init__.py").is_file()
    assert not (site / "__pycache__").exists()  # the install stays as the variable asked


def test_bytecode_beside_the_sources_is_used_as_it_is(site, tmp_path):
    py_compile.compile(str(site / "__init__.py"), doraise=True)
    read_only(site)
    seen = start(site, tmp_path, no_write=True)
    assert seen == {"prefix": None, "child": ["None", "1"]}
    assert not (tmp_path / "cache" / "bytecode").exists()


def test_a_prefix_the_user_chose_is_kept(site, tmp_path):
    read_only(site)
    own = tmp_path / "own"
    seen = start(site, tmp_path, prefix=own)
    assert seen == {"prefix": str(own), "child": [str(own), "0"]}
    assert cached(own, site / "__init__.py").is_file()
    assert not (tmp_path / "cache" / "bytecode").exists()


def test_a_writable_install_gets_its_bytecode_from_python_itself(site, tmp_path):
    seen = start(site, tmp_path)
    assert seen == {"prefix": None, "child": ["None", "0"]}
    assert Path(importlib.util.cache_from_source(str(site / "__init__.py"))).is_file()
    assert not (tmp_path / "cache" / "bytecode").exists()
