import importlib
import pkgutil
from pathlib import Path

import pytest

from conftest import assert_user_error, cli, make_result
from dlbench import diagnose as diagnosis
from dlbench.diagnose import causes
from dlbench.diagnose.check import Kind
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.references import Reference, load_references, references_from_runs
from dlbench.diagnose.render import render
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.system.datasheet import lookup

V100 = {"host": "jade2-node", "gpus": [{"name": "Tesla V100-SXM2-16GB"}] * 4, "gpu_count": 4,
        "cpu": {"model": "Xeon", "cores": 8}}
A40 = {"host": "hot-node", "gpus": [{"name": "NVIDIA A40"}], "gpu_count": 1, "cpu": {"model": "EPYC", "cores": 32}}


def system_record(system, **metrics):
    base = {"device": "cuda:0", "ceilings": {}, "unmeasured": {}, "datasheet": {}, "gpu_facts": []}
    base.update(metrics)
    return Result(spec={"workload": "system", "model": "", "device": "cuda:0"}, system=system, metrics=base)


def input_bound_result():
    step, data = [0.60, 0.62, 0.61], [0.40, 0.41, 0.42]
    return make_result(
        spec={"workload": "train", "model": "resnet50", "batch": 64, "precision": "fp32",
              "options": {"data": "/scratch/imagenet", "workers": 2}},
        system=V100,
        metrics={"device": "cuda:0", "throughput": 105.0, "throughput_unit": "img/s", "gpu_util_mean": 30.0,
                 "throttled": False, "throttle_reasons": []},
        samples={"step": step, "data": data, "forward": [0.07] * 3, "backward": [0.13] * 3})


def throttled_result():
    return make_result(
        spec={"batch": 16, "model": "resnet50", "precision": "fp32"}, system=A40,
        metrics={"device": "cuda:0", "throughput": 300.0, "throughput_unit": "img/s", "gpu_util_mean": 99.0,
                 "throttled": True, "throttled_share": 0.8, "throttle_reasons": ["hw_thermal_slowdown"],
                 "sm_clock_mean_mhz": 810.0, "temperature_max_c": 92.0, "power_mean_w": 180.0},
        samples={"step": [0.0533] * 5, "forward": [0.018] * 5, "backward": [0.035] * 5})


def test_input_bound_machine_is_named_with_its_evidence():
    record = system_record(V100, disk_read_gbs=0.2, jpeg_decode_cpu_img_s_per_core=350.0,
                           ceilings={"disk_read_gbs": {"details": {"path": "/scratch/imagenet"}}})
    [d] = diagnose([input_bound_result(), record])
    # one reason for the wait, the one the figures point to: the disk
    assert [c.name for c in d.causes] == ["slow storage"]
    evidence = d.causes[0].evidence
    assert "waiting for data 67% of the measured time" in evidence and "0.20 GB/s on /scratch/imagenet" in evidence
    assert d.causes[0].share == pytest.approx(1.23 / 1.83)
    # with a fast disk: too few workers for the rate the GPU would take without waiting
    record = system_record(V100, disk_read_gbs=3.0, jpeg_decode_cpu_img_s_per_core=350.0)
    [d] = diagnose([input_bound_result(), record])
    assert [c.name for c in d.causes] == ["too few loader workers"]
    assert "2 loader workers per GPU delivered 105 img/s" in d.causes[0].evidence
    assert "JPEG decode alone measured 350 img/s per core" in d.causes[0].evidence
    assert "`--workers 7` (8 cores for 1 GPU(s))" in d.causes[0].evidence
    # workers far below what one reached alone here: they wait for something, more of them won't help
    record = system_record(V100, disk_read_gbs=3.0, jpeg_loader_cpu_img_s_per_core=300.0)
    [d] = diagnose([input_bound_result(), record])
    assert [c.name for c in d.causes] == ["slow loader workers"]
    assert "one worker alone reached 300 img/s here (`dlbench system`), 5.71x what each delivered" in d.causes[0].evidence


