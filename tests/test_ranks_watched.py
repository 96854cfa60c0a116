"""Every GPU of a multi-process run is watched: each rank's own monitor readings and phase spread
reach rank 0's result, typed (RankGpu, RankPhases), and the doctor names a neighbour on any GPU with
its index, and a straggling rank where no neighbour was seen. Real gloo ranks on the CPU, monitor
data of a real process, and stored records with the figures a 2-GPU run records."""

import json
import subprocess
import sys
import time

import pytest
import torch

from conftest import cli, make_result
from dlbench.diagnose import ranks
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.render import render, to_json
from dlbench.measure.host import command_line
from dlbench.measure.monitor import MonitorData
from dlbench.results.measurement import GpuNeighbour, RankGpu, RankPhases, PhaseSpread
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.workloads.distributed import Group, watched

H100S = {"host": "gpu-node", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 2, "gpu_count": 2,
         "cpu": {"model": "Xeon", "cores": 32}, "torch": "2.11.0", "driver": "580.1"}
TRAIN = {"workload": "train", "model": "resnet50", "batch": 64, "precision": "bf16", "gpus": 2,
         "options": {"data": "synthetic"}}
NEIGHBOUR = {"pid": 1234, "sm_share": 0.45, "memory_gb": 0.9, "command": "python neighbour.py gpu 1"}
LAUNCHER = {"pid": 99, "sm_share": 0.0, "memory_gb": 0.5, "launcher": "python -m dlbench run train"}


def line(rank, steps=60, **phases):
    """A rank's line as pipeline.py stores it: each phase as (median, p10, p90) in ms."""
    out = {"rank": rank, "steps": steps, "step_ms": sum(p[0] for p in phases.values())}
    for name, (median, p10, p90) in phases.items():
        out.update({f"{name}_ms": median, f"{name}_p10_ms": p10, f"{name}_p90_ms": p90})
    return out


def gpu(rank, neighbours=(), clock=1980.0, busy=95.0):
    return RankGpu(rank, gpu=rank, pid=100 + rank, host="gpu-node", readings=40, gpu_util_mean=busy,
                   sm_clock_mean_mhz=clock, power_mean_w=600.0,
                   neighbours_sm_share=sum(n.get("sm_share", 0.0) for n in neighbours if "launcher" not in n),
                   other_processes=len(neighbours),
                   neighbours=tuple(GpuNeighbour(**{**n, "launcher": "launcher" in n}) for n in neighbours)).stored()


EQUAL = [line(0, forward=(8.4, 8.2, 8.9), backward=(16.0, 15.7, 16.4), optimizer=(1.5, 1.4, 1.6)),
         line(1, forward=(8.5, 8.2, 8.9), backward=(16.1, 15.8, 16.5), optimizer=(1.5, 1.4, 1.6))]
# rank 1 slow in its forward; rank 0's backward is longer by its wait in the all-reduce
STRAGGLE = [line(0, forward=(8.4, 8.2, 8.9), backward=(26.2, 25.9, 26.6), optimizer=(1.5, 1.4, 1.6)),
            line(1, forward=(18.5, 17.9, 19.2), backward=(16.1, 15.8, 16.5), optimizer=(1.5, 1.4, 1.6))]


def run_record(step_s, tag, ranks, rank_gpus=None, started=None, **metrics):
    steps = [step_s + 0.0003 * ((i * 7) % 5 - 2) for i in range(120)]
    figures = {"device": "cuda:0", "throughput": 128 / step_s, "throughput_unit": "img/s", "gpu_util_mean": 95.0,
               "monitor_readings": 40, "sm_clock_mean_mhz": 1980.0, "gpu_neighbours_sm_share": 0.0,
               "gpu_neighbours": [], "data_share": 0.001, "cpu_cores": 32, "cpu_other_cores": 0.1,
               "load_average_1m": 1.0, "processes": 2, "ranks": ranks, **metrics}
    if rank_gpus is not None:
        figures["rank_gpus"] = rank_gpus
    return make_result(spec=TRAIN, system=H100S, metrics=figures, samples={"step": steps}, tag=tag,
                       started=started)


