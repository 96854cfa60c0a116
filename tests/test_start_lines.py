"""`dlbench suite` and `dlbench system` say what they do before torch loads, repeat it every 5 s until
they say how long they will take, and then say a line at least every 5 s. `python -X importtime`
writes a line to stderr as each module finishes importing, so the order of stderr's lines shows what
came before torch, on any machine however busy (as tests/test_first_line.py does for `dlbench run`)."""

import io
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

from dlbench.commands.suite import LOOKING, NO_GPU, checking, default_suite
from dlbench.commands.system import STARTING
from dlbench.launch import view as views
from dlbench.launch.view import Terminal
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import Estimate, rough_rate
from dlbench.system import ceilings as c
from dlbench.system.info import gpus_seen
from dlbench.system.survey import expected_seconds

CPU = torch.device("cpu")
TINY_SUITE = """name: tiny
description: one tiny benchmark
defaults: {model: resnet18, batch: 2, input_shape: 3x32x32, device: cpu, warmup: 1, warmup_seconds: 0.0,
           steps: 1, min_seconds: 0.0}
specs:
  - {workload: fwdbwd}
"""


def _stderr(*args, cwd) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlbench", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)
    return proc.returncode, proc.stderr.splitlines()


def _said(lines: list[str]) -> list[tuple[int, str]]:
    return [(i, line) for i, line in enumerate(lines) if not line.startswith("import time:")]


def _first_torch_import(lines: list[str]) -> int:
    """Where torch finished importing, whichever module imported it (nested imports are indented)."""
    return next(i for i, line in enumerate(lines) if line.startswith("import time:")
                and line.split("|")[-1].strip() == "torch")


# ---------------------------------------------------------------- dlbench suite


@pytest.mark.slow  # a real suite in fresh processes
def test_a_suites_first_line_comes_before_torch_and_its_estimate_after(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY_SUITE)
    code, lines = _stderr("suite", suite, "--db", tmp_path / "r.db", cwd=tmp_path)
    said = _said(lines)
    assert code == 0, "\n".join(line for _, line in said)
    first, line = said[0]
    assert line == f"suite tiny: {checking(1)}" and first < _first_torch_import(lines)
    estimate = next(i for i, text in said if re.match(r"suite tiny, run \S+: 1 to run, about \d+ s", text))
    assert _first_torch_import(lines) < estimate
    assert all(checking(1) in text for i, text in said if i < estimate and "results go to" not in text)


@pytest.mark.skipif(gpus_seen() != 0, reason="a machine where NVML or a GPU driver may show a GPU")
def test_the_plain_command_without_a_gpu_says_smoke_before_torch_loads(tmp_path):
    # NVML, or the absence of a GPU driver, tells at once; torch loads after, for the suite's checks.
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "dlbench", "--db", tmp_path / "r.db"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("import time:") and line.split("|")[-1].strip() == "torch":
                break
    finally:
        proc.send_signal(signal.SIGINT)  # the started worker goes with the command's own stop
        proc.communicate(timeout=60)
    said = [text for _, text in _said(lines)]
    assert said[:2] == [NO_GPU, f"suite smoke: {checking(3)}"]
    assert LOOKING not in said
    assert _said(lines)[1][0] < _first_torch_import(lines)


@pytest.mark.parametrize("seen, cuda, suite", [(1, True, "quick"), (None, True, "quick"), (1, False, "smoke"),
                                               (None, False, "smoke")])
def test_where_a_gpu_may_be_torch_decides(monkeypatch, seen, cuda, suite):
    monkeypatch.setattr("dlbench.system.info.gpus_seen", lambda: seen)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)  # a CPU build of torch on a GPU machine: False
    out = io.StringIO()
    assert default_suite(Terminal(err=Console(file=out, width=300))) == suite
    said = out.getvalue().splitlines()
    assert said[0] == LOOKING and (said[1:] == [NO_GPU] if suite == "smoke" else len(said) == 1)


