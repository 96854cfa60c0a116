"""The doctor judges each run against the machine's own runs first and names measured causes:
real CPU runs with real busy processes beside them, stored records with the figures a GPU run
records (other processes' SM time, NCCL settings), the JSON form, named runs and old records."""

import json
import subprocess
import sys
import time

import pytest

from conftest import assert_user_error, cli, make_result
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.render import render, to_json
from dlbench.measure.host import HostSampler
from dlbench.measure.monitor import neighbours
from dlbench.results.store import Store

H200 = {"host": "gpu-node", "gpus": [{"name": "NVIDIA H200"}] * 2, "gpu_count": 2,
        "cpu": {"model": "Xeon", "cores": 32}, "torch": "2.11.0", "driver": "580.1"}
TRAIN = {"workload": "train", "model": "resnet50", "batch": 64, "precision": "bf16", "gpus": 1,
         "options": {"data": "synthetic"}}
SPIN = "import time\nwhile True: pass"


def run_record(step_s, tag, spec=None, noise=0.0003, started=None, **metrics):
    steps = [step_s + noise * ((i * 7) % 5 - 2) for i in range(60)]
    figures = {"device": "cuda:0", "throughput": 64 / step_s, "throughput_unit": "img/s", "gpu_util_mean": 80.0,
               "monitor_readings": 40, "sm_clock_mean_mhz": 1980.0, "gpu_neighbours_sm_share": 0.0,
               "gpu_neighbours": [], "data_share": 0.001, "cpu_cores": 32, "cpu_other_cores": 0.1,
               "load_average_1m": 1.0, **metrics}
    return make_result(spec={**TRAIN, **(spec or {})}, system=H200, metrics=figures, samples={"step": steps},
                       tag=tag, started=started)


def by_tag(diagnoses):
    return {d.result.tag: d for d in diagnoses}


# ---- stored records --------------------------------------------------------------------------

def test_a_gpu_neighbour_is_the_first_cause_and_a_power_cap_with_full_clocks_only_a_note():
    clean = [run_record(step, "clean", throttle_reasons=["sw_power_cap"], throttled_share=0.9)
             for step in (0.0209, 0.021, 0.0211)]
    neighbour = run_record(0.036, "neighbour", gpu_util_mean=100.0, sm_clock_mean_mhz=1975.0,
                           gpu_neighbours_sm_share=0.68, throttle_reasons=["sw_power_cap"], throttled_share=1.0,
                           gpu_neighbours=[{"pid": 952, "sm_share": 0.68, "memory_gb": 0.9,
                                            "command": "python3 neighbour.py gpu 0"}])
    found = by_tag(diagnose([*clean, neighbour], refs=[]))
    d = found["neighbour"]
    # three clean runs measure the between-run spread; the median one is the comparison
    assert d.history.slower and d.history.ratio == pytest.approx(0.021 / 0.036, rel=0.02)
    assert d.history.other.id == clean[1].id and d.history.spread.n == 3
    assert "slower than this machine's run-to-run spread (3 runs, 3,033–3,062 img/s" in render([d])
    assert d.causes[0].name == "another process on the GPU" and d.causes[0].explains == 1.0
    assert "PID 952 `python3 neighbour.py gpu 0` used 68% of the SM time and held 0.9 GB" in d.causes[0].evidence
    assert "throttled" not in [c.name for c in d.causes]
    assert any("sw_power_cap flagged" in h and "costs no measurable time" in h for h in d.hints)
    # an older clean run lies within the others' spread (the neighbour's run among them): not judged
    assert "clean" not in found
    [again] = diagnose([*clean, neighbour], refs=[], chosen=[clean[0]])
    assert again.causes == [] and "within this machine's run-to-run spread" in render([again])


def test_a_degraded_nccl_path_and_poor_scaling_against_one_gpu():
    one = run_record(0.021, "one")
    settings = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    comm = {"gradient_bytes": 102_000_000, "nvlinks_active": [18, 18], "peer_access": True}
    clean, _ = (run_record(step, "two", spec={"gpus": 2}, gpu_util_mean=65.0,
                           communication={**comm, "nccl_settings": {}}) for step in (0.030, 0.0301))
    sockets = run_record(0.043, "sockets", spec={"gpus": 2}, gpu_util_mean=95.0,
                         communication={**comm, "nccl_settings": settings})
    system = make_result(spec={"workload": "system", "model": "", "device": "cuda:0"}, system=H200,
                         metrics={"device": "cuda:0", "allreduce_busbw_gbs": 294.0, "ceilings": {}})
    found = by_tag(diagnose([one, clean, _, sockets, system], refs=[]))
    d = found["sockets"]
    assert d.history.other.tag == "two" and d.history.slower
    assert d.causes[0].name == "degraded all-reduce path"
    assert ("all-reduce over sockets: NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 are set; NVLink is up (18 links "
            "per GPU), the GPUs reach each other directly") in d.causes[0].evidence
    # a clean two-GPU run (within the others' spread, so judged when asked): efficiency 0.70 against
    # one GPU, the host gaps that grew named
    [d] = diagnose([one, clean, _, sockets, system], refs=[], chosen=[clean])
    assert d.one_gpu.kind == "one GPU" and d.one_gpu.ratio == pytest.approx(0.70, abs=0.01)
    assert "verdict: scales poorly" in render([d])
    assert d.causes[0].name == "host overhead of several processes"
    assert any("should take 0.35 ms at the all-reduce bandwidth" in h for h in d.hints)


