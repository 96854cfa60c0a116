import pytest

from dlbench.errors import UserError
from dlbench.spec import BenchmarkSpec


def test_valid_spec_round_trips_through_dict():
    spec = BenchmarkSpec(workload="fwdbwd", model="resnet50", input_shape="3x64x64", precision="bf16")
    again = BenchmarkSpec.from_dict(spec.to_dict())
    assert again == spec and again.input_shape == (3, 64, 64)


@pytest.mark.parametrize("overrides, needle", [
    ({"model": "resnet5"}, "did you mean resnet50"),
    ({"batch": 0}, "--batch must be ≥ 1, got 0"),
    ({"batch": -3}, "--batch must be ≥ 1, got -3"),
    ({"precision": "fp8"}, "--precision must be one of fp32, tf32, fp16, bf16, auto, got 'fp8'"),
    ({"device": "gpu"}, "bad device 'gpu'"),
    ({"workload": "fwdbwdd"}, "unknown workload"),
    ({"steps": 0}, "--steps must be ≥ 1"),
    ({"min_seconds": -1}, "--min-seconds must be ≥ 0 s"),
    ({"warmup_seconds": float("nan")}, "--warmup-seconds must be a finite number"),
    ({"seed": 2**64}, "--seed must be ≤"),
    ({"gpus": 0}, "gpus must be"),
])
def test_bad_specs_are_user_errors(overrides, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        BenchmarkSpec.from_dict({"workload": "fwdbwd", "model": "resnet50", **overrides})


def test_unknown_key_is_named():
    with pytest.raises(UserError, match="unknown spec key 'bacth'.*did you mean batch"):
        BenchmarkSpec.from_dict({"workload": "fwdbwd", "model": "resnet50", "bacth": 3})


def test_any_torchvision_classifier_resolves():
    assert BenchmarkSpec(workload="fwdbwd", model="mobilenet_v3_small").model == "mobilenet_v3_small"


def test_auto_precision_is_for_the_volume_only():
    from dlbench.spec import BenchmarkSpec

    with pytest.raises(UserError, match=r"--precision auto is for `run volume` only; train takes fp32"):
        BenchmarkSpec.from_dict({"workload": "train", "precision": "auto"})
    volume = BenchmarkSpec.from_dict({"workload": "volume"})
    assert volume.precision == "auto" and volume.opts.block == "auto" and volume.opts.volume_shape == "auto"
