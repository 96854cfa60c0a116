"""Between-run noise: `--repeat` runs a spec in fresh processes as one set, its statistics, and the
verdicts of the doctor and `compare` that rest on the spread of runs, not the steps of one."""

import json
import math
import re
import statistics

import pytest

from conftest import assert_user_error, cli, make_result
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.render import render, to_json
from dlbench.errors import UserError
from dlbench.launch import repeats
from dlbench.launch.suiterun import make_plan
from dlbench.report import compare as cmp
from dlbench.results.spread import AUTO_MIN_RUNS, Spread, median_runs, set_of
from dlbench.results.store import Store
from dlbench.suites import parse

HOST = {"host": "gpu-node", "gpus": [{"name": "NVIDIA H100"}], "cpu": {"model": "Xeon", "cores": 32}}
TRAIN = {"workload": "train", "model": "resnet50", "batch": 64, "precision": "bf16", "device": "cuda",
         "options": {"data": "synthetic"}}
# what 13 clean runs of one host-bound configuration measured on one machine: 1.8x apart
HOST_BOUND = (1735, 2250, 3195, 2900, 1980, 2610, 3008)


def run(img_s, tag="clean", repeat_set=None, index=None, **metrics):
    step = 64 / img_s
    figures = {"device": "cuda:0", "throughput": img_s, "throughput_unit": "img/s", **metrics}
    if repeat_set:
        figures.update(repeat_set=repeat_set, repeat_index=index, repeat_of=5)
    return make_result(spec=TRAIN, system=HOST, metrics=figures, tag=tag,
                       samples={"step": [step * (1 + 0.002 * ((i * 7) % 5 - 2)) for i in range(50)]})


# ---- the statistics of a set ----------------------------------------------------------------------

def test_a_set_of_runs_gives_its_median_spread_cv_and_interval():
    spread = Spread.of([run(v) for v in (100, 110, 90, 105, 95)])
    assert (spread.n, spread.median, spread.low, spread.high, spread.unit) == (5, 100, 90, 110, "img/s")
    assert spread.cv == pytest.approx(statistics.stdev([100, 110, 90, 105, 95]) / 100)
    assert spread.half_width == pytest.approx(2.776 * spread.cv / math.sqrt(5))
    low, high = spread.band()
    assert low < 90 and high > 110  # a further run: the prediction interval, wider than the range
    assert spread.place(100) == 0 and spread.place(40) == -1 and spread.place(200) == 1
    assert spread.text() == "median of 5 runs 100 img/s, spread 90–110 (CV 7.9%, mean ±9.8% at 95%)"
    assert not spread.settled()


def test_one_run_says_it_is_one_and_knows_no_band():
    spread = Spread.of([run(2250)])
    assert spread.band() is None and spread.place(1.0) == 0 and spread.cv is None
    assert spread.text() == "one run, 2,250 img/s: between-run noise unknown (--repeat N measures it)"


def test_auto_stops_once_the_mean_is_known_within_two_percent():
    assert Spread.of([run(v) for v in (3990, 3991, 4000)]).settled()
    assert not Spread.of([run(v) for v in (3990, 3991)]).settled()  # fewer than AUTO_MIN_RUNS
    assert not Spread.of([run(v) for v in HOST_BOUND]).settled()
    assert AUTO_MIN_RUNS == 3


def test_a_set_is_read_as_its_median_run():
    runs = [run(v, repeat_set="s1", index=i + 1) for i, v in enumerate((100, 130, 90))]
    other = run(50, tag="other")
    kept = median_runs([*runs, other])
    assert [r.id for r in kept] == [runs[0].id, other.id] and set_of(runs[0]) == "s1"


# ---- the doctor ---------------------------------------------------------------------------------

def test_clean_repeats_spread_far_are_never_slower_beyond_noise():
    clean = [run(v) for v in HOST_BOUND]
    diagnoses = diagnose(clean, refs=[], chosen=clean)
    assert [d.history.slower for d in diagnoses] == [False] * len(clean)
    text = render(diagnoses)
    assert "slower" not in text
    assert "within this machine's run-to-run spread (6 runs, " in text
    assert all("verdict: within this machine's run-to-run spread" in render([d]) for d in diagnoses)


