"""`dlbench report`: every format from one store, filters, seed layouts, escaping, bad inputs."""

import csv
import io
import json

import pytest

from dlbench.report import filter_systems, render, tables
from dlbench.report import training3d
from dlbench.errors import UserError
from dlbench.results.store import Store

from conftest import assert_user_error, cli, make_result


def _unet(gpu: str, gpus: int, step_s: float, **kw):
    return make_result(spec={"workload": "train", "model": "unet3d-aniso", "gpus": gpus, "batch": 1,
                             "input_shape": [1, 40, 432, 432]},
                       system={"gpus": [{"name": gpu}], "cuda": "9.1", "torch": "0.4.0"},
                       samples={"step": [step_s] * 1001 * gpus}, metrics={"steps": 1001}, **kw)


def test_seed_000_001_training_table_layout():
    # Seed 000: Cluster:1080Ti 1754.2 s for 1001 iterations, its x2 run 2053.8 s.
    results = [_unet("GeForce GTX 1080 Ti", 1, 1754.2 / 1001), _unet("GeForce GTX 1080 Ti", 2, 2053.8 / 1001),
               _unet("Tesla P100", 1, 1.0, status="oom")]
    (table,) = training3d.tables(results)
    lines = table.markdown().splitlines()
    assert lines[0] == "## 3D U-Net (aniso): training"
    assert lines[1].startswith("How long the publications' 1001 training iterations take")
    assert lines[4] == ("|System|GPUs|Precision|Training [s]|Iters / Min|Iteration vs 1 GPU|100k Iters [d]|Software|"
                        "Data|")
    assert lines[5] == "|---|---:|---|---:|---:|---:|---:|---|---|"
    assert lines[6] == "|GeForce GTX 1080 Ti|1|fp32|1754.2|34.2|-|2.0|CUDA 9.1, PyTorch 0.4.0|Synthetic|"
    # on two GPUs each iteration is 17% longer than on one: the seeds' x2 rows show the same
    assert lines[7] == "|GeForce GTX 1080 Ti|2|fp32|2053.8|29.2|1.17x|2.4|CUDA 9.1, PyTorch 0.4.0|Synthetic|"
    assert lines[8] == "|Tesla P100|1|fp32|OOM|OOM|-|OOM|CUDA 9.1, PyTorch 0.4.0|Synthetic|"


def _sample_results():
    return [
        make_result(system={"gpus": [{"name": "NVIDIA H200"}], "host": "gpu01"}, samples={"step": [0.015] * 4}),
        make_result(system={"gpus": [{"name": "Tesla K80"}], "host": "old01"},
                    metrics={"forward_ms": 124.38, "backward_ms": 274.43, "total_ms": 398.81}),
        make_result(system={"gpus": [{"name": "GTX 1080"}], "host": "desk"}, status="oom"),
    ]


def _cells(records, title, label, column):
    return [r for r in records if r["title"] == title and r["label"] == label and r["column"] == column]


def test_csv_and_json_hold_every_cell_of_the_tables_as_tidy_records():
    results = _sample_results()
    found = tables(results)
    rows = list(csv.DictReader(io.StringIO(render(results, "csv"))))
    assert list(rows[0]) == ["table", "title", "row", "label", "column", "value", "unit", "text", "note"]
    (forward,) = _cells(rows, "ResNet-50", "NVIDIA H200", "Forward (ms)")
    assert (forward["value"], forward["unit"], forward["text"], forward["note"]) == ("5.0", "ms", "", "")
    (cudnn,) = _cells(rows, "ResNet-50", "NVIDIA H200", "cuDNN")
    assert (cudnn["value"], cudnn["text"]) == ("", "9.1.0")  # a version is text, not the number 9.1
    assert [r["text"] for r in rows if r["label"] == "GTX 1080" and r["column"].endswith("(ms)")] == ["OOM"] * 4
    data = json.loads(render(results, "json"))
    assert [t["title"] for t in data["tables"]] == [t.title for t in found] and data["results"] == 3
    assert data["tables"][1]["header"][:3] == ["GPU", "cuDNN", "Forward (ms)"]
    (total,) = _cells(data["cells"], "ResNet-50", "Tesla K80", "Total (ms)")
    assert total == {"table": 2, "title": "ResNet-50", "row": 2, "label": "Tesla K80", "column": "Total (ms)",
                     "value": 398.81, "unit": "ms", "text": None, "note": None}
    assert len(data["cells"]) == len(rows) == sum(len(t.rows) * (len(t.header) - 1) for t in found)


