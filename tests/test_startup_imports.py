"""What a benchmark's process and a suite's own process load before measuring: torchvision without
torch._dynamo, models built on the meta device without their initialisation, a launcher's
fingerprint without torch, and a suite's pre-run checks remembered per configuration."""

import socket
import subprocess
import sys

import pytest

from dlbench.commands import suite as suite_command
from dlbench.launch.view import Terminal
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec

from conftest import TINY


def _fresh(code: str) -> list[str]:
    """The lines `code` prints in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_torchvision_loads_without_torch_dynamo_which_still_works_after():
    said = _fresh("import sys\n"
                  "from dlbench import vision\n"
                  "ra = sys.modules['torchvision.ops.roi_align']\n"
                  "print('torch._dynamo' in sys.modules)\n"
                  "import torch._dynamo.utils as real\n"  # the real module, not the stand-in
                  "print(real.is_compile_supported is not None, hasattr(real, 'counters'))\n"
                  "print(ra.is_compile_supported('cpu') == real.is_compile_supported('cpu'))\n")
    assert said == ["False", "True", "True", "True"]


def test_a_torchvision_that_imports_torch_dynamo_itself_gets_the_real_one():
    said = _fresh("import sys, torch\n"
                  "from dlbench import vision\n"
                  "with vision._without_dynamo():\n"
                  "    import torch._dynamo\n"  # what another torchvision release might do while it imports
                  "    from torch._dynamo.utils import counters\n"
                  "print(type(sys.modules['torch._dynamo.utils']) is type(sys), counters is not None)\n"
                  "print(torch.compile(lambda x: x + 1, backend='eager')(torch.ones(2)).tolist())\n")
    assert said == ["True", "True", "[2.0,", "2.0]"]


def test_a_model_on_the_meta_device_counts_its_parameters_without_torch_dynamo():
    said = _fresh("import sys, torch\n"
                  "from dlbench.models import registry\n"
                  "for name in ('resnet18', 'vgg16', 'unet2d'):\n"
                  "    entry = registry.resolve(name)\n"
                  "    meta = registry.build_on_meta(entry)\n"
                  "    assert all(p.is_meta for p in meta.parameters()), name\n"
                  "    print(sum(p.numel() for p in meta.parameters()))\n"
                  "print('torch._dynamo' in sys.modules)\n"
                  "print(sum(p.numel() for p in registry.resolve('vgg16').build().parameters()))\n")
    resnet18, vgg16, unet2d, dynamo, vgg16_built = said
    assert (int(resnet18), int(vgg16)) == (11689512, 138357544) and int(unet2d) > 0
    assert dynamo == "False" and vgg16_built == vgg16  # the same count as a model built and initialised


def test_a_launchers_fingerprint_is_the_workers_without_importing_torch():
    said = _fresh("import json, sys\n"
                  "from dlbench.system.info import launcher_fingerprint\n"
                  "print(json.dumps(launcher_fingerprint(), sort_keys=True, default=str).replace(' ', ''))\n"
                  "print('torch' in sys.modules)\n")
    launcher, torch_loaded = said
    from dlbench.system.info import fingerprint

    worker = fingerprint()
    import json

    mine = json.loads(launcher)
    assert torch_loaded == "False"
    for key in ("torch", "cuda", "cudnn", "gpu_count", "host"):
        assert mine[key] == worker[key], key


SPEC = BenchmarkSpec(**TINY)


def _ok_here(db, spec: BenchmarkSpec, device_system: str | None = None) -> None:
    with Store(db) as store:
        store.add(Result(spec=spec.to_dict(), system={"host": device_system or socket.gethostname()}, status="ok",
                         started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:00:10+00:00"))


def test_a_suite_checks_again_only_what_never_ran_here(db, monkeypatch):
    checked = []
    monkeypatch.setattr("dlbench.commands.run.preflight", lambda spec, view: checked.append(spec.batch))
    other = BenchmarkSpec(**{**TINY, "batch": 3})
    elsewhere = BenchmarkSpec(**{**TINY, "batch": 4})
    _ok_here(db, SPEC)
    _ok_here(db, elsewhere, "another-host")
    with Store(db) as store:
        store.add(Result(spec=other.to_dict(), system={"host": socket.gethostname()}, status="error"))
    proven = suite_command._proven(str(db), socket.gethostname())
    kept = suite_command._runnable([SPEC, other, elsewhere], Terminal(), proven)
    assert kept == [SPEC, other, elsewhere] and checked == [3, 4]  # a failed run or another host's proves nothing


def test_a_suite_whose_every_spec_ran_here_loads_no_torch_for_its_checks(db):
    _ok_here(db, SPEC)
    said = _fresh("import socket, sys\n"
                  "from dlbench.commands import suite\n"
                  "from dlbench.launch.view import Terminal\n"
                  "from dlbench.spec import BenchmarkSpec\n"
                  f"spec = BenchmarkSpec(**{TINY!r})\n"
                  f"proven = suite._proven({str(db)!r}, socket.gethostname())\n"
                  "print(len(suite._runnable([spec], Terminal(), proven)), 'torch' in sys.modules)\n")
    assert said == ["1", "False"]


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_a_gpu_spec_is_checked_every_time(db, device):
    spec = BenchmarkSpec(**{**TINY, "device": device})
    _ok_here(db, spec)
    assert suite_command._proven(str(db), socket.gethostname()) == set()