def test_a_fault_beyond_the_spread_is_slower_and_measured_against_the_median_run():
    clean = [run(v) for v in (3990, 3991, 4000, 3995, 3988)]
    slow = run(2400, tag="fault")
    [d] = diagnose([*clean, slow], refs=[], chosen=[slow])
    assert d.history.slower and d.history.other.id == clean[1].id  # 3,991: the median run
    assert d.history.spread.n == 5 and d.history.ratio == pytest.approx(2400 / 3991, rel=1e-6)
    assert "slower than this machine's run-to-run spread (5 runs, 3,988–4,000 img/s" in render([d])
    entry = to_json([d])["diagnoses"][0]["history"]
    assert entry["between_runs"]["runs"] == 5 and entry["between_runs"]["place"] == -1


def test_one_earlier_run_leaves_the_between_run_noise_unknown():
    first, second = run(3000), run(1800)
    [d] = diagnose([first, second], refs=[], chosen=[second])
    assert not d.history.slower and not d.history.between_runs
    assert "between-run noise unknown" in render([d]) and "slower" not in render([d])


def test_the_newest_run_and_only_older_ones_beyond_the_spread_are_judged_by_default():
    clean = [run(v) for v in HOST_BOUND]
    judged = diagnose(clean, refs=[])
    assert [d.result.id for d in judged] == [clean[-1].id]


# ---- compare -----------------------------------------------------------------------------------

def test_compare_uses_the_runs_of_each_side_where_they_are_several():
    a = [run(v, tag="a") for v in (4000, 3990, 4010)]
    b = [run(v, tag="b") for v in (2000, 2010, 1990)]
    c = cmp.compare([*a, *b], ["a", "b"])
    (r,) = c.ratios.values()
    assert r.noise == "between runs" and r.runs == (3, 3)
    assert r.ratio == pytest.approx(2.0, rel=0.01) and r.low < r.ratio < r.high and r.high < 2.1
    assert cmp.conclusions(c)[0].endswith(f"(95% interval {r.low:.2f}–{r.high:.2f}, 3 and 3 runs)")
    assert "(median of 3 runs)" in cmp.render(c, "md", [])


def test_compare_of_two_noisy_sets_is_within_noise_where_steps_alone_would_not_be():
    a = [run(v, tag="a") for v in (1735, 3195, 2250)]
    b = [run(v, tag="b") for v in (2900, 1980, 2610)]
    (r,) = cmp.compare([*a, *b], ["a", "b"]).ratios.values()
    assert r.within_noise and r.noise == "between runs"


def test_a_side_of_one_run_takes_the_spread_this_machine_recorded():
    history = [run(v, tag="before") for v in (4000, 3990, 4010, 3995)]
    a, b = run(4005, tag="a"), run(3000, tag="b")
    (r,) = cmp.compare([*history, a, b], ["a", "b"]).ratios.values()
    assert r.noise == "between runs" and r.runs == (1, 1) and not r.within_noise
    (alone,) = cmp.compare([a, b], ["a", "b"]).ratios.values()
    assert alone.noise == "steps"
    assert re.search(r"one run each of \d+ and \d+ steps: between-run noise unknown",
                     cmp.conclusions(cmp.compare([a, b], ["a", "b"]))[0])


# ---- suites and the command line ---------------------------------------------------------------------

SUITE = {"name": "r", "specs": [{"workload": "fwdbwd", "model": "resnet18", "batch": 2, "input_shape": "3x32x32",
                                 "device": "cpu", "repeat": 3}, {"workload": "fwdbwd", "model": "resnet18",
                                                                  "batch": 4, "input_shape": "3x32x32", "device": "cpu"}]}


def test_a_suite_entry_repeats_and_a_resume_counts_what_ran(db):
    suite = parse(SUITE, "r.yaml", {})
    assert [suite.runs(s) for s in suite.specs] == [3, 1]
    plan = make_plan(suite, None, "h")
    assert [s.batch for s in plan.todo] == [2, 2, 2, 4]
    done = make_result(spec=plan.todo[0].to_dict(), system={"host": "h"}, run=plan.run, suite="r")
    with Store(db) as store:
        store.add(done)
        resumed = make_plan(suite, store, "h", resume=True, run=plan.run)
    assert [s.batch for s in resumed.todo] == [2, 2, 4] and len(resumed.done) == 1


