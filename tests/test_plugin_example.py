"""The example plug-in in examples/ (the one docs/architecture.md shows) works end to end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts dlbench with the plug-in, one or more times

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def dlbench(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
           "DLBENCH_PLUGINS": "dlbench_matmul", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_plugin_workload_runs_and_is_stored(tmp_path):
    db = tmp_path / "r.db"
    proc = dlbench("run", "matmul", "--size", "32", "--steps", "2", "--device", "cpu", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ok matmul" in proc.stdout and "TFLOP/s" in proc.stdout
    records = [json.loads(line) for line in dlbench("export", "--db", db, cwd=tmp_path).stdout.splitlines()]
    records = [r for r in records if r["spec"]["workload"] != "system"]  # a ceiling measured for its utilisation
    assert [(r["spec"]["workload"], r["spec"]["options"], r["metrics"]["throughput_unit"]) for r in records] == [
        ("matmul", {"size": 32}, "TFLOP/s")]
    assert records[0]["metrics"]["throughput"] > 0


def test_plugin_options_are_checked_and_documented(tmp_path):
    proc = dlbench("run", "matmul", "--size", "0", "--db", tmp_path / "r.db", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --size must be ≥ 1, got 0"
    assert not (tmp_path / "r.db").exists()
    assert "Rows and columns of the square matrices" in dlbench("run", "matmul", "--help", cwd=tmp_path).stdout


def test_plugin_model_and_suite_schema(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nspecs:\n  - {workload: matmul, size: 16, steps: 1, device: cpu}\n"
                     "  - {workload: fwdbwd, model: tiny-cnn, batch: 2, steps: 1, warmup: 1, device: cpu}\n")
    listed = dlbench("suite", suite, "--list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "matmul" in listed.stdout and "tiny-cnn" in listed.stdout
    suite.write_text("name: s\nspecs:\n  - {workload: matmul, sise: 16}\n")
    bad = dlbench("suite", suite, "--list", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown spec key 'sise' (did you mean size?)" in bad.stderr


def test_the_documented_plugin_is_the_example_file():
    # docs/architecture.md shows the plug-in the tests run: a change to one must reach the other.
    doc = (EXAMPLES.parent / "docs" / "architecture.md").read_text()
    block = doc.split("```python\n")[1:]
    code = (EXAMPLES / "dlbench_matmul.py").read_text()
    assert any(b.split("```\n")[0] == code for b in block), "docs/architecture.md's plug-in differs from the example"
    assert sum(1 for line in code.splitlines() if line.strip()) <= 22


def test_the_documented_fwdbwd_command_runs_the_plugin_model(tmp_path):
    # The plug-in's tiny-cnn ends in nn.LazyLinear, whose weights have no shape until a first input:
    # the run must give it one before it moves the model to a memory format or counts its parameters.
    doc = (EXAMPLES.parent / "docs" / "architecture.md").read_text()
    [line] = [line for line in doc.splitlines() if "dlbench run fwdbwd --model tiny-cnn" in line]
    assert line.startswith("PYTHONPATH=examples DLBENCH_PLUGINS=dlbench_matmul dlbench ")
    documented = line.split(" dlbench ", 1)[1].split()
    tiny = ["--batch", "2", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0",
            "--device", "cpu", "--db", tmp_path / "r.db"]
    proc = dlbench(*documented, *tiny, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok fwdbwd tiny-cnn batch 2"), proc.stdout
    assert "uninitialized" not in proc.stderr
