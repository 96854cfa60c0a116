"""One quantity, one number: the five figures of the published pages that did not follow from the
figures beside them, each checked at its source on the real records behind those pages
(docs/data/report-*.jsonl), read back from a real SQLite store by `dlbench report` where the
figure is a table's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import cli
from dlbench.report import compare as cmp
from dlbench.report import training3d
from dlbench.report.images import phase_tables
from dlbench.results.exchange import read_jsonl
from dlbench.results.store import Store
from dlbench.units import hours_for
from dlbench.workloads.volume import describe

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


@pytest.fixture(scope="module")
def two_gpu():
    return read_jsonl(DATA / "report-2gpu.jsonl")


def _prediction(tmp_path, results) -> tuple[dict, list[dict]]:
    """`dlbench report --format json` of a store of these records: the prediction table (title, notes,
    header) and its rows, each a mapping of column to the cell as printed (its number where it is one,
    and under 'column, note' what the cell says beside its number)."""
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.add_many(results)
    proc = cli("report", "--format", "json", "--db", db)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    [table] = [t for t in data["tables"] if t["title"].endswith(": prediction")]
    rows: dict[int, dict] = {}
    for c in data["cells"]:
        if c["table"] == table["table"]:
            row = rows.setdefault(c["row"], {table["header"][0]: c["label"]})
            row[c["column"]] = c["text"] if c["text"] is not None else c["value"]
            row[f'{c["column"]}, note'] = c.get("note")
    return table, [rows[k] for k in sorted(rows)]


def _number(cell) -> float:
    return float(re.match(r"[\d,.]+", str(cell)).group(0).replace(",", ""))


def _ttr(results):
    """The plain volume command's runs on one and two H200s (tags ttr-first, ttr-second)."""
    return [r for r in results if r.workload == "volume" and r.model == "unet3d" and r.status == "ok"]


def test_the_hours_follow_the_rate_printed_beside_them_in_the_run_line_and_the_report(tmp_path, two_gpu):
    runs = _ttr(two_gpu)
    # these records ran faster after the first tile: the old hours used that rate, the table another
    assert any(r.measured.volume.sustained_mvox_per_s > 1.01 * r.measured.volume.mvox_per_s for r in runs)
    table, rows = _prediction(tmp_path, runs)
    hours_column = next(h for h in table["header"] if "Tvox [h]" in h)
    assert len(rows) == len(runs) == 3
    for r, row in zip(sorted(runs, key=lambda r: (r.setup.gpus, r.started)), rows):
        rate = r.measured.volume.mvox_per_s
        assert _number(row["Megavox / s"]) == pytest.approx(rate, abs=0.05)
        hours = hours_for(8.1e12, rate)
        assert _number(row[hours_column]) == pytest.approx(hours, abs=0.05)
        line = describe(r.measured)
        gpus = r.measured.run.processes
        assert f"8.10 Tvox in {hours:.1f} h on {gpus} GPU" in line, line
        assert "after the first tile's" in line  # the other rate is told, as what it is


def test_the_phase_tables_total_is_the_window_the_throughput_counts(tmp_path, two_gpu):
    infer = [r for r in two_gpu if r.model == "resnet50" and r.workload == "infer"
             and r.setup.options.get("data") == "dummy"]
    two = next(r for r in infer if r.setup.gpus == 2)
    # the record: one process's mean batch 53.3 ms, the window over both 65.5 ms a batch
    assert two.measured.step.mean * 1e3 == pytest.approx(53.31, abs=0.01)
    [table] = [t for t in phase_tables(infer) if t.title.endswith("time per batch in each phase")]
    rows = [dict(zip(table.header, row)) for row in table.rows]
    [row] = [row for row in rows if " x2," in row["Run"]]
    total = float(row["Total [ms]"])
    assert 2 * 64 / (total / 1e3) == pytest.approx(two.measured.throughput.value, rel=1e-3)  # 1,955 img/s
    parts = [row[h] for h in table.header[1:7]]
    assert sum(float(str(p).split()[0]) for p in parts if p not in (None, "-")) == pytest.approx(total, abs=0.02)
    assert any("Other Time holds the processes' offset" in note for note in table.notes)
    one_gpu = [dict(zip(table.header, r)) for r in table.rows if " x1," in r[0]]
    assert one_gpu and not any("x2" in r["Run"] for r in one_gpu)


def test_the_speed_up_is_over_a_named_statistic_of_every_one_gpu_row(tmp_path, two_gpu):
    runs = _ttr(two_gpu)
    singles = [r.measured.volume.mvox_per_s for r in runs if r.measured.run.processes == 1]
    two = next(r for r in runs if r.measured.run.processes == 2)
    assert len(singles) == 2 and abs(singles[0] - singles[1]) > 1  # 376.5 and 372.1: 1.92x or 1.94x
    table, rows = _prediction(tmp_path, runs)
    [row] = [row for row in rows if row["GPUs"] == 2]
    expected = two.measured.volume.mvox_per_s / np.mean(singles)
    assert row["Speed-up vs 1 GPU"] == f"{expected:.2f}x"
    assert any("the base is the median of their rates (of two, their mean)" in note for note in table["notes"])


