"""The host's CPU figures over a measured window (measure/host.py), recorded from real processes and
threads fighting for a CPU, and what the doctor makes of them (diagnose/host.py): the launching
thread's wait, a CPU set smaller than the machine, steal, the environment among what differed, and
records of earlier versions that lack them."""

import json
import os
import subprocess
import sys
import threading
import types

import pytest
import torch

from conftest import make_result
from dlbench.diagnose import host
from dlbench.diagnose.differences import differences
from dlbench.diagnose.judge import diagnose
from dlbench.measure.host import environment
from dlbench.measure.loop import run_steps
from dlbench.report.parts import parts
from dlbench.results.measurement import Measurement

SCHEDSTAT = os.path.exists(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/schedstat")
needs_schedstat = pytest.mark.skipif(not SCHEDSTAT, reason="this kernel shows no /proc/<pid>/task/<tid>/schedstat")
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="restricting the CPU set needs two CPUs")

# A benchmark process in miniature: pinned to one CPU where asked, with a thread hashing beside the
# launching one where asked (hashing a large buffer releases the GIL, so that thread wants a CPU and
# not the GIL), it measures a window of busy work and prints the sampler's figures.
WINDOW = r"""
import hashlib, json, os, subprocess, sys, threading, time
pin, helper, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
if pin != "-":
    os.sched_setaffinity(0, {int(pin)})
if helper == "torch":
    import torch
    torch.set_num_threads(1)
from dlbench.measure.host import HostSampler
stop = threading.Event()

def hashing():
    data = os.urandom(1 << 20)
    while not stop.is_set():
        hashlib.sha256(data).digest()

if helper == "thread":
    hasher = threading.Thread(target=hashing, daemon=True)
    hasher.start()
# loader workers in miniature: processes below this one, on the CPUs it may use (they inherit its set)
workers = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3 if helper == "workers" else 0)]
sampler = HostSampler().start()
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    pass
figures = sampler.stop()
stop.set()
for worker in workers:
    worker.kill()
print(json.dumps({**figures, **({"hasher": hasher.native_id} if helper == "thread" else {})}))
"""
SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
TRAIN = {"workload": "train", "model": "resnet50", "batch": 64, "precision": "bf16", "gpus": 1}
MACHINE = {"host": "gpu-node", "gpus": [{"name": "NVIDIA H200"}], "gpu_count": 1,
           "cpu": {"model": "Xeon", "cores": 32}, "torch": "2.11.0", "driver": "580.1"}


def window(pin="-", helper="-", seconds=1.0, env=None) -> dict:
    """The figures of one measured window in a fresh process (not below this one's launcher)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("DLBENCH_RANKS", "TORCHELASTIC_RUN_ID")}
    done = subprocess.run([sys.executable, "-c", WINDOW, str(pin), helper, str(seconds)], capture_output=True,
                          text=True, env={**clean, **(env or {})}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def record(step_s=0.02, tag="", spec=None, **metrics):
    """A stored GPU training run with these figures (the window's own, where a test measured them)."""
    steps = [step_s + 0.0003 * ((i * 7) % 5 - 2) for i in range(60)]
    figures = {"device": "cuda:0", "throughput": 64 / step_s, "throughput_unit": "img/s", "gpu_util_mean": 98.0,
               "monitor_readings": 40, "sm_clock_mean_mhz": 1980.0, "gpu_neighbours_sm_share": 0.0,
               "gpu_neighbours": [], "cpu_cores": 32, "cpu_other_cores": 0.1, "load_average_1m": 1.0, **metrics}
    return make_result(spec={**TRAIN, **(spec or {})}, system=MACHINE, metrics=figures, samples={"step": steps},
                       tag=tag)


# ---- real processes and threads -------------------------------------------------------------------

@needs_schedstat
def test_a_busy_process_on_the_same_cpu_makes_the_launching_thread_wait():
    cpu = CPUS[-1]
    busy = subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)])
    try:
        figures = window(pin=cpu, seconds=1.5)
    finally:
        busy.kill()
        busy.wait()
    # two busy processes on one CPU: each runs about half the time and waits the other half
    assert figures["launch_thread_wait_s"] > 0.15 * figures["host_window_s"]
    assert figures["cpu_wait_run_s"] >= figures["cpu_wait_process_s"] >= figures["launch_thread_wait_s"]
    assert figures["launch_thread_switches"] > 0
    assert figures["cpus_allowed"] == 1 and figures["cpu_cores"] == os.cpu_count()
    assert 0 <= figures["cpu_steal_share"] < 1
    assert figures["cpu_mhz_mean"] is None or figures["cpu_mhz_mean"] > 0
    # a GPU run whose window recorded these: the wait is named, a cause of its own in seconds a step, or
    # how CPU contention cost time where the other processes' CPU use counts as contention on this machine
    r = record(0.02, "busy", **{**figures, "gpu_util_mean": 60.0})
    [d] = diagnose([r], refs=[])
    share = figures["launch_thread_wait_s"] / figures["host_window_s"]
    said = (f"the launching thread waited {share * parts(r).step * 1e3:.2f} ms a step for a CPU "
            f"({figures['launch_thread_switches']:,} involuntary switches")
    [cause] = [c for c in d.causes if said in c.evidence]
    assert cause.name in ("CPU contention", host.WAITED.name)
    if cause.name == host.WAITED.name:
        assert cause.share == pytest.approx(share, rel=1e-6) and cause.evidence.startswith(said)


