import pytest

from dlbench.system.datasheet import GPUS, lookup, normalize

SEED_GPUS = {
    "Tesla K80": "Tesla K80",
    "Tesla M60": "Tesla M60",
    "Quadro M4000": "Quadro M4000",
    "Quadro P5000": "Quadro P5000",
    "GeForce GTX 1080": "GeForce GTX 1080",
    "GeForce GTX 1080 Ti": "GeForce GTX 1080 Ti",
    "Tesla P40": "Tesla P40",
    "Tesla P100-PCIE-16GB": "Tesla P100 PCIe 16GB",
    "Tesla P100-SXM2-16GB": "Tesla P100 SXM2",
    "Tesla V100-SXM2-16GB": "Tesla V100 SXM2",
    "Tesla V100-SXM2-32GB": "Tesla V100 SXM2 32GB",
    "Tesla V100-PCIE-32GB": "Tesla V100 PCIe",
    "Tesla V100S-PCIE-32GB": "Tesla V100S PCIe",
    "NVIDIA A40": "A40",
    "NVIDIA A10G": "A10",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA H100 80GB HBM3": "H100 SXM5",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada",
    "Quadro RTX 6000": "Quadro RTX 6000",
    "TITAN X (Pascal)": "TITAN X (Pascal)",
    "GeForce GTX TITAN X": "GeForce GTX TITAN X",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
    "NVIDIA L40S": "L40S",
    "NVIDIA L4": "L4",
    "1080Ti": "GeForce GTX 1080 Ti",
    "V100": "Tesla V100 SXM2",
}


@pytest.mark.parametrize("reported,expected", SEED_GPUS.items())
def test_lookup_matches_device_names(reported, expected):
    gpu = lookup(reported)
    assert gpu is not None and gpu.name == expected


@pytest.mark.parametrize("name", ["", "cpu", "Intel Xeon", "AMD Instinct MI250X", "NVIDIA A1000"])
def test_unknown_names_give_none(name):
    assert lookup(name) is None


def test_normalize_drops_vendor_words_and_punctuation():
    assert normalize("Tesla V100-SXM2-16GB") == "v100sxm216gb"
    assert normalize("NVIDIA GeForce GTX 1080 Ti") == "gtx1080ti"


def test_every_entry_is_found_by_its_own_name_and_is_plausible():
    names = [g.name for g in GPUS]
    assert len(names) == len(set(names))
    for gpu in GPUS:
        assert lookup(gpu.name) is gpu, gpu.name
        assert gpu.memory_gb > 0 and gpu.bandwidth_gbs > 0 and gpu.fp32_tflops > 0
        assert len(gpu.release) == 7 and gpu.release[4] == "-"
        for precision in ("tf32", "fp16", "bf16", "fp8"):
            peak = gpu.peak_tflops(precision)
            assert peak is None or peak >= gpu.fp32_tflops * 0.99, (gpu.name, precision)


def test_hopper_figures():
    h200 = lookup("NVIDIA H200")
    assert (h200.memory_gb, h200.bandwidth_gbs, h200.bf16_tflops, h200.fp8_tflops) == (141, 4800, 989.4, 1978.9)
    assert lookup("Tesla K80").fp8_tflops is None and lookup("Tesla K80").peak_tflops("bf16") is None


# Names that more than one pattern fits: the entry listed first in datasheets.yaml must win.
ORDER_SENSITIVE = {
    "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada",
    "Quadro RTX 6000": "Quadro RTX 6000",
    "Tesla P100-PCIE-12GB": "Tesla P100 PCIe 12GB",
    "Tesla P100-SXM2-16GB": "Tesla P100 SXM2",
    "Tesla V100S-PCIE-32GB": "Tesla V100S PCIe",
    "Tesla V100-DGXS-32GB": "Tesla V100 SXM2 32GB",
    "NVIDIA A100-PCIE-80GB": "A100 PCIe 80GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA H100 80GB PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA GH200 480GB": "GH200",
    "NVIDIA B200": "B200",
}


@pytest.mark.parametrize("reported,expected", ORDER_SENSITIVE.items())
def test_order_sensitive_lookups(reported, expected):
    assert lookup(reported).name == expected


def test_table_is_read_once_from_the_data_file_in_order():
    from importlib import resources

    import yaml

    from dlbench.system import datasheet

    entries = yaml.safe_load(resources.files("dlbench.system").joinpath("datasheets.yaml").read_text())["gpus"]
    assert [e["name"] for e in entries] == [g.name for g in GPUS]
    assert [e["pattern"] for e in entries] == [g.match for g in GPUS]
    assert all(isinstance(e["release"], str) for e in entries)  # quoted, not read as a date
    assert lookup("NVIDIA B200") is datasheet.GPUS[-1]  # one set of objects, cached
    assert datasheet._load.cache_info().misses == 1
    position = {g.name: i for i, g in enumerate(GPUS)}
    assert position["RTX 6000 Ada"] < position["Quadro RTX 6000"]
    b200 = lookup("B200")
    assert (b200.cuda_cores, b200.fp32_tflops, b200.fp8_tflops, b200.release) == (None, 75, 4500, "2024-03")
    assert lookup("Tesla V100S-PCIE-32GB").match == r"v100s(?!xm).*"