def test_throttled_machine_is_named_and_scaled_from_the_nearest_reference():
    facts = {"index": 0, "sm_clock_max_mhz": 1740, "power_limit_w": 300.0}
    [d] = diagnose([throttled_result(), system_record(A40, gpu_facts=[facts])])
    assert [c.name for c in d.causes] == ["throttled"]
    assert "hw_thermal_slowdown" in d.causes[0].evidence and "810 MHz against 1740 MHz max" in d.causes[0].evidence
    # nearest reference by fp32 peak: a Pascal card of seed 004, scaled by the datasheet ratio
    ref = d.reference
    assert ref.workload == "fwdbwd" and ref.model == "resnet50" and ref.batch == 16
    scale = lookup("NVIDIA A40").fp32_tflops / lookup(ref.gpu).fp32_tflops
    assert d.expected == pytest.approx(ref.value * scale)
    assert d.ratio < 0.8
    assert "slower than it should be" in render([d])


def test_reference_runs_compare_measured_ceilings_like_with_like():
    h200 = {"host": "ref", "gpus": [{"name": "NVIDIA H200"}], "gpu_count": 1}
    run = make_result(system=h200, metrics={"device": "cuda:0", "throughput": 3000.0, "throughput_unit": "img/s"},
                      samples={"step": [0.005]})
    refs = references_from_runs([run, system_record(h200, matmul_fp32_tflops=50.0)], "test")
    assert refs[0].ceilings is not None and refs[0].gpu == "NVIDIA H200"
    mine = make_result(system=A40, metrics={"device": "cuda:0", "throughput": 600.0, "throughput_unit": "img/s"},
                       samples={"step": [0.027]})
    [d] = diagnose([mine, system_record(A40, matmul_fp32_tflops=25.0)], refs)
    assert d.expected == pytest.approx(1500.0) and "measured fp32 matmul" in d.scaling
    assert d.ratio == pytest.approx(0.4)


def test_unit_conversion_of_a_reference():
    ref = Reference(source="s", gpu="Tesla V100-SXM2-16GB", workload="train", model="resnet50", precision="fp32",
                    metric="throughput", value=30.0, unit="iters/min", batch=1)
    r = make_result(spec={"workload": "train", "model": "resnet50", "batch": 1}, system=V100,
                    metrics={"device": "cuda:0", "throughput": 0.5, "throughput_unit": "iter/s"}, samples={"step": [2.0]})
    [d] = diagnose([r], [ref])
    assert d.expected == pytest.approx(0.5) and d.ratio == pytest.approx(1.0)
    assert "as expected" in render([d])


def test_no_reference_and_cpu_results_are_said_plainly():
    r = make_result(spec={"device": "cpu", "model": "mobilenet_v2", "input_shape": [3, 32, 32]},
                    system={"host": "laptop", "gpus": []},
                    metrics={"device": "cpu", "throughput": 5.0, "throughput_unit": "img/s"}, samples={"step": [3.2]})
    [d] = diagnose([r])
    assert d.expected is None and "no published or reference figure" in render([d])
    assert "verdict: not judged" in render([d])  # nothing to compare it with: no verdict
    again = make_result(spec=r.spec, system=r.system, metrics=r.metrics, samples={"step": [3.2, 3.21]})
    judged = {x.result.id: x for x in diagnose([r, again])}
    # one earlier run: how far a fresh process moves is not known, so nothing is judged
    assert "verdict: not judged" in render([judged[again.id]])
    assert "between-run noise unknown" in render([judged[again.id]])
    third = make_result(spec=r.spec, system=r.system, metrics=r.metrics, samples={"step": [3.21, 3.22]})
    judged = {x.result.id: x for x in diagnose([r, again, third])}
    assert "verdict: within this machine's run-to-run spread" in render([judged[third.id]])


