"""A workload that no report module, plot, estimate or check names appears in all of them through its
declaration (workloads/__init__.py): a plug-in's, or one added since; a result of a workload not
installed where the store is read appears too, under its name and its stored unit."""

import dataclasses

import pytest

from conftest import make_result

from dlbench import report, workloads
from dlbench.errors import UserError
from dlbench.report import general, plots
from dlbench.spec import BenchmarkSpec
from dlbench.suites.estimate import Known, estimate_run
from dlbench.workloads import Workload

ECHO = Workload("echo", "Echoes tokens.", run=lambda *a: None, describe=lambda m: "", label="echoing",
                unit="tokens/s", passes=2.0)


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setitem(workloads._LOADED, "echo", ECHO)
    return ECHO


def _echoed(throughput: float, steps: list[float], workload: str = "echo", unit: str = "tokens/s", **spec):
    return make_result(spec={"workload": workload, "model": "gpt2", "batch": 8, "input_shape": [1024],
                             "precision": "bf16", **spec},
                       metrics={"throughput": throughput, "throughput_unit": unit, "input_shape": [8, 1024]},
                       samples={"step": steps}, title="GPT-2")


def test_an_unseen_workloads_results_get_a_table_of_their_own(echo):
    runs = [_echoed(1000.0, [0.010, 0.011, 0.012]), _echoed(1100.0, [0.009, 0.010, 0.011] * 40)]
    (table,) = general.tables(runs)
    assert table.title == "Echoing (echo)"
    assert "Throughput [tokens/s]" in table.header
    (row,) = table.rows  # one benchmark, run twice
    cells = dict(zip(table.header, row))
    assert cells["Throughput [tokens/s]"] == "1,100.0"  # the latest run's
    assert cells["Runs"] == "2 (spread 1.10x)"
    assert cells["Step p50 [ms]"] == "10.00" and cells["Step p99 [ms]"] == "11.00"
    assert cells["Model"] == "GPT-2" and cells["Input"] == "8x1024" and cells["GPUs"] == 1
    assert "## Echoing (echo)" in report.render_markdown(runs)


def test_a_workload_not_installed_here_reads_under_its_name_and_stored_unit():
    (table,) = general.tables([_echoed(5.0, [0.2, 0.2], workload="mystery", unit="frames/s")])
    assert table.title == "Mystery" and "Throughput [frames/s]" in table.header


def test_the_publications_workloads_stay_in_their_own_sections():
    assert general.tables([make_result(metrics={"throughput": 100.0, "throughput_unit": "img/s"})]) == []
    assert general.selected(report.SECTIONS) >= {"fwdbwd", "train", "infer", "smooth", "volume", "converge"}


def test_a_plot_heads_an_unseen_workload_with_its_label(echo):
    (plot,) = plots.throughput_plots([_echoed(1000.0, [0.01, 0.01])])
    assert plot.title == "Throughput: echoing (echo)"


def test_the_estimate_counts_the_passes_the_workload_declares(echo, monkeypatch):
    monkeypatch.setattr(BenchmarkSpec, "__post_init__", lambda self: None)  # no model registry for this sketch
    spec = BenchmarkSpec(workload="echo", model="gpt2", batch=8, input_shape=(1024,), device="cpu", warmup=1,
                         warmup_seconds=0.0, steps=10, min_seconds=0.0)
    facts = Known({}, {}, {("cpu", "fp32"): 1e12}, 0.0, {})

    def seconds() -> float:
        return estimate_run(spec, facts, "cpu", forward=lambda s: 1e10).run.seconds

    twice = seconds()
    monkeypatch.setitem(workloads._LOADED, "echo", dataclasses.replace(ECHO, passes=1.0))
    assert twice == pytest.approx(2 * seconds())  # a step of two forward passes' FLOPs takes twice as long


def test_the_built_in_declarations_say_how_their_results_read():
    assert workloads.declared("infer").passes == 1.0 and workloads.declared("train").passes == 3.0
    assert workloads.declared("volume").batch_free and workloads.declared("volume").takes("kernels")
    assert workloads.declared("train").title == "training (train)"
    assert set(workloads.names()) >= {"fwdbwd", "train", "infer", "smooth", "volume", "converge"}


def test_a_workload_that_names_a_task_alone_runs_its_models(echo, monkeypatch):
    speaker = Workload("speak", "", run=ECHO.run, describe=ECHO.describe, tasks=("speech",))
    monkeypatch.setitem(workloads._LOADED, "speak", speaker)
    workloads.check_task(speaker, "whisper", "speech")
    workloads.check_task(echo, "resnet50", "classify")  # names no task: runs the rest
    with pytest.raises(UserError, match=r"^model 'whisper' is a speech model, which echo cannot run: "
                                        r"use `dlbench run speak`$"):
        workloads.check_task(echo, "whisper", "speech")
    with pytest.raises(UserError, match=r"^speak runs speech models; 'resnet50' is a classify model$"):
        workloads.check_task(speaker, "resnet50", "classify")
