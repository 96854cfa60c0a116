"""The typed measurement (results/measurement.py): read from the stored metrics of every schema,
written back to the same mapping, a plug-in's own figures kept."""

import json
import math
from pathlib import Path

import pytest

from dlbench.figures import Odd
from dlbench.results.measurement import (ClassTime, Communication, GpuFacts, GpuNeighbour, Measurement, Phase, Stats,
                                        Throughput, Volume)
from dlbench.results.record import Result, Setup, tamed
from dlbench.results.store import Store

from conftest import make_result

ROOT = Path(__file__).resolve().parents[1]
STORES = [ROOT / "docs/data/report-2gpu.jsonl", ROOT / "src/dlbench/system/reference_runs.jsonl"]


def records():
    return [json.loads(line) for path in STORES for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("index", range(len(records())))
def test_every_stored_record_reads_into_known_records_and_back(index):
    record = records()[index]
    measured = Measurement.read(record["metrics"])
    assert measured.extra == {}, f"keys no record knows: {sorted(measured.extra)}"
    # the process count's older names are written back under its one name
    stored = {("processes" if key in ("world_size", "gpus") else key): value for key, value in record["metrics"].items()}
    assert measured.to_metrics() == stored


def test_the_fields_hold_the_stored_figures():
    volume = next(r for r in records() if r["spec"]["workload"] == "volume")
    measured = Measurement.read(volume["metrics"])
    assert measured.throughput == Throughput(volume["metrics"]["throughput"], "Mvox/s", None)
    assert measured.volume.mvox_per_s == volume["metrics"]["mvox_per_s"]
    assert measured.volume.block == volume["metrics"]["block"]
    assert measured.monitor.energy_j_per_mvox == volume["metrics"]["energy_j_per_mvox"]
    assert measured.energy_per_item() == ("mvox", volume["metrics"]["energy_j_per_mvox"])
    assert measured.window.wall_to_result_s == volume["metrics"]["wall_to_result_s"]
    train = next(r for r in records() if r["spec"]["workload"] == "train")
    measured = Measurement.read(train["metrics"])
    assert measured.phases["backward"] == Phase("backward", train["metrics"]["backward_ms"],
                                                 train["metrics"]["backward_share"])
    assert measured.stats["backward"].median == train["metrics"]["stats"]["backward"]["median"]
    assert measured.training.iters_per_min == train["metrics"]["iters_per_min"]
    system = next(r for r in records() if r["spec"]["workload"] == "system")
    ceiling = Measurement.read(system["metrics"]).system.ceiling("h2d_pinned_gbs")
    assert ceiling.value == system["metrics"]["ceilings"]["h2d_pinned_gbs"]["value"]
    assert ceiling.details == system["metrics"]["ceilings"]["h2d_pinned_gbs"]["details"]


def test_a_plugin_workloads_own_figures_ride_along():
    metrics = {"throughput": 5.0, "throughput_unit": "frames/s", "frames_dropped": 3, "stats": {"step": {"median": 0.2}}}
    measured = Measurement.read(metrics)
    assert measured.extra == {"frames_dropped": 3}
    assert measured.step == Stats(median=0.2)
    assert measured.to_metrics() == metrics


def test_written_through_fields_reads_back_equal():
    measured = Measurement(throughput=Throughput(410.0, "Mvox/s", "voxels over the measured time"),
                           volume=Volume(mvox_per_s=410.0, block=[200, 1536, 768]),
                           phases={"forward": Phase("forward", 20.5, 0.9)}, stats={"forward": Stats(median=0.0205)})
    metrics = measured.to_metrics()
    assert metrics["throughput_unit"] == "Mvox/s" and metrics["forward_ms"] == 20.5
    assert Measurement.read(json.loads(json.dumps(metrics))) == measured


@pytest.mark.parametrize("schema", [1, 2, 3])
def test_records_of_every_schema_read_through_the_store(tmp_path, schema):
    result = make_result(metrics={"throughput": 12.5, "throughput_unit": "img/s", "forward_ms": 3.0,
                                  "latency_p99_ms": 9.0})
    data = {**result.to_dict(), "schema": schema}
    if schema < 3:
        data.pop("title")
    read = Result.from_dict(data)
    with Store(tmp_path / "r.db") as store:
        store.add(read)
        stored = store.results()[0]
    assert stored.measured.throughput.value == 12.5
    assert stored.measured.phase_ms("forward") == 3.0
    assert stored.measured.latency.p99_ms == 9.0


def test_an_odd_stored_figure_reads_as_a_marked_gap():
    result = make_result(metrics={"throughput": 12.5, "latency_p99_ms": -4.0})
    measured = tamed(result).measured
    assert isinstance(measured.latency.p99_ms, Odd) and math.isnan(measured.latency.p99_ms)
    assert measured.throughput.value == 12.5


def test_a_stored_spec_reads_as_typed_settings_with_defaults_for_what_it_lacks():
    full = make_result(spec={"precision": "bf16", "gpus": 2, "channels_last": True, "optimize": "compile",
                             "options": {"data": "dummy"}})
    assert full.setup == Setup(batch=16, input_shape=[3, 224, 224], precision="bf16", channels_last=True, gpus=2,
                               optimize="compile", options={"data": "dummy"})
    assert full.optimize == "compile"
    # an old record's spec lacks the newer settings; a hand-edited one holds odd values
    old = make_result(spec={"precision": None, "gpus": "two", "options": None}, metrics={"optimize": "graphs"})
    assert (old.setup.precision, old.setup.gpus, old.setup.options, old.setup.channels_last) == ("fp32", 1, {}, False)
    assert old.setup.optimize is None and old.optimize == "graphs"  # the run record says what ran
    assert make_result().optimize == "eager"
    assert tamed(make_result(spec={"batch": -3})).setup.batch is None


def test_a_stored_profile_reads_as_typed_classes_and_a_failed_one_as_its_error():
    stored = {"steps": 5, "step_s": 0.02, "adds_up": True, "coverage": 1.01, "device": "cuda",
              "classes": {"idle": {"seconds": 0.004, "share": 0.2, "kernel_seconds": 0.0},
                          "tensor_core": {"seconds": 0.016, "share": 0.8, "kernel_seconds": 0.016, "flop_s": 3e14}},
              "top_kernels": [{"name": "k", "seconds": 0.01}], "unknown_key": 1}
    profile = Measurement.read({"profile": stored}).profiled
    assert profile.classes["tensor_core"] == ClassTime(seconds=0.016, share=0.8, kernel_seconds=0.016, flop_s=3e14)
    assert (profile.share("idle"), profile.share("communication"), profile.steps, profile.adds_up) == (0.2, None, 5, True)
    failed = Measurement.read({"profile": {"steps": 5, "error": "RuntimeError: CUPTI"}}).profiled
    assert failed.classes is None and failed.error == "RuntimeError: CUPTI"
    assert Measurement.read({}).profiled is None


def test_the_gpus_other_processes_read_typed_without_the_runs_launcher():
    stored = {"gpu_neighbours": [{"pid": 9, "sm_share": 0.6, "memory_gb": 2.0, "command": "python3 x.py"},
                                 {"pid": 5, "sm_share": 0.0, "launcher": True, "command": "dlbench suite quick"},
                                 {"sm_share": 0.1}]}  # no pid: not a process dlbench can name
    assert Measurement.read(stored).neighbours.strangers == [GpuNeighbour(9, 0.6, 2.0, "python3 x.py")]
    assert Measurement.read({}).neighbours.strangers == []


def test_the_surveys_gpu_facts_read_typed_and_stay_stored_as_they_were():
    stored = [{"index": 0, "name": "NVIDIA H200", "pcie_gen": 5, "pcie_width_max": 16, "ecc": True,
               "sm_clock_max_mhz": 1980, "power_limit_w": 700.0, "temperature_c": 45, "new_fact": "kept",
               "other_processes": [{"pid": 7, "launcher": "dlbench suite"}, {"pid": 8}, "odd"]},
              {"index": 1, "pcie_gen": "5", "ecc": 1, "power_limit_w": "700", "other_processes": "odd"}, "odd"]
    system = Measurement.read({"gpu_facts": stored}).system
    first, second = system.facts
    assert (first.name, first.pcie_gen, first.pcie_width_max, first.ecc, first.sm_clock_max_mhz) == \
        ("NVIDIA H200", 5, 16, True, 1980)
    assert (first.other_processes, first.launcher_processes) == (1, 1)
    assert second == GpuFacts(index=1)  # a value of the wrong type reads as unknown
    assert system.facts_of(1) == second and system.facts_of(3) == GpuFacts()
    assert system.to_metrics()["gpu_facts"] == stored


def test_all_reduce_facts_are_stored_as_before_a_fact_not_known_left_out():
    cpu = {"gradient_bytes": 400, "nccl_settings": {}, "backend": "gloo"}  # what a CPU run has always stored
    assert Communication.read(cpu).stored() == cpu
    assert Communication.read(None).nvlinks_active is None and Communication.read(None).nccl_settings == {}


def test_the_process_count_has_one_name_and_older_records_read_into_it():
    # volume prediction stored it as `world_size`, converge as `gpus`, the image workloads as `processes`
    for key in ("world_size", "gpus", "processes"):
        m = Measurement.read({key: 2, "throughput": 1.0})
        assert m.run.processes == 2 and key not in m.extra
        assert m.to_metrics()["processes"] == 2 and Measurement.read(m.to_metrics()) == m
    assert Measurement.read({"throughput": 1.0}).run.processes is None


def test_the_machine_reads_typed_and_never_fails_on_odd_values():
    r = make_result(system={"host": "node7", "cpu": {"model": "EPYC", "cores": 64}, "cudnn": 91900, "cuda": "13.0",
                            "gpus": [{"name": "NVIDIA H200", "memory_bytes": 150109880320}, "odd", {"name": 5}],
                            "cluster": "alps", "gpu_uuids": ["GPU-1", 2]})
    m = r.machine
    assert (m.host, m.cpu.cores, m.cudnn, m.cuda, m.cluster) == ("node7", 64, "91900", "13.0", "alps")
    assert m.gpu_names == ["NVIDIA H200", ""] and m.gpus[0].memory_bytes == 150109880320
    assert m.gpu_uuids == ("GPU-1",) and r.machine is m  # read once
    r.system = {"cpu": "odd", "gpus": "odd"}
    assert r.machine.host == "" and r.machine.cpu.cores is None and r.machine.gpus == ()
