"""compare: ratios and bootstrap intervals on synthetic samples, conclusions, the regression check."""

import json
import re

import numpy as np
import pytest

from dlbench.errors import UserError
from dlbench.report import compare as cmp
from dlbench.results.store import Store

from conftest import assert_user_error, cli, make_result


def _steps(ms: float, n: int = 200, sd: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(rng.normal(ms, ms * sd, n) / 1e3)


def _run(gpu: str, ms: float, seed: int = 0, **kw) -> object:
    return make_result(system={"gpus": [{"name": gpu}], "host": gpu.split()[-1].lower()},
                       samples={"step": _steps(ms, seed=seed, sd=kw.pop("sd", 0.02))}, **kw)


def test_ratio_and_interval_on_synthetic_samples():
    a, b = _run("NVIDIA H200", 10.0, seed=1), _run("NVIDIA A100", 23.0, seed=2)
    c = cmp.compare([a, b], ["H200", "A100"])
    (r,) = c.ratios.values()
    assert r.ratio == pytest.approx(2.3, rel=0.01)
    assert r.low < r.ratio < r.high and r.low == pytest.approx(2.3, rel=0.02) and r.high == pytest.approx(2.3, rel=0.02)
    assert r.high - r.low < 0.1 and not r.within_noise
    lines = cmp.conclusions(c)
    found = re.fullmatch(r"H200 is (2\.\d+)x as fast as A100 on ResNet-50 fwdbwd, 95% CI (2\.\d+)–(2\.\d+); one run each of [\d,]+ and [\d,]+ steps: between-run noise unknown", lines[0])
    assert found and float(found[1]) == pytest.approx(r.ratio, abs=0.01)
    assert float(found[2]) == pytest.approx(r.low, abs=0.01) and float(found[3]) == pytest.approx(r.high, abs=0.01)
    assert found[2] != found[3]  # enough digits to show the interval


def test_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    hits = 0
    trials = 60
    for seed in range(trials):
        a = _steps(10.0, n=80, sd=0.05, seed=2 * seed)
        b = _steps(15.0, n=80, sd=0.05, seed=2 * seed + 1)
        _, low, high = cmp.bootstrap_ratio(a, b, resamples=400, seed=seed)
        hits += low <= 1.5 <= high
    assert 0.85 <= hits / trials <= 1.0


def test_same_distribution_is_within_noise_and_said_so():
    a, b = _run("NVIDIA H200", 10.0, seed=1, tag="before"), _run("NVIDIA H200", 10.0, seed=2, tag="after")
    c = cmp.compare([a, b], ["before", "after"])
    (r,) = c.ratios.values()
    assert r.within_noise
    assert "before and after are within noise on ResNet-50 fwdbwd" in cmp.conclusions(c)[0]
    assert cmp.regressions(c, 0.0) == []


def test_matrix_has_both_directions_oom_and_missing_cells():
    h200, a100 = _run("NVIDIA H200", 10.0), _run("NVIDIA A100", 20.0)
    k80 = make_result(system={"gpus": [{"name": "Tesla K80"}]}, status="oom")
    only_h200 = _run("NVIDIA H200", 5.0, spec={"model": "resnet18"})
    only_a100 = _run("NVIDIA A100", 9.0, spec={"model": "resnet18"})
    c = cmp.compare([h200, a100, k80, only_h200, only_a100], ["NVIDIA H200", "NVIDIA A100", "Tesla K80"])
    tables = {t.title: t for t in cmp.tables(c)}
    matrix = tables["ResNet-50 fwdbwd: relative speed"]
    assert matrix.header == ["", "NVIDIA H200", "NVIDIA A100", "Tesla K80"]
    assert matrix.rows[0][1] == "1.00x" and matrix.rows[0][2].startswith("2.00x (")
    assert matrix.rows[1][1].startswith("0.50x (") and matrix.rows[0][3] == "OOM" and matrix.rows[2][0] == "Tesla K80"
    resnet18 = tables["ResNet-18 fwdbwd: relative speed"]
    assert resnet18.rows[0][3] is None  # K80 did not run it: rendered as '-'
    assert "Tesla K80 ran out of memory on ResNet-50" in " ".join(cmp.conclusions(c))


def test_names_show_only_the_settings_that_differ():
    runs = [_run(gpu, ms, spec=spec) for gpu, ms in (("NVIDIA H200", 10.0), ("NVIDIA A100", 20.0))
            for spec in ({}, {"precision": "bf16"}, {"gpus": 2}, {"channels_last": True})]
    names = set(cmp.compare(runs, ["H200", "A100"]).benchmarks.values())
    assert names == {"ResNet-50 fwdbwd (fp32, 1 GPU, channels-first)", "ResNet-50 fwdbwd (bf16, 1 GPU, channels-first)",
                     "ResNet-50 fwdbwd (fp32, 2 GPUs, channels-first)", "ResNet-50 fwdbwd (fp32, 1 GPU, channels-last)"}
    shapes = [_run(gpu, 10.0, spec={"batch": 8, "input_shape": shape}) for gpu in ("NVIDIA H200", "NVIDIA A100")
              for shape in ([3, 224, 224], [3, 96, 96])]
    assert set(cmp.compare(shapes, ["H200", "A100"]).benchmarks.values()) == {
        "ResNet-50 fwdbwd (3x224x224)", "ResNet-50 fwdbwd (3x96x96)"}
    assert cmp.benchmark_name(runs[0]) == "ResNet-50 fwdbwd (batch 16, fp32, 3x224x224)"  # alone: every setting


def test_names_that_would_be_alike_keep_every_setting():
    a = _run("NVIDIA H200", 10.0, spec={"options": {"data": "synthetic"}})
    b = _run("NVIDIA H200", 10.0, spec={"options": {"data": "synthetic"}, "extra": 1})
    names = cmp.benchmark_names({cmp.benchmark_key(r): r for r in (a, b)})
    assert len(names) == 2 and all("batch 16" in n for n in names.values())


def test_seed_004_conclusions_from_its_own_totals():
    # Seed 004's totals (ms) without samples: the across-models range it states.
    totals = {"alexnet": (19.58, 43.75, 47.61), "googlenet": (52.86, 129.77, 156.64),
              "vgg16": (180.30, 444.35, 449.40), "vgg19": (207.47, 517.50, 527.69),
              "resnet18": (44.06, 109.21, 112.74), "resnet34": (72.61, 177.22, 189.03),
              "resnet50": (147.49, 345.69, 398.81), "resnet101": (223.88, 536.98, 685.52),
              "resnet152": (311.13, 746.16, 983.83)}
    results = []
    for model, times in totals.items():
        for gpu, total in zip(("Quadro P5000", "Quadro M4000", "Tesla K80"), times):
            results.append(make_result(spec={"model": model}, system={"gpus": [{"name": gpu}]},
                                       metrics={"total_ms": total}))
    lines = cmp.conclusions(cmp.compare(results, ["Quadro P5000", "Quadro M4000", "Tesla K80"]))
    assert "Across 9 benchmarks, Quadro P5000 is 2.23x to 2.49x as fast as Quadro M4000" in lines
    # The seed says "1.05x to 1.25x"; its own tables give 1.01x (VGG-16) to 1.32x (ResNet-152).
    assert "Across 9 benchmarks, Quadro M4000 is 1.01x to 1.32x as fast as Tesla K80" in lines
    assert any("(no samples: no interval)" in line for line in lines)


def test_selectors_by_id_prefix_tag_host_and_partial_name():
    a, b = _run("NVIDIA H200", 10.0, tag="nightly"), _run("NVIDIA A100-SXM4-40GB", 20.0)
    assert cmp.select([a, b], a.id[:6]) == [a]
    assert cmp.select([a, b], "nightly") == [a]
    assert cmp.select([a, b], "h200") == [a]  # host
    assert cmp.select([a, b], "A100") == [b]  # unique part of a GPU name
    with pytest.raises(UserError, match="no results match 'V100'; systems: NVIDIA A100-SXM4-40GB, NVIDIA H200"):
        cmp.select([a, b], "V100")
    with pytest.raises(UserError, match="matches several systems"):
        cmp.select([a, b], "NVIDIA")


def _store(db, *results):
    with Store(db) as store:
        store.add_many(results)


def test_regression_needs_a_slowdown_beyond_both_threshold_and_noise():
    base = _run("NVIDIA H200", 10.0, seed=1, tag="base")
    slower = _run("NVIDIA H200", 11.0, seed=2, tag="slower")  # 10% slower, well beyond noise
    noisy = _run("NVIDIA H200", 10.6, seed=3, tag="noisy", sd=0.8)  # 6% slower median, very noisy
    results = [base, slower, noisy]
    (found,) = cmp.regressions(cmp.compare(results, ["base", "slower"]), 5.0)
    assert re.search(r"ResNet-50 fwdbwd: slower is (9\.\d|10\.\d)% slower than base \(", found)
    assert cmp.regressions(cmp.compare(results, ["base", "slower"]), 15.0) == []
    noisy_vs_base = cmp.compare(results, ["base", "noisy"])
    (r,) = noisy_vs_base.ratios.values()
    assert r.ratio > 1.05 and r.within_noise and cmp.regressions(noisy_vs_base, 5.0) == []
    assert cmp.regressions(cmp.compare(results, ["slower", "base"]), 1.0) == []  # faster is no regression
    oom = make_result(status="oom", tag="oom", system={"gpus": [{"name": "NVIDIA H200"}]})
    assert "oom ran out of memory, base did not" in cmp.regressions(cmp.compare([base, oom], ["base", "oom"]), 5)[0]


def test_regression_exit_codes(db):
    _store(db, _run("NVIDIA H200", 10.0, seed=1, tag="base"), _run("NVIDIA H200", 11.0, seed=2, tag="slower"))
    failed = cli("compare", "base", "slower", "--fail-above", "5", "--db", db)
    assert failed.returncode == 1, failed.stderr
    assert re.search(r"^regression: ResNet-50 fwdbwd: slower is \S+% slower than base", failed.stderr)
    assert "base is 1.10x as fast as slower on ResNet-50 fwdbwd" in failed.stdout
    passed = cli("compare", "base", "slower", "--fail-above", "15", "--db", db)
    assert passed.returncode == 0 and "no regression above 15% beyond noise" in passed.stderr


def test_compare_json_output(db, tmp_path):
    _store(db, _run("NVIDIA H200", 10.0, seed=1), _run("NVIDIA A100", 25.0, seed=2))
    out = tmp_path / "cmp.json"
    proc = cli("compare", "H200", "A100", "--format", "json", "-o", out, "--db", db)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["sides"] == ["H200", "A100"] and data["ratios"][0]["ratio"] == pytest.approx(2.5, rel=0.02)
    assert data["tables"][0]["title"] == "Median step time (ms)"


def test_compare_user_errors(db):
    _store(db, _run("NVIDIA H200", 10.0), _run("NVIDIA A100", 20.0, spec={"model": "resnet18"}),
           _run("Tesla V100", 30.0))
    with Store(db) as store:
        before = store.count()
    assert_user_error(cli("compare", "H200", "--db", db), "at least two")
    assert_user_error(cli("compare", "H200", "P100", "--db", db), "no results match 'P100'")
    assert_user_error(cli("compare", "H200", "A100", "--db", db), "no benchmark in common")
    assert_user_error(cli("compare", "H200", "A100", "V100", "--fail-above", "5", "--db", db), "exactly two")
    assert_user_error(cli("compare", "H200", "V100", "--fail-above", "-1", "--db", db), "--fail-above must be ≥ 0")
    assert_user_error(cli("compare", "H200", "V100", "--confidence", "1.5", "--db", db), "confidence")
    assert_user_error(cli("compare", "H200", "V100", "--format", "xml", "--db", db), "must be one of md, json")
    with Store(db) as store:
        assert store.count() == before


def test_labels_from_results_are_escaped_in_markdown(db):
    _store(db, _run("<script>x</script>|A", 10.0), _run("NVIDIA A100", 20.0))
    proc = cli("compare", "<script>x</script>|A", "A100", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "<script>" not in proc.stdout and "&lt;script>x&lt;/script>\\|A" in proc.stdout
