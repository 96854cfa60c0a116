import re

import pytest
import torch

from conftest import assert_user_error, cli, make_result
from dlbench.errors import UserError
from dlbench.report import render_markdown
from dlbench.results import exchange
from dlbench.results.measurement import Utilisation
from dlbench.results.record import Result
from dlbench.results.store import Store
from dlbench.system import ceilings as c
from dlbench.system.records import annotate, ceilings_for, utilisation

CPU = torch.device("cpu")


def test_cpu_matmul_ceiling_keeps_the_best_size():
    ceiling = c.matmul("fp32", CPU, sizes=(32, 96))
    assert ceiling.name == "matmul_fp32_tflops" and ceiling.unit == "TFLOP/s"
    assert set(ceiling.details["by_size"]) == {"32", "96"}  # text keys: the record goes through JSON
    assert ceiling.value == max(ceiling.details["by_size"].values()) > 0
    assert "2n^3" in ceiling.method


def test_what_the_cpu_cannot_measure_says_why():
    for measure in (lambda: c.matmul("bf16", CPU), lambda: c.matmul("fp8", CPU),
                    lambda: c.host_device(CPU, "h2d", True), lambda: c.jpeg_decode_gpu(CPU),
                    lambda: c.allreduce(1)):
        with pytest.raises(c.Unmeasured):
            measure()


def test_copy_bandwidth_counts_read_and_written_bytes(monkeypatch):
    monkeypatch.setattr(c, "time_call", lambda fn, device, **kw: (fn(), 0.5)[1])
    ceiling = c.copy_bandwidth(CPU, nbytes=1 << 20)
    assert ceiling.value == pytest.approx(2 * (1 << 20) / 0.5 / 1e9)
    assert c.copy_bandwidth(CPU, nbytes=1 << 22).name == "copy_gbs"


def test_time_call_runs_batches_of_calls():
    calls = []
    seconds = c.time_call(lambda: calls.append(1), CPU, reps=3, calls=4)
    assert len(calls) == 2 + 3 * 4 and seconds >= 0


def test_jpeg_decode_per_core_on_a_real_jpeg():
    data = c.synthetic_jpeg(64, 80)
    assert bytes(data[:2].tolist()) == b"\xff\xd8"
    ceiling = c.jpeg_decode_cpu(seconds=0.1)
    assert ceiling.value > 0 and ceiling.details["all_cores_estimate_img_s"] >= ceiling.value


def test_disk_read_of_a_folder(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 300_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"y" * 200_000)
    ceiling = c.disk_read(tmp_path, chunk=1 << 16)
    assert ceiling.details["bytes"] == 500_000 and ceiling.details["files"] == 2 and ceiling.value > 0
    assert c.disk_read(tmp_path, max_bytes=1000, chunk=1 << 16).details["files"] == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="nothing readable"):
        c.disk_read(tmp_path / "empty")
    with pytest.raises(UserError, match="no such file"):
        c.disk_read(tmp_path / "missing")


def test_allreduce_bus_bandwidth_over_two_gloo_ranks():
    ceiling = c.allreduce(2, backend="gloo", nbytes=1 << 16)
    assert ceiling.value > 0 and ceiling.details["world"] == 2
    assert ceiling.value == pytest.approx(ceiling.details["algbw_gbs"])  # 2(n-1)/n = 1 for two ranks


def test_ceilings_are_found_by_host_and_gpu():
    def record(host, gpu, started, value):
        system = {"host": host, "gpus": [{"name": gpu}]}
        return Result(spec={"workload": "system", "model": ""}, system=system, started=started,
                      metrics={"device": "cuda:0", "matmul_bf16_tflops": value})

    old, new = record("n1", "NVIDIA H200", "2026-01-01", 700.0), record("n1", "NVIDIA H200", "2026-02-01", 750.0)
    others = [record("n2", "NVIDIA H200", "2026-03-01", 1.0), record("n1", "NVIDIA A40", "2026-03-01", 2.0)]
    run = make_result(spec={"precision": "bf16"}, system={"host": "n1"},
                      metrics={"device": "cuda:0", "achieved_tflops": 300.0})
    assert ceilings_for(run, [old, new, *others]) is new
    u = utilisation(run, [old, new, *others])
    assert u.ceiling_fraction == pytest.approx(0.4) and u.ceiling_tflops == 750.0
    assert u.ceiling_precision == "bf16" and u.ceiling_record == new.id
    assert u.datasheet_fraction == pytest.approx(300 / 989.4)
    annotate(run, [old])
    assert run.metrics["ceiling_fraction"] == pytest.approx(300 / 700)
    assert utilisation(make_result(), [new]) == Utilisation()  # nothing achieved recorded, nothing claimed


def test_system_command_measures_stores_and_reports(db, tmp_path):
    data = tmp_path / "dataset.bin"
    data.write_bytes(b"z" * 2_000_000)
    proc = cli("system", "--device", "cpu", "--disk", data, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "matmul fp32" in proc.stdout and "disk read" in proc.stdout and "Not measured: matmul bf16" in proc.stdout
    # piped: one line each, and a ceiling that takes over 5 s says its line again with the time left
    stages = [line for line in proc.stderr.splitlines() if re.fullmatch(r"measuring \S+ \(\d+/\d+\)", line)]
    assert stages[0].endswith("(1/%d)" % len(stages)) and stages[-1].endswith("(%d/%d)" % (len(stages), len(stages)))
    with Store(db) as store:
        [record] = store.results(workload="system")
    m = record.metrics
    assert m["matmul_fp32_tflops"] > 0 and m["copy_gbs"] > 0 and m["disk_read_gbs"] > 0
    # the rate one loader worker reaches through the real JPEG folder path, beside the decoder's alone
    assert "JPEG loader, 1 worker" in proc.stdout and m["jpeg_loader_cpu_img_s_per_core"] > 0
    assert "one DataLoader worker" in m["ceilings"]["jpeg_loader_cpu_img_s_per_core"]["method"]
    assert m["ceilings"]["copy_gbs"]["method"] and "bf16" in " ".join(m["unmeasured"])
    assert "Ceilings: CPU" in render_markdown([record])
    exported = tmp_path / "machine.jsonl"
    assert cli("export", "--db", db, "-o", exported).returncode == 0
    with Store(tmp_path / "other.db") as other:
        other.add_many(exchange.read_jsonl(exported))
        assert other.results(workload="system")[0].to_dict() == record.to_dict()


def test_system_command_bad_input_keeps_the_store(db, tmp_path):
    with Store(db) as store:
        store.add(make_result())
    assert_user_error(cli("system", "--device", "cpu", "--disk", tmp_path / "nope", "--db", db), "no such file")
    with Store(db) as store:
        assert store.count() == 1


def test_the_cpu_matmul_ceiling_is_the_faster_of_two_libraries(monkeypatch):
    from dlbench.system import ceilings

    for mm_s, conv_s in ((2e-3, 1e-3), (1e-3, 4e-3)):  # either library may be the faster one
        timings = iter([mm_s, conv_s])  # matmul() times torch.mm, then the 1x1 convolution
        monkeypatch.setattr(ceilings, "time_call", lambda fn, device, timings=timings, **_: (fn(), next(timings))[1])
        found = ceilings.matmul("fp32", torch.device("cpu"), sizes=(64,))
        assert "the faster of torch.mm fp32 and the same product as a 1x1 convolution" in found.method
        assert found.value == pytest.approx(2 * 64**3 / min(mm_s, conv_s) / 1e12)