def test_shipped_references_cover_the_seeds():
    refs = load_references()
    sources = " ".join(r.source for r in refs)
    assert all(s in sources for s in ("GPU in the Cloud (cnn-benchmarks", "GPU Benchmarks (", "GPU Benchmark Summary (",
                                      "BenchmarkJade (", "NVIDIA UNet_Medical ("))
    assert "seed" not in sources
    gtx = [r for r in refs if r.gpu == "GeForce GTX 1080" and r.model == "resnet50"]
    assert gtx and gtx[0].unit == "img/s" and gtx[0].batch == 16
    assert all(lookup(r.gpu) is not None for r in refs)  # every reference GPU has datasheet figures


def test_doctor_cli(db):
    assert_user_error(cli("doctor", "--db", db), f"no store at {db}")  # a typo never creates a store
    Store(db).close()
    proc = cli("doctor", "--db", db)
    assert proc.returncode == 0 and "No benchmark results" in proc.stdout and "dlbench system" in proc.stdout
    with Store(db) as store:
        store.add_many([input_bound_result(), throttled_result(), system_record(A40)])
    proc = cli("doctor", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "too few loader workers" in proc.stdout and "throttled" in proc.stdout and "jade2-node" in proc.stdout
    proc = cli("doctor", "--db", db, "--workload", "fwdbwd")
    assert "too few loader workers" not in proc.stdout and "throttled" in proc.stdout


def test_doctor_on_a_file_that_is_not_a_store(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    assert_user_error(cli("doctor", "--db", bad), "not a SQLite database")
    assert bad.read_text() == "hello"


def test_degraded_link_from_the_system_record():
    facts = {"index": 0, "pcie_width": 16, "pcie_width_max": 16, "pcie_gen_max": 5, "pcie_gen_gpu_max": 5}
    busy = {"h2d_pinned_gbs": {"details": {"pcie_gen": 3, "pcie_width": 8}}}
    record = system_record(A40, gpu_facts=[facts], ceilings=busy, h2d_pinned_gbs=6.0)
    run = make_result(system=A40, metrics={"device": "cuda:0", "throughput": 900.0, "throughput_unit": "img/s"},
                      samples={"step": [0.018]})
    [d] = diagnose([run, record])
    [cause] = [c for c in d.machine if c.name == "degraded link"]  # a finding: no share of the step measured
    assert "gen 3 while copying" in cause.evidence and "x8 of x16" in cause.evidence
    assert "6.0 GB/s, under half of gen 5 x16" in cause.evidence


def test_doctor_markdown_strips_control_characters_and_renders_no_link(db):
    hostile = {**V100, "host": "[x](javascript:alert(1))\rfake", "gpus": [{"name": "<b>GPU</b>\x1b[2J"}] * 4}
    r = input_bound_result()
    r = Result(spec={**r.spec, "options": {"data": "/d\r\n## [y](javascript:alert(2))", "workers": 2}},
               system=hostile, metrics=r.metrics, samples=r.samples)
    text = render(diagnose([r]))
    assert "](javascript" not in text and "\r" not in text and "\x1b" not in text and "<b>" not in text
    assert "## train resnet50 b64 fp32 on &lt;b>GPU&lt;/b> [2J ([x]\\(javascript:alert(1)) fake): run " in text
    assert not any(line.startswith("## [y]") for line in text.splitlines())  # no heading smuggled in
    with Store(db) as store:
        store.add(r)
    proc = cli("doctor", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "](javascript" not in proc.stdout and "\r" not in proc.stdout and "[x]\\(javascript" in proc.stdout


def test_the_runs_launcher_on_the_gpu_is_named_not_blamed_as_another_process():
    figures = {"device": "cuda:0", "throughput": 900.0, "throughput_unit": "img/s", "launcher_processes": 1,
               "launcher_memory_gb": 0.7, "other_processes": 0, "other_processes_memory_gb": 0.0}
    [d] = diagnose([make_result(system=A40, metrics=figures, samples={"step": [0.018]})])
    assert d.causes == [] and [c.name for c in d.machine] == ["the run's launcher on the GPU"]
    assert "(a dlbench suite or torchrun) held 0.7 GB" in d.machine[0].evidence  # stored before commands were
    [d] = diagnose([make_result(system=A40, metrics={**figures, "launcher_commands": ["python3 bench.py"]},
                                samples={"step": [0.018]})])
    assert "the process that started this run (python3 bench.py) held 0.7 GB" in d.machine[0].evidence
    [d] = diagnose([make_result(system=A40, metrics={**figures, "other_processes": 2, "other_processes_memory_gb": 3.0},
                                samples={"step": [0.018]})])
    assert [c.name for c in d.causes + d.machine] == ["other processes on the GPU", "the run's launcher on the GPU"]
    assert "2 other compute process(es) held 3.0 GB" in d.causes[0].evidence


def test_launch_bound_only_where_the_monitor_saw_enough_and_no_profile_measured_idle():
    figures = {"device": "cuda:0", "throughput": 900.0, "throughput_unit": "img/s", "gpu_util_mean": 30.0,
               "monitor_readings": 50}
    [d] = diagnose([make_result(system=A40, metrics=figures, samples={"step": [0.018] * 5})])
    assert [c.name for c in d.causes] == ["launch-bound"]
    assert "(GPU busy 30% of the window by NVML) at batch 16" in d.causes[0].evidence
    assert d.causes[0].share == pytest.approx(0.7)
    # a window of two readings (a 0.2 s volume run read "0%"): NVML had not measured it
    [d] = diagnose([make_result(system=A40, metrics={**figures, "gpu_util_mean": 0.0, "monitor_readings": 2},
                                samples={"step": [0.19]})])
    assert "launch-bound" not in [c.name for c in d.causes]
    profiled = {**figures, "profile": {"steps": 3, "step_s": 0.018, "device": "cuda", "adds_up": True,
                                       "classes": {"tensor_core": {"seconds": 0.0179, "share": 0.995,
                                                                   "kernel_seconds": 0.0179},
                                                   "idle": {"seconds": 0.0001, "share": 0.005}}}}
    [d] = diagnose([make_result(system=A40, metrics=profiled, samples={"step": [0.018] * 5})])
    assert "launch-bound" not in [c.name for c in d.causes]  # the profile measured 0.5% idle
    [d] = diagnose([make_result(spec={"workload": "volume", "model": "unet3d", "batch": 1}, system=A40,
                                metrics={**figures, "throughput_unit": "Mvox/s"}, samples={"step": [0.2] * 5})])
    assert "at one tile a step" in d.causes[0].evidence and "larger blocks (`--block`)" in d.causes[0].evidence


# ---- the checks -----------------------------------------------------------------------------------

NAMED = {kind for check in causes.CHECKS for kind in check.names} | {causes.CHANGED, causes.UNEXPLAINED}


def test_every_cause_declared_is_named_by_a_registered_check():
    # a Kind no check of CHECKS names would never be found: declared, not registered
    declared = {value for info in pkgutil.iter_modules(diagnosis.__path__)
                for value in vars(importlib.import_module(f"dlbench.diagnose.{info.name}")).values()
                if isinstance(value, Kind)}
    assert declared == NAMED
    assert len({kind.name for kind in NAMED}) == len(NAMED)  # one declaration a name


def test_every_cause_a_check_can_name_has_its_row_in_the_doctors_page():
    page = (Path(__file__).resolve().parent.parent / "docs" / "doctor.md").read_text(encoding="utf-8")
    table = page[page.index("| cause | measured by | fix it names |"):].split("\n\n")[0].splitlines()[2:]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table]
    assert sorted(rows) == sorted(kind.name for kind in NAMED)
