"""Datasheet figures of known GPUs, to print measured/datasheet and to scale references.

Figures are the vendor's peak numbers at boost clock, per device as CUDA sees it (a
Tesla K80 board holds two GK210 devices; one entry is one device). Tensor figures are
dense (no 2:4 sparsity) with fp32 accumulation, which is what PyTorch uses. `fp16_tflops`
is also given for P100, whose packed fp16 runs at twice the fp32 rate; on other pre-Volta
chips fp16 runs far below fp32 and is left out (None), as is every type a chip lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    memory_type: str
    bandwidth_gbs: float
    architecture: str
    cuda_cores: int | None
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    release: str  # YYYY-MM
    match: str  # regex, fullmatch against normalize(device name)

    def peak_tflops(self, precision: str) -> float | None:
        """Peak TFLOP/s for a dlbench precision name (fp32, tf32, fp16, bf16, fp8)."""
        return {
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "fp16": self.fp16_tflops,
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
        }.get(precision)


def _gpu(name: str, mem: float, mtype: str, bw: float, arch: str, cores: int | None,
         fp32: float, tf32: float | None, fp16: float | None, bf16: float | None,
         fp8: float | None, release: str, match: str) -> GpuSpec:
    return GpuSpec(name, mem, mtype, bw, arch, cores, fp32, tf32, fp16, bf16, fp8, release, match)


# Order matters: the first entry whose pattern matches wins, so variants come first.
GPUS: list[GpuSpec] = [
    # Kepler, Maxwell
    _gpu("GRID K520", 4, "GDDR5", 160, "Kepler", 1536, 2.45, None, None, None, None, "2013-07", r"k520"),
    _gpu("Tesla K40", 12, "GDDR5", 288, "Kepler", 2880, 5.04, None, None, None, None, "2013-11", r"k40[cm]?"),
    _gpu("Tesla K80", 12, "GDDR5", 240.6, "Kepler", 2496, 4.37, None, None, None, None, "2014-11", r"k80m?"),
    _gpu("GeForce GTX TITAN X", 12, "GDDR5", 336.5, "Maxwell", 3072, 6.60, None, None, None, None, "2015-03",
         r"(gtx)?titanx(maxwell)?"),
    _gpu("Quadro M4000", 8, "GDDR5", 192, "Maxwell", 1664, 2.57, None, None, None, None, "2015-06", r"m4000"),
    _gpu("Tesla M60", 8, "GDDR5", 160, "Maxwell", 2048, 4.82, None, None, None, None, "2015-08", r"m60"),
    _gpu("Tesla M40", 12, "GDDR5", 288, "Maxwell", 3072, 6.84, None, None, None, None, "2015-11", r"m40(24gb)?"),
    # Pascal
    _gpu("GeForce GTX 1080 Ti", 11, "GDDR5X", 484, "Pascal", 3584, 11.34, None, None, None, None, "2017-03",
         r"(gtx)?1080ti"),
    _gpu("GeForce GTX 1080", 8, "GDDR5X", 320, "Pascal", 2560, 8.87, None, None, None, None, "2016-05",
         r"(gtx)?1080"),
    _gpu("GeForce GTX 1070", 8, "GDDR5", 256, "Pascal", 1920, 6.46, None, None, None, None, "2016-06",
         r"(gtx)?1070"),
    _gpu("TITAN Xp", 12, "GDDR5X", 547.7, "Pascal", 3840, 12.15, None, None, None, None, "2017-04", r"titanxp"),
    _gpu("TITAN X (Pascal)", 12, "GDDR5X", 480, "Pascal", 3584, 10.97, None, None, None, None, "2016-08",
         r"titanxpascal"),
    _gpu("Quadro P5000", 16, "GDDR5X", 288, "Pascal", 2560, 8.87, None, None, None, None, "2016-10", r"p5000"),
    _gpu("Tesla P40", 24, "GDDR5", 346, "Pascal", 3840, 11.76, None, None, None, None, "2016-09", r"p40"),
    _gpu("Tesla P100 PCIe 12GB", 12, "HBM2", 549, "Pascal", 3584, 9.3, None, 18.7, None, None, "2016-06",
         r"p100pcie12gb.*"),
    _gpu("Tesla P100 SXM2", 16, "HBM2", 732, "Pascal", 3584, 10.6, None, 21.2, None, None, "2016-04",
         r"p100sxm.*"),
    _gpu("Tesla P100 PCIe 16GB", 16, "HBM2", 732, "Pascal", 3584, 9.3, None, 18.7, None, None, "2016-06",
         r"p100((?!\d)|\d+gb).*"),
    # Volta, Turing
    _gpu("Tesla V100S PCIe", 32, "HBM2", 1134, "Volta", 5120, 16.4, None, 130, None, None, "2019-11", r"v100s(?!xm).*"),
    _gpu("Tesla V100 PCIe", 16, "HBM2", 900, "Volta", 5120, 14.0, None, 112, None, None, "2017-06",
         r"v100pcie.*"),
    _gpu("Tesla V100 SXM2 32GB", 32, "HBM2", 900, "Volta", 5120, 15.7, None, 125, None, None, "2018-03",
         r"v100(sxm[23]|dgxs)?32gb.*"),
    _gpu("Tesla V100 SXM2", 16, "HBM2", 900, "Volta", 5120, 15.7, None, 125, None, None, "2017-05", r"v100((?!\d)|\d+gb).*"),
    _gpu("TITAN V", 12, "HBM2", 652.8, "Volta", 5120, 14.9, None, 110, None, None, "2017-12", r"titanv"),
    _gpu("Tesla T4", 16, "GDDR6", 320, "Turing", 2560, 8.1, None, 65, None, None, "2018-09", r"t4"),
    _gpu("GeForce RTX 2080 Ti", 11, "GDDR6", 616, "Turing", 4352, 13.45, None, 53.8, None, None, "2018-09",
         r"rtx2080ti"),
    _gpu("TITAN RTX", 24, "GDDR6", 672, "Turing", 4608, 16.3, None, 130.5, None, None, "2018-12", r"titanrtx"),
    _gpu("Quadro RTX 8000", 48, "GDDR6", 672, "Turing", 4608, 16.3, None, 130.5, None, None, "2018-08",
         r"rtx8000"),
    # Ada before Turing's "RTX 6000" so that the Ada card is not taken for it
    _gpu("RTX 6000 Ada", 48, "GDDR6", 960, "Ada Lovelace", 18176, 91.1, 182.1, 364.2, 364.2, 728.5, "2022-12",
         r"rtx6000ada.*"),
    _gpu("Quadro RTX 6000", 24, "GDDR6", 672, "Turing", 4608, 16.3, None, 130.5, None, None, "2018-08",
         r"rtx6000"),
    # Ampere
    _gpu("GeForce RTX 3080", 10, "GDDR6X", 760, "Ampere", 8704, 29.8, 29.8, 59.5, 59.5, None, "2020-09",
         r"rtx3080"),
    _gpu("GeForce RTX 3090", 24, "GDDR6X", 936, "Ampere", 10496, 35.6, 35.6, 71.0, 71.0, None, "2020-09",
         r"rtx3090"),
    _gpu("RTX A6000", 48, "GDDR6", 768, "Ampere", 10752, 38.7, 77.4, 154.8, 154.8, None, "2020-10", r"rtxa6000"),
    _gpu("A40", 48, "GDDR6", 696, "Ampere", 10752, 37.4, 74.8, 149.7, 149.7, None, "2020-10", r"a40"),
    _gpu("A10", 24, "GDDR6", 600, "Ampere", 9216, 31.2, 62.5, 125, 125, None, "2021-04", r"a10g?"),
    _gpu("A30", 24, "HBM2", 933, "Ampere", 3584, 10.3, 82, 165, 165, None, "2021-04", r"a30"),
    _gpu("A100 PCIe 80GB", 80, "HBM2e", 1935, "Ampere", 6912, 19.5, 156, 312, 312, None, "2021-06",
         r"a100(80gbpcie|pcie80gb).*"),
    _gpu("A100 SXM4 80GB", 80, "HBM2e", 2039, "Ampere", 6912, 19.5, 156, 312, 312, None, "2020-11",
         r"a100(sxm4?)?80gb.*"),
    _gpu("A100 PCIe 40GB", 40, "HBM2", 1555, "Ampere", 6912, 19.5, 156, 312, 312, None, "2020-06",
         r"a100(40gb)?pcie.*"),
    _gpu("A100 SXM4 40GB", 40, "HBM2", 1555, "Ampere", 6912, 19.5, 156, 312, 312, None, "2020-05", r"a100((?!\d)|\d+gb).*"),
    # Ada Lovelace
    _gpu("GeForce RTX 4090", 24, "GDDR6X", 1008, "Ada Lovelace", 16384, 82.6, 82.6, 165.2, 165.2, 330.3,
         "2022-10", r"rtx4090"),
    _gpu("L4", 24, "GDDR6", 300, "Ada Lovelace", 7424, 30.3, 60, 121, 121, 242, "2023-03", r"l4"),
    _gpu("L40S", 48, "GDDR6", 864, "Ada Lovelace", 18176, 91.6, 183, 366, 366, 733, "2023-08", r"l40s"),
    _gpu("L40", 48, "GDDR6", 864, "Ada Lovelace", 18176, 90.5, 90.5, 181, 181, 362, "2022-10", r"l40"),
    # Hopper, Blackwell
    _gpu("H100 NVL", 94, "HBM3", 3900, "Hopper", 16896, 60, 417.5, 835, 835, 1670, "2023-03", r"h100nvl.*"),
    _gpu("H100 PCIe", 80, "HBM2e", 2000, "Hopper", 14592, 51.2, 378, 756, 756, 1513, "2022-09",
         r"h100(80gb)?pcie.*"),
    _gpu("H100 SXM5", 80, "HBM3", 3350, "Hopper", 16896, 67, 494.7, 989.4, 989.4, 1978.9, "2022-09",
         r"h100((?!\d)|\d+gb).*"),
    _gpu("GH200", 96, "HBM3", 4000, "Hopper", 16896, 67, 494.7, 989.4, 989.4, 1978.9, "2023-05", r"gh200((?!\d)|\d+gb).*"),
    _gpu("H200 NVL", 141, "HBM3e", 4800, "Hopper", 16896, 60, 417.5, 835, 835, 1670, "2024-11", r"h200nvl.*"),
    _gpu("H200 SXM", 141, "HBM3e", 4800, "Hopper", 16896, 67, 494.7, 989.4, 989.4, 1978.9, "2023-11",
         r"h200((?!\d)|\d+gb).*"),
    _gpu("B200", 180, "HBM3e", 8000, "Blackwell", None, 75, 1125, 2250, 2250, 4500, "2024-03", r"b200((?!\d)|\d+gb).*"),
]

_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro|grid)\b")


def normalize(name: str) -> str:
    """'Tesla V100-SXM2-16GB' -> 'v100sxm216gb': no vendor words, only letters and digits."""
    text = _VENDOR_WORDS.sub(" ", name.lower())
    return re.sub(r"[^a-z0-9]", "", text)


def lookup(name: str) -> GpuSpec | None:
    """The datasheet entry for a device name as CUDA/NVML report it, or None if unknown."""
    key = normalize(name)
    if not key:
        return None
    for gpu in GPUS:
        if re.fullmatch(gpu.match, key):
            return gpu
    return None