def clean():
    """The clean run the doctor compares with: made before any test's own run, whenever it is called."""
    return run_record(0.026, "clean", EQUAL, [gpu(0), gpu(1)], started="2026-01-01T00:00:00+00:00")


def by_tag(diagnoses):
    return {d.result.tag: d for d in diagnoses}


# ---- the typed records ------------------------------------------------------------------------

def test_each_ranks_gpu_and_phases_round_trip_through_the_stored_result():
    r = run_record(0.036, "neighbour", STRAGGLE, [gpu(0, [LAUNCHER]), gpu(1, [NEIGHBOUR, LAUNCHER])])
    back = Result.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.metrics == r.metrics
    first, second = back.measured.monitor.per_rank
    assert (first.rank, first.gpu, first.pid, second.gpu, second.sm_clock_mean_mhz) == (0, 0, 100, 1, 1980.0)
    assert second.neighbours == (GpuNeighbour(1234, 0.45, 0.9, "python neighbour.py gpu 1"),
                                 GpuNeighbour(99, 0.0, 0.5, None, launcher=True))
    # neither the launcher nor another rank of the run is a stranger on a GPU
    assert second.strangers({100, 101}) == [GpuNeighbour(1234, 0.45, 0.9, "python neighbour.py gpu 1")]
    assert RankGpu.read(second.stored()) == second
    phases = back.measured.data.per_rank
    assert [p.rank for p in phases] == [0, 1] and all(p.spread_recorded for p in phases)
    assert phases[1].phases["forward"] == PhaseSpread(18.5, 17.9, 19.2) and list(phases[1].phases) == \
        ["forward", "backward", "optimizer"]
    # rank 0's own figures stay where they were
    assert back.measured.monitor.sm_clock_mean_mhz == 1980.0 and back.measured.neighbours.gpu_neighbours == []


def test_a_record_without_them_reads_as_none_and_a_median_only_line_has_no_spread():
    old = make_result(spec=TRAIN, metrics={"ranks": [{"rank": 0, "steps": 60, "forward_ms": 8.4}]})
    assert old.measured.monitor.per_rank == []
    [phases] = old.measured.data.per_rank
    assert phases == RankPhases(0, 60, None, {"forward": PhaseSpread(8.4)}) and not phases.spread_recorded


def test_a_ranks_monitor_data_becomes_its_record_with_the_gpu_index_and_the_neighbour_named(tmp_path):
    script = tmp_path / "neighbour.py"
    script.write_text("import time\ntime.sleep(60)\n")
    other = subprocess.Popen([sys.executable, str(script), "gpu", "1"])
    while not command_line(other.pid).endswith("gpu 1"):  # its command line is readable once it runs
        time.sleep(0.01)
    try:
        data = MonitorData(available=True, readings=[
            {"t": 0.0, "util": 90, "sm_clock_mhz": 1400.0, "power_w": 500.0},
            {"t": 0.1, "util": 100, "sm_clock_mhz": 1420.0, "power_w": 520.0}],
            other_processes=[{"pid": other.pid, "memory_gb": 0.9}],
            process_samples={(other.pid, 1): 50.0, (other.pid, 2): 40.0})
        stored = watched(Group(1, 2, torch.device("cuda", 1)), data)
    finally:
        other.kill()
        other.wait()
    g = RankGpu.read(json.loads(json.dumps(stored)))
    assert (g.rank, g.gpu, g.readings, g.gpu_util_mean, g.sm_clock_mean_mhz, g.power_mean_w) == \
        (1, 1, 2, 95.0, 1410.0, 510.0)
    assert g.neighbours_sm_share == 0.45 and g.other_processes == 1 and g.reason is None
    [n] = g.strangers()
    assert (n.pid, n.sm_share, n.memory_gb) == (other.pid, 0.45, 0.9) and n.command.endswith("neighbour.py gpu 1")
    # on the CPU a rank says why its device was not read
    cpu = RankGpu.read(watched(Group(1, 2, torch.device("cpu")), MonitorData(False, "no GPU monitor on device cpu")))
    assert (cpu.gpu, cpu.readings, cpu.reason) == (None, None, "no GPU monitor on device cpu")