def test_a_loss_no_figure_explains_is_unexplained_with_what_differed():
    before = run_record(0.020, "before")
    after = run_record(0.026, "after", power_mean_w=300.0)
    after.system = {**H200, "torch": "2.12.0"}
    before.metrics["power_mean_w"] = 450.0
    d = by_tag(diagnose([before, after], refs=[]))["after"]
    [gap] = d.causes
    assert gap.name == "unexplained" and gap.explains == pytest.approx(1.0)
    assert gap.evidence.startswith("0.77x of run ")
    assert "power 300 W against 450 W" in gap.evidence and "torch 2.12.0 against 2.11.0" in gap.evidence


def test_records_of_earlier_versions_say_what_they_lack():
    old = make_result(spec=TRAIN, system=H200, metrics={"device": "cuda:0", "throughput": 3000.0,
                                                       "throughput_unit": "img/s", "other_processes": 1,
                                                       "other_processes_memory_gb": 0.9, "gpu_util_mean": 90.0},
                      samples={})
    [d] = diagnose([old], refs=[])
    [cause] = d.causes
    assert cause.name == "other processes on the GPU" and cause.share is None
    assert "their share of the GPU's time was not recorded (stored by an earlier dlbench)" in cause.evidence
    assert any("no per-step samples" in h for h in d.hints)


