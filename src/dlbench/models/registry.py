"""The model registry: what a model name means. Builders never download weights: every
model starts from random init.

The built-in models register in `dlbench.models` (models/__init__.py, classifiers.py,
unet3d_config.py), plug-ins in their own modules; importing the registry through
`dlbench.models` gives the full registry. Names that are not entries resolve to any
torchvision classification model, to `timm:<name>` when timm is installed, or to a model file.

Knowing a name loads no torch (the command line checks names before anything runs): builders
import their model's module when called (`built`), and torchvision's classifiers are known by
name for the torchvision release that list was taken from.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import lru_cache, partial
from importlib import metadata
from typing import TYPE_CHECKING, Callable

from dlbench.errors import UserError
from dlbench.units import suggest

if TYPE_CHECKING:
    import torch.nn as nn


@dataclass(frozen=True)
class ModelEntry:
    name: str
    title: str  # how reports name it, e.g. "ResNet-50"
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...] = (3, 224, 224)
    task: str = "classify"  # what the output means, so training picks the loss: classify, affinities, mask, segment


MODELS: dict[str, ModelEntry] = {}
ALIASES: dict[str, str] = {}  # other spellings of an entry's name
# Families whose names carry settings ('unet3d:f=16,d=3'): prefix -> entry builder.
FAMILIES: dict[str, Callable[[str], ModelEntry]] = {}
BUILT_IN: list[object] = []  # the entries and families of dlbench itself (dlbench.models fills it)


def register(entry: ModelEntry, aliases: tuple[str, ...] = ()) -> ModelEntry:
    MODELS[entry.name] = entry
    ALIASES.update(dict.fromkeys(aliases, entry.name))
    return entry


def register_family(prefix: str, entry_for: Callable[[str], ModelEntry]) -> None:
    """Names '<prefix>' and '<prefix>:<settings>' resolve to `entry_for(name)`."""
    FAMILIES[prefix] = entry_for


def built(module: str, name: str, *args, **kwargs) -> Callable[[], nn.Module]:
    """A builder that calls `module.name(*args, **kwargs)`, importing the module (and torch) only then."""
    return partial(_build, module, name, *args, **kwargs)


def _build(module: str, name: str, *args, **kwargs) -> nn.Module:
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


def torchvision(name: str, **kwargs) -> Callable[[], nn.Module]:
    """A builder of torchvision's `name`, randomly initialised."""
    return partial(_torchvision_model, name, **kwargs)


def _torchvision_model(name: str, **kwargs) -> nn.Module:
    from dlbench import vision  # noqa: F401, I001 - first: a torchvision made for another torch fails in one line
    import torchvision.models as tvm

    return tvm.get_model(name, weights=None, **kwargs)


def build_on_meta(entry: ModelEntry) -> nn.Module:
    """`entry`'s model on the meta device, with its initialisation skipped: its shapes, parameter count
    and FLOPs need no values, and initialising on meta goes through torch._refs, whose first call
    imports all of torch._dynamo (seconds on a busy CPU, in a run that compiles nothing)."""
    import torch

    with torch.device("meta"), _skip_init()():
        return entry.build()


@lru_cache(maxsize=1)
def _skip_init() -> type:
    """A torch function mode in which an in-place call on a meta tensor (`normal_`, `zero_`,
    `nn.init.kaiming_normal_`) returns the tensor untouched."""
    from torch import Tensor
    from torch.overrides import TorchFunctionMode

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            target = args[0] if args else kwargs.get("tensor")  # nn.init passes it by name
            if name.endswith("_") and not name.endswith("__") and isinstance(target, Tensor) and target.is_meta:
                return target
            return func(*args, **kwargs)

    return SkipInit


# torchvision's classification models (`torchvision.models.list_models(module=torchvision.models)`)
# in the release below, so that a name is checked without importing torch; with another release
# installed, torchvision itself is asked.
TORCHVISION_RELEASE = "0.29"
TORCHVISION_CLASSIFIERS = (
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny", "densenet121", "densenet161",
    "densenet169", "densenet201", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
    "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_l",
    "efficientnet_v2_m", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5", "mnasnet0_75",
    "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_16gf",
    "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf", "regnet_y_400mf",
    "regnet_y_800mf", "regnet_y_8gf", "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0",
    "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_0", "squeezenet1_1", "swin_b", "swin_s", "swin_t",
    "swin_v2_b", "swin_v2_s", "swin_v2_t", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
    "vgg19_bn", "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32", "wide_resnet101_2", "wide_resnet50_2",
)


@lru_cache(maxsize=None)
def _torchvision_classifiers() -> tuple[str, ...]:
    try:
        installed = metadata.version("torchvision")
    except metadata.PackageNotFoundError:
        installed = None
    if installed is not None and installed.split("+")[0].split(".")[:2] == TORCHVISION_RELEASE.split("."):
        return TORCHVISION_CLASSIFIERS
    from dlbench import vision  # noqa: F401, I001 - one line when torchvision is missing or made for another torch
    import torchvision.models as tvm

    return tuple(tvm.list_models(module=tvm))


def _timm_entry(name: str) -> ModelEntry:
    try:
        import timm
    except ImportError:
        raise UserError(f"model {name!r} needs timm, which is not installed (pip install timm)") from None
    timm_name = name.removeprefix("timm:")
    known = timm.list_models()
    if timm_name not in known:
        raise UserError(f"unknown timm model {timm_name!r}{suggest(timm_name, known)}")
    config = timm.get_pretrained_cfg(timm_name)
    shape = tuple(config.input_size) if config is not None and config.input_size else (3, 224, 224)
    return ModelEntry(name, timm_name, partial(timm.create_model, timm_name, pretrained=False), shape, "classify")


