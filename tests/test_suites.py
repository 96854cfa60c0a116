import pytest

from dlbench import suites
from dlbench.errors import UserError


def test_builtin_suites_expand():
    assert {"quick", "cnn-benchmarks"} <= set(suites.builtin_names())
    cnn = suites.load("cnn-benchmarks")
    assert [s.model for s in cnn.specs] == ["alexnet", "googlenet", "vgg16", "vgg19", "resnet18", "resnet34",
                                             "resnet50", "resnet101", "resnet152", "resnet200"]
    assert all(s.batch == 16 and s.input_shape == (3, 224, 224) and s.precision == "fp32" for s in cnn.specs)


def test_matrix_times_explicit_and_overrides(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("defaults: {workload: fwdbwd, batch: 4}\n"
                    "matrix: {model: [resnet18, resnet34], precision: [fp32, bf16]}\n"
                    "specs: [{model: alexnet, batch: 8}]\n")
    suite = suites.load(str(path), {"device": "cpu"})
    assert suite.name == "m" and len(suite.specs) == 5
    assert suite.specs[-1].model == "alexnet" and suite.specs[-1].batch == 8
    assert all(s.device == "cpu" for s in suite.specs)


@pytest.mark.parametrize("text, needle", [
    ("[1, 2]", "must be a mapping"),
    ("defaults: {workload: fwdbwd}\n", "defines no benchmarks"),
    ("matrix: {model: [resnet18]}\n", "missing 'workload'"),
    ("defaults: {workload: fwdbwd}\nmatrix: {model: [resnet18]}\nspecs: 3\n", "'specs' must be a list"),
])
def test_bad_suites(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=needle):
        suites.load(str(path))