def test_json_named_runs_and_bad_selectors_on_the_command_line(db):
    clean, second = run_record(0.021, "clean"), run_record(0.0211, "second")
    slow = run_record(0.036, "slow", gpu_neighbours_sm_share=0.68,
                      gpu_neighbours=[{"pid": 7, "sm_share": 0.68, "command": "x"}])
    with Store(db) as store:
        store.add_many([clean, second, slow])
    proc = cli("doctor", "--db", db, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "dlbench-doctor"
    [entry] = [e for e in data["diagnoses"] if e["tag"] == "slow"]
    assert entry["result"] == slow.id and entry["verdict"] == "slower than this machine's own runs"
    assert entry["comparison"]["kind"] == "history" and entry["comparison"]["run"] == second.id
    assert entry["comparison"]["beyond_noise"] and entry["comparison"]["between_runs"]["runs"] == 2
    assert entry["comparison"]["between_runs"]["place"] == -1
    assert entry["causes"][0]["name"] == "another process on the GPU"
    assert entry["causes"][0]["share_of_step"] == pytest.approx(0.68, abs=0.01)
    proc = cli("doctor", "--db", db, "clean")  # a tag: that run alone
    assert proc.returncode == 0 and "tag clean" in proc.stdout and "tag slow" not in proc.stdout
    proc = cli("doctor", "--db", db, slow.id[:8], "--format", "json")
    assert [e["result"] for e in json.loads(proc.stdout)["diagnoses"]] == [slow.id]
    assert_user_error(cli("doctor", "--db", db, "nosuchtag"), "no results match 'nosuchtag'")
    assert_user_error(cli("doctor", "--db", db, "--format", "xml"), "--format must be one of text, json")


def test_to_json_is_plain_data():
    d = diagnose([run_record(0.02, "a"), run_record(0.03, "b")], refs=[])
    assert json.loads(json.dumps(to_json(d), allow_nan=False))["diagnoses"][0]["figure"]["unit"] == "img/s"


# ---- the monitor's figures ----------------------------------------------------------------------

def test_neighbours_share_of_sm_time_over_the_sampling_instants():
    samples = {(1, 10): 30.0, (1, 20): 30.0, (99, 10): 60.0, (99, 20): 60.0, (5, 20): 40.0}
    others = [{"pid": 99, "memory_gb": 2.0}, {"pid": 5, "memory_gb": 0.5, "launcher": "dlbench suite quick"}]
    figures = neighbours(samples, others, own_pid=1)
    assert figures["gpu_own_sm_share"] == pytest.approx(0.30) and figures["gpu_sm_instants"] == 2
    assert figures["gpu_neighbours_sm_share"] == pytest.approx(0.60)  # the launcher is named, not counted
    assert [(n["pid"], n["sm_share"], n.get("launcher")) for n in figures["gpu_neighbours"]] == \
        [(99, 0.6, None), (5, 0.2, True)]


def test_the_host_sampler_tells_the_runs_own_processes_from_others(monkeypatch):
    monkeypatch.setattr("dlbench.measure.host.TOP_OTHERS", 1000)  # on a busy machine it may not be the top three
    other = subprocess.Popen([sys.executable, "-c", SPIN])  # not below the run's root: another's
    try:
        sampler = HostSampler(root=1 << 30).start()  # a root that owns nothing
        time.sleep(1.0)
        figures = sampler.stop()
    finally:
        other.kill()
    assert figures["cpu_other_cores"] >= 0.1 and figures["cpu_cores"] >= 1  # a busy machine gives it less than a core
    assert any(p["pid"] == other.pid and "while True" in p["command"] for p in figures["cpu_other_top"])
    child = subprocess.Popen([sys.executable, "-c", SPIN])  # below this process: the run's own
    try:
        sampler = HostSampler().start()
        time.sleep(1.0)
        figures = sampler.stop()
    finally:
        child.kill()
    assert figures["cpu_own_cores"] >= 0.1
    assert all(p["pid"] != child.pid for p in figures["cpu_other_top"])


# ---- real runs ------------------------------------------------------------------------------

RUN = ["run", "fwdbwd", "--model", "resnet18", "--batch", "4", "--input-shape", "3x64x64", "--device", "cpu",
       "--warmup", "2", "--warmup-seconds", "0", "--steps", "15", "--min-seconds", "2"]


@pytest.mark.slow
def test_real_runs_slowed_by_busy_processes_are_judged_against_the_clean_ones(db):
    for _ in range(4):  # from two runs Student's t (1 degree of freedom) leaves the noise near unbounded; 3 df for margin
        proc = cli(*RUN, "--db", db, "--tag", "clean", env={"OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
    # busy loops on every core beside the run: CPU contention, created for real
    busy = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(4)]
    try:
        time.sleep(0.5)
        proc = cli(*RUN, "--db", db, "--tag", "busy", env={"OMP_NUM_THREADS": "1"})
    finally:
        for p in busy:
            p.kill()
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = cli("doctor", "--db", db, "busy", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    [entry] = json.loads(proc.stdout)["diagnoses"]
    assert entry["verdict"] == "slower than this machine's own runs"
    assert entry["history"]["tag"] == "clean" and entry["history"]["high"] < 1
    first = entry["causes"][0]
    # the busy loops are among the processes named unless the machine is busier still
    assert first["name"] == "CPU contention" and "other processes used" in first["evidence"]
    assert first["share_of_lost"] > 0.5
    text = cli("doctor", "--db", db).stdout
    assert "tag busy" in text and "CPU contention" in text


def test_the_profile_tells_how_much_of_the_all_reduce_ran_under_compute():
    profiled = {"steps": 5, "step_s": 0.030, "device": "cuda", "adds_up": True,
                "classes": {"tensor_core": {"seconds": 0.024, "share": 0.8, "kernel_seconds": 0.024},
                            "communication": {"seconds": 0.003, "share": 0.1, "kernel_seconds": 0.012},
                            "idle": {"seconds": 0.003, "share": 0.1}}}
    two = run_record(0.030, "two", spec={"gpus": 2}, profile=profiled)
    [d] = diagnose([two], refs=[])
    assert any("NCCL kernels ran 12.00 ms a step, 75% of it under compute; 3.00 ms exposed (10% of the step)" in h
               for h in d.hints)


def test_odd_stored_values_never_stop_the_doctor(db):
    # the odd run is the newest, so the doctor judges it whichever second each record was made in
    fine = run_record(0.02, "fine", started="2026-01-01T10:00:00+00:00")
    odd = run_record(0.03, "odd", gpu_util_mean=float("nan"), data_share=float("inf"),
                     started="2026-01-01T11:00:00+00:00")
    odd.metrics["throughput"] = float("nan")
    with Store(db) as store:
        store.add_many([fine, odd])
    for extra in ([], ["--format", "json"]):
        proc = cli("doctor", "--db", db, *extra)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    entry = [e for e in json.loads(proc.stdout)["diagnoses"] if e["tag"] == "odd"][0]
    assert entry["figure"]["value"] is None


def test_beside_a_gpu_neighbour_the_profiles_idle_is_not_a_host_gap():
    profiled = {"steps": 5, "step_s": 0.036, "device": "cuda", "adds_up": True,
                "classes": {"tensor_core": {"seconds": 0.024, "share": 0.67, "kernel_seconds": 0.024},
                            "idle": {"seconds": 0.012, "share": 0.33}}}
    clean = run_record(0.021, "clean", gpu_util_mean=100.0)
    neighbour = run_record(0.036, "neighbour", gpu_util_mean=100.0, gpu_neighbours_sm_share=0.33, profile=profiled,
                           gpu_neighbours=[{"pid": 9, "sm_share": 0.33, "command": "python3 other.py"}])
    d = by_tag(diagnose([clean, neighbour], refs=[]))["neighbour"]
    assert [c.name for c in d.causes][0] == "another process on the GPU"
    assert "launch-bound" not in [c.name for c in d.causes]
    assert "measured beside another process on the GPU" in render([d])
    assert not any("--optimize graphs" in evidence for _, evidence in d.breakdown)


def test_a_run_on_images_is_set_beside_the_same_work_on_synthetic_data():
    """What reading real images costs: the data wait, and with --decode gpu the GPU's time for the decoding."""
    stored = {"data": "synthetic", "decode": "cpu", "cpu_share": 0.0, "prefetch": 2, "max_corrupt": 0.05,
              "dummy_images": 10000, "epochs": 0, "augment": "auto"}  # every option, as a run stores them
    synthetic = run_record(0.042, "synthetic", spec={"options": stored})
    folder = {**stored, "data": "folder:/img", "workers": 16}
    gpu = run_record(0.046, "gpu decode", spec={"options": {**folder, "decode": "gpu"}}, data_share=0.05)
    cpu = run_record(0.080, "cpu decode", spec={"options": folder}, data_share=0.48)
    other = run_record(0.030, "other work", spec={"options": {**stored, "augment": "cpu"}})  # not the same work
    found = by_tag(diagnose([synthetic, other, gpu, cpu], refs=[]))
    d = found["gpu decode"]
    assert d.synthetic.other.tag == "synthetic" and d.synthetic.ratio == pytest.approx(0.042 / 0.046, rel=0.02)
    text = render([d])
    assert "against synthetic data: 0.91x of run" in text
    # 4 ms longer: 5 % of 46 ms waiting, the other 1.7 ms the decoding on the model's GPU
    assert ("its step is 4.00 ms longer: 2.30 ms waiting for data, 1.70 ms (4% of its step) more work on the "
            "GPU: the decoding and crops") in text
    assert "its step is 38.00 ms longer: 38.00 ms waiting for data" in render([found["cpu decode"]])
    assert "more work" not in render([found["cpu decode"]])  # the wait explains all of it
    assert found["synthetic"].synthetic is None
    assert to_json([d])["diagnoses"][0]["synthetic"]["ratio"] == pytest.approx(0.042 / 0.046, rel=0.02)
    on_cpu = [run_record(0.042, "cpu synthetic", spec={"options": stored}, device="cpu"),
              run_record(0.046, "cpu dummy", spec={"options": {**stored, "data": "dummy"}}, device="cpu",
                         data_share=0.05)]
    text = render([by_tag(diagnose(on_cpu, refs=[]))["cpu dummy"]])
    assert "1.70 ms more in the step itself (the loader's workers share the cores)" in text and "GPU (" not in text


def test_the_input_options_the_doctor_sets_aside_are_the_data_options():
    from dlbench.data import DataOptions
    from dlbench.diagnose.history import INPUT_OPTIONS

    assert INPUT_OPTIONS == {f.name for f in DataOptions.fields()}


@pytest.mark.parametrize("decoder, says", [
    ("nvjpeg-cuda", "the JPEGs are decoded there, by nvjpeg, while this GPU's hardware JPEG decoders sit idle: `--decode hardware`"),
    ("nvimgcodec-hardware", "the crops and resizes run there (the decoding itself on the hardware"),
])
def test_the_doctor_says_where_the_gpu_decoding_ran(decoder, says):
    """On an H200 (hardware JPEG decoders beside the SMs), the decoder the run recorded decides
    what the extra GPU time is: nvjpeg on the SMs is told of the idle engines."""
    stored = {"data": "synthetic", "decode": "cpu", "workers": 16}
    synthetic = run_record(0.042, "synthetic", spec={"options": stored})
    gpu = run_record(0.048, "gpu decode", spec={"options": {**stored, "data": "folder:/img", "decode": "gpu"}},
                     data_share=0.0, decoder=decoder)
    text = render([by_tag(diagnose([synthetic, gpu], refs=[]))["gpu decode"]])
    assert "6.00 ms (12% of its step) more work on the GPU: " + says in text
