"""`dlbench run` says what it runs before it loads torch: its first line comes before the seconds of
imports and checks, and the line repeats every few seconds until the estimate is said. `python -X
importtime` writes a line to stderr as each module finishes importing, so the order of stderr's lines
shows what came before torch, on any machine however busy."""

import subprocess
import sys

import pytest

from dlbench.commands.run import STARTING

pytestmark = pytest.mark.slow  # a real run in a fresh process


def _stderr(*args, cwd) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlbench", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)
    return proc.returncode, proc.stderr.splitlines()


def _first_torch_import(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith("import time:") and "| torch" in line
                and line.split("|")[-1].strip().split(".")[0] == "torch")


def test_the_first_line_says_what_runs_before_torch_loads(tmp_path):
    code, lines = _stderr("run", "fwdbwd", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32",
                          "--warmup", "1", "--warmup-seconds", "0", "--steps", "1", "--min-seconds", "0",
                          "--device", "cpu", "--db", tmp_path / "r.db", cwd=tmp_path)
    said = [(i, line) for i, line in enumerate(lines) if not line.startswith("import time:")]
    assert code == 0, "\n".join(line for _, line in said)
    first, line = said[0]
    assert line == f"fwdbwd resnet18 b2 3x32x32 fp32: {STARTING}"
    assert first < _first_torch_import(lines)
    estimate = next(i for i, text in said if text.startswith("fwdbwd resnet18 b2 3x32x32 fp32: about "))
    assert _first_torch_import(lines) < estimate  # the estimate needs torch; the line before it did not wait
    assert said[[i for i, _ in said].index(estimate)][1].endswith(" of start-up")  # torch's seconds, told


def test_a_mistake_found_without_torch_says_one_line_and_no_start(tmp_path):
    code, lines = _stderr("run", "fwdbwd", "--batch", "0", "--db", tmp_path / "r.db", cwd=tmp_path)
    said = [line for line in lines if not line.startswith("import time:")]
    assert code == 2 and said == ["error: --batch must be ≥ 1, got 0"]
    assert not any("| torch" in line for line in lines)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_a_mistake_found_with_torch_comes_after_the_start_line(tmp_path):
    # whether a GPU is there is torch's to say (this test runs where none is)
    code, lines = _stderr("run", "fwdbwd", "--model", "resnet18", "--device", "cuda", "--db", tmp_path / "r.db",
                          cwd=tmp_path)
    said = [line for line in lines if not line.startswith("import time:")]
    assert code == 2 and STARTING in said[0], said
    assert said[-1] == "error: device 'cuda' asked for, but no CUDA GPU is visible (use --device cpu)", said
    assert not (tmp_path / "r.db").exists()
    assert all(STARTING in line for line in said[:-1]), said  # the start line, maybe repeated, then the error