def test_tidy_csv_reads_as_typed_columns():
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(io.StringIO(render(_sample_results(), "csv")))
    assert str(frame["value"].dtype) == "float64" and str(frame["row"].dtype) == "int64"
    assert frame.loc[frame["column"] == "Forward (ms)", "value"].dropna().tolist() == [5.0, 124.38]
    assert frame["text"].isna().sum() > 0 and "None" not in frame["text"].tolist()


def test_figures_keep_their_marks_units_and_sign_apart_from_the_number():
    from dlbench.report.formats import records
    from dlbench.report.tables import Table

    table = Table("T", ["System", "CUDA", "Total (ms)", "Speed", "Share", "Cores", "Phase (bf16)", "Gain"],
                  "llrrrrrr",
                  [["a", "12.4", "1,754.2 †", "4,000.0 img/s (x1.50)", "25%", 16896, "-0.5", float("nan")]])
    got = {r["column"]: (r["value"], r["unit"], r["text"], r["note"]) for r in records([table])}
    assert got == {"CUDA": (None, None, "12.4", None), "Total (ms)": (1754.2, "ms", None, "†"),
                   "Speed": (4000.0, "img/s", None, "(x1.50)"), "Share": (25, "%", None, None),
                   "Cores": (16896, None, None, None), "Phase (bf16)": (-0.5, None, None, None),
                   "Gain": (None, None, None, None)}


def test_filter_systems_by_label_or_host():
    results = _sample_results()
    assert [r.system_label for r in filter_systems(results, ["nvidia h200", "old01"])] == ["NVIDIA H200", "Tesla K80"]
    with pytest.raises(UserError, match="no results for system v100; stored: GTX 1080, NVIDIA H200, Tesla K80, desk"):
        filter_systems(results, ["V100"])


def test_missing_cells_are_dashes_in_markdown_and_empty_in_csv_and_json():
    no_backward = make_result(metrics={"backward_ms": None})
    both = [no_backward, make_result(system={"gpus": [{"name": "NVIDIA H100"}]})]  # a column no row fills is left out
    # no backward time: no Total either (it is their sum), the median step stays
    assert "|NVIDIA H200|9.1.0|5.00|-|-|15.00|" in render(both, "md")
    rows = list(csv.DictReader(io.StringIO(render(both, "csv"))))
    (backward,) = _cells(rows, "ResNet-50", "NVIDIA H200", "Backward (ms)")
    assert (backward["value"], backward["unit"], backward["text"], backward["note"]) == ("", "", "", "")
    assert all(r[k] not in ("None", "-") for r in rows for k in r)
    cells = json.loads(render(both, "json"))["cells"]
    (total,) = _cells(cells, "ResNet-50", "NVIDIA H200", "Total (ms)")
    assert total["value"] is None and total["text"] is None
    assert all(isinstance(c["value"], (int, float)) for c in cells if c["value"] is not None)


def test_report_csv_never_starts_a_text_cell_like_a_formula(db):
    evil = make_result(system={"gpus": [{"name": '=HYPERLINK("http://x","y")'}], "host": "@evil"}, tag="+cmd",
                       metrics={"forward_ms": -0.5})
    other = make_result(system={"gpus": [{"name": "NVIDIA H200"}]}, tag="-other")  # two tags: a Tag column
    with Store(db) as store:
        store.add_many([evil, other])
    proc = cli("report", "--format", "csv", "--db", db)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert all(not v.startswith(("=", "+", "@", "\t", "\r")) for r in rows for v in r.values())
    assert {r["label"] for r in rows if r["title"] == "ResNet-50"} == {"'=HYPERLINK(\"http://x\",\"y\")", "NVIDIA H200"}
    assert sorted(r["text"] for r in rows if r["column"] == "Tag" and r["title"] == "ResNet-50") == ["'+cmd", "'-other"]
    (forward,) = [r for r in rows if r["column"] == "Forward (ms)" and r["label"] != "NVIDIA H200"]
    assert forward["text"] == "?" and not forward["value"]  # a negative time is no figure: marked, never '-0.5'
    assert [r["text"] for r in rows if r["column"] == "Fields"] == ["metrics.forward_ms"]  # the legend names it
    with Store(db) as store:
        assert store.count() == 2