@pytest.mark.parametrize("value", [0, -1, "3", 1.5, True, 101])
def test_a_bad_repeat_in_a_suite_is_one_clear_error(value):
    bad = {**SUITE, "specs": [{**SUITE["specs"][0], "repeat": value}]}
    with pytest.raises(UserError, match=r"suite r.yaml: repeat must be a whole number of runs from 1 to 100"):
        parse(bad, "r.yaml", {})


@pytest.mark.parametrize("value", ["0", "x", "101", "-2", "auto5"])
def test_a_bad_repeat_flag_is_one_line_and_exit_2(db, value):
    proc = cli("run", "fwdbwd", "--device", "cpu", "--repeat", value, "--db", db)
    assert_user_error(proc, "--repeat must be a number of runs from 1 to 100 or 'auto'")
    assert not db.exists() or Store(db).results() == []


def test_repeat_with_a_batch_search_is_refused(db):
    proc = cli("run", "train", "--device", "cpu", "--batch", "auto", "--repeat", "2", "--db", db)
    assert_user_error(proc, "--repeat runs one batch again and again")


def test_parse_accepts_counts_and_auto():
    assert repeats.parse("5") == 5 and repeats.parse(" AUTO ") == "auto"


@pytest.mark.slow
def test_repeat_runs_fresh_processes_stored_as_one_set(db, tmp_path):
    out = tmp_path / "r.json"
    proc = cli("run", "fwdbwd", "--model", "resnet18", "--batch", "2", "--input-shape", "3x32x32", "--device", "cpu",
               "--warmup", "1", "--warmup-seconds", "0", "--steps", "3", "--min-seconds", "0", "--repeat", "3",
               "--db", db, "--results-file", out)
    assert proc.returncode == 0, proc.stderr
    with Store(db) as store:
        results = [r for r in store.results() if r.workload == "fwdbwd"]
    assert len(results) == 3 and len({set_of(r) for r in results}) == 1
    assert sorted(r.measured.run.repeat_index for r in results) == [1, 2, 3]
    assert len({r.traces["launch"]["mode"] for r in results}) == 1  # each an isolated child
    assert "median of 3 runs" in proc.stdout and "fresh processes" in proc.stderr
    assert len(json.loads(out.read_text())) == 3
    assert all(r.suite is None for r in results)


def test_a_changed_environment_is_named_where_it_is_the_only_difference():
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "32", "NCCL_NVLS_ENABLE": "0"}
    clean = [run(v, environment=env) for v in (3990, 3991, 4000)]
    one = run(2400, tag="fault", environment={**env, "CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    [d] = diagnose([*clean, one], refs=[], chosen=[one])
    assert d.causes[0].name == "changed environment"
    assert d.causes[0].evidence.startswith("CUDA_DEVICE_MAX_CONNECTIONS 1 against 32 (0.60x of run")
    inside = run(3995, tag="inside", environment={**env, "OMP_NUM_THREADS": "4"})
    [d] = diagnose([*clean, inside], refs=[], chosen=[inside])
    assert any("the environment differs from run" in h and "OMP_NUM_THREADS 4 against unset" in h for h in d.hints)


def test_auto_adds_runs_until_settled_failed_or_out_of_time():
    import time

    budget = repeats.Budget(600.0, time.monotonic())
    steady = [run(v) for v in (3990, 3991, 4000)]
    assert not budget.enough(steady[:2]) and budget.enough(steady)
    noisy = [run(v) for v in HOST_BOUND[:4]]
    assert not budget.enough(noisy)
    failed = make_result(spec=TRAIN, system=HOST, status="error")
    assert budget.enough([failed])  # a spec that fails will fail again
    for r in noisy:
        r.traces["launch"] = {"wall_s": 30.0}
    late = repeats.Budget(100.0, time.monotonic() - 90.0)  # one more 30 s run would pass the budget
    assert late.enough(noisy) and not late.enough(noisy[:1])
    assert "until the mean's 95% interval is within ±2%" in repeats.announce(_spec(), "auto", 600)


def _spec():
    from dlbench.spec import BenchmarkSpec

    return BenchmarkSpec.from_dict({"workload": "fwdbwd", "model": "resnet18", "device": "cpu"})