MODEL_FILES = (".pt", ".pth", ".ts", ".pt2")  # TorchScript (torch.jit.save) or torch.export (.pt2) files


def load_model_file(path: str) -> nn.Module:
    """A user's own model: a torch.export archive (.pt2) or a TorchScript file."""
    import warnings

    import torch

    try:
        if path.endswith(".pt2"):
            return torch.export.load(path).module()
        with warnings.catch_warnings():  # TorchScript is deprecated but still what many users have
            warnings.simplefilter("ignore", FutureWarning)
            return torch.jit.load(path, map_location="cpu")
    except Exception as error:  # noqa: BLE001 - any failure to load is the user's file
        raise UserError(f"cannot load model file {path}: {str(error).strip().splitlines()[0][:200]}") from None


def _file_entry(name: str) -> ModelEntry:
    from pathlib import Path

    if not Path(name).is_file():
        raise UserError(f"model file {name} does not exist")
    return ModelEntry(name, Path(name).name, partial(load_model_file, name), (1, 32, 256, 256), "file")


def resolve(name: str) -> ModelEntry:
    """The entry for `name`; an unknown name is a UserError that suggests close names."""
    name = ALIASES.get(name, name)
    if name in MODELS:
        return MODELS[name]
    if name.startswith("timm:"):
        return _timm_entry(name)
    if name.partition(":")[0] in FAMILIES:
        return FAMILIES[name.partition(":")[0]](name)
    if name.endswith(MODEL_FILES):
        return _file_entry(name)
    if name in _torchvision_classifiers():
        return ModelEntry(name, name, torchvision(name))
    known = sorted(set(MODELS) | set(_torchvision_classifiers()))
    raise UserError(f"unknown model {name!r}{suggest(name, known)}; `dlbench models` lists them")


def title(name: str) -> str:
    """The display name (ResNet-50), or the name as given for models this install lacks
    (results imported from elsewhere may name them)."""
    try:
        return resolve(name).title
    except UserError:
        return name


LAYOUTS = {3: "CxHxW", 4: "CxZxYxX"}


def check_input(entry: ModelEntry, shape: tuple[int, ...]) -> None:
    """An input shape (without the batch) has the model's rank and channels; a model file's
    expectations are unknown until it is loaded, so it is not checked here."""
    if entry.task == "file":
        return
    want, given = entry.input_shape, "x".join(map(str, shape))
    example = "x".join(map(str, want))
    if len(shape) != len(want):
        layout = LAYOUTS.get(len(want), f"{len(want)} sizes")
        raise UserError(f"--input-shape {given} has {len(shape)} sizes, but {entry.name} takes {len(want)} "
                        f"({layout}, e.g. {example})")
    if shape[0] != want[0]:
        raise UserError(f"--input-shape {given} has {shape[0]} channel{'s' if shape[0] > 1 else ''}, but "
                        f"{entry.name} takes {want[0]} (e.g. {example})")


_SHAPE_WORDS = ("size", "shape", "channel", "dimension", "height", "width")


def check_fits(name: str, shape: tuple[int, ...] | None, batch: int, training: bool = False) -> None:
    """Run the model on the meta device (no memory, no arithmetic) to refuse, before anything
    runs, sizes it cannot take: too small for its pooling, not what its layers expect. With
    `training`, in training mode, where a batch of one is judged at the model's own shape (None) too:
    BatchNorm trains only on more than one value per channel (batch x the sizes where it sits), which
    resnet18 at batch 1 and 3x32x32 does not give its last layers (1x512x1x1), and the meta device
    raises the same error as the real run.
    Failures that are not about sizes (an operation without a meta implementation) say
    nothing about the input and are left to the real run."""
    import torch

    entry = resolve(name)
    if not _safe_to_build(name):
        return
    shape = tuple(shape or entry.input_shape)
    if shape == tuple(entry.input_shape) and not (training and batch == 1):
        return  # the model's own shape fits it; only a batch of one can fail to train
    try:
        model = build_on_meta(entry).train(training)
        with torch.device("meta"):
            with torch.no_grad():
                model(torch.empty(batch, *shape))
    except (RuntimeError, ValueError, AssertionError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        if training and "when training" in first:
            raise UserError(_untrainable(name, shape, batch, first)) from None
        about_sizes = isinstance(error, AssertionError) or any(word in first.lower() for word in _SHAPE_WORDS)
        if "meta" in first.lower() or not about_sizes:
            return
        raise UserError(f"--input-shape {'x'.join(map(str, shape))} does not fit {name}: {first}") from None
    except Exception:  # noqa: BLE001 - the check cannot judge this model; the run will
        return


def _untrainable(name: str, shape: tuple[int, ...], batch: int, error: str) -> str:
    larger = "--batch 2 or more, or a larger --input-shape" if batch == 1 else "a larger --input-shape"
    error = re.sub(r"torch\.Size\((.*?)\)", r"\1", error)
    return (f"{name} cannot train on a batch of {batch} at {'x'.join(map(str, shape))}: a normalisation layer "
            f"sees one value per channel ({error}); give {larger}")


def _safe_to_build(name: str) -> bool:
    """Whether the launcher may build `name` to check it: a plug-in's model or a model file may
    do anything when built or run (abort, hang), which only the benchmark's own process may risk."""
    name = ALIASES.get(name, name)
    family = name.partition(":")[0]
    if name in MODELS or family in FAMILIES:
        ours = MODELS[name] if name in MODELS else FAMILIES[family]
        return any(ours is built_in for built_in in BUILT_IN)
    return name.startswith("timm:") or name in _torchvision_classifiers()


def build(name: str) -> nn.Module:
    return resolve(name).build()


def names() -> list[str]:
    return list(MODELS)