def test_an_extrapolated_prediction_names_the_volume_its_wall_time_is_of(tmp_path, two_gpu):
    fp32 = [r for r in two_gpu if r.workload == "volume" and r.model == "unet3d-aniso" and r.status == "ok"
            and r.setup.precision == "fp32"]
    assert fp32 and fp32[0].measured.volume.volume_shape == [200, 1536, 1536]
    _, [row] = _prediction(tmp_path, fp32)
    assert row["Inference [s], note"] == "(extrapolated from 200x1536x1536)"
    wall = fp32[0].measured.window.wall_to_result_s
    assert (row["Wall time to result [s]"], row["Wall time to result [s], note"]) == (round(wall, 1), "(of 200x1536x1536)")
    assert training3d.wall_cell(fp32[0]) == f"{wall:.1f} (of 200x1536x1536)"


def test_no_interval_from_two_steps_and_every_interval_says_its_steps(two_gpu):
    resnet34 = [r for r in two_gpu if r.workload == "fwdbwd" and r.model == "resnet34" and r.status == "ok"]
    gpu = next(r for r in resnet34 if r.spec.get("device") != "cpu")
    cpu = next(r for r in resnet34 if r.spec.get("device") == "cpu")
    assert len(cpu.samples["step"]) == 2 < cmp.MIN_STEPS <= len(gpu.samples["step"])
    comparison = cmp.compare([gpu, cpu], [gpu.system_label, cpu.system_label])
    (ratio,) = comparison.ratios.values()
    assert not ratio.has_interval and ratio.steps == (29, 2)
    # the ratio of the Totals the cnn-benchmarks tables print (forward + backward), not of whole steps
    assert ratio.ratio == pytest.approx(cpu.measured.window.total_ms / gpu.measured.window.total_ms)
    assert f"{ratio.ratio:.1f}" == "24.4"
    (line,) = [c for c in cmp.conclusions(comparison) if "ResNet-34" in c]
    assert "CI" not in line and line.endswith("(one run each, 29 and 2 steps: no interval from fewer than 10 a side)")
    table = next(t for t in cmp.tables(comparison) if t.title.endswith("relative speed"))
    assert "29 and 2 steps" in str(table.rows) and "fewer than 10 steps a side" in table.notes[0]
    # with ten steps a side there is an interval, and it says how many steps stand behind it
    many = cmp.compare([gpu, _with_steps(cpu, 10)], [gpu.system_label, cpu.system_label])
    (line,) = cmp.conclusions(many)
    assert re.search(r", 95% CI [\d.]+–[\d.]+; one run each of 29 and 10 steps: between-run noise unknown$", line), line
    assert cmp.to_json(many)["ratios"][0]["steps"] == [29, 10]
    matrix = next(t for t in cmp.tables(many) if t.title.endswith("relative speed"))
    assert re.fullmatch(r"[\d.]+x \([\d.]+–[\d.]+, 29 and 10 steps\)", matrix.rows[0][2]), matrix.rows


def _with_steps(r, n: int):
    """The record with `n` step samples spread as its two were."""
    from dlbench.results.record import Result

    data = r.to_dict()
    spread = {k: list(np.linspace(*sorted(r.samples[k]), n)) for k in ("step", "total")}
    data["samples"] = {**data["samples"], **spread}
    data["id"] = data["id"][:-4] + "beef"
    return Result.from_dict(data)


def test_compare_and_the_doctor_give_one_interval_for_the_same_two_runs_in_either_order(two_gpu):
    from dlbench.diagnose import history
    from dlbench.diagnose.history import interval_text

    train = [r for r in two_gpu if r.model == "resnet50" and r.workload == "train" and r.setup.gpus == 1
             and r.setup.options.get("data") in ("dummy", "synthetic")]
    dummy = next(r for r in train if r.setup.options["data"] == "dummy")
    synthetic = next(r for r in train if r.setup.options["data"] == "synthetic")
    doctor = history.against(dummy, synthetic, "synthetic data")
    both = cmp.ratio_of(dummy, synthetic, ("dummy", "synthetic"), "ResNet-50 train", 0.95)
    back = cmp.ratio_of(synthetic, dummy, ("synthetic", "dummy"), "ResNet-50 train", 0.95)
    assert (doctor.ratio, doctor.low, doctor.high) == (both.ratio, both.low, both.high)
    assert (back.ratio, back.low, back.high) == pytest.approx((1 / both.ratio, 1 / both.high, 1 / both.low), rel=1e-12)
    assert doctor.steps == both.steps == (30, 30)
    assert interval_text(doctor) == f", 95% interval over both runs' steps (30 and 30) {doctor.low:.2f}–{doctor.high:.2f}"


def test_the_doctor_prints_no_interval_from_two_steps(two_gpu):
    from dlbench.diagnose import history
    from dlbench.diagnose.history import interval_text

    resnet34 = [r for r in two_gpu if r.workload == "fwdbwd" and r.model == "resnet34" and r.status == "ok"]
    gpu = next(r for r in resnet34 if r.spec.get("device") != "cpu")
    cpu = next(r for r in resnet34 if r.spec.get("device") == "cpu")
    found = history.against(cpu, gpu, "synthetic data")
    assert found.low is None and found.high is None and found.steps == (2, 29)
    assert not found.beyond_noise  # no verdict from an interval that was not made
    assert interval_text(found) == ", no interval from 2 and 29 steps (fewer than 10 a side)"
