"""Suite files (include, matrix, timeouts), plans for --resume, estimates, SLURM options and
record compatibility; all in-process, nothing is run."""

import json
import os
import subprocess
import sys

import pytest

from dlbench import plugins, suites
from dlbench.commands.suite import announce
from dlbench.errors import UserError
from dlbench.launch import isolated, placement, slurm
from dlbench.launch.suiterun import make_plan
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import CONV_EFFICIENCY, estimate_run, format_seconds, known
from dlbench.system.datasheet import lookup

from conftest import TINY, cli, make_result

HEAD = "defaults: {workload: fwdbwd, batch: 2, input_shape: 3x32x32, device: cpu}\n"


def write(path, text):
    path.write_text(text)
    return path


def test_include_builtin_and_relative_files_with_timeouts(tmp_path):
    (tmp_path / "parts").mkdir()
    write(tmp_path / "parts" / "small.yaml", HEAD + "timeout: 30\nmatrix: {model: [resnet18, resnet34]}\n")
    top = write(tmp_path / "top.yaml", "name: top\ntimeout: 99\ninclude: [quick, parts/small.yaml]\n" + HEAD +
                "specs: [{model: resnet18, timeout: 5}, {model: alexnet}]\n")
    loaded = suites.load(str(top))
    titles = [(s.model, s.batch, s.timeout) for s in loaded.specs]
    quick = [(s.model, 16, s.timeout) for s in suites.load("quick").specs]  # its own timeout wins
    assert quick and all(limit == 900.0 for _, _, limit in quick)
    # quick's specs first, then small's; the explicit resnet18 is the same benchmark as small's, so kept once
    assert titles == quick + [("resnet18", 2, 30.0), ("resnet34", 2, 30.0), ("alexnet", 2, 99.0)]
    assert loaded.name == "top"


def test_include_cycle_is_an_error(tmp_path):
    write(tmp_path / "a.yaml", "include: b.yaml\n" + HEAD + "specs: [{model: resnet18}]\n")
    write(tmp_path / "b.yaml", "include: [a.yaml]\n")
    with pytest.raises(UserError, match=r"include cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"):
        suites.load(str(tmp_path / "a.yaml"))


@pytest.mark.parametrize("text, needle", [
    ("include: [nosuch]\n", "no suite named 'nosuch'"),
    ("include: 3\n", "'include' must be a suite name or path"),
    ("timeout: -1\n" + HEAD + "specs: [{model: resnet18}]\n", "'timeout' must be > 0 s, got -1"),
    (HEAD + "matrix: {model: []}\n", "matrix axis 'model' is empty"),
])
def test_bad_suite_files(tmp_path, text, needle):
    with pytest.raises(UserError, match=needle):
        suites.load(str(write(tmp_path / "bad.yaml", text)))


def test_matrix_over_any_key_and_mapping_axes(tmp_path):
    path = write(tmp_path / "m.yaml", HEAD + "matrix:\n  model: [resnet18]\n  gpus: [1, 2]\n"
                 "  variant: [{precision: fp32, batch: 4}, {precision: bf16, channels_last: true}]\n")
    got = [(s.gpus, s.precision, s.batch, s.channels_last) for s in suites.load(str(path)).specs]
    assert got == [(1, "fp32", 4, False), (1, "bf16", 2, True), (2, "fp32", 4, False), (2, "bf16", 2, True)]


def _suite(n=3):
    return suites.Suite("s", "", [BenchmarkSpec(**{**TINY, "seed": i}) for i in range(n)])


def _stored(spec, run, status="ok", host="here", wall=None, started="2026-01-01T00:00:00+00:00"):
    traces = {"launch": {"wall_s": wall}} if wall else {}
    return Result(spec=spec.to_dict(), system={"host": host}, status=status, suite="s", run=run,
                  traces=traces, started=started, finished=started)


@pytest.mark.slow
def test_resume_plans_only_what_is_missing(db):
    suite = _suite()
    a, b, c = suite.specs
    with Store(db) as store:
        store.add_many([
            _stored(a, "old", started="2026-01-01T00:00:00+00:00"),
            _stored(a, "new", started="2026-01-02T00:00:00+00:00"),
            _stored(b, "new", status="interrupted", started="2026-01-02T00:01:00+00:00"),
            _stored(c, "new", host="elsewhere", started="2026-01-03T00:00:00+00:00"),
            _stored(b, "old", started="2026-01-01T00:01:00+00:00"),
        ])
        plan = make_plan(suite, store, "here", resume=True)
        assert plan.resumed and plan.run == "new"
        assert plan.done == [a] and plan.todo == [b, c]
        chosen = make_plan(suite, store, "here", resume=True, run="old")
        assert chosen.done == [a, b] and chosen.todo == [c]
        fresh = make_plan(suite, store, "here")
        assert not fresh.resumed and fresh.todo == [a, b, c] and fresh.run not in ("new", "old")
        nothing = make_plan(suite, store, "nowhere", resume=True)
        assert not nothing.resumed and nothing.todo == [a, b, c]


