"""NVML code paths against a stand-in module that answers with recorded readings."""

import json
import time
from pathlib import Path
from types import SimpleNamespace

from dlbench.measure.monitor import Monitor
from dlbench.measure import nvml

READINGS = json.loads((Path(__file__).parent / "data" / "nvml_readings.json").read_text())


class FakeNvml:
    """Answers like pynvml does, from one recorded reading; some queries unsupported."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_FEATURE_ENABLED, NVML_NVLINK_MAX_LINKS = 1, 18

    def __init__(self, raw, pcie=(4, 8, 5, 16, 5)):
        self.raw, self.pcie = raw, pcie

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        raise RuntimeError("NVML_ERROR_NOT_FOUND")

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self.raw["utilization_gpu"], memory=self.raw["utilization_memory"])

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self.raw["clock_sm_mhz"]

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=self.raw["memory_used_bytes"], total=150_000_000_000)

    def nvmlDeviceGetPowerUsage(self, h):
        return self.raw["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.raw["energy_mj"]

    def nvmlDeviceGetTemperature(self, h, kind):
        return self.raw["temperature_c"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self.raw["throttle_reasons"]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self.pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self.pcie[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self.pcie[3]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self.pcie[4]

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link < 18:
            return 1
        raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700_000

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=1, usedGpuMemory=2_000_000_000), SimpleNamespace(pid=2, usedGpuMemory=None)]


def test_read_raw_returns_nvml_numbers_and_tolerates_missing_queries():
    fake = FakeNvml(READINGS[7])
    assert nvml.read_raw(fake, "h0") == READINGS[7]
    del FakeNvml.nvmlDeviceGetTotalEnergyConsumption  # a GPU without an energy counter
    try:
        assert nvml.read_raw(FakeNvml(READINGS[7]), "h0")["energy_mj"] is None
    finally:
        FakeNvml.nvmlDeviceGetTotalEnergyConsumption = lambda self, h: self.raw["energy_mj"]


def test_device_facts_link_clocks_power_processes():
    facts = nvml.device_facts(FakeNvml(READINGS[0]), "h0")
    assert facts["name"] == "NVIDIA H200" and facts["ecc"] is True and facts["nvlinks_active"] == 18
    assert (facts["pcie_gen"], facts["pcie_width"], facts["pcie_gen_max"], facts["pcie_width_max"]) == (4, 8, 5, 16)
    assert facts["power_limit_w"] == 700.0 and facts["sm_clock_max_mhz"] == 1980
    assert [p["pid"] for p in nvml.other_processes(FakeNvml(READINGS[0]), "h0", own_pid=2)] == [1]


def test_monitor_through_the_nvml_path(monkeypatch):
    fake = FakeNvml(READINGS[8])
    released = []
    monkeypatch.setattr(nvml, "acquire", lambda: fake)
    monkeypatch.setattr(nvml, "release", lambda: released.append(1))
    with Monitor("cuda:0", interval=0.01) as monitor:
        time.sleep(0.05)
    summary = monitor.data.summary()
    assert summary["throttled"] and summary["throttle_reasons"] == ["sw_power_cap"]
    assert summary["power_mean_w"] == 700.0 and summary["other_processes"] == 2
    assert released == [1]


def test_the_launcher_is_named_not_counted_as_another_process(tmp_path):
    # A real chain: a script (any script: a benchmark harness, a notebook) starts this child,
    # which asks NVML (a stand-in listing both) who else is on the GPU.
    import subprocess
    import sys

    child = ("import json, os, sys; sys.path[:0] = sys.argv[1:]; from test_nvml import FakeNvml, READINGS; "
             "from types import SimpleNamespace as P; from dlbench.measure import nvml; "
             "fake = FakeNvml(READINGS[0]); fake.nvmlDeviceGetComputeRunningProcesses = lambda h: "
             "[P(pid=os.getppid(), usedGpuMemory=7e8), P(pid=4242424, usedGpuMemory=1e9), "
             "P(pid=os.getpid(), usedGpuMemory=5e9)]; "
             "print(json.dumps([os.getppid(), nvml.other_processes(fake, 'h0')]))")
    launcher = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))  # harness stand-in"
    tests = str(Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", launcher, sys.executable, "-c", child, tests, *sys.path],
                         capture_output=True, text=True, check=True).stdout
    parent, found = json.loads(out)
    command = found[0].pop("launcher")  # its command line, cut to what a report shows
    assert command.startswith(f"{sys.executable} -c {launcher}"[:100]) and len(command) == 120
    assert found == [{"pid": parent, "memory_gb": 0.7}, {"pid": 4242424, "memory_gb": 1.0}]
    from dlbench.measure.monitor import summarize_readings

    found[0]["launcher"] = command
    figures = summarize_readings([nvml.parse(READINGS[0], 0.0)], found)
    assert figures["other_processes"] == 1 and figures["other_processes_memory_gb"] == 1.0
    assert figures["launcher_processes"] == 1 and figures["launcher_memory_gb"] == 0.7
    assert figures["launcher_commands"] == [command]