# ---- the doctor ---------------------------------------------------------------------------------

def test_a_neighbour_on_the_second_gpu_is_named_with_its_index():
    slow = run_record(0.036, "neighbour", STRAGGLE, [gpu(0, [LAUNCHER]), gpu(1, [NEIGHBOUR, LAUNCHER])])
    d = by_tag(diagnose([clean(), slow], refs=[]))["neighbour"]
    first = d.causes[0]
    assert first.name == "another process on the GPU"
    assert first.seconds == pytest.approx(0.45 * 0.036, rel=0.01)
    assert first.evidence.startswith("another process on GPU 1 (rank 1): PID 1234 `python neighbour.py gpu 1` took "
                                     "45% of its SM time and held 0.9 GB; rank 1 (GPU 1) forward 18.50 ms a step "
                                     "against 8.40 ms on rank 0")
    assert first.evidence.endswith("the all-reduce waits for the slowest rank")
    # the straggle it causes is its evidence, not a second cause
    assert [c.name for c in d.causes].count("straggling rank") == 0 and "unexplained" not in [c.name for c in d.causes]
    assert "another process on GPU 1 (rank 1)" in render([d])


def test_a_neighbour_on_rank_0s_gpu_says_which_gpu_in_a_multi_gpu_run():
    slow = run_record(0.036, "neighbour0", EQUAL, [gpu(0, [NEIGHBOUR]), gpu(1)], gpu_neighbours_sm_share=0.45,
                      gpu_neighbours=[NEIGHBOUR])
    d = by_tag(diagnose([clean(), slow], refs=[]))["neighbour0"]
    assert d.causes[0].name == "another process on the GPU"
    assert "another process computed on GPU 0 (rank 0) during the window" in d.causes[0].evidence


def test_neighbours_on_two_gpus_count_once_as_the_ranks_wait_for_the_slowest():
    second = {**NEIGHBOUR, "pid": 4321, "sm_share": 0.30}
    slow = run_record(0.036, "both", EQUAL, [gpu(0, [NEIGHBOUR]), gpu(1, [second])], gpu_neighbours_sm_share=0.45,
                      gpu_neighbours=[NEIGHBOUR])
    d = by_tag(diagnose([clean(), slow], refs=[]))["both"]
    [cause] = [c for c in d.causes if c.name == "another process on the GPU"]
    assert "GPU 0 (rank 0)" in cause.evidence and cause.seconds == pytest.approx(0.45 * 0.036, rel=0.01)
    # the smaller neighbour on GPU 1 costs nothing beyond it, and is still named
    assert any(h.startswith("another process on GPU 1 (rank 1): PID 4321") and "costs no more" in h for h in d.hints)


def test_a_straggling_rank_is_named_where_no_neighbour_was_seen():
    slow = run_record(0.036, "straggler", STRAGGLE, [gpu(0), gpu(1, [LAUNCHER], clock=1410.0, busy=99.0)])
    d = by_tag(diagnose([clean(), slow], refs=[]))["straggler"]
    [cause] = [c for c in d.causes if c.name == "straggling rank"]
    assert cause is d.causes[0] and cause.seconds == pytest.approx(0.0101)
    assert cause.evidence == ("rank 1 (GPU 1) forward 18.50 ms a step against 8.40 ms on rank 0 (p10–p90 17.90–19.20 "
                              "against 8.20–8.90 ms); the all-reduce waits for the slowest rank; its SM clock 1,410 "
                              "MHz against 1,980 MHz on GPU 0; no other process computed on GPU 1")
    # rank 0, longer in its backward by its wait for rank 1, is no straggler
    [s] = ranks.stragglers(slow.measured.data.per_rank)
    assert s.rank == 1
    # without a GPU (gloo on the CPU) and where no all-reduce joins the ranks (infer, smooth)
    text = ranks.straggle_text(s, {}, "infer")
    assert text.startswith("rank 1 forward 18.50 ms") and text.endswith("; the run's figure is its slowest rank's")
    assert "- straggling rank (28% of the step" in render([d])