def test_estimates_from_earlier_runs_else_a_rough_figure():
    a, b = _suite(2).specs
    facts = known([_stored(a, "r", wall=10.0), _stored(a, "r", wall=30.0), _stored(a, "r", wall=20.0),
                   _stored(a, "r", status="error", wall=999.0), _stored(a, "r", host="other", wall=999.0)], "here", None)
    measured = estimate_run(a, facts, "cpu").run
    assert (measured.seconds, measured.measured, measured.source) == (20.0, 3, "from 3 earlier runs")
    guessed = estimate_run(b, facts, "cpu").run
    assert guessed.measured == 0 and guessed.source == "rough" and guessed.seconds > 0


def _flops_of(spec, host, flops):
    return Result(spec=spec.to_dict(), system={"host": host}, metrics={"flops_per_step": flops})


def _earlier_here(spec, wall, warmup_s, steps):
    """An ok isolated run here: its wall time, warm-up and measured steps."""
    result = _stored(spec, "r", wall=wall)
    result.metrics["warmup_s"], result.samples = warmup_s, {"step": steps}
    return result


def test_a_run_without_a_basis_is_given_a_rough_figure_labelled_so():
    # A fresh store: no earlier run here, no FLOP count, no start-up cost; a GPU's name alone says nothing of seconds.
    a, = _suite(1).specs
    for gpu, kind in ((None, "cpu"), ("NVIDIA H200", "cuda")):
        told = estimate_run(a, known([], "here", gpu), kind)
        assert told.run.rough and told.run.measured == 0 and told.run.source == "rough" and told.run.seconds > 0
        assert told.basis == "rough" and told.text().endswith("(rough)")


def test_a_run_guesses_from_stored_flops_the_datasheet_and_start_up_here():
    a, b = _suite(2).specs
    gpu_spec = BenchmarkSpec(**{**TINY, "device": "cuda", "seed": 7})
    earlier = [_earlier_here(a, wall=9.0, warmup_s=0.5, steps=[0.25] * 2),  # 8 s here beyond warm-up and window
               _flops_of(gpu_spec, "elsewhere", 6.7e12)]  # FLOPs of a step do not depend on the machine
    facts = known(earlier, "here", "NVIDIA H200")
    step = 6.7e12 / (lookup("NVIDIA H200").peak_tflops("fp32") * 1e12 * CONV_EFFICIENCY["cuda"])
    stepping = 2 * step + max(gpu_spec.warmup * step, gpu_spec.warmup_seconds) + max(gpu_spec.steps * step,
                                                                                     gpu_spec.min_seconds)
    told = estimate_run(gpu_spec, facts, "cuda").run
    assert told.measured == 0 and told.source == "from FLOPs" and told.seconds == pytest.approx(8.0 + stepping)
    assert estimate_run(a, facts, "cpu").run.seconds == 9.0 and estimate_run(a, facts, "cpu").run.measured == 1
    assert estimate_run(b, facts, "cpu").run.rough  # a CPU run: no rate of this CPU is stored
    # a ceiling measured on this GPU here wins over the datasheet
    ceiling = Result(spec={"workload": "system"}, system={"host": "here"},
                     metrics={"device": "cuda:0", "matmul_fp32_tflops": 10.0})
    measured = estimate_run(gpu_spec, known([*earlier, ceiling], "here", "NVIDIA H200"), "cuda").run
    step = 6.7e12 / (10.0e12 * CONV_EFFICIENCY["cuda"])
    assert measured.seconds == pytest.approx(8.0 + 2 * step + max(gpu_spec.warmup * step, gpu_spec.warmup_seconds)
                                             + max(gpu_spec.steps * step, gpu_spec.min_seconds))


PLAN_QUICK = """
import subprocess, sys
def refused(*args, **kwargs):
    raise AssertionError("planning started a process")
subprocess.run = subprocess.Popen = refused
from dlbench import suites
from dlbench.commands.suite import announce
from dlbench.launch.suiterun import make_plan
plan = make_plan(suites.load("quick"), None, "here")
print(announce(plan))
print(sorted(name for name in ("torch", "torchvision") if name in sys.modules))
"""