def test_where_no_gpu_is_seen_torch_is_not_asked(monkeypatch):
    def asked():
        raise AssertionError("torch asked")

    monkeypatch.setattr("dlbench.system.info.gpus_seen", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", asked)
    out = io.StringIO()
    assert default_suite(Terminal(err=Console(file=out, width=300))) == "smoke"
    assert out.getvalue().splitlines() == [NO_GPU]


class _NoNvml:
    """pynvml where the NVIDIA driver's library is missing."""

    @staticmethod
    def nvmlInit():
        raise RuntimeError("NVML Shared Library Not Found")


@pytest.mark.parametrize("driver, seen", [(False, 0), (True, None)])
def test_without_nvml_a_gpu_driver_means_only_torch_can_tell(tmp_path, monkeypatch, driver, seen):
    from dlbench.system import info

    device = tmp_path / "kfd"
    if driver:
        device.touch()
    monkeypatch.setitem(sys.modules, "pynvml", _NoNvml)
    monkeypatch.setattr(info, "GPU_DEVICES", (str(device),))
    assert info.gpus_seen() == seen


def test_a_suite_says_the_running_benchmark_at_least_every_5_s(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(views.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    console = Console(file=out, width=200)  # a file: no live bars, plain lines
    suite = views.SuiteView(console, "tiny", [Estimate(20.0, 0, True)])
    suite.start(0, BenchmarkSpec(workload="fwdbwd", model="resnet18", batch=1, device="cpu"), None)
    ticks = []
    for _ in range(20):  # ten ticks a second, as the launcher makes them, for 10 s of a silent benchmark
        for _ in range(10):
            clock[0] += 0.1
            suite.tick({"stage": "warm-up", "done": 0, "total": 1})
        ticks.append(out.getvalue().count("warm-up 0/1"))
    assert ticks[4] >= 1 and ticks[-1] >= 3  # a line by 5 s, and again every 5 s
    assert views.SUITE_TICK_S <= 5


def test_a_late_tick_still_comes_within_the_silence_promised():
    beat = views.Heartbeat(Console(file=io.StringIO()))
    late = min(0.5, beat.every_s / 10)  # how late _tick may notice the interval is up
    assert beat.every_s + late <= views.SILENT_S - 0.5 and views.SUITE_TICK_S == beat.every_s


# ---------------------------------------------------------------- dlbench system


def test_each_ceilings_budget_is_its_timed_calls_and_its_setup():
    rate = 3e10
    matmul = sum(2 * (2 * s + c.REPS * max(s, c.REP_SECONDS)) for s in (2 * n**3 / rate for n in c.CPU_MATMUL_SIZES))
    assert c.budget_s("matmul_fp32_tflops", CPU, rate) == pytest.approx(matmul)
    assert c.budget_s("matmul_bf16_tflops", CPU, rate) == 0  # measured on GPUs only: it stops at once
    assert c.budget_s("h2d_pinned_gbs", CPU, rate) == 0 and c.budget_s("jpeg_decode_gpu_img_s", CPU, rate) == 0
    assert c.budget_s("allreduce_busbw_gbs", CPU, rate, gpus=1) == 0
    assert c.budget_s("jpeg_loader_cpu_img_s_per_core", CPU, rate) == 2.0 + c.SETUP_S["jpeg_loader_cpu_img_s_per_core"]
    # a faster machine's matmuls take less of it
    assert expected_seconds(CPU, None, 1e11) < expected_seconds(CPU, None, rate)


def test_a_disks_budget_is_what_it_will_read(tmp_path: Path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"z" * 10**6)
    assert c.budget_s("disk_read_gbs", CPU, 1e10, disk=data) == pytest.approx(10**6 / c.DISK_BYTES_PER_S)
    assert expected_seconds(CPU, data, 1e10) > expected_seconds(CPU, None, 1e10)


@pytest.mark.slow  # every ceiling of this CPU, measured: seconds
def test_system_says_its_start_before_torch_and_its_estimate_before_measuring(tmp_path):
    code, lines = _stderr("system", "--device", "cpu", "--no-store", cwd=tmp_path)
    said = _said(lines)
    assert code == 0, "\n".join(line for _, line in said)
    first, line = said[0]
    assert line == f"system: {STARTING}" and first < _first_torch_import(lines)
    estimate = next(i for i, text in said if re.fullmatch(
        r"system: measuring the ceilings of cpu: about \d+ s \(from each measurement's time budget, its matmuls "
        r"at a stand-in matmul rate, rough\)", text))
    measuring = next(i for i, text in said if text.startswith("measuring "))
    assert _first_torch_import(lines) < estimate < measuring


def test_system_goes_by_this_hosts_stored_matmul_ceiling(tmp_path):
    import socket

    from dlbench.commands.system import _announce
    from dlbench.launch.view import Terminal
    from dlbench.results.record import Result
    from dlbench.results.store import Store

    said = io.StringIO()
    view = Terminal(err=Console(file=said, width=300))
    with Store(tmp_path / "r.db") as store:
        assert _announce(CPU, None, store, view) == pytest.approx(expected_seconds(CPU, None, rough_rate("cpu")))
        assert "its matmuls at a stand-in matmul rate, rough)" in said.getvalue()
        store.add(Result(spec={"workload": "system", "model": ""}, system={"host": socket.gethostname()},
                         started="2026-11-28", metrics={"device": "cpu", "matmul_fp32_tflops": 0.2}))
        assert _announce(CPU, None, store, view) == pytest.approx(expected_seconds(CPU, None, 0.2e12))
    assert "about " in said.getvalue().splitlines()[-1]
    assert said.getvalue().splitlines()[-1].endswith("its matmuls at this machine's fp32 matmul rate)")
