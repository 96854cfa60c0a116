"""How records of schema 1 and 2 name their model: those records carry no display name, and
reading them must not need the model registry (which loads torch). The table is the built-in
registry as it was then, frozen; records of schema 3 on carry their own title."""

from __future__ import annotations

from pathlib import PurePath

TITLES = {
    "alexnet": "AlexNet", "googlenet": "Inception-V1", "vgg16": "VGG-16", "vgg19": "VGG-19",
    "resnet18": "ResNet-18", "resnet34": "ResNet-34", "resnet50": "ResNet-50", "resnet101": "ResNet-101",
    "resnet152": "ResNet-152", "resnet200": "ResNet-200", "unet3d-aniso": "3D U-Net (aniso)", "unet3d": "3D U-Net",
    "unet2d-medical": "U-Net (original)", "unet2d": "U-Net (padded)",
}
ALIASES = {"inception-v1": "googlenet", "inception_v1": "googlenet"}
_FAMILIES = {"unet3d": "3D U-Net ({})", "unet3d-aniso": "3D U-Net (aniso, {})", "timm": "{}"}
_MODEL_FILES = (".pt", ".pth", ".ts", ".pt2")


def legacy_title(model: str) -> str:
    """The title the registry of schema 2 gave `model`; any other name stands for itself."""
    model = ALIASES.get(model, model)
    family, colon, settings = model.partition(":")
    if model in TITLES:
        return TITLES[model]
    if colon and family in _FAMILIES:
        return _FAMILIES[family].format(settings)
    if model.endswith(_MODEL_FILES):
        return PurePath(model).name
    return model
