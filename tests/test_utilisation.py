"""One denominator for FLOP utilisation: the measured matmul ceiling for the precision that ran,
on the machine it ran on; measured once by the first run that needs it, then reused."""

import re

import pytest
import torch

from conftest import TINY, make_result
from dlbench.diagnose.judge import diagnose
from dlbench.diagnose.render import render
from dlbench.launch.execute import describe
from dlbench.launch.inprocess import run_specs
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.results.measurement import Utilisation
from dlbench.system.records import annotate, carried_ceiling, matmul_ceiling, utilisation_text
from dlbench.system.survey import quick_ceiling

H200 = {"host": "n1", "gpus": [{"name": "NVIDIA H200"}]}


def system_record(started, quick=False, **ceilings):
    spec = {"workload": "system", "model": "", "device": "cuda:0", **({"quick": True} if quick else {})}
    return Result(spec=spec, system=H200, started=started, metrics={"device": "cuda:0", **ceilings})


def run(precision="bf16", **metrics):
    return make_result(spec={"precision": precision}, system=H200,
                       metrics={"device": "cuda:0", "achieved_tflops": 140.0, **metrics})


def test_the_precision_that_ran_picks_the_ceiling_and_a_missing_one_is_measured():
    survey = system_record("2026-01-01", matmul_fp32_tflops=50.0, matmul_bf16_tflops=700.0)
    settled = run("bf16", asked={"precision": "fp32"})  # a volume run asked fp32 and settled on bf16
    assert annotate(settled, [survey]) is None
    assert settled.metrics["ceiling_tflops"] == 700.0 and settled.metrics["ceiling_precision"] == "bf16"
    assert utilisation_text(settled.measured.utilisation) == "20% of the measured bf16 matmul ceiling of 700 TFLOP/s"

    asked = []
    fp16 = run("fp16")

    def measure(precision):
        asked.append(precision)
        return system_record("2026-01-02", quick=True, matmul_fp16_tflops=560.0)

    new = annotate(fp16, [survey], measure)
    assert asked == ["fp16"] and new.spec["quick"] and fp16.metrics["ceiling_record"] == new.id
    assert fp16.metrics["ceiling_fraction"] == pytest.approx(0.25)
    assert annotate(run("fp16"), [survey, new], measure) is None and asked == ["fp16"]  # reused, not measured again


def test_a_survey_wins_over_a_newer_quick_measurement():
    survey = system_record("2026-01-01", matmul_bf16_tflops=700.0)
    quick = system_record("2026-02-01", quick=True, matmul_bf16_tflops=650.0)
    assert matmul_ceiling(run(), [quick, survey]) == (700.0, survey)
    assert matmul_ceiling(run(), [quick]) == (650.0, quick)
    assert matmul_ceiling(run("fp16"), [quick, survey]) is None


def test_without_a_measurable_ceiling_the_datasheet_is_named_as_such():
    result = run("bf16")
    annotate(result, [], lambda precision: None)  # nothing could be measured for it
    assert "ceiling_fraction" not in result.metrics
    assert utilisation_text(result.measured.utilisation) == "14% of the datasheet bf16 peak of 989 TFLOP/s (no ceiling measured here)"


def test_quick_ceiling_on_the_cpu():
    system = {"host": "here", "cpu": {"model": "test", "cores": 2}}
    record = quick_ceiling(system, torch.device("cpu"), "fp32")
    assert record.spec["quick"] and record.workload == "system" and record.metrics["matmul_fp32_tflops"] > 0
    assert record.metrics["ceilings"]["matmul_fp32_tflops"]["details"]["best_n"] == 1024
    assert quick_ceiling(system, torch.device("cpu"), "bf16") is None  # measured on GPUs only


def test_measured_once_through_the_store_and_named_alike_everywhere(db):
    spec = BenchmarkSpec(**TINY)
    with Store(db) as store:
        first = run_specs([spec], store)[0]
        [ceiling] = store.results(workload="system")
        second = run_specs([spec], store)[0]
        assert len(store.results(workload="system")) == 1  # the second run reused it
        stored = store.results(workload="fwdbwd")
    assert ceiling.spec["quick"] and ceiling.metrics["matmul_fp32_tflops"] > 0
    assert first.metrics["ceiling_record"] == second.metrics["ceiling_record"] == ceiling.id
    assert [r.metrics["ceiling_record"] for r in stored] == [ceiling.id] * 2
    words = utilisation_text(second.measured.utilisation)
    assert re.fullmatch(r"[\d.]+% of the measured fp32 matmul ceiling of [\d.]+ TFLOP/s", words), words
    assert f", {words};" in describe(second) or describe(second).endswith(f", {words}")
    doctor = render(diagnose([*stored, ceiling]))
    assert f"TFLOP/s, {words}" in doctor and "datasheet" not in doctor


def test_a_worker_sends_the_ceiling_it_measured_to_its_launcher():
    from dlbench.launch.execute import with_utilisation

    result = run("fp32", device="cpu")
    result.system = {"host": "here", "cpu": {"model": "test", "cores": 2}}
    new = with_utilisation(result, [], carry=True)
    sent = Result.from_dict(result.to_dict())  # what the launcher reads from the result file
    back = carried_ceiling(sent)
    assert back.id == new.id and back.spec["quick"] and sent.metrics["ceiling_record"] == new.id
    assert "new_ceiling" not in sent.traces  # stored as a system record, not inside the result


def test_the_doctor_asks_for_a_survey_in_words_that_fit_what_is_stored():
    bare = run("bf16", throughput=900.0, throughput_unit="img/s")
    [d] = diagnose([bare], refs=[])
    assert any(h.startswith("no `dlbench system` record for this machine") for h in d.hints)
    quick = system_record("2026-01-02", quick=True, matmul_bf16_tflops=650.0)
    [d] = diagnose([bare, quick], refs=[])
    [hint] = [h for h in d.hints if "dlbench system" in h]
    assert hint.startswith("only the bf16 matmul ceiling the runs measured is stored for this machine")
    assert "the GPU's link, memory copy, host to device, JPEG decoding, disk" in hint
    survey = system_record("2026-01-03", matmul_bf16_tflops=700.0)
    [d] = diagnose([bare, quick, survey], refs=[])
    assert not [h for h in d.hints if "dlbench system" in h]


def test_a_run_above_its_measured_ceiling_says_the_ceiling_is_stale():
    text = utilisation_text(Utilisation(ceiling_fraction=1.05, ceiling_tflops=0.0682, ceiling_precision="fp32"))
    assert text.startswith("105% of the measured fp32 matmul ceiling of 0.0682 TFLOP/s (above it: that measurement was low")
    assert "`dlbench system` measures it again" in text
    assert "above it" not in utilisation_text(Utilisation(ceiling_fraction=0.4, ceiling_tflops=700.0))