def test_ranks_alike_or_apart_within_their_spread_are_not_named():
    alike = run_record(0.026, "alike", EQUAL, [gpu(0), gpu(1)])
    assert ranks.stragglers(alike.measured.data.per_rank) == []
    # 13% apart in the median, but the spreads overlap: noise, not a straggler
    overlap = [EQUAL[0], line(1, forward=(9.5, 8.0, 11.0), backward=(16.1, 15.8, 16.5), optimizer=(1.5, 1.4, 1.6))]
    assert ranks.stragglers([RankPhases.read(x) for x in overlap]) == []
    # too few steps a rank to judge by
    few = [{**x, "steps": 3} for x in STRAGGLE]
    assert ranks.stragglers([RankPhases.read(x) for x in few]) == []
    d = by_tag(diagnose([clean(), alike], refs=[]))["alike"]
    assert "straggling rank" not in [c.name for c in d.causes]


def test_records_of_earlier_versions_say_what_they_lack_only_on_several_processes():
    medians = [{k: v for k, v in x.items() if not k.endswith(("_p10_ms", "_p90_ms"))} for x in STRAGGLE]
    old = run_record(0.036, "old", medians)
    [d] = diagnose([old], refs=[])
    assert "straggling rank" not in [c.name for c in d.causes]
    assert any("each rank's GPU was not watched in this record (stored by an earlier dlbench)" in h for h in d.hints)
    assert any("each rank's per-step spread was not recorded (stored by an earlier dlbench)" in h for h in d.hints)
    one = make_result(spec={**TRAIN, "gpus": 1}, system=H100S,
                      metrics={"device": "cuda:0", "throughput": 3000.0, "throughput_unit": "img/s"},
                      samples={"step": [0.02] * 20})
    [d] = diagnose([one], refs=[])
    assert not any("each rank" in h for h in d.hints)


def test_doctor_json_on_the_command_line_has_the_new_causes(db):
    neighbour = run_record(0.036, "neighbour", STRAGGLE, [gpu(0), gpu(1, [NEIGHBOUR])])
    straggler = run_record(0.036, "straggler", STRAGGLE, [gpu(0), gpu(1)])
    with Store(db) as store:
        store.add_many([clean(), neighbour, straggler])
    proc = cli("doctor", "--db", db, "neighbour", "straggler", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    found = {e["tag"]: e["causes"][0] for e in json.loads(proc.stdout)["diagnoses"]}
    assert found["neighbour"]["name"] == "another process on the GPU"
    assert found["neighbour"]["evidence"].startswith("another process on GPU 1 (rank 1): PID 1234")
    assert found["straggler"]["name"] == "straggling rank"
    assert found["straggler"]["seconds_per_step"] == pytest.approx(0.0101)
    assert found["straggler"]["evidence"].startswith("rank 1 (GPU 1) forward 18.50 ms a step against 8.40 ms on rank 0")
    assert to_json(diagnose([straggler], refs=[]))["diagnoses"][0]["causes"][0]["name"] == "straggling rank"


# ---- real ranks --------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_gloo_ranks_store_each_ranks_record(db):
    proc = cli("--db", db, "run", "train", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32",
               "--device", "cpu", "--gpus", "2", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2",
               "--min-seconds", "0", env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    with Store(db) as store:
        (r,) = store.results(workload="train")
    ranks = r.measured.monitor.per_rank
    assert [g.rank for g in ranks] == [0, 1] and len({g.pid for g in ranks}) == 2
    assert all(g.gpu is None and g.reason == "no GPU monitor on device cpu" for g in ranks)
    phases = r.measured.data.per_rank
    assert [p.rank for p in phases] == [0, 1] and all(p.spread_recorded and p.steps == 2 for p in phases)
    assert set(phases[0].phases) == {"data", "h2d", "forward", "backward", "optimizer"}
    proc = cli("doctor", "--db", db, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    [entry] = json.loads(proc.stdout)["diagnoses"]
    # two steps a rank are too few to judge a straggler by, and nothing is said missing
    assert "straggling rank" not in [c["name"] for c in entry["causes"]]
    assert not any("each rank" in note for note in entry["notes"])
