"""Which JPEG decoder a run uses: the GPU's CUDA cores, its hardware decoders, or the CPU.

`--decode gpu` decodes with nvjpeg on the SMs (torchvision's CUDA decoder). `--decode hardware`
takes the GPU's hardware JPEG decoders (NVJPG engines beside the SMs, through nvImageCodec, the
`jpeg-gpu` extra) and fails in one line where they or the library are missing. `--decode cpu`
decodes in the loader workers (Pillow, `data/jpeg_cpu.py`).

Why `gpu` is not the hardware decoders: measured on an H200 (docs/performance.md, "Real JPEGs"),
ResNet-50 training at batch 256 kept 0.915 of synthetic data's rate with nvjpeg and 0.887 with
the engines, and on 2048x1536 photos nvjpeg delivered 1,317 img/s against 1,018. The engines
free the SMs, but the step loses more to the host work around them than the SMs' decoding costs.
Both decode the same pixels as Pillow within JPEG's tolerance (the engines within one level).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from dlbench.descriptors import redirected
from dlbench.errors import UserError
from dlbench.paths import cache_folder

DECODE_CHOICES = ("cpu", "gpu", "hardware")  # --decode
CPU, CUDA, HARDWARE = "pillow", "nvjpeg-cuda", "nvimgcodec-hardware"  # the decoder that ran (Data.decoder)
LIBRARY = "nvidia.nvimgcodec"
INSTALL_HINT = "pip install 'dlbench[jpeg-gpu]' (nvImageCodec; 'dlbench[jpeg-gpu-cu13]' with a CUDA 13 torch)"
# GPUs with NVJPG engines, where NVML cannot say (a driver older than its JPG query)
HARDWARE_GPUS = ("A100", "A30", "A800", "H100", "H200", "H800", "H20", "GH200", "B200", "B100", "GB200")


@dataclass(frozen=True)
class Facts:
    """What the choice depends on."""
    cuda: bool  # the run is on a CUDA GPU
    library: bool  # nvImageCodec imports
    hardware: bool  # the GPU has hardware JPEG decoders


def choose(asked: str, facts: Facts) -> str:
    """The decoder for `--decode asked`, or a UserError saying what is missing and what to do."""
    if asked == "cpu":
        return CPU
    if not facts.cuda:
        raise UserError(f"--decode {asked} needs a CUDA GPU (this run is on the CPU): use --decode cpu")
    if asked == "hardware":
        if not facts.library:
            raise UserError(f"--decode hardware needs nvImageCodec, which is not installed: {INSTALL_HINT}")
        if not facts.hardware:
            raise UserError("--decode hardware: this GPU has no hardware JPEG decoders: use --decode gpu")
        return HARDWARE
    return CUDA


def library_installed() -> bool:
    try:
        return importlib.util.find_spec(LIBRARY) is not None
    except (ImportError, ValueError):  # no `nvidia` namespace at all
        return False


def has_hardware_decoders(torch_index: int) -> bool:
    """Whether the GPU carries JPEG decoder engines: NVML's JPG-engine query answers only
    on GPUs that have them; without NVML or the query, the GPU's name decides."""
    from dlbench.measure import nvml

    lib = nvml.acquire()
    if lib is not None:
        try:
            handle = nvml.handle_for(lib, torch_index)
            if handle is not None and hasattr(lib, "nvmlDeviceGetJpgUtilization"):
                return nvml._call(lib, "nvmlDeviceGetJpgUtilization", handle) is not None
        finally:
            nvml.release()
    import torch

    return named_with_hardware(torch.cuda.get_device_name(torch_index))


def named_with_hardware(gpu_name: str) -> bool:
    """Whether a GPU of this name carries hardware JPEG decoders (for records, where no NVML answers)."""
    return any(model in gpu_name.split() or f"{model}-" in gpu_name for model in HARDWARE_GPUS)


def facts_for(device: Any, asked: str = "hardware") -> Facts:
    """What `choose(asked, ...)` reads. Only `--decode hardware` reads the library and the engines
    (an NVML query at every run's start): for the others they stay False, unasked."""
    cuda = getattr(device, "type", None) == "cuda"
    if asked != "hardware":
        return Facts(cuda, library=False, hardware=False)
    library = library_installed()
    return Facts(cuda, library, cuda and library and has_hardware_decoders(device.index or 0))


def start_log() -> Any:
    """Where nvImageCodec's start-up messages go: a file under dlbench's cache, kept for a look."""
    return cache_folder("logs") / "nvimgcodec-start.log"


class HardwareDecode:
    """A batch of JPEG files decoded by the GPU's hardware decoders (nvImageCodec), as uint8
    CHW tensors on the device; files the engines do not take (progressive JPEGs, odd chroma
    layouts) go to nvImageCodec's CUDA decoder."""

    def __init__(self, device: Any) -> None:
        self.device = device
        with redirected(start_log()):  # it prints every optional codec it lacks (JPEG 2000, TIFF) as an error
            from nvidia import nvimgcodec

            # sRGB in nvImageCodec 0.9 and later, RGB before
            spec = getattr(nvimgcodec.ColorSpec, "SRGB", None) or nvimgcodec.ColorSpec.RGB
            self.params = nvimgcodec.DecodeParams(color_spec=spec)
            self.decoder = nvimgcodec.Decoder(device_id=device.index or 0,
                                              backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY),
                                                        nvimgcodec.Backend(nvimgcodec.BackendKind.GPU_ONLY)])

    def __call__(self, files: list[Any]) -> list[Any]:
        import torch

        stream = torch.cuda.current_stream(self.device)
        # the files as views of the loader's pinned buffer: no copy, and little work holding the
        # interpreter lock that the training loop's thread needs to launch its kernels
        decoded = self.decoder.decode([f.numpy() for f in files], params=self.params, cuda_stream=stream.cuda_stream)
        if any(image is None for image in decoded):
            raise RuntimeError("a file of the batch did not decode")
        return [torch.from_dlpack(image).permute(2, 0, 1) for image in decoded]
