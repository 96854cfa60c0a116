"""The 3D U-Nets' configurations and registry names (see models/unet3d.py), without torch:
a name is parsed and checked before anything runs; the net is built by models/unet3d.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlbench.errors import UserError
from dlbench.models.registry import ModelEntry, built, register, register_family


@dataclass(frozen=True)
class UNetConfig:
    features: int = 32
    depth: int = 4  # levels; the net pools depth - 1 times
    growth: int = 2
    out_channels: int = 1
    in_channels: int = 1
    anisotropic: bool = False  # True: the seed's CREMI design (xy-only pooling by 3, ELU, nearest upsampling)


ANISO = UNetConfig(features=12, depth=4, growth=5, out_channels=3, anisotropic=True)
ISO = UNetConfig(features=32, depth=4, growth=2, out_channels=1, anisotropic=False)


_KEYS = {"f": "features", "d": "depth", "g": "growth", "out": "out_channels", "in": "in_channels"}


def parse_name(name: str) -> UNetConfig:
    """'unet3d', 'unet3d-aniso' or either with ':f=16,d=3,g=2,out=3' -> its configuration."""
    family, _, settings = name.partition(":")
    if family not in ("unet3d", "unet3d-aniso"):
        raise UserError(f"unknown 3D U-Net {family!r}: use unet3d or unet3d-aniso")
    config = ANISO if family == "unet3d-aniso" else ISO
    if not settings:
        return config
    changes: dict[str, int] = {}
    for item in settings.split(","):
        key, _, value = item.partition("=")
        if key.strip() not in _KEYS or not value.strip().isdigit() or int(value) < 1:
            raise UserError(f"bad 3D U-Net setting {item!r} in {name!r}: use f=N (features), d=N (depth), "
                            f"g=N (growth), out=N (output channels), in=N (input channels), each a positive integer")
        changes[_KEYS[key.strip()]] = int(value)
    return replace(config, **changes)


def entry_for(name: str) -> ModelEntry:
    """A registry entry for any unet3d / unet3d-aniso name (with or without settings)."""
    config = parse_name(name)
    if config.anisotropic:
        title = "3D U-Net (aniso)" if name == "unet3d-aniso" else f"3D U-Net (aniso, {name.partition(':')[2]})"
        shape = (config.in_channels, 40, 432, 432)  # the seed's training patch
    else:
        title = "3D U-Net" if name == "unet3d" else f"3D U-Net ({name.partition(':')[2]})"
        shape = (config.in_channels, 64, 512, 512)  # the prediction tile of the benchmark
    task = "affinities" if config.out_channels == 3 else "mask"
    return ModelEntry(name, title, built("dlbench.models.unet3d", "UNet3D", config), shape, task)


for _family in ("unet3d-aniso", "unet3d"):
    register_family(_family, entry_for)
    register(entry_for(_family))
