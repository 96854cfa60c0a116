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
                       samples={"step": [step_s] * 5}, **kw)


def test_seed_000_001_training_table_layout():
    # Seed 000: Cluster:1080Ti 1754.2 s for 1001 iterations, its x2 run 2053.8 s.
    results = [_unet("GeForce GTX 1080 Ti", 1, 1754.2 / 1001), _unet("GeForce GTX 1080 Ti", 2, 2053.8 / 1001),
               _unet("Tesla P100", 1, 1.0, status="oom")]
    (table,) = training3d.tables(results)
    lines = table.markdown().splitlines()
    assert lines[0] == "## 3D U-Net (aniso): training and prediction"
    assert lines[3] == ("|System|CUDA|pytorch|Training [s]|Inference [s]|Iters / Min|Megavox / s|100k Iters [d]|"
                        "Platynereis, 8.1 Tvox [h]|")
    assert lines[4] == "|---|---|---|---:|---:|---:|---:|---:|---:|"
    assert lines[5] == "|GeForce GTX 1080 Ti|9.1|0.4.0|1754.2|-|34.2|-|2.0|-|"
    assert lines[6] == "|GeForce GTX 1080 Ti (x2)|9.1|0.4.0|2053.8|-|29.2|-|2.4|-|"
    assert lines[7] == "|Tesla P100|9.1|0.4.0|OOM|-|OOM|-|OOM|-|"


def _sample_results():
    return [
        make_result(system={"gpus": [{"name": "NVIDIA H200"}], "host": "gpu01"}, samples={"step": [0.015] * 4}),
        make_result(system={"gpus": [{"name": "Tesla K80"}], "host": "old01"},
                    metrics={"forward_ms": 124.38, "backward_ms": 274.43, "total_ms": 398.81}),
        make_result(system={"gpus": [{"name": "GTX 1080"}], "host": "desk"}, status="oom"),
    ]


def test_csv_and_json_hold_the_same_tables_as_markdown():
    results = _sample_results()
    found = tables(results)
    rows = list(csv.reader(io.StringIO(render(results, "csv"))))
    resnet = rows.index(["ResNet-50"])
    assert rows[resnet + 1] == ["GPU", "cuDNN", "Forward (ms)", "Backward (ms)", "Total (ms)", "Median step (ms)"]
    assert rows[resnet + 2] == ["NVIDIA H200", "9.1.0", "5.00", "10.00", "15.00", "15.00"]
    assert rows[resnet + 4] == ["GTX 1080", "9.1.0", "OOM", "OOM", "OOM", "OOM"]
    data = json.loads(render(results, "json"))
    assert [t["title"] for t in data["tables"]] == [t.title for t in found] and data["results"] == 3
    (resnet_json,) = [t for t in data["tables"] if t["title"] == "ResNet-50"]
    assert resnet_json["rows"][1] == ["Tesla K80", "9.1.0", "124.38", "274.43", "398.81", "398.81"]


def test_filter_systems_by_label_or_host():
    results = _sample_results()
    assert [r.system_label for r in filter_systems(results, ["nvidia h200", "old01"])] == ["NVIDIA H200", "Tesla K80"]
    with pytest.raises(UserError, match="no results for system v100; stored: GTX 1080, NVIDIA H200, Tesla K80, desk"):
        filter_systems(results, ["V100"])


def test_missing_cells_are_dashes_in_every_format():
    no_backward = make_result(metrics={"backward_ms": None})
    # no backward time: no Total either (it is their sum), the median step stays
    assert "|NVIDIA H200|9.1.0|5.00|-|-|15.00|" in render([no_backward], "md")
    assert "NVIDIA H200,9.1.0,5.00,-,-,15.00" in render([no_backward], "csv")
    assert '"-"' in render([no_backward], "json")


def test_report_cli_formats_filters_and_errors(db, tmp_path):
    evil = make_result(system={"gpus": [{"name": "<script>alert(1)</script>"}], "host": "evil"},
                       tag="<img src=x onerror=alert(2)>", samples={"step": [0.01, 0.011, 0.012]})
    with Store(db) as store:
        store.add_many([*_sample_results(), evil])
    md = cli("report", "--system", "NVIDIA H200", "--system", "evil", "--db", db)
    assert md.returncode == 0, md.stderr
    assert "|NVIDIA H200|" in md.stdout and "Tesla K80" not in md.stdout
    assert "<script>" not in md.stdout and "&lt;script&gt;alert(1)&lt;/script&gt;" in md.stdout
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
        "    return [Table('Extra <b>', ['System', 'Value'], 'lr', [[r.system_label, None] for r in results],"
        " notes=['a note'])]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import dlbench.report as report

    monkeypatch.setattr(report, "SECTIONS", [*report.SECTIONS, "extra_section"])
    results = [make_result(system={"gpus": [{"name": "A|<i>"}]})]
    assert "## Extra &lt;b&gt;\na note\n\n|System|Value|\n|---|---:|\n|A\\|&lt;i&gt;|-|" in render(results, "md")
    assert "Extra <b>\nSystem,Value\nA|<i>,-\n" in render(results, "csv")
    assert {"title": "Extra <b>", "notes": ["a note"], "header": ["System", "Value"], "rows": [["A|<i>", "-"]]} \
        in json.loads(render(results, "json"))["tables"]
    page = render(results, "html")
    assert "<h3>Extra &lt;b&gt;</h3>" in page and '<td class="l">A|&lt;i&gt;</td><td class="r">-</td>' in page


def test_empty_report_says_what_to_run_in_every_format():
    assert "dlbench suite cnn-benchmarks" in render([], "md") and "dlbench suite cnn-benchmarks" in render([], "html")
    assert json.loads(render([], "json")) == {"tables": [], "results": 0} and render([], "csv") == ""
