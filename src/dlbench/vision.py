"""torchvision, checked against torch on first import.

pip can pair a torch with a torchvision made for another torch (a CPU torch from the PyTorch
index beside a CUDA torchvision from PyPI, or an upgrade of one without the other); importing
torchvision then fails with 'operator torchvision::nms does not exist' deep inside its own
import. Every dlbench module that uses torchvision imports this one first, so the mismatch ends
in one line that names the pair and the pip command that installs a matching one.
"""

from __future__ import annotations

import importlib
import sys
import types
from contextlib import contextmanager
from importlib import metadata
from typing import Iterator

import torch

from dlbench.errors import UserError

INDEX = "https://download.pytorch.org/whl"
TORCHVISION_OFFSET = 15  # torchvision 0.N is made for torch 2.(N-15): 0.19 for 2.4, 0.29 for 2.14


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def made_for(torchvision_version: str | None) -> str | None:
    """The torch minor version ('2.11') that a torchvision release ('0.26.0') is made for."""
    parts = (torchvision_version or "").split("+")[0].split(".")
    if len(parts) < 2 or parts[0] != "0" or not parts[1].isdigit() or int(parts[1]) < TORCHVISION_OFFSET:
        return None
    return f"2.{int(parts[1]) - TORCHVISION_OFFSET}"


def matching_torchvision(torch_version: str) -> str:
    """The pip requirement of the torchvision made for this torch: 'torchvision==0.29.*' for 2.14.1."""
    major, minor = (torch_version.split("+")[0].split(".") + ["", ""])[:2]
    return f"torchvision==0.{int(minor) + TORCHVISION_OFFSET}.*" if major == "2" and minor.isdigit() else "torchvision"


def index_url() -> str:
    """The PyTorch wheel index of the installed torch's build (cpu, cu130, rocm6.4)."""
    if torch.version.cuda:
        return f"{INDEX}/cu{torch.version.cuda.replace('.', '')}"
    if getattr(torch.version, "hip", None):
        return f"{INDEX}/rocm{'.'.join(torch.version.hip.split('.')[:2])}"
    return f"{INDEX}/cpu"


def fix_command() -> str:
    public = torch.__version__.split("+")[0]
    return (f"pip install --force-reinstall torch=={public} '{matching_torchvision(torch.__version__)}' "
            f"--index-url {index_url()}")


def mismatch(error: Exception) -> str:
    """One line: what does not match, and the command that installs a matching pair."""
    vision = _installed("torchvision")
    expected = made_for(vision)
    if expected and not torch.__version__.startswith(expected + "."):
        what = f"torchvision {vision} is made for torch {expected}, but torch here is {torch.__version__}"
    else:  # the versions pair, the builds do not (CPU and CUDA)
        what = f"torchvision {vision or '(version unknown)'} was built for another torch than {torch.__version__}"
    return f"{what} ({str(error).strip()}); install a matching pair: {fix_command()}"


def _is_compile_supported(device_type: str) -> bool:
    from torch._dynamo.utils import is_compile_supported

    return is_compile_supported(device_type)


class _StandIn(types.ModuleType):
    """torch._dynamo.utils while torchvision imports: its one helper, and for any other name (a
    torchvision that wants more of it) the real module, imported then."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # what the import system asks of any module
            raise AttributeError(name)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


@contextmanager
def _without_dynamo() -> Iterator[None]:
    """torchvision.ops.roi_align imports one helper from torch._dynamo.utils, which imports all of
    torch._dynamo (3-6 s on two busy cores, half of a CPU benchmark's start-up) for a function it
    calls only while compiling. While torchvision imports, that module is a stand-in whose helper
    imports the real one when called; the stand-in is gone before anything else can import it."""
    if "torch._dynamo.utils" in sys.modules:
        yield
        return
    stand_in = _StandIn("torch._dynamo.utils")
    stand_in.is_compile_supported = _is_compile_supported  # type: ignore[attr-defined]
    sys.modules["torch._dynamo.utils"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("torch._dynamo.utils") is stand_in:
            del sys.modules["torch._dynamo.utils"]


def _check() -> None:
    try:
        with _without_dynamo():
            import torchvision  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "torchvision":
            raise
        raise UserError(f"torchvision is not installed; install the one made for torch {torch.__version__}: "
                        f"pip install '{matching_torchvision(torch.__version__)}' "
                        f"--index-url {index_url()}") from None
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
        raise UserError(mismatch(error)) from None


_check()