@needs_schedstat
def test_a_thread_of_its_own_on_its_one_cpu_makes_the_launching_thread_wait():
    figures = window(pin=CPUS[-1], helper="thread", seconds=1.5)
    assert figures["launch_thread_wait_s"] > 0.05 * figures["host_window_s"]
    waits = {t["tid"]: t["wait_s"] for t in figures["cpu_wait_threads"]}
    assert waits.get(figures["hasher"], 0) > 0  # the other thread waited for the launching one too
    assert figures["cpu_wait_process_s"] >= figures["launch_thread_wait_s"] + waits[figures["hasher"]] - 1e-3


@needs_two_cpus
def test_a_restricted_cpu_set_is_recorded_and_named_instead_of_more_workers():
    # its own processes fill its one CPU even where another process of the machine comes to it too
    figures = window(pin=CPUS[-1], helper="workers", seconds=1.5)
    assert figures["cpus_allowed"] == 1
    machine = figures["cpu_cores"]
    # a JPEG run starved of data, eight workers: with the machine's cores free, the doctor would ask for more
    r = record(0.036, "held", spec={"options": {"data": "folder:/data/imagenet", "workers": 8}},
               data_share=0.4, workers=8, **figures)
    [d] = diagnose([r], refs=[])
    names = [c.name for c in d.causes]
    assert not any("--workers" in c.evidence for c in d.causes)
    if figures["cpu_own_cores"] >= host.FULL_CORES:
        held = next(c for c in d.causes if c.name == "held to fewer cores")
        assert "too few loader workers" not in names and "CPU contention starving the input pipeline" not in names
        assert held.evidence.startswith(f"held to 1 of {machine} cores by its CPU affinity (its processes used ")
        assert "the step waited for data 40% of the measured time" in held.evidence and "`taskset -c`" in held.evidence
        assert held.share == pytest.approx(0.4, abs=0.01)
        # its processes take turns on that one CPU: the launching thread's wait is said with the restriction
        assert host.WAITED.name not in names
        waits = figures.get("launch_thread_wait_s", 0.0) / figures["host_window_s"] >= host.WAIT_SHARE
        assert ("; the launching thread waited " in held.evidence) == waits
    else:  # the machine's other processes took part of that CPU: then it is not the set that held it
        assert "held to fewer cores" not in names


def test_loader_workers_are_never_advised_beyond_the_allowed_cores():
    starved = dict(data_share=0.4, workers=2, cpu_own_cores=1.5)
    options = {"options": {"data": "folder:/data/imagenet", "workers": 2}}
    [d] = diagnose([record(0.036, spec=options, cpus_allowed=4, **starved)], refs=[])
    [cause] = [c for c in d.causes if c.name == "too few loader workers"]
    assert "`--workers 3` (4 allowed cores for 1 GPU(s))" in cause.evidence
    [d] = diagnose([record(0.036, spec=options, cpus_allowed=32, **starved)], refs=[])
    [cause] = [c for c in d.causes if c.name == "too few loader workers"]
    assert "`--workers 4` (32 cores for 1 GPU(s))" in cause.evidence  # the rate, not the cores, limits it here


