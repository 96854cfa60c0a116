"""`dlbench compare` and `dlbench doctor` print the ratio of the same two sets of runs, and its interval,
from one function (results/spread.py: ratio_of_runs), with the runs behind each side, and no interval
where the runs cannot give one."""

import math
import re
import statistics

import pytest

from conftest import cli, make_result
from dlbench.results.spread import Logs, RunRatio, ratio_of_logs, ratio_of_runs
from dlbench.results.store import Store

HOST = {"host": "gpu-node", "gpus": [{"name": "NVIDIA H100"}], "cpu": {"model": "Xeon", "cores": 32}}
TRAIN = {"workload": "train", "model": "resnet50", "batch": 64, "precision": "bf16", "device": "cuda",
         "options": {"data": "synthetic"}}
INTERVAL = re.compile(r"\d+\.\d\dx \(95% interval \d+\.\d\d–\d+\.\d\d, \d+ and \d+ runs\)")


def run(img_s: float, tag: str, started: str):
    step = 64 / img_s
    return make_result(spec=TRAIN, system=HOST, tag=tag, started=started,
                       metrics={"device": "cuda:0", "throughput": img_s, "throughput_unit": "img/s"},
                       samples={"step": [step * (1 + 0.002 * ((i * 7) % 5 - 2)) for i in range(50)]})


def stored(db, before: tuple[float, ...], after: float):
    """Runs of one configuration tagged 'before', then one newer run tagged 'after', in a real store."""
    runs = [run(v, "before", f"2026-11-28T0{i}:00:00") for i, v in enumerate(before)]
    newest = run(after, "after", "2026-11-28T09:00:00")
    with Store(db) as store:
        store.add_many([*runs, newest])
    return runs, newest


def both(db, newest) -> tuple[str, str]:
    """compare's and the doctor's output for the newest run against the others, each as the user runs it."""
    compared = cli("compare", "after", "before", "--db", db)
    doctor = cli("doctor", "--db", db, newest.id[:8])
    assert compared.returncode == 0, compared.stderr
    assert doctor.returncode == 0, doctor.stderr
    return compared.stdout, doctor.stdout


def shared(text: str) -> set[str]:
    return set(INTERVAL.findall(text.replace("\\", "")))


def test_a_slower_run_reads_the_same_ratio_and_interval_in_compare_and_the_doctor(db):
    before, newest = stored(db, (4000, 3900, 4100, 3950), 2500)
    compared, doctor = both(db, newest)
    expected = ratio_of_runs([newest], before)
    text = expected.text()
    assert text.endswith(", 1 and 4 runs)") and expected.high < 1
    assert text in compared and text in doctor, (text, compared, doctor)
    assert shared(doctor) <= shared(compared)
    assert "verdict: slower than this machine's own runs" in doctor


def test_a_run_within_the_noise_reads_the_same_interval_and_is_not_called_slower(db):
    before, newest = stored(db, (1735, 2250, 3195, 2900, 1980), 2100)
    compared, doctor = both(db, newest)
    text = ratio_of_runs([newest], before).text()
    assert text in compared and text in doctor
    assert "verdict: within this machine's run-to-run spread" in doctor and "slower" not in doctor
    assert "are within noise" in compared


def test_the_doctor_s_verdict_follows_the_interval_it_prints(db):
    # 3% slower than four runs that agree to 0.1%: beyond the noise between them, so slower
    before, newest = stored(db, (4000, 4002, 3998, 4001), 3700)
    _, doctor = both(db, newest)
    [printed] = shared(doctor)
    low, high = map(float, re.search(r"interval (\S+)–(\S+),", printed).groups())
    assert high < 1 and "verdict: slower than this machine's own runs" in doctor


def test_one_run_a_side_prints_no_interval_and_says_what_is_missing():
    a, b = run(4000, "a", "2026-11-28T01:00:00"), run(3000, "b", "2026-11-28T02:00:00")
    alone = ratio_of_runs([a], [b])
    assert not alone.has_interval and alone.value == pytest.approx(4000 / 3000)
    assert alone.text() == ("1.33x (no interval from 1 and 1 runs: the noise between runs is unknown "
                            "(--repeat N measures it))")
    assert alone.place() == 0  # no verdict from it


def test_a_side_of_one_run_borrows_the_other_sides_noise_and_its_degrees_of_freedom():
    # one estimate for both sides: its own degrees of freedom, not Welch's for two independent ones
    one, four = Logs.of([100.0]), Logs.of([90.0, 100.0, 110.0, 105.0])
    logs = [math.log(v) for v in (90.0, 100.0, 110.0, 105.0)]
    reach = 3.182 * math.sqrt(statistics.variance(logs) * (1 + 1 / 4))  # Student's t for 3 degrees of freedom
    centre = math.log(100.0) - statistics.fmean(logs)
    found = ratio_of_logs(one, four)
    assert (found.low, found.high) == pytest.approx((math.exp(centre - reach), math.exp(centre + reach)))
    assert found.runs == (1, 4) and found.place() == 0
    turned = found.flipped()
    assert turned.runs == (4, 1) and (turned.value, turned.low, turned.high) == pytest.approx(
        (1 / found.value, 1 / found.high, 1 / found.low))
    recorded = ratio_of_logs(one, four, (Logs.of([100.0, 100.5, 99.5]), None))
    assert recorded.has_interval and recorded.high - recorded.low < found.high - found.low
    assert ratio_of_logs(one, Logs.of([100.0])).text().startswith("1.00x (no interval from 1 and 1 runs")