def test_planning_a_run_measures_nothing_and_imports_no_torch():
    done = subprocess.run([sys.executable, "-c", PLAN_QUICK], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    line, loaded = done.stdout.strip().splitlines()[-2:]
    assert line.endswith(" (rough for all of them: never run here, no FLOP count and ceiling known)"), line
    assert loaded == "[]"


def test_the_first_line_says_which_estimates_are_rough():
    suite = _suite(2)
    a, b = suite.specs
    plan = make_plan(suite, None, "here")
    stored = estimate_run(a, known([_stored(a, "r", wall=70.0)], "here", None), "cpu").run
    rough = estimate_run(b, known([], "here", None), "cpu").run
    plan.estimates = [stored, rough]
    assert announce(plan).endswith(f": 2 to run, about {format_seconds(70.0 + rough.seconds)} (rough for 1 of them: "
                                   f"never run here, no FLOP count and ceiling known)")
    plan.estimates = plan.estimates[:1] * 2
    assert announce(plan).endswith(": 2 to run, about 2 min 20 s")


def test_the_eta_of_never_run_benchmarks_follows_the_finished_ones():
    import io

    from rich.console import Console

    from dlbench.launch.view import SuiteView
    from dlbench.suites.estimate import Estimate

    view = SuiteView(Console(file=io.StringIO()), "s", [Estimate(None, 0)] * 3)
    assert view._eta(0.0).endswith("0/3 done, ETA once one has finished")
    view.took, view.index = [12.0], 1  # the first took 12 s; the second has run for 2
    assert view._eta(2.0).endswith("1/3 done, ETA 22 s")
    known_ones = SuiteView(Console(file=io.StringIO()), "s", [Estimate(10.0, 1), Estimate(20.0, 1)])
    known_ones.took, known_ones.index = [15.0], 1  # 1.5x the estimate: the rest is scaled so
    assert known_ones._eta(0.0).endswith("1/2 done, ETA 30 s")


@pytest.mark.slow
def test_list_shows_estimates_from_the_store(tmp_path, db):
    path = write(tmp_path / "l.yaml", HEAD + "matrix: {model: [resnet18, resnet34]}\n")
    spec = suites.load(str(path)).specs[0]
    from dlbench.system.info import fingerprint
    with Store(db) as store:
        store.add(_stored(spec, "r", host=fingerprint()["host"], wall=125.0))
    proc = cli("suite", path, "--list", "--db", db)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "resnet18" in lines[1] and "2 min 05 s" in lines[1] and "from 1 earlier run" in lines[1]
    assert "resnet34" in lines[2] and "rough" in lines[2]  # a listing counts no FLOPs and measures nothing
    assert "2 benchmarks: about" in lines[3] and "1 from earlier runs on this machine, 1 guessed" in lines[3]
    no_store = tmp_path / "none.db"
    assert cli("suite", path, "--list", "--db", no_store).returncode == 0 and not no_store.exists()


def test_records_stay_compatible(db):
    old = make_result().to_dict()
    del old["run"]
    old["schema"] = 1
    assert Result.from_dict(json.loads(json.dumps(old))).run is None
    timed_out = make_result(status="timeout", run="r1")
    with Store(db) as store:
        store.add(timed_out)
        (back,) = store.results(status="timeout")
    assert back.run == "r1" and back.status == "timeout"


def test_slurm_options():
    assert slurm.parse_options("partition=gpu, gpus=4,time=1:30:00,account=proj") == {
        "partition": "gpu", "gpus": 4, "time": 90.0, "account": "proj"}
    assert slurm.parse_minutes("45") == 45 and slurm.parse_minutes("1-0") == 1440 and slurm.parse_minutes("2:30") == 2.5
    for text, needle in [("gpus=x", "gpus must be a positive integer"), ("time=soon", "bad time"),
                         ("partition", "is not key=value"), ("cluster=k8s", "cluster must be slurm or local")]:
        with pytest.raises(UserError, match=needle):
            slurm.parse_options(text)
    big = BenchmarkSpec(**{**TINY, "gpus": 2})
    with pytest.raises(UserError, match="needs 2 GPUs but jobs get gpus=1"):
        slurm.parameters({"gpus": 1}, big, 600)
    params = slurm.parameters({"partition": "gpu", "qos": "high"}, big, 600)
    assert params["timeout_min"] == 20 and params["slurm_partition"] == "gpu" and params["slurm_qos"] == "high"


def test_multi_gpu_specs_start_one_rank_per_gpu(tmp_path):
    one = placement.of(BenchmarkSpec(**TINY)).command(tmp_path / "s", tmp_path / "r")
    four = placement.of(BenchmarkSpec(**{**TINY, "gpus": 4})).command(tmp_path / "s", tmp_path / "r")
    assert one[1:3] == ["-m", "dlbench.launch.worker"]
    assert four[1:6] == ["-m", "dlbench.launch.ranks", "4", "-m", "dlbench.launch.worker"]
    assert "torch.distributed.run" not in four  # one host: dlbench starts the ranks itself
    modes = [placement.of(BenchmarkSpec(**{**TINY, "gpus": n})).mode(isolated) for n in (1, 4) for isolated in (False, True)]
    assert modes == ["in-process", "isolated", "torchrun", "torchrun"]


def test_plugins_register_models(monkeypatch):
    import sys
    from pathlib import Path

    from dlbench.models import registry

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    assert plugins.load("dlbench_testmodels, ") == ["dlbench_testmodels"]
    assert "hang-model" in registry.MODELS
    with pytest.raises(UserError, match="cannot load plug-in 'nope_not_here'"):
        plugins.load("nope_not_here")
    assert "dlbench_testmodels" in sys.modules
