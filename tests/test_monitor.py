import json
import time
from pathlib import Path

import pytest
import torch

from dlbench.measure.loop import run_steps
from dlbench.measure.monitor import Monitor, summarize_readings, window_energy_j
from dlbench.measure import nvml

READINGS = json.loads((Path(__file__).parent / "data" / "nvml_readings.json").read_text())


def test_parse_converts_nvml_units():
    parsed = nvml.parse(READINGS[6], t=0.6)
    assert parsed["power_w"] == pytest.approx(700.0)
    assert parsed["energy_j"] == pytest.approx(912_345.678 + 6 * 68)
    assert parsed["memory_used_gb"] == pytest.approx(60.529705, rel=1e-6)
    assert parsed["sm_clock_mhz"] == 1755 and parsed["util"] == 100 and parsed["temperature_c"] == 64
    assert parsed["throttle"] == ["sw_power_cap"]
    idle = nvml.parse(READINGS[-1], t=1.0)
    assert idle["throttle"] == ["gpu_idle"] and idle["energy_j"] is None


def test_throttle_bits_decode_every_reason():
    assert nvml.throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert nvml.throttle_names(0) == [] and nvml.throttle_names(None) == []


def test_summary_of_a_power_capped_window():
    parsed = [nvml.parse(raw, t=0.1 * i) for i, raw in enumerate(READINGS[:12])]
    s = summarize_readings(parsed, [{"pid": 4242, "memory_gb": 1.5}])
    assert s["energy_j"] == pytest.approx(11 * 68.0) and s["energy_method"] == "energy counter"
    assert s["throttled"] and s["throttle_reasons"] == ["sw_power_cap"] and s["throttled_share"] == 0.5
    assert s["sm_clock_min_mhz"] == 1755 and s["sm_clock_mean_mhz"] == pytest.approx((1980 + 1755) / 2)
    assert s["temperature_max_c"] == 69 and s["power_max_w"] == pytest.approx(700)
    assert s["other_processes"] == 1 and s["other_processes_memory_gb"] == 1.5


def test_energy_falls_back_to_integrated_power():
    readings = [{"t": 0.0, "power_w": 100.0, "energy_j": None}, {"t": 2.0, "power_w": 300.0, "energy_j": None}]
    assert window_energy_j(readings) == (pytest.approx(400.0), "power integrated")
    assert window_energy_j([{"t": 0.0}]) == (None, None)


def test_monitor_thread_samples_recorded_readings():
    feed = iter(READINGS[:12] * 100)
    with Monitor("cuda:0", interval=0.01, reader=lambda: next(feed), others=lambda: []) as monitor:
        time.sleep(0.1)
    data = monitor.data
    assert data.available and len(data.readings) >= 3  # one at each end plus the thread's
    ts = [r["t"] for r in data.readings]
    assert ts == sorted(ts)
    trace = data.trace()
    assert trace["available"] and len(trace["power_w"]) == len(data.readings)


def test_processes_are_read_once_a_second_and_at_the_end(monkeypatch):
    """One query a second, and one at the end: the per-process query costs a step at the edge of host-bound."""
    import dlbench.measure.monitor as monitor_module

    monkeypatch.setattr(monitor_module, "PROCESS_EVERY_S", 0.2)
    feed = iter(READINGS[:12] * 1000)
    queries: list[int] = []
    monitor = Monitor("cuda:0", interval=0.01, reader=lambda: next(feed), others=lambda: [])
    monitor._utilisation = lambda since: queries.append(since) or [(4242, len(queries), 30.0)]
    with monitor:
        time.sleep(0.5)
    readings = len(monitor.data.readings)
    assert readings >= 10 and 3 <= len(queries) <= 5  # the start, each 0.2 s, the end
    assert len(monitor.data.process_samples) == len(queries)


def test_a_failing_reader_leaves_gaps_not_errors():
    def broken():
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    with Monitor("cuda:0", interval=0.01, reader=broken, others=lambda: []) as monitor:
        time.sleep(0.03)
    # no GPU figure from a reader that never answered; the host's CPU figures stay
    assert monitor.data.available and monitor.data.readings == []
    assert not {"gpu_util_mean", "monitor_readings", "energy_j"} & set(monitor.data.summary())


def test_monitor_degrades_without_gpu_or_nvml(monkeypatch):
    with Monitor("cpu") as monitor:
        pass
    assert not monitor.data.available and "cpu" in monitor.data.reason
    monkeypatch.setattr(nvml, "acquire", lambda: None)
    with Monitor("cuda:0") as monitor:
        pass
    assert monitor.data.trace() == {"available": False, "reason": nvml.last_error()}


def test_run_steps_reports_common_metrics_on_the_cpu():
    w = torch.randn(64, 64)
    x = torch.randn(8, 64)

    def step(timer):
        (x @ w).relu()
        timer.mark("compute")

    measured = run_steps(step, torch.device("cpu"), warmup=1, warmup_seconds=0.0, steps=3, min_seconds=0.0)
    assert measured.flops_per_step == 2 * 8 * 64 * 64
    common = measured.common_metrics(items_per_step=8)
    assert common.utilisation.achieved_tflops > 0
    assert common.traces["monitor"]["available"] is False
    assert "energy_j" not in common.to_metrics()  # nothing measured, nothing claimed
    off = run_steps(step, torch.device("cpu"), warmup=0, warmup_seconds=0.0, steps=1, min_seconds=0.0,
                    flops=False, monitor=False)
    assert off.flops_per_step is None and off.monitor is None


def test_result_line_shows_utilisation_energy_and_throttling():
    from conftest import make_result
    from dlbench.launch.execute import describe

    result = make_result(metrics={"achieved_tflops": 151.2, "ceiling_fraction": 0.2, "ceiling_tflops": 756.0,
                                  "ceiling_precision": "bf16", "datasheet_fraction": 0.15, "datasheet_tflops": 989.4,
                                  "energy_j_per_step": 42.0, "throttled": True, "throttle_reasons": ["sw_power_cap"]})
    line = describe(result)
    assert "151 TFLOP/s, 20% of the measured bf16 matmul ceiling of 756 TFLOP/s;" in line and "42.0 J/step" in line
    assert "THROTTLED: sw_power_cap" in line
    volume = make_result(metrics={"energy_j_per_step": 414.0, "energy_j_per_mvox": 1.76})
    assert "414 J/step (1.76 J/Mvox)" in describe(volume)
    assert "TFLOP/s" not in describe(make_result())
    unmeasured = make_result(metrics={"achieved_tflops": 151.2, "ceiling_precision": "fp8", "datasheet_fraction": 0.08,
                                      "datasheet_tflops": 1979.0})
    assert "151 TFLOP/s, 8% of the datasheet fp8 peak of 1979 TFLOP/s (no ceiling measured here)" in describe(unmeasured)
