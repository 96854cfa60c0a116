"""Seed 004's GPU table from the datasheet, with measured ceilings from `dlbench system` records."""

from dlbench.report import gpus, render_markdown
from dlbench.results.record import Result

from conftest import make_result


def _system_record(gpu: str, device: str = "cuda:0", **ceilings) -> Result:
    return Result(spec={"workload": "system", "model": "", "device": device},
                  system={"host": "node1", "gpus": [{"name": gpu}], "cpu": {"model": "Xeon", "cores": 8}},
                  metrics={"device": device, **ceilings,
                           "ceilings": {k: {"value": v, "unit": "x", "method": "m"} for k, v in ceilings.items()}})


def test_gpu_table_layout_sorted_by_fp32_with_unknown_gpus_as_dashes():
    results = [make_result(system={"gpus": [{"name": n}]}) for n in ("Tesla K80", "NVIDIA H200", "Mystery GPU 9")]
    (table,) = gpus.tables(results)
    lines = table.markdown().splitlines()
    assert lines[0] == "## GPUs" and lines[1].startswith("What each GPU is on paper")
    del lines[1]
    assert lines[2] == "|GPU|Memory|Architecture|CUDA Cores|FP32 TFLOPS|Release Date|"
    assert lines[3] == "|---|---|---|---:|---:|---|"
    assert lines[4] == "|NVIDIA H200|141GB HBM3e|Hopper|16896|67.00|Nov 2023|"
    assert lines[5] == "|Tesla K80|12GB GDDR5|Kepler|2496|4.37|Nov 2014|"
    assert lines[6] == "|Mystery GPU 9|-|-|-|-|-|"


def test_measured_ceilings_appear_beside_the_datasheet():
    results = [make_result(), make_result(system={"gpus": [{"name": "Tesla K80"}]}),
               _system_record("NVIDIA H200", matmul_fp32_tflops=51.2, matmul_bf16_tflops=756.0, copy_gbs=4250.0),
               _system_record("Tesla K80", device="cpu", matmul_fp32_tflops=1.5)]  # CPU ceilings: no GPU's
    (table, measured) = gpus.tables(results)  # one table of both was 15 columns wide with every ceiling
    assert measured.title == "GPUs: measured ceilings"
    assert measured.header == ["GPU", "FP32 TFLOPS", "BF16 TFLOPS", "copy GB/s"]
    assert measured.rows == [["NVIDIA H200", "51.2", "756.0", "4250.0"]]  # the K80 measured nothing here
    assert table.rows[0] == ["NVIDIA H200", "141GB HBM3e", "Hopper", 16896, "67.00", "Nov 2023"]
    assert "|Tesla K80|12GB GDDR5|Kepler|2496|4.37|Nov 2014|" in render_markdown(results)


def test_no_gpus_no_table():
    assert gpus.tables([make_result(spec={"device": "cpu"}, system={"gpus": []})]) == []
