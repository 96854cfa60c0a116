import pytest
import torch

from dlbench.errors import UserError
from dlbench.models import registry
from dlbench.models.unet3d import parse_name


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_aniso_matches_the_seed_network():
    entry = registry.resolve("unet3d-aniso")
    assert entry.task == "affinities"
    model = entry.build()
    assert round(n_params(model) / 1e6, 1) == 93.7  # the figure for the seed's CREMI net
    assert model.encoders[-1][0].out_channels == 1500
    assert model.pool.kernel_size == (1, 4, 4) and model.pool.stride == (1, 3, 3)


def test_isotropic_defaults():
    entry = registry.resolve("unet3d")
    config = entry.build().config
    assert (config.depth, config.features, config.growth, config.out_channels) == (4, 32, 2, 1)
    assert entry.task == "mask"


@pytest.mark.parametrize("name, shape", [
    ("unet3d:f=2,d=3", (9, 17, 23)),
    ("unet3d:f=2,d=2,out=3", (5, 8, 11)),
    ("unet3d-aniso:f=2,d=3,g=2", (3, 19, 29)),
    ("unet3d-aniso:f=2,d=2", (4, 10, 13)),
])
def test_output_keeps_odd_input_shapes(name, shape):
    model = registry.build(name).eval()
    out_channels = model.config.out_channels
    with torch.no_grad():
        y = model(torch.rand(2, 1, *shape))
    assert y.shape == (2, out_channels, *shape)
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0  # sigmoid outputs


def test_settings_in_the_name():
    config = parse_name("unet3d-aniso:f=8,d=3,g=4,out=2")
    assert (config.features, config.depth, config.growth, config.out_channels, config.anisotropic) == (8, 3, 4, 2, True)
    assert registry.resolve("unet3d:out=3").task == "affinities"
    with pytest.raises(UserError, match="bad 3D U-Net setting"):
        registry.resolve("unet3d:f=zero")
    with pytest.raises(UserError, match="bad 3D U-Net setting"):
        registry.resolve("unet3d:x=2")


@pytest.mark.parametrize("workload", ["infer", "fwdbwd"])
def test_channels_last_means_channels_last_3d_for_volumes(workload):
    from dlbench.spec import BenchmarkSpec
    from dlbench.launch.execute import execute

    spec = BenchmarkSpec(workload=workload, model="unet3d:d=2,f=4", input_shape=(1, 8, 16, 16), batch=1,
                         channels_last=True, device="cpu", warmup=1, warmup_seconds=0.0, steps=2, min_seconds=0.0)
    result = execute(spec, {})
    assert result.status == "ok", result.error
    assert result.metrics["input_shape"] == [1, 1, 8, 16, 16]
