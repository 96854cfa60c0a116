"""Issue 17's audit, one test per rule on stored records: the `results` step column, percentages,
CPU rows in CPU terms, weak scaling across tags, plot labels that tell runs apart, and the Data
column of a source given as an environment variable."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from conftest import make_result
from dlbench.figures import percent
from dlbench.report import images, rows as rowinfo
from dlbench.report.plots import _short, latest_ok, throughput_plots

CPU = {"host": "laptop", "gpus": [], "cpu": {"model": "Xeon E5-2630 v3", "cores": 16}}


def _rows(table):
    return [dict(zip(table.header, row)) for row in table.rows]


def _listing(results) -> str:
    from dlbench.launch.view import Terminal

    out = io.StringIO()
    Terminal(out=Console(file=out, width=300), err=Console(file=io.StringIO())).results(results)
    return out.getvalue()


def _train(gpus=1, throughput=100.0, tag=None, device="cuda", **spec):
    return make_result(spec={"workload": "train", "model": "unet2d-medical", "batch": 8, "precision": "tf32",
                             "gpus": gpus, "device": device, "options": {"data": "synthetic"}, **spec},
                       system=CPU if device == "cpu" else {}, tag=tag,
                       metrics={"device": device, "throughput": throughput, "throughput_unit": "img/s"})


# ---- `dlbench results`: a median step, named so, never 0.00 -------------------------------------

def test_results_column_is_the_median_step_for_every_workload_and_tiny_values_are_not_zero():
    fwdbwd = make_result(metrics={"total_ms": 0.0012})
    train = make_result(spec={"workload": "train"}, metrics={"total_ms": None, "step_ms": 62.76})
    volume = make_result(spec={"workload": "volume"}, metrics={"total_ms": None}, samples={"step": [0.5, 0.7, 0.9]})
    text = _listing([fwdbwd, train, volume])
    header = text.splitlines()[0]
    assert "median step ms" in header and "total ms" not in header
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert " 0.0012 " in lines[fwdbwd.id[:8]] and "0.00 " not in lines[fwdbwd.id[:8]]
    assert " 62.76 " in lines[train.id[:8]] and " 700.00 " in lines[volume.id[:8]]


# ---- percentages -----------------------------------------------------------------------------

@pytest.mark.parametrize("share, shown", [(0.005, "0.5%"), (0.001, "0.1%"), (-0.004, "-0.4%"), (0.0, "0%"),
                                          (0.25, "25%"), (None, "-")])
def test_a_nonzero_share_never_shows_as_0_percent(share, shown):
    assert percent(share) == shown


def test_ceilings_table_ratio_uses_percent():
    from dlbench.report.system import ceilings_table

    record = make_result(spec={"workload": "system"}, metrics={
        "ceilings": {"fp32_tflops": {"value": 0.3, "unit": "TFLOP/s", "method": "matmul"}},
        "datasheet": {"fp32_tflops": 67.0}})
    [row] = ceilings_table(record).rows
    assert row[4] == "0.4%"


# ---- CPU rows in CPU terms -------------------------------------------------------------------

def test_cpu_throughput_rows_count_processes_not_gpus():
    [table, scaling] = images.throughput_tables([_train(1, 10.0, device="cpu"), _train(2, 18.0, device="cpu")])
    assert table.header[1:3] == scaling.header[1:3] == ["Processes", "Batch size / process"]
    assert "N processes over throughput on 1 process" in scaling.notes[0] and "GPU" not in " ".join(scaling.notes)
    assert _rows(scaling)[0]["Weak scaling - TF32"] == "1.80"
    assert "2 processes" in _short(_train(2, device="cpu")) and "GPU" not in _short(_train(2, device="cpu"))


def test_gpu_throughput_rows_read_like_seed_003():
    [table, scaling] = images.throughput_tables([_train(1, 100.0), _train(8, 640.0)])
    assert table.header[:3] == ["System", "GPUs", "Batch size / GPU"]
    assert "on N GPUs over throughput on 1 GPU at the same batch per GPU" in scaling.notes[0]
    assert "x8GPU" in _short(_train(8))


def test_cpu_and_gpu_rows_in_one_table_name_both():
    [table] = images.throughput_tables([_train(1, 100.0), _train(2, 18.0, device="cpu")])
    assert table.header[1:3] == ["GPUs or processes", "Batch size / GPU or process"]


# ---- weak scaling across tags ----------------------------------------------------------------

def test_weak_scaling_compares_runs_whatever_their_tags():
    one = _train(1, 29.81, tag="baseline", started="2026-01-01T00:00:00+00:00")
    eight = _train(8, 169.62, tag="scale", started="2026-01-02T00:00:00+00:00")
    [table, scaling] = images.throughput_tables([one, eight])
    rows = {r["GPUs"]: r for r in _rows(table)}
    [eight_row] = _rows(scaling)
    assert eight_row["Weak scaling - TF32"] == "5.69" and eight_row["Scaling efficiency - TF32"] == "0.71"
    assert (rows[1]["Tag"], rows[8]["Tag"]) == ("baseline", "scale")


def test_tagged_runs_keep_their_rows_and_their_own_base():
    before = [_train(1, 100.0, tag="before"), _train(8, 400.0, tag="before")]
    after = [_train(1, 200.0, tag="after"), _train(8, 1200.0, tag="after")]
    [table, scaling] = images.throughput_tables(before + after)
    assert len(table.rows) == 4 and "Tag" in table.header
    weak = {(r["GPUs"], r["Tag"]): r["Weak scaling - TF32"] for r in _rows(scaling)}
    assert weak[(8, "before")] == "4.00" and weak[(8, "after")] == "6.00" and len(weak) == 2


# ---- plot labels tell runs apart -------------------------------------------------------------

def test_plot_labels_differ_where_layout_level_or_tag_differ():
    plain = _train()
    layout = _train(channels_last=True)
    compiled = _train(optimize="compile")
    tagged = _train(tag="lent")
    runs = latest_ok([plain, layout, compiled, tagged])
    assert len(runs) == 4
    labels = {_short(r, runs) for r in runs}
    assert len(labels) == 4
    assert "channels-last" in _short(layout, runs) and "compile" in _short(compiled, runs)
    assert "[lent]" in _short(tagged, runs)
    alone = _short(layout, [layout, _train(channels_last=True, tag=None)])
    assert "channels" not in alone and "eager" not in alone and "[" not in alone  # only what differs
    assert len(throughput_plots(runs)) == 1


# ---- the Data column of a source named by an environment variable -----------------------------

def test_data_source_shows_the_resolved_path_when_the_record_holds_one():
    stored = make_result(spec={"workload": "train", "options": {"data": "$DLBENCH_TRAIN_VOLUME"}})
    # nothing to resolve it with (the report never reads this machine's environment): the row says so
    assert rowinfo.data_source(stored) == "$DLBENCH_TRAIN_VOLUME (path not recorded)"
    folder = make_result(spec={"workload": "infer", "options": {"data": "folder:$DLBENCH_IMAGES"}})
    assert rowinfo.data_source(folder) == "JPEG folder ($DLBENCH_IMAGES, path not recorded)"
    resolved = make_result(spec={"workload": "train", "options": {"data": "${DLBENCH_TRAIN_VOLUME}:raw"}},
                           metrics={"data_path": "/scratch/cremi-train.h5:raw"})
    assert rowinfo.data_source(resolved) == "cremi-train.h5"
    plain = make_result(spec={"workload": "train", "options": {"data": "/data/x.h5"}}, metrics={"data": "/other.h5"})
    assert rowinfo.data_source(plain) == "x.h5"  # no variable: the option as typed


def test_the_system_facts_line_counts_launchers_apart_from_strangers():
    from dlbench.report.system import _facts_line
    from dlbench.results.measurement import GpuFacts

    line = _facts_line(GpuFacts.read({"index": 0, "name": "NVIDIA H200", "other_processes": [
        {"pid": 7, "memory_gb": 0.9, "launcher": "python3 bench.py"}, {"pid": 8, "memory_gb": 2.0}]}))
    assert line == "GPU 0: NVIDIA H200, 1 other process(es) on it, 1 launcher process(es) on it"
    assert _facts_line(GpuFacts.read({"index": 0, "name": "H200", "other_processes": []})) == "GPU 0: H200"


def test_a_run_stopped_before_it_started_is_labelled_by_the_machine_it_was_asked_on():
    gpu = {"gpus": [{"name": "NVIDIA H200"}], "cpu": {"model": "Xeon", "cores": 32}}
    stopped = make_result(spec={"device": "auto"}, system=gpu, metrics={}, status="interrupted")
    assert stopped.system_label == "NVIDIA H200" and rowinfo.on_gpu(stopped)  # 'auto': the first GPU
    cpu_only = make_result(spec={"device": "auto"}, system={"gpus": [], "cpu": {"model": "Xeon", "cores": 32}})
    assert cpu_only.system_label == "CPU: Xeon (32 cores)" and not rowinfo.on_gpu(cpu_only)
    asked_cpu = make_result(spec={"device": "cpu"}, system=gpu, metrics={})
    assert asked_cpu.system_label == "CPU: Xeon (32 cores)"


def test_a_volume_predictions_data_is_its_input_file_or_a_generated_volume():
    read = make_result(spec={"workload": "volume", "options": {"input": "/scratch/cremi.h5:raw"}})
    made = make_result(spec={"workload": "volume", "options": {"volume_shape": "200x3072x3072"}})
    assert rowinfo.data_source(read) == "cremi.h5" and rowinfo.data_source(made) == "Generated volume"


def test_plot_labels_figured_once_per_group_are_those_figured_run_by_run():
    from dlbench.report import plots

    runs = latest_ok([_train(), _train(gpus=2), _train(channels_last=True), _train(optimize="compile", tag="lent"),
                      _train(gpus=8, tag="lent"), _train(device="cpu")])

    def one_by_one(r):  # each part kept where the runs' texts for its key differ, each figured again
        texts = [text for key, text in plots._parts(r, runs)
                 if len({dict(plots._parts(o, runs)).get(key, "") for o in runs}) > 1]
        return " ".join(texts) or " ".join(text for key, text in plots._parts(r, runs) if key in plots.FULL)

    assert [_short(r, runs) for r in runs] == [one_by_one(r) for r in runs]
    assert len({_short(r, runs) for r in runs}) == len(runs) and "x1GPU" in _short(runs[0], runs)
    fewer = runs[:1] + runs[2:4]  # another group of some of the same runs: its own parts (one GPU count)
    assert "x1GPU" not in _short(runs[0], fewer) and "x1GPU" in _short(runs[0], runs)
