"""The model registry: what a model name means. Builders never download weights: every
model starts from random init.

Models register where they are defined (models/classifiers.py, unet2d.py, unet3d.py, or a
plug-in); `dlbench.models` imports the built-in ones, so importing the registry through it
gives the full registry. Names that are not entries resolve to any torchvision
classification model, to `timm:<name>` when timm is installed, or to a model file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Callable

import torch.nn as nn
import torchvision.models as tvm

from dlbench.errors import UserError
from dlbench.units import suggest


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


def torchvision(name: str, **kwargs) -> Callable[[], nn.Module]:
    """A builder of torchvision's `name`, randomly initialised."""
    return partial(tvm.get_model, name, weights=None, **kwargs)


@lru_cache(maxsize=None)
def _torchvision_classifiers() -> tuple[str, ...]:
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
        with torch.device("meta"):
            model = entry.build().train(training)
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