def test_report_cli_formats_filters_and_errors(db, tmp_path):
    evil = make_result(system={"gpus": [{"name": "<script>alert(1)</script>"}], "host": "evil"},
                       tag="<img src=x onerror=alert(2)>", samples={"step": [0.01, 0.011, 0.012]})
    with Store(db) as store:
        store.add_many([*_sample_results(), evil])
    md = cli("report", "--system", "NVIDIA H200", "--system", "evil", "--db", db)
    assert md.returncode == 0, md.stderr
    assert "|NVIDIA H200|" in md.stdout and "Tesla K80" not in md.stdout
    assert "<script>" not in md.stdout and "&lt;script>alert(1)&lt;/script>" in md.stdout
    page = tmp_path / "report.html"
    html = cli("report", "--format", "html", "-o", page, "--db", db)
    assert html.returncode == 0, html.stderr
    text = page.read_text()
    assert "<script" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;img src=x onerror=alert(2)&gt;" in text
    assert text.count('<figure class="plot"') >= 2 and "http://" not in text and "https://" not in text
    assert_user_error(cli("report", "--format", "pdf", "--db", db), "--format must be one of md, csv, json, html")
    assert_user_error(cli("report", "--format", "html", "--db", db), "--output")
    assert_user_error(cli("report", "--system", "V100", "--db", db), "no results for system v100")
    assert_user_error(cli("report", "-o", tmp_path / "missing" / "r.md", "--db", db), "cannot write")
    with Store(db) as store:
        assert store.count() == 4


def test_a_new_section_appears_in_every_format(tmp_path, monkeypatch):
    (tmp_path / "extra_section.py").write_text(
        "from dlbench.report.tables import Table\n"
        "def tables(results):\n"
        "    return [Table('Extra <b>', ['System', 'Value'], 'lr', [[r.system_label, None] for r in results]"
        " + [['B', 2]], notes=['a note'])]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import dlbench.report as report

    monkeypatch.setattr(report, "SECTIONS", [*report.SECTIONS, "extra_section"])
    results = [make_result(system={"gpus": [{"name": "A|<i>"}]})]
    assert "## Extra &lt;b>\na note\n\n|System|Value|\n|---|---:|\n|A\\|&lt;i>|-|\n|B|2|" in render(results, "md")
    assert "Extra <b>,1,A|<i>,Value,,,,\n" in render(results, "csv")
    data = json.loads(render(results, "json"))
    assert {"title": "Extra <b>", "notes": ["a note"], "header": ["System", "Value"]} in \
        [{k: t[k] for k in ("title", "notes", "header")} for t in data["tables"]]
    assert {"title": "Extra <b>", "row": 1, "label": "A|<i>", "column": "Value", "value": None, "text": None} \
        .items() <= next(c for c in data["cells"] if c["title"] == "Extra <b>").items()
    page = render(results, "html")
    assert "<h3>Extra &lt;b&gt;</h3>" in page and '<td class="l">A|&lt;i&gt;</td><td class="r">-</td>' in page


def test_empty_report_says_what_to_run_in_every_format():
    assert "dlbench suite cnn-benchmarks" in render([], "md") and "dlbench suite cnn-benchmarks" in render([], "html")
    assert json.loads(render([], "json")) == {"results": 0, "tables": [], "cells": []} and render([], "csv") == ""


def test_output_suffix_chooses_the_format_and_a_contradiction_is_refused(db, tmp_path):
    with Store(db) as store:
        store.add_many(_sample_results())
    for name in ("r.html", "r.csv", "r.json", "r.md", "plain"):
        proc = cli("report", "-o", tmp_path / name, "--db", db)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert next(csv.DictReader((tmp_path / "r.csv").open()))["table"] == "1"
    assert json.loads((tmp_path / "r.json").read_text())["results"] == 3
    assert (tmp_path / "r.md").read_text().startswith("## ") and (tmp_path / "plain").read_text().startswith("## ")
    assert cli("report", "--format", "csv", "-o", tmp_path / "R.CSV", "--db", db).returncode == 0
    assert_user_error(cli("report", "-o", tmp_path / "r.pdf", "--db", db),
                      "r.pdf: .pdf names no report format; name it .md, .csv, .json or .html")
    assert_user_error(cli("report", "--format", "md", "-o", tmp_path / "x.html", "--db", db),
                      "x.html names html, but --format is md")
    assert not (tmp_path / "r.pdf").exists() and not (tmp_path / "x.html").exists()
