"""JPEG decoding: the CPU path at reduced size gives the images a full decode gives, no
deprecated decoder runs by default, and the decoder choice with its fallbacks and messages."""

import io
import os
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from conftest import assert_user_error, cli
from dlbench.data import decoders, generate, images
from dlbench.data.decoders import CPU, CUDA, HARDWARE, Facts, choose
from dlbench.data.jpeg_cpu import decode_crop, reduction
from dlbench.errors import UserError


def _jpeg(width: int, height: int, seed: int = 3, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    generate.photo(np.random.default_rng(seed), (width, height)).convert(mode).save(out, "JPEG", quality=90)
    return out.getvalue()


def _difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.int() - b.int()).abs().float()


def test_the_reduction_leaves_the_crop_at_least_the_output_size():
    assert reduction((0, 0, 2048, 1536), (224, 224)) == 4  # 1536 / 4 = 384 >= 224, / 8 = 192 < 224
    assert reduction((0, 0, 1800, 1800), (224, 224)) == 8
    assert reduction((0, 0, 400, 300), (224, 224)) == 1
    assert reduction((0, 0, 2048, 1536), (224, 224), limit=2) == 2


def test_a_decode_at_reduced_size_gives_the_full_decode_within_jpeg_tolerance():
    data = _jpeg(1024, 768)
    reduced = 0
    for seed in range(6):  # the same random crop, decoded at reduced and at full size
        torch.manual_seed(seed)
        small = decode_crop(data, (64, 64), train=True)
        torch.manual_seed(seed)
        full = decode_crop(data, (64, 64), train=True, limit=1)
        assert small.shape == full.shape == (3, 64, 64) and small.dtype == torch.uint8
        diff = _difference(small, full)
        assert diff.mean() < 2 and torch.quantile(diff.flatten(), 0.99) <= 12
        reduced += not torch.equal(small, full)
    assert reduced  # some crops did decode at reduced size
    eval_small, eval_full = decode_crop(data, (64, 64), train=False), decode_crop(data, (64, 64), train=False, limit=1)
    assert _difference(eval_small, eval_full).mean() < 2


def test_the_eval_crop_is_torchvisions_resize_and_centre_crop():
    data = _jpeg(1024, 768)
    full = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
    expected = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop((224, 224))])(full)
    assert _difference(decode_crop(data, (224, 224), train=False), expected).mean() < 4


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grey_and_cmyk_jpegs_come_out_rgb(mode):
    out = decode_crop(_jpeg(640, 480, mode=mode), (32, 32), train=True)
    assert out.shape == (3, 32, 32)


