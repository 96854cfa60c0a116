from dlbench.report import render_markdown
from dlbench.report.markdown import cell

from conftest import make_result


def _section(text: str, title: str) -> list[str]:
    block = text.split(f"## {title}\n")[1].split("\n## ")[0]
    return block.strip().splitlines()


def test_seed_004_layout_sorted_by_total_with_cpu_and_oom_rows():
    results = [
        make_result(system={"gpus": [{"name": "Tesla K80"}], "cudnn": "5.1.10"},
                    metrics={"forward_ms": 124.38, "backward_ms": 274.43, "total_ms": 398.81}),
        make_result(metrics={"forward_ms": 5.0, "backward_ms": 10.0, "total_ms": 15.0}),
        make_result(spec={"device": "cpu"}, system={"cpu": {"model": "Xeon E5-2630 v3", "cores": 16}},
                    metrics={"forward_ms": 2477.61, "backward_ms": 4149.64, "total_ms": 6627.25}),
        make_result(system={"gpus": [{"name": "GTX 1080"}], "cudnn": "5.1.10"}, status="oom",
                    metrics={"batch_tried": 16}),
    ]
    lines = _section(render_markdown(results), "ResNet-50")[1:]  # after the line on what the table shows
    assert lines[0] == "(input 16 x 3 x 224 x 224)"
    assert lines[1].startswith("Forward, Backward: medians over the measured steps; Total = Forward + Backward")
    assert lines[3] == "|GPU or CPU|cuDNN|Forward (ms)|Backward (ms)|Total (ms)|Median step (ms)|"
    assert lines[4] == "|---|---|---:|---:|---:|---:|"
    assert lines[5] == "|NVIDIA H200|9.1.0|5.00|10.00|15.00|15.00|"
    assert lines[6] == "|Tesla K80|5.1.10|124.38|274.43|398.81|398.81|"
    assert lines[7] == "|CPU: Xeon E5-2630 v3 (16 cores)|-|2477.61|4149.64|6627.25|6627.25|"
    assert lines[8] == "|GTX 1080|5.1.10|OOM|OOM|OOM|OOM|"


def test_a_host_bound_row_is_marked_and_says_how_long_the_gpu_waited():
    """A GPU busy 63% of the window: the forward and backward times are mostly the host's launching
    (ResNet-50 at batch 16 on a slow host). A busy GPU, or too few monitor readings, leave no mark."""
    times = {"forward_ms": 20.15, "backward_ms": 16.83, "total_ms": 36.98}
    slow = make_result(metrics={**times, "gpu_util_mean": 63.0, "monitor_readings": 12}, samples={"step": [0.037] * 20})
    lines = _section(render_markdown([slow]), "ResNet-50")
    assert "|NVIDIA H200|9.1.0|20.15|16.83|36.98 (host-bound)|36.98|" in lines
    assert "(host-bound), NVIDIA H200: the GPU waited for the host 37% of each step (by NVML's busy share)" in "\n".join(lines)
    assert "|(host-bound)|The GPU waited for the host" in render_markdown([slow])  # the legend explains the mark
    for metrics in ({"gpu_util_mean": 97.0, "monitor_readings": 12}, {"gpu_util_mean": 63.0, "monitor_readings": 3}):
        busy = make_result(metrics={**times, **metrics}, samples={"step": [0.037] * 20})
        assert "host-bound" not in render_markdown([busy])


def test_latest_result_per_system_and_precision_rows_apart():
    old = make_result(started="2026-01-01T00:00:00+00:00", metrics={"forward_ms": 33.0, "backward_ms": 66.0})
    new = make_result(started="2026-02-01T00:00:00+00:00", metrics={"total_ms": 15.0})
    bf16 = make_result(spec={"precision": "bf16"}, metrics={"forward_ms": 2.0, "backward_ms": 5.0, "total_ms": 7.0})
    lines = _section(render_markdown([old, new, bf16]), "ResNet-50")[1:]
    assert lines[5].startswith("|NVIDIA H200 (bf16)|") and lines[6] == "|NVIDIA H200|9.1.0|5.00|10.00|15.00|15.00|"
    assert len(lines) == 7


def test_models_in_seed_order_with_titles():
    text = render_markdown([make_result(spec={"model": m}) for m in ("resnet200", "alexnet", "googlenet")])
    assert text.index("## AlexNet") < text.index("## Inception-V1") < text.index("## ResNet-200")


def test_text_from_results_is_escaped():
    evil = make_result(system={"gpus": [{"name": "<script>alert(1)</script>|x"}]})
    text = render_markdown([evil])
    assert "<script>" not in text and "&lt;script>" in text and "\\|x" in text
    assert cell(None) == "-"


def test_empty_store_says_what_to_run():
    assert "dlbench suite cnn-benchmarks" in render_markdown([])


def test_volumetric_training_throughput_is_in_patches():
    from dlbench.report.images import throughput_tables

    spec = {"workload": "train", "model": "unet3d-aniso", "batch": 1, "input_shape": [1, 40, 432, 432],
            "precision": "bf16", "options": {"data": "volume:/data/cremi.h5"}}
    results = [make_result(spec={**spec, "gpus": g}, metrics={"throughput": t, "throughput_unit": "patch/s"})
               for g, t in ((1, 7.14), (2, 14.08))]
    (table, scaling) = throughput_tables(results)
    assert "Throughput - mixed precision (bf16) [patch/s]" in table.header
    assert table.notes[1] == "Throughput: patches over total measured time, all processes together."  # one precision: no speed-up
    row = dict(zip(scaling.header, scaling.rows[0]))
    # seed 003's weak scaling: throughput of N GPUs over 1 GPU; its efficiency (÷ N) apart
    assert row["Weak scaling - mixed precision (bf16)"] == "1.97"
    assert row["Scaling efficiency - mixed precision (bf16)"] == "0.99"
