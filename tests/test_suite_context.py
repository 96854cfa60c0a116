"""A suite's own process never initialises CUDA: only the worker that measures may hold a GPU
context, or every benchmark of the suite runs beside the suite's context (and the monitor
blames it as another process). On a CPU machine the test pretends a GPU is there, so every
path that would reach for it (fingerprint, planning) is taken, and fails loudly
if it initialises CUDA."""

import sys

import pytest
import torch

from dlbench.commands.suite import SuiteRequest, suite_command
from dlbench.launch import flopcount
from dlbench.launch.view import Terminal
from dlbench.results.store import Store


class CudaTouched(AssertionError):
    pass


@pytest.fixture
def no_cuda_here(monkeypatch):
    """A GPU that seems present; initialising CUDA in this process raises and is recorded."""
    touched = []

    def guard(*args, **kwargs):
        touched.append(True)
        raise CudaTouched("the suite's own process initialised CUDA")

    for name, module in list(sys.modules.items()):  # torch.cuda's submodules import _lazy_init by name
        if name.startswith("torch.cuda") and hasattr(module, "_lazy_init"):
            monkeypatch.setattr(module, "_lazy_init", guard)
    monkeypatch.setattr(torch._C, "_cuda_init", guard, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr("dlbench.system.info.gpus_seen", lambda: 1)  # as NVML would see it

    def counted(*args, **kwargs):  # a suite's estimates count nothing and measure nothing
        raise AssertionError("the suite's own process counted FLOPs for an estimate")

    monkeypatch.setattr(flopcount, "_forward_flops", counted)
    yield touched


@pytest.mark.slow
def test_a_suite_never_initialises_cuda_in_its_own_process(tmp_path, db, no_cuda_here):
    # device auto: the worker (a real child process, where no GPU is pretended) runs on the CPU.
    suite = tmp_path / "tiny.yaml"
    suite.write_text("name: tiny\ndefaults: {workload: fwdbwd, model: resnet18, batch: 2, input_shape: 3x32x32, "
                     "warmup: 1, warmup_seconds: 0, steps: 2, min_seconds: 0}\nspecs: [{precision: fp32}, {batch: 3}]\n")
    status = suite_command(SuiteRequest(name=str(suite), db=str(db)), Terminal())
    assert status == 0 and not no_cuda_here
    assert not torch.cuda.is_initialized()
    with Store(db, read_only=True) as store:
        ran = [r for r in store.results() if r.workload == "fwdbwd"]
        [ceiling] = store.results(workload="system")
    assert [r.status for r in ran] == ["ok", "ok"]
    # the first worker measured the fp32 matmul ceiling it lacked, the suite stored it, the second reused it
    assert ceiling.spec["quick"] and [r.metrics["ceiling_record"] for r in ran] == [ceiling.id] * 2
    assert all("new_ceiling" not in r.traces for r in ran)


def test_launcher_gpus_follow_cuda_visible_devices(monkeypatch):
    from dlbench.system.info import _visible

    uuids = {"a": "GPU-aaaa-1", "b": "GPU-bbbb-2", "c": "GPU-cccc-3"}
    handles = list(uuids)
    for shown, expected in [(None, ["a", "b", "c"]), ("2,0", ["c", "a"]), ("GPU-bbbb", ["b"]),
                            ("1,7,0", ["b"]), ("", [])]:
        if shown is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", shown)
        assert _visible(handles, uuids.get) == expected, shown


def test_planning_the_default_gpu_suite_never_initialises_cuda(no_cuda_here):
    # What `dlbench` does before its first benchmark: checks every spec (devices, shapes, data)
    # and estimates the time from what the store holds (here: nothing), measuring nothing.
    from dlbench import suites
    from dlbench.commands.suite import _runnable, default_suite
    from dlbench.launch.suiterun import make_plan

    view = Terminal()
    loaded = suites.load(default_suite(view))
    assert loaded.name == "quick"
    loaded.specs = _runnable(loaded.specs, view)
    plan = make_plan(loaded, None, "here")
    assert len(plan.todo) == len(loaded.specs) == 5 and all(e.rough for e in plan.estimates)
    assert not no_cuda_here and not torch.cuda.is_initialized()
