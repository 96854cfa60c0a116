"""A report reads without the publications: plain words, every tag and mark in the legend, no empty
column, times in a sensible unit, tiny runs' extrapolations marked, and the publications' rows and
conclusions only beside runs they concern. The stores are the published reports' own
(docs/data/report-NAME.jsonl: real runs on lent GPU machines) in a real SQLite store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import make_result
from dlbench.figures import duration
from dlbench.report import render, tables
from dlbench.report.claims import CNN_TITLE
from dlbench.report.legend import ENTRIES, TITLE
from dlbench.report.tables import Table, shown
from dlbench.results.exchange import read_jsonl
from dlbench.results.store import Store

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"
EMPTY = (None, "", "-")


@pytest.fixture(scope="module", params=["report-2gpu", "report-4gpu"])
def stored(request, tmp_path_factory):
    """The runs behind a published report, imported into a fresh store and read back from it."""
    path = tmp_path_factory.mktemp("store") / "r.db"
    with Store(path) as store:
        store.add_many(read_jsonl(DATA / f"{request.param}.jsonl"))
    with Store(path, read_only=True) as store:
        return store.results()


def _two_gpu() -> list:
    return read_jsonl(DATA / "report-2gpu.jsonl")


def _legend(found: list[Table]) -> dict[str, str]:
    table = next(t for t in found if t.title == TITLE)
    return {str(term): str(meaning) for term, meaning in table.rows}


def _no_seed(text: str) -> None:
    assert not re.search(r"seed", text, re.IGNORECASE), re.findall(r".{60}seed.{30}", text, re.IGNORECASE)


def test_the_word_seed_is_in_no_format_of_any_section(stored):
    for fmt in ("md", "csv", "json"):
        for references in (False, True):
            _no_seed(render(stored, fmt, with_references=references))


def test_the_word_seed_is_not_on_the_html_page_either():
    """The page adds plots and the list of runs to the tables; their captions name each run's
    data, which for generated data was stored with its random seed (plots take a while: few runs)."""
    runs = [r for r in _two_gpu() if r.workload in ("converge", "volume")]
    assert any("seed" in str(r.measured.data.source) for r in runs)
    _no_seed(render(runs, "html", with_references=True))


def test_every_tag_shown_is_named_in_the_legend(stored):
    found = tables(stored, with_references=True)
    shown_tags = {str(row[t.header.index("Tag")]) for t in found if "Tag" in t.header and t.title != TITLE
                  for row in t.rows if row[t.header.index("Tag")] not in EMPTY}
    shown_tags |= {m for t in found for n in t.notes for m in re.findall(r"tagged `([^`]+)`", n)}
    assert shown_tags, "the stores' runs are tagged"
    tagged = _legend(found)["tagged"]
    for tag in shown_tags:
        assert f"`{tag}`" in tagged


# A cell's mark: what follows a figure and its unit ('138.8 (extrapolated from 300)', '0.82 †', '1.31 !').
_MARKED = re.compile(r"^-?[\d,.]+(?: ?(?:ms|s|min|h|x|%))? (?P<mark>[(†!*].*)$")


def test_every_mark_in_a_cell_is_explained_in_the_legend(stored):
    found = tables(stored, with_references=True)
    legend = _legend(found)
    patterns = [(term, re.compile(pattern or re.escape(term))) for term, pattern, _ in ENTRIES]
    for t in found:
        for row in t.rows:
            for value in row:
                mark = _MARKED.match(str(value))
                if mark is None:
                    continue
                terms = [term for term, p in patterns if p.search(str(value))]
                assert any(term in legend for term in terms), (t.title, value)


def test_no_table_shows_a_column_that_is_empty_in_every_row(stored):
    for fmt_tables in (tables(stored), tables(stored, with_references=True)):
        for t in fmt_tables:
            for i, column in enumerate(t.header):
                if t.rows and i != t.label_index():
                    assert any(row[i] not in EMPTY for row in t.rows), (t.title, column)
    phases = [t for t in tables(stored) if t.title.endswith("time per batch in each phase")]
    assert phases and all("Data Processing Time [ms]" not in t.header for t in phases if "aniso" in t.title)


def test_an_empty_column_leaves_with_the_note_text_that_defines_it():
    table = Table("T", ["Run", "Forward [ms]", "Median Batch [ms]"], "lrr", [["a", "1.0", "-"], ["b", "2.0", None]],
                  notes=["Forward: the mean forward pass; Median Batch: the median whole batch."])
    (t,) = shown([table])
    assert t.header == ["Run", "Forward [ms]"] and t.rows == [["a", "1.0"], ["b", "2.0"]]
    assert t.notes == ["Forward: the mean forward pass."]
    md = render([make_result()], "md")
    assert "|-|" not in md.splitlines()[md.splitlines().index("## ResNet-50") + 4]


@pytest.mark.parametrize("seconds, text", [(0.0047, "4.70 ms"), (0.078, "78.0 ms"), (4.67, "4.67 s"),
                                           (90, "90.0 s"), (4.68 * 60, "4.7 min"), (3 * 3600, "3.0 h"),
                                           (357_294.5 * 3600, "357,294.5 h"), (None, "-")])
def test_a_duration_is_printed_in_the_unit_a_reader_thinks_in(seconds, text):
    assert duration(seconds) == text


def test_time_to_dice_below_a_minute_is_in_seconds_not_a_fraction_of_a_minute():
    found = tables([r for r in _two_gpu() if r.workload == "converge"], with_references=True)
    timing = next(t for t in found if t.title.endswith("time to train"))
    column = next(i for i, h in enumerate(timing.header) if h.startswith("Time to DICE"))
    cells = [str(row[column]) for row in timing.rows if row[-1] == "dlbench"]
    assert cells and all(re.fullmatch(r"[\d.,]+ (ms|s|min|h)( \*)?", c) for c in cells), cells
    assert not any(re.match(r"0\.\d+ min", c) for c in cells)


def _cnn(results: list, published: bool = True) -> Table:
    return next(t for t in tables(results, with_references=published) if t.title == "ResNet-50")


def test_the_tag_note_holds_only_where_every_dlbench_row_carries_that_tag():
    runs = [r for r in _two_gpu() if r.workload == "fwdbwd" and r.model == "resnet50"]
    assert len(runs) == 2 and all(r.tag == "lent-2gpu" for r in runs)
    table = _cnn(runs)
    assert "dlbench's rows are runs tagged `lent-2gpu`." in table.notes and "Tag" not in table.header
    runs[0].tag = None  # one run untagged: the sentence would be false
    table = _cnn(runs)
    assert not any("tagged" in n for n in table.notes)
    tags = [row[table.header.index("Tag")] for row in table.rows if row[-1] == "dlbench"]
    assert sorted(map(str, tags)) == ["None", "lent-2gpu"]  # None: the untagged run, shown as '-'


def test_the_cnn_benchmarks_conclusions_are_shown_only_beside_gpu_runs_at_its_setting():
    fwdbwd = [r for r in _two_gpu() if r.workload == "fwdbwd"]
    cpu = [r for r in fwdbwd if not r.device.startswith("cuda")]
    assert len(cpu) == 8 and len(cpu) < len(fwdbwd)
    claims = [t for t in tables(cpu, with_references=True) if t.title == CNN_TITLE]
    assert not any("Quadro P5000" in str(cell) for t in claims for row in t.rows for cell in row)
    claims = next(t for t in tables(fwdbwd, with_references=True) if t.title == CNN_TITLE)
    assert any("Quadro P5000 == GTX 1080" in str(row[0]) for row in claims.rows)


def _tiny_cpu_volume():
    shape = [24, 128, 128]
    return make_result(spec={"workload": "volume", "model": "unet3d-aniso", "batch": 1, "device": "cpu",
                             "input_shape": []},
                       system={"gpus": [], "cpu": {"model": "AMD EPYC", "cores": 2}},
                       metrics={"device": "cpu", "mvox_per_s": 0.0063, "throughput": 0.0063,
                                "throughput_unit": "Mvox/s", "total_s": 62.4, "volume_shape": shape,
                                "voxels": 24 * 128 * 128, "block": [24, 128, 128], "halo": [8, 48, 48],
                                "extrapolate_voxels": 8.1e12, "wall_to_result_s": 80.0})


def test_an_extrapolation_from_a_tiny_cpu_run_says_so():
    found = tables([_tiny_cpu_volume()])
    prediction = next(t for t in found if t.title.endswith(": prediction"))
    column = next(i for i, h in enumerate(prediction.header) if h.startswith("Platynereis"))
    cell = str(prediction.rows[0][column])
    assert cell.endswith("(extrapolated from a 24x128x128 run on a CPU)"), cell
    assert "(extrapolated …)" in _legend(found)


def test_a_run_line_from_a_tiny_volume_calls_its_hours_rough():
    from dlbench.workloads.volume import describe

    line = describe(_tiny_cpu_volume().measured)
    assert "rough: this run's volume scaled" in line, line


def test_rows_that_share_a_label_are_told_apart_by_their_batch_in_words():
    runs = [r for r in _two_gpu() if r.model == "unet2d-medical" and r.workload in ("train", "infer")]
    phases = next(t for t in tables(runs) if t.title.endswith("time per batch in each phase"))
    labels = [str(row[0]) for row in phases.rows]
    assert any(label.endswith(", batch 4") for label in labels), labels
    assert not any(re.search(r"\(\d+\)$", label) for label in labels)
    assert len(set(labels)) == len(labels)


def test_weak_scaling_keeps_the_data_column_that_tells_its_rows_apart():
    runs = [r for r in _two_gpu() if r.model == "resnet50" and r.workload == "train"]
    scaling = next(t for t in tables(runs) if t.title == "ResNet-50 train weak scaling")
    assert "Data" in scaling.header
    data = [row[scaling.header.index("Data")] for row in scaling.rows]
    assert len(set(data)) == len(data) > 1


def test_no_two_sections_share_a_title_but_for_punctuation(stored):
    titles = [t.title for t in tables(stored, with_references=True)]
    plain = [re.sub(r"[^a-z0-9 ]", "", t.lower()).split() for t in titles]
    assert len({" ".join(p) for p in plain}) == len(titles), titles


def test_the_gpu_benchmarks_sites_are_described(stored):
    found = tables(stored, with_references=True)
    sites = _legend(found)["VM:, Cluster:, SMC:"]
    assert "Supermicro" in sites and "NVLink" in sites and "PCIe" in sites
    for name in ("BenchmarkJade", "NVIDIA UNet_Medical", "GPU in the Cloud (cnn-benchmarks)", "CREMI", "Platynereis"):
        if any(name in text for t in found if t.title != TITLE for text in [t.title, *t.notes, *map(str, sum(t.rows, []))]):
            assert name in _legend(found), name