def test_the_workers_decode_without_a_deprecated_decoder(tmp_path):
    generate.generate(tmp_path, 4, classes=1, workers=1, size=(96, 80))
    items, _ = images.scan_folder(tmp_path)
    config = images.ImageConfig(size=(32, 32), batch=2, train=True, workers=0, prefetch=1, seed=0, max_corrupt=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        sample, label, bad = images.FolderImages(items, config)[0]
    assert sample.shape == (3, 32, 32) and bad == []


def test_the_generator_writes_large_photos_of_the_size_asked(tmp_path):
    summary = generate.generate(tmp_path / "big", 2, classes=1, workers=1, size=(320, 240))
    files = sorted((tmp_path / "big").rglob("*.jpg"))
    assert summary["images"] == 2 and [Image.open(f).size for f in files] == [(320, 240)] * 2
    assert_user_error(cli("data", "images", tmp_path / "x", "--size", "10x10"), "each side must be 16 to")
    assert_user_error(cli("data", "images", tmp_path / "x", "--size", "3x64x64"), "--size must be WIDTHxHEIGHT")


@pytest.mark.parametrize("asked, facts, decoder", [
    ("cpu", Facts(cuda=False, library=False, hardware=False), CPU),
    ("gpu", Facts(cuda=True, library=True, hardware=True), CUDA),  # measured faster than the engines on an H200
    ("gpu", Facts(cuda=True, library=True, hardware=False), CUDA),  # an L40S, say: no NVJPG engines
    ("gpu", Facts(cuda=True, library=False, hardware=True), CUDA),  # the extra not installed
    ("hardware", Facts(cuda=True, library=True, hardware=True), HARDWARE),
])
def test_the_decoder_choice_and_its_fallbacks(asked, facts, decoder):
    assert choose(asked, facts) == decoder


@pytest.mark.parametrize("asked, facts, message", [
    ("hardware", Facts(cuda=True, library=False, hardware=True),
     "--decode hardware needs nvImageCodec, which is not installed: pip install 'dlbench[jpeg-gpu]'"),
    ("hardware", Facts(cuda=True, library=True, hardware=False), "this GPU has no hardware JPEG decoders: use --decode gpu"),
    ("hardware", Facts(cuda=False, library=True, hardware=False), "--decode hardware needs a CUDA GPU"),
    ("gpu", Facts(cuda=False, library=False, hardware=False), "--decode gpu needs a CUDA GPU"),
])
def test_what_a_missing_decoder_says(asked, facts, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        choose(asked, facts)


def test_the_install_hint_names_the_extra_the_package_declares():
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "'dlbench[jpeg-gpu]'" in decoders.INSTALL_HINT and extras["jpeg-gpu"] == ["nvidia-nvimgcodec-cu12[nvjpeg]"]
    assert "'dlbench[jpeg-gpu-cu13]'" in decoders.INSTALL_HINT and extras["jpeg-gpu-cu13"] == ["nvidia-nvimgcodec-cu13[nvjpeg]"]


def test_facts_on_the_cpu():
    facts = decoders.facts_for(torch.device("cpu"))
    assert facts.cuda is False and facts.hardware is False


def test_asking_for_the_hardware_decoders_on_the_cpu_is_one_line(tmp_path):
    generate.generate(tmp_path / "imgs", 8, classes=2, workers=1, size=(64, 48))
    proc = cli("run", "train", "--model", "resnet18", "--device", "cpu", "--data", f"folder:{tmp_path / 'imgs'}",
               "--decode", "hardware", "--batch", "2", "--steps", "1", "--db", tmp_path / "r.db")
    assert_user_error(proc, "--decode hardware needs a CUDA GPU")


def test_the_result_and_the_run_line_say_which_decoder_ran(tmp_path, monkeypatch):
    from test_images import _tiny, ok, spec

    from dlbench.models import registry

    monkeypatch.setitem(registry.MODELS, "tiny", registry.ModelEntry("tiny", "Tiny", _tiny, (3, 32, 32)))

    from dlbench.results.measurement import Measurement
    from dlbench.workloads.train import describe

    generate.generate(tmp_path / "imgs", 8, classes=2, workers=1, size=(64, 48))
    m, _ = ok(spec(data=f"folder:{tmp_path / 'imgs'}", batch=4, steps=1))
    assert m["decoder"] == CPU
    assert "JPEGs decoded by pillow" in describe(Measurement.read(m))
    synthetic, _ = ok(spec(batch=4, steps=1))
    assert "decoder" not in synthetic  # nothing decoded, nothing said


def test_the_hardware_library_s_start_up_messages_go_to_a_log(tmp_path, monkeypatch, capfd):
    """nvImageCodec prints an error line for every optional codec it cannot load (JPEG 2000, TIFF)
    from C code at import: a run that uses it keeps them in a log under the cache, not on the terminal."""
    import sys
    import types

    monkeypatch.setenv("DLBENCH_CACHE", str(tmp_path / "cache"))
    fake = types.ModuleType("nvidia.nvimgcodec")

    class Backend:
        def __init__(self, kind):
            self.kind = kind

    def decoder(**_):
        os.write(2, b"[ERROR] [nvjpeg2k_ext] Failed to load nvJPEG2000 library\n")
        return "decoder"

    fake.ColorSpec = types.SimpleNamespace(SRGB="srgb")
    fake.DecodeParams = lambda color_spec: color_spec
    fake.Backend, fake.BackendKind, fake.Decoder = Backend, types.SimpleNamespace(HW_GPU_ONLY=1, GPU_ONLY=2), decoder
    package = types.ModuleType("nvidia")
    package.nvimgcodec = fake
    monkeypatch.setitem(sys.modules, "nvidia", package)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", fake)
    hardware = decoders.HardwareDecode(torch.device("cpu"))
    assert hardware.decoder == "decoder" and hardware.params == "srgb"
    assert "nvJPEG2000" not in capfd.readouterr().err
    assert "Failed to load nvJPEG2000" in decoders.start_log().read_text()


def test_only_the_hardware_decoders_ask_for_the_library_and_the_engines(monkeypatch):
    """`--decode gpu` runs nvjpeg whatever is installed: its facts cost no import search and no NVML query."""
    asked = []
    monkeypatch.setattr(decoders, "library_installed", lambda: asked.append("library") or True)
    monkeypatch.setattr(decoders, "has_hardware_decoders", lambda index: asked.append("engines") or True)
    cuda = torch.device("cuda", 0)
    assert decoders.choose("gpu", decoders.facts_for(cuda, "gpu")) == CUDA and asked == []
    assert decoders.choose("hardware", decoders.facts_for(cuda, "hardware")) == HARDWARE
    assert asked == ["library", "engines"]