def test_environment_that_changes_behaviour_is_recorded_as_the_process_saw_it():
    figures = window(helper="torch", seconds=0.3, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "3",
                                                       "NCCL_P2P_DISABLE": "1", "DLBENCH_TEST_OTHER": "x",
                                                       "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    env = figures["environment"]
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and env["OMP_NUM_THREADS"] == "3"
    assert env["NCCL_P2P_DISABLE"] == "1" and env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "DLBENCH_TEST_OTHER" not in env
    assert figures["torch_threads"] == 1 and figures["torch_interop_threads"] >= 1
    assert Measurement.read(figures).host.omp_num_threads == "3"
    # two runs apart only in their environment: each variable listed once, NCCL's too
    comm = {"gradient_bytes": 1000}
    mine = record(0.03, communication={**comm, "nccl_settings": {"NCCL_P2P_DISABLE": "1"}}, **figures)
    theirs = record(0.02, communication={**comm, "nccl_settings": {}},
                    **{**figures, "environment": {**environment(), "CUDA_DEVICE_MAX_CONNECTIONS": "32",
                                                  "OMP_NUM_THREADS": "3",
                                                  "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}})
    found = differences(mine, theirs)
    assert "CUDA_DEVICE_MAX_CONNECTIONS 1 against 32" in found
    assert "NCCL_P2P_DISABLE 1 against unset" in found
    assert sum("NCCL_P2P_DISABLE" in line for line in found) == 1


def test_a_measured_window_carries_the_host_figures_into_the_measurement():
    w, x = torch.randn(64, 64), torch.randn(8, 64)

    def step(timer):
        (x @ w).relu()
        timer.mark("compute")

    measured = run_steps(step, torch.device("cpu"), warmup=1, warmup_seconds=0.0, steps=3, min_seconds=0.2)
    m = measured.common_metrics(items_per_step=8)
    host = m.host
    assert host.recorded and host.cpus_allowed == len(CPUS) and host.window_s >= 0.2
    assert host.torch_threads == torch.get_num_threads() and isinstance(host.environment, dict)
    assert (host.launch_thread_wait_s is not None) == SCHEDSTAT
    assert not {"host_window_s", "cpus_allowed", "environment"} & set(m.extra)
    assert Measurement.read(m.to_metrics()).host == host


# ---- the doctor on recorded figures -----------------------------------------------------------------

HOST = {"host_window_s": 2.0, "cpus_allowed": 32, "environment": {"CUDA_DEVICE_MAX_CONNECTIONS": "32"},
        "cpu_steal_share": 0.0, "torch_threads": 16}


def test_the_launching_threads_wait_is_a_cause_in_seconds_a_step():
    r = record(0.020, "waited", **{**HOST, "gpu_util_mean": 70.0, "launch_thread_wait_s": 0.6,
                                   "launch_thread_switches": 4100, "launch_thread_migrations": 230,
                                   "cpu_steal_share": 0.09})
    [d] = diagnose([r], refs=[])
    [cause] = [c for c in d.causes if c.name == "launching thread waited for a CPU"]
    step = parts(r).step
    assert cause.seconds == pytest.approx(0.3 * step) and cause.share == pytest.approx(0.3)
    assert cause.evidence.startswith(f"the launching thread waited {0.3 * step * 1e3:.2f} ms a step for a CPU "
                                     "(4,100 involuntary switches, 230 migrations); steal 9%")
    [steal] = [c for c in d.causes if c.name == "hypervisor steal"]
    assert steal.evidence.startswith("the hypervisor took 9% of the CPUs' time (steal)") and steal.share is None
    assert all(kind.idle for kind in host.HOST.names)  # no launch-bound advice beside them
    # against a baseline only the wait that grew counts; a small wait of its own is no cause
    base = record(0.016, "base", **{**HOST, "launch_thread_wait_s": 0.04})
    grown = host.waited(r, parts(r), types.SimpleNamespace(other=base))
    assert grown.seconds == pytest.approx((0.3 - 0.02) * step)
    assert "; against 0.32 ms in run " in grown.evidence
    assert host.waited(base, parts(base), None) is None
    assert host.stolen(r, types.SimpleNamespace(other=record(**{**HOST, "cpu_steal_share": 0.08}))) is None


def test_with_other_processes_on_the_cores_the_wait_is_said_as_how_contention_cost_time():
    r = record(0.020, "contended", **{**HOST, "gpu_util_mean": 60.0, "cpu_other_cores": 20.0,
                                      "launch_thread_wait_s": 0.6, "launch_thread_switches": 4100})
    [d] = diagnose([r], refs=[])
    first = d.causes[0]
    assert first.name == "CPU contention" and "other processes used 20.0 of 32 CPU cores" in first.evidence
    assert f"; the launching thread waited {0.3 * parts(r).step * 1e3:.2f} ms a step for a CPU" in first.evidence
    assert host.WAITED.name not in [c.name for c in d.causes]


def test_a_cgroup_quota_holds_a_cpu_run_with_no_share_measured():
    r = make_result(spec={"device": "cpu", "model": "resnet18"}, system={"host": "laptop", "gpus": []},
                    metrics={"device": "cpu", "throughput": 5.0, "throughput_unit": "img/s", "cpu_cores": 16,
                             "cpu_own_cores": 1.9, **HOST, "cpu_quota_cores": 2.0}, samples={"step": [0.2, 0.21]})
    [d] = diagnose([r], refs=[])
    [held] = [c for c in d.causes if c.name == "held to fewer cores"]
    assert held.evidence.startswith("held to 2 of 16 cores by its cgroup's CPU quota (its processes used 1.9 cores); "
                                    "the benchmark runs on those cores")
    assert held.share is None


def test_records_of_earlier_versions_say_the_host_figures_were_not_recorded():
    old = record(0.02, "old")
    [d] = diagnose([old], refs=[])
    assert host.NOT_RECORDED in d.hints
    assert not {c.kind for c in d.causes} & set(host.HOST.names)
    new = record(0.02, "new", **{**HOST, "launch_thread_wait_s": 0.01})
    missing = differences(new, old)[-1]
    assert missing.startswith("not recorded in one of them (stored by an earlier dlbench): ")
    for name in ("launching thread's wait for a CPU", "steal", "cores allowed", "torch threads", "environment"):
        assert name in missing
    # a new record on a kernel without schedstat says that much, and names no wait
    [d] = diagnose([record(0.02, "no-schedstat", **HOST)], refs=[])
    assert host.NO_SCHEDSTAT in d.hints and host.NOT_RECORDED not in d.hints
