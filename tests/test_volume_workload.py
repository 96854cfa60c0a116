import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import assert_user_error, cli, scripted
from dlbench.data.blocking import Blocking
from dlbench.data.generate_volume import generate
from dlbench.data import prediction_store
from dlbench.data.prediction_store import PredictionStore
from dlbench.data.volumes import open_volume
from dlbench.errors import UserError
from dlbench.models import registry, slabs
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.launch.execute import execute
from dlbench.workloads.volume import preflight

SHAPE = (10, 30, 34)  # not divisible by the blocks below


class ConvNet(nn.Module):
    """Two 3x3x3 convolutions: receptive radius 2, so a halo of 2 makes every voxel exact.
    `inner` more width-to-width convolutions make a slower model (a run that can be stopped partway)."""

    def __init__(self, width: int = 3, inner: int = 0) -> None:
        super().__init__()
        middle = [layer for _ in range(inner) for layer in (nn.Conv3d(width, width, 3, padding=1), nn.Tanh())]
        self.body = nn.Sequential(nn.Conv3d(1, width, 3, padding=1), nn.Tanh(), *middle,
                                  nn.Conv3d(width, 2, 3, padding=1), nn.Sigmoid())

    def forward(self, x):
        return self.body(x)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    torch.manual_seed(0)
    model_file = root / "conv.pt"
    scripted(ConvNet()).save(str(model_file))
    slow_file = root / "slow.pt"
    scripted(ConvNet(width=32)).save(str(slow_file))
    slower_file = root / "slower.pt"  # about 10-20 ms a 4x8x8 block on one core
    scripted(ConvNet(width=64, inner=2)).save(str(slower_file))
    bad_file = root / "pooling.pt"
    scripted(nn.Sequential(nn.Conv3d(1, 1, 3, padding=1), nn.MaxPool3d(2))).save(str(bad_file))
    volume = generate(root / "v.h5", SHAPE, "hdf5", chunks=(4, 16, 16), seed=1, labels=False)
    return {"root": root, "model": str(model_file), "slow": str(slow_file), "slower": str(slower_file),
            "bad": str(bad_file), "input": str(volume)}


def predict(data, output, *, model=None, block=(4, 16, 16), halo=(2, 2, 2), dtype="float16", **options):
    spec = BenchmarkSpec(workload="volume", model=model or data["model"], batch=1, device="cpu", warmup=1, steps=1,
                         options={"input": data["input"], "output": str(output),
                                  "block": block if isinstance(block, str) else "x".join(map(str, block)),
                                  "halo": "x".join(map(str, halo)), "dtype": dtype, "readers": 2, "writers": 2,
                                  "queue": 2, **options})
    return execute(spec, {})


def whole_volume(data, model, halo) -> np.ndarray:
    """The reference: the whole volume reflect-padded by the halo, predicted at once, cropped."""
    volume = open_volume(data["input"])
    raw = volume.read((slice(None),) * 3).astype(np.float32) / 255
    padded = np.pad(raw, [(h, h) for h in halo], mode="reflect")
    with torch.no_grad():
        y = model(torch.from_numpy(padded)[None, None])[0]
    return y[(slice(None), *(slice(h, h + s) for h, s in zip(halo, SHAPE)))].numpy()


def stored(output) -> np.ndarray:
    store = PredictionStore(str(output))
    store.open()
    return store.read()


def chunk_bytes(output) -> dict[str, bytes]:
    folder = Path(output) / "prediction"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("block, halo", [((4, 16, 16), (2, 2, 2)), ((3, 7, 11), (2, 3, 2)), ((10, 30, 34), (3, 2, 2))])
def test_blockwise_equals_whole_volume(data, tmp_path, block, halo):
    result = predict(data, tmp_path / "out.zarr", block=block, halo=halo)
    assert result.status == "ok", result.error
    got = stored(tmp_path / "out.zarr").astype(np.float32)
    expected = whole_volume(data, registry.build(data["model"]), halo)
    assert got.shape == (2, *SHAPE)
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=0)  # float16 storage of the fp32 prediction
    blocking = Blocking(SHAPE, block, halo)
    assert result.metrics["blocks"] == len(blocking) and result.metrics["voxels"] == int(np.prod(SHAPE))
    assert len(PredictionStore(str(tmp_path / "out.zarr")).done()) == len(blocking)


def test_unet_blockwise_equals_whole_volume_inside_the_valid_region(data, tmp_path):
    name = "unet3d:f=2,d=2"
    result = predict(data, tmp_path / "unet.zarr", model=name, block=(4, 16, 18), halo=(9, 10, 10))
    assert result.status == "ok", result.error
    torch.manual_seed(0)  # the workload builds the model from the spec's seed
    expected = whole_volume(data, registry.build(name).eval(), (9, 10, 10))
    np.testing.assert_allclose(stored(tmp_path / "unet.zarr").astype(np.float32), expected, atol=1e-3, rtol=0)


def test_depth_slabs_give_the_same_bytes(data, tmp_path, monkeypatch):
    name, block, halo = "unet3d:f=2,d=2", (4, 16, 18), (9, 10, 10)
    whole = predict(data, tmp_path / "whole.zarr", model=name, block=block, halo=halo)
    assert whole.status == "ok" and whole.metrics["slab_layers"] == 8
    counts: list[int] = []
    ranges = slabs.ranges
    monkeypatch.setattr(slabs, "ranges", lambda size, most: counts.append(len(ranges(size, most))) or ranges(size, most))
    monkeypatch.setattr(slabs, "INDEX_LIMIT", 20_000)  # a 22x36x38 tile: 60,192 elements at 2 channels
    split = predict(data, tmp_path / "split.zarr", model=name, block=block, halo=halo)
    assert split.status == "ok", split.error
    assert max(counts) > 1
    assert chunk_bytes(tmp_path / "split.zarr") == chunk_bytes(tmp_path / "whole.zarr")


def test_large_blocks_are_written_as_several_chunks(data, tmp_path, monkeypatch):
    monkeypatch.setattr(prediction_store, "CHUNK_VOXELS", 100)
    result = predict(data, tmp_path / "chunked.zarr", block=(4, 16, 16))
    assert result.status == "ok", result.error
    assert json.loads((tmp_path / "chunked.zarr" / "prediction" / ".zarray").read_text())["chunks"] == [2, 4, 4, 4]
    np.testing.assert_allclose(stored(tmp_path / "chunked.zarr").astype(np.float32),
                               whole_volume(data, registry.build(data["model"]), (2, 2, 2)), atol=1e-3, rtol=0)


def test_metrics_and_uint8_output(data, tmp_path):
    result = predict(data, tmp_path / "u8.n5", dtype="uint8", extrapolate="8.1T")
    assert result.status == "ok", result.error
    m = result.metrics
    assert m["throughput_unit"] == "Mvox/s" and m["throughput"] > 0
    assert m["throughput"] == pytest.approx(m["voxels"] / m["total_s"] / 1e6)
    # the first tile's wait once, then the rate after it
    assert m["sustained_mvox_per_s"] == pytest.approx(m["voxels"] / (m["total_s"] - m["first_tile_wait_s"]) / 1e6)
    assert m["sustained_mvox_per_s"] >= m["throughput"] and m["first_tile_wait_s"] == result.samples["wait"][0]
    # the hours follow the rate printed beside them (the whole window's), in the run line as in the report
    assert m["extrapolate_hours"]["1"] == pytest.approx(8.1e12 / (m["throughput"] * 1e6) / 3600)
    assert list(m["extrapolate_hours"]) == ["1"]  # a CPU run: its own rate, no GPU counts
    assert set(m["phase_s"]) >= {"read", "copy_in", "compute", "copy_out", "write"}
    assert m["warmup_s"] > 0 and len(result.samples["compute"]) == m["blocks"]
    u8 = stored(tmp_path / "u8.n5")
    assert u8.dtype == np.uint8 and u8.max() > 0
    expected = whole_volume(data, registry.build(data["model"]), (2, 2, 2))
    assert np.abs(u8.astype(np.float32) - expected * 255).max() <= 0.51


def test_hours_on_one_gpu_are_one_gpus_and_eight_gpus_come_from_a_rate_measured_on_several():
    from dlbench.workloads.volume import _hours

    cuda, tvox = torch.device("cuda"), 8.1e12
    one = _hours(tvox, 1.0, 1, cuda)
    assert one["extrapolate_hours"] == {"1": pytest.approx(tvox / 1e6 / 3600)}  # no 8 x one GPU's rate
    assert one["extrapolate_hours_basis"] == {"1": "measured on 1 GPU"}
    two = _hours(tvox, 1.8, 2, cuda)  # 1.8 Mvox/s on 2 GPUs: 0.9 each, the loss at 2 kept for 8
    assert two["extrapolate_hours"] == {"2": pytest.approx(tvox / 1.8e6 / 3600), "8": pytest.approx(tvox / 7.2e6 / 3600)}
    assert two["extrapolate_hours_basis"] == {"2": "measured on 2 GPUs",
                                              "8": "extrapolated: 8 x the rate per GPU measured on 2 GPUs"}
    assert _hours(tvox, 8.0, 8, cuda)["extrapolate_hours_basis"] == {"8": "measured on 8 GPUs"}
    cpu = _hours(tvox, 2.0, 2, torch.device("cpu"))
    assert cpu["extrapolate_hours"] == {"1": pytest.approx(two["extrapolate_hours"]["2"] * 1.8 / 2.0)}
    assert cpu["extrapolate_hours_basis"] == {"1": "measured on this CPU (2 processes)"}


def test_the_summary_gives_hours_where_they_were_measured():
    from dlbench.results.measurement import Measurement
    from dlbench.workloads.volume import _hours, describe

    def line(world, mvox_s, device="cuda", **extra):
        metrics = {"device": device, "world_size": world, "voxels": 1e9, "total_s": 1e3 / mvox_s, "mvox_per_s": mvox_s,
                   "blocks": 9, "blocks_skipped": 0, "extrapolate_voxels": 8.1e12,
                   **_hours(8.1e12, mvox_s, world, torch.device(device)), **extra}
        return describe(Measurement.read(metrics))

    one = line(1, 100.0)
    assert "8.10 Tvox in 22.5 h on 1 GPU" in one and "8 GPUs" not in one
    two = line(2, 180.0, blocks_per_rank=[5, 4])
    assert "9 blocks over 2 processes: 5/4" in two
    assert "8.10 Tvox in 12.5 h on 2 GPUs (3.1 h on 8 GPUs, extrapolated from the rate per GPU on 2)" in two
    assert "on 8 GPUs" in line(8, 800.0) and "extrapolated" not in line(8, 800.0)
    assert "on this CPU" in line(2, 1.0, "cpu") and "GPU" not in line(2, 1.0, "cpu")
    after = line(1, 375.0, sustained_mvox_per_s=400.0, first_tile_wait_s=0.31)
    # the hours follow the rate printed beside them; the rate after the first tile is told apart
    assert "8.10 Tvox in 6.0 h on 1 GPU at its 375 Mvox/s (after the first tile's 0.310 s it ran at 400 Mvox/s)" in after
    assert "after the first tile" not in line(1, 375.0, sustained_mvox_per_s=376.0, first_tile_wait_s=0.01)
    # results stored before: hours on 1, N and 8 GPUs (at the rate after the first tile); the line computes
    # them again from the stored rate, as the report does, and gives only the measured count
    old = {"device": "cuda", "voxels": 1e9, "total_s": 10.0, "mvox_per_s": 100.0, "blocks": 9, "blocks_skipped": 0,
           "extrapolate_voxels": 8.1e12}
    two_old = describe(Measurement.read({**old, "world_size": 2, "extrapolate_hours": {"1": 25.0, "2": 12.5, "8": 3.1}}))
    assert "22.5 h on 2 GPUs" in two_old and "8 GPUs" not in two_old
    one_old = describe(Measurement.read({**old, "world_size": 1, "extrapolate_hours": {"1": 22.5, "8": 2.8}}))
    assert "22.5 h on 1 GPU" in one_old and "8 GPUs" not in one_old


@pytest.mark.parametrize("count, finished", [(18, set()), (18, set(range(0, 18, 2))), (9, {0, 1, 2}), (9, set(range(9))),
                                             (1, set()), (7, {6})])
def test_the_blocks_left_are_shared_evenly_over_any_number_of_ranks(count, finished):
    from dlbench.workloads.volume import share

    left = [i for i in range(count) if i not in finished]
    for world in (1, 2, 3, 4):
        parts = [share(count, finished, rank, world) for rank in range(world)]
        assert sorted(i for part in parts for i in part) == left  # every block left, once
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    if count == 18 and finished:  # the even blocks done: dealing out all 18 would leave rank 0 none
        assert [len(share(count, finished, rank, 2)) for rank in (0, 1)] == [5, 4]


def test_flops_per_tile_and_achieved_tflops_like_the_other_workloads(data, tmp_path):
    result = predict(data, tmp_path / "f.zarr")
    assert result.status == "ok", result.error
    m, tile = result.metrics, Blocking(SHAPE, (4, 16, 16), (2, 2, 2)).tile
    # Two 3x3x3 convolutions, 1 -> 3 and 3 -> 2 channels, a multiply and an add per weight and voxel.
    assert m["flops_per_step"] == 2 * 27 * (1 * 3 + 3 * 2) * int(np.prod(tile))
    assert m["achieved_tflops"] > 0
    assert m["achieved_tflops"] == pytest.approx(m["flops_per_step"] * m["blocks"] / m["total_s"] / 1e12)  # wall, as Mvox/s


def test_the_gpu_is_monitored_while_blocks_run(data, tmp_path, monkeypatch):
    """Recorded NVML readings stand in for a GPU: power capping and energy reach the result."""
    import itertools
    import json

    from dlbench.measure import monitor as monitor_module
    from dlbench.workloads import volume

    capped = json.loads((Path(__file__).parent / "data" / "nvml_readings.json").read_text())[6]
    feed = ({**capped, "energy_mj": capped["energy_mj"] + 1000 * i} for i in itertools.count())  # 1 J a reading
    monkeypatch.setattr(volume, "Monitor", lambda device: monitor_module.Monitor(
        "cuda:0", interval=0.01, reader=lambda: next(feed), others=lambda: []))
    result = predict(data, tmp_path / "m.zarr")
    assert result.status == "ok", result.error
    m = result.metrics
    assert m["throttled"] and m["throttle_reasons"] == ["sw_power_cap"] and m["energy_j"] > 0
    assert m["energy_j_per_mvox"] == pytest.approx(m["energy_j"] / (m["voxels"] / 1e6))
    assert m["energy_j_per_step"] == pytest.approx(m["energy_j"] / m["blocks"])
    assert result.traces["monitor"]["available"]


def test_write_failure_stops_cleanly_and_resume_completes(data, tmp_path, monkeypatch):
    reference = tmp_path / "reference.zarr"
    assert predict(data, reference).status == "ok"
    original = PredictionStore.write_block
    calls = []

    def failing(self, index, box, array):
        calls.append(index)
        if len(calls) > 3:
            raise OSError(28, "No space left on device")
        original(self, index, box, array)

    monkeypatch.setattr(PredictionStore, "write_block", failing)
    with pytest.raises(UserError, match=r"No space left on device.*rerun with --resume"):
        predict(data, tmp_path / "full.zarr")
    monkeypatch.setattr(PredictionStore, "write_block", original)
    kept = PredictionStore(str(tmp_path / "full.zarr")).done()
    assert 0 < len(kept) < 18
    with pytest.raises(UserError, match="already exists"):
        predict(data, tmp_path / "full.zarr")
    result = predict(data, tmp_path / "full.zarr", resume=True)
    assert result.metrics["blocks_skipped"] == len(kept)
    assert chunk_bytes(tmp_path / "full.zarr") == chunk_bytes(reference)


def test_resume_with_other_settings_is_refused(data, tmp_path):
    assert predict(data, tmp_path / "o.zarr").status == "ok"
    with pytest.raises(UserError, match="other settings.*halo"):
        predict(data, tmp_path / "o.zarr", halo=(1, 1, 1), resume=True)
    result = predict(data, tmp_path / "o.zarr", overwrite=True, dtype="uint8")
    assert result.status == "ok" and stored(tmp_path / "o.zarr").dtype == np.uint8


def test_resume_computes_in_the_layout_the_output_was_written_with(data, tmp_path, monkeypatch):
    """The layout is how the blocks are computed, not what they hold: --resume takes it from the output
    (the one --block auto chose), and a resume asking another one is not refused."""
    spec = BenchmarkSpec(workload="volume", model=data["model"], batch=1, device="cpu", warmup=1, steps=1,
                         channels_last=True, options={"input": data["input"], "output": str(tmp_path / "o.zarr"),
                                                      "block": "4x16x16", "halo": "2x2x2", "dtype": "float16"})
    assert execute(spec, {}).status == "ok"
    assert json.loads((tmp_path / "o.zarr" / ".dlbench" / "run.json").read_text())["channels_last"] is True
    done = tmp_path / "o.zarr" / ".dlbench" / "done"
    for marker in sorted(done.iterdir())[::2]:  # every other block to compute again
        marker.unlink()
    before = chunk_bytes(tmp_path / "o.zarr")
    layouts = []
    monkeypatch.setattr("dlbench.workloads.block_choice.set_layout", lambda model, cl: layouts.append(cl) or model)
    resumed = execute(dataclasses.replace(spec, channels_last=False, options={**spec.options, "block": "auto",
                                                                                "resume": True}), {})
    assert resumed.status == "ok" and resumed.metrics["blocks_skipped"] > 0
    assert layouts == [True] and resumed.spec["channels_last"] is True
    assert chunk_bytes(tmp_path / "o.zarr") == before
    first = dataclasses.replace(spec, channels_last=False, options={**spec.options, "output": str(tmp_path / "p.zarr")})
    assert execute(first, {}).status == "ok"
    again = dataclasses.replace(first, channels_last=True, options={**first.options, "resume": True})
    assert execute(again, {}).status == "ok"  # asked in the other layout: resumed, not refused


def _run_args(data, output, *extra, model=None):
    return ("run", "volume", "--input", data["input"], "--output", output, "--model", model or data["model"],
            "--block", "4x16x16", "--halo", "2x2x2", "--dtype", "float16", "--device", "cpu", "--warmup", "1", *extra)


def _started(args, output, blocks: int) -> subprocess.Popen:
    """`dlbench` with `args` (4x8x8 blocks) started, once `blocks` of its blocks are recorded done."""
    args = [a if a != "4x16x16" else "4x8x8" for a in args]
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    done_dir = Path(output) / ".dlbench" / "done"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if done_dir.is_dir() and len(os.listdir(done_dir)) >= blocks:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed"
    return proc


@pytest.mark.slow
def test_sigkill_and_resume_gives_the_same_bytes(data, tmp_path, db):
    reference = tmp_path / "ref.zarr"
    assert predict(data, reference, model=data["slow"], block=(4, 8, 8)).status == "ok"
    output = tmp_path / "killed.zarr"
    proc = _started(_run_args(data, output, "--db", db, "--readers", "1", "--writers", "1", "--queue", "1",
                              model=data["slow"]), output, blocks=3)
    done_dir = output / ".dlbench" / "done"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(os.listdir(done_dir))
    total = len(Blocking(SHAPE, (4, 8, 8), (2, 2, 2)))
    assert finished < total
    resumed = predict(data, output, model=data["slow"], block=(4, 8, 8), resume=True)
    assert resumed.status == "ok" and resumed.metrics["blocks_skipped"] == finished
    assert chunk_bytes(output) == chunk_bytes(reference)


@pytest.mark.slow
def test_two_gloo_ranks_equal_one(data, tmp_path, db):
    one = tmp_path / "one.zarr"
    assert predict(data, one).status == "ok"
    two = tmp_path / "two.zarr"
    proc = cli(*_run_args(data, two, "--db", db, "--gpus", "2"))
    assert proc.returncode == 0, proc.stderr
    assert chunk_bytes(two) == chunk_bytes(one)
    assert '"processes": 2' in cli("export", "--db", db).stdout


def _stored_volume_result(db):
    with Store(db) as store:
        (result,) = store.results(workload="volume")
    return result


@pytest.mark.slow
def test_an_output_left_partway_is_completed_by_two_ranks_sharing_what_is_left(data, tmp_path, db, monkeypatch):
    """1 process, then 2: a first run got only the even blocks written (dealing out all 18 blocks
    in turn would leave rank 0 nothing of the 9 left); the two ranks complete it, 5 and 4 blocks."""
    reference = tmp_path / "reference.zarr"
    assert predict(data, reference).status == "ok"
    output, write = tmp_path / "partial.zarr", PredictionStore.write_block
    monkeypatch.setattr(PredictionStore, "write_block",
                        lambda self, index, box, array: write(self, index, box, array) if index % 2 == 0 else None)
    assert predict(data, output).status == "ok"
    monkeypatch.setattr(PredictionStore, "write_block", write)
    total = len(Blocking(SHAPE, (4, 16, 16), (2, 2, 2)))
    assert PredictionStore(str(output)).done() == set(range(0, total, 2))
    assert chunk_bytes(output) != chunk_bytes(reference)
    proc = cli(*_run_args(data, output, "--db", db, "--gpus", "2", "--resume"))
    assert proc.returncode == 0, proc.stderr
    assert chunk_bytes(output) == chunk_bytes(reference)
    m = _stored_volume_result(db).metrics
    assert (m["processes"], m["blocks_skipped"], m["blocks"], m["blocks_per_rank"]) == (2, 9, 9, [5, 4])
    assert "9 blocks over 2 processes: 5/4, 9 already done" in proc.stdout


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (torchrun starts its workers in sessions of their own, so a
    signal to the launcher's process group does not reach them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds torchrun's workers through /proc")
def test_two_ranks_killed_partway_are_completed_by_one_process(data, tmp_path, db):
    """2 processes, then 1: both ranks and the launcher killed while blocks are written (the
    machine lost), the output completed by one process, bytes as one uninterrupted process's."""
    block, total = (4, 8, 8), len(Blocking(SHAPE, (4, 8, 8), (2, 2, 2)))
    reference = tmp_path / "ref.zarr"
    assert predict(data, reference, model=data["slower"], block=block).status == "ok"
    output = tmp_path / "killed.zarr"
    proc = _started(_run_args(data, output, "--db", db, "--gpus", "2", "--readers", "1", "--writers", "1", "--queue", "1",
                              model=data["slower"]), output, blocks=6)
    done_dir = output / ".dlbench" / "done"
    pids = [proc.pid, *_descendants(proc.pid)]
    assert len(pids) >= 4  # dlbench, torchrun, two workers
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 30
    while not all(_gone(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.01)
    assert all(_gone(pid) for pid in pids), "a killed process still runs"
    finished = len(os.listdir(done_dir))
    assert 6 <= finished < total
    resumed = predict(data, output, model=data["slower"], block=block, resume=True)
    assert resumed.status == "ok", resumed.error
    m = resumed.metrics
    assert (m["blocks_skipped"], m["blocks"], m["blocks_per_rank"]) == (finished, total - finished, [total - finished])
    assert chunk_bytes(output) == chunk_bytes(reference)


def test_existing_output_is_refused_untouched(data, tmp_path):
    existing = tmp_path / "exists.zarr"
    existing.mkdir()
    (existing / "keep").write_text("mine")
    with pytest.raises(UserError, match="already exists: pass --resume to complete it or --overwrite to replace it"):
        predict(data, existing)
    with pytest.raises(UserError, match="holds no dlbench completion record"):
        predict(data, existing, resume=True)
    assert [p.name for p in existing.iterdir()] == ["keep"]


def test_bad_model_output_is_one_line(data, tmp_path, db):
    # Found mid-run, after the estimate and the progress bar: one line of error, and no output left behind.
    out = tmp_path / "new.zarr"
    assert_user_error(cli(*_run_args(data, out, "--db", db, model=data["bad"])), "does not match the tile", started=True)
    assert not out.exists()


@pytest.mark.parametrize("options, message", [
    ({"input": "{input}:volumes/nope"}, "no dataset 'volumes/nope'; datasets present: volumes/raw"),
    ({"halo": "2x40x2", "block": "4x8x8"}, "halo 2x40x2 must be"),
    ({"block": "4x64x8"}, "block 4x64x8 is larger than the volume"),
    ({"dtype": "int7"}, "--dtype must be one of uint8, float16"),
    ({"readers": 0}, "--readers must be ≥ 1"),
    ({"extrapolate": "much"}, "bad --extrapolate"),
    ({"resume": True, "overwrite": True}, "exclude each other"),
    ({"kernels": "fused"}, "--kernels fused needs a CUDA GPU and Triton"),
])
def test_bad_options_are_user_errors(data, tmp_path, options, message):
    options = {k: v.format(input=data["input"]) if isinstance(v, str) else v for k, v in options.items()}
    full = {"input": data["input"], "output": str(tmp_path / "p.zarr"), "block": "4x16x16", "halo": "2x2x2", **options}
    with pytest.raises(UserError, match=message):
        preflight(BenchmarkSpec.from_dict({"workload": "volume", "model": data["model"], "device": "cpu", **full}))
    with pytest.raises(UserError, match=message):
        predict(data, tmp_path / "p.zarr", **{k: v for k, v in options.items() if k not in ("block", "halo")},
                **({"block": tuple(map(int, options["block"].split("x")))} if "block" in options else {}),
                **({"halo": tuple(map(int, options["halo"].split("x")))} if "halo" in options else {}))
    assert not (tmp_path / "p.zarr").exists()


def test_data_volume_cli(tmp_path):
    proc = cli("data", "volume", tmp_path / "c.n5", "--shape", "6x20x20", "--chunks", "2x10x10")
    assert proc.returncode == 0, proc.stderr
    assert open_volume(str(tmp_path / "c.n5")).shape == (6, 20, 20)
    assert_user_error(cli("data", "volume", tmp_path / "c.n5", "--shape", "6x20x20"), "already exists")


def test_torch_export_model_file(data, tmp_path):
    torch.manual_seed(0)
    net = ConvNet().eval()
    path = tmp_path / "conv.pt2"
    torch.export.save(torch.export.export(net, (torch.rand(1, 1, 8, 20, 20),)), str(path))  # the 4x16x16 + 2x2x2 tile
    result = predict(data, tmp_path / "e.zarr", model=str(path))
    assert result.status == "ok", result.error
    np.testing.assert_allclose(stored(tmp_path / "e.zarr").astype(np.float32), whole_volume(data, net, (2, 2, 2)),
                               atol=1e-3, rtol=0)
    with pytest.raises(UserError, match="fails on a 1x1x10x20x20 tile.*dynamic shapes"):
        predict(data, tmp_path / "f.zarr", model=str(path), halo=(3, 2, 2))


def test_block_auto_on_the_cpu_takes_a_block_that_fits_the_volume(data, tmp_path):
    result = predict(data, tmp_path / "auto.zarr", block="auto")
    assert result.status == "ok", result.error
    assert result.metrics["block"] == [10, 30, 34]  # the volume is smaller than every candidate
    assert result.metrics["blocks"] == 1


def test_a_run_of_few_blocks_makes_no_more_buffers_than_blocks(data, tmp_path, monkeypatch):
    """Pinning costs time a megabyte: a run of 8 blocks makes 8 tiles and 8 outputs, not its queue's 10."""
    from dlbench.workloads import volume_pipeline

    made = []

    class Counted(volume_pipeline.PinnedBuffers):
        def __init__(self, count, *args, **kwargs):
            made.append(count)
            super().__init__(count, *args, **kwargs)

    monkeypatch.setattr(volume_pipeline, "PinnedBuffers", Counted)
    result = predict(data, tmp_path / "few.zarr", block=(8, 16, 32), queue=8)
    assert result.status == "ok", result.error
    assert result.metrics["blocks"] == 8 and made == [8, 8]
    np.testing.assert_allclose(stored(tmp_path / "few.zarr").astype(np.float32),
                               whole_volume(data, registry.build(data["model"]), (2, 2, 2)), atol=1e-3, rtol=0)
    made.clear()
    assert predict(data, tmp_path / "many.zarr", queue=8).metrics["blocks"] == 18 and made == [10, 10]


def test_pinned_buffers_are_reused_in_turn_and_viewed_at_any_smaller_shape():
    from dlbench.workloads.volume_pipeline import PinnedBuffers

    pool = PinnedBuffers(2, 24, torch.uint8)  # without a GPU: the same logic over plain memory
    a, b = pool.take((2, 3, 4)), pool.take((2, 3))
    assert a.shape == (2, 3, 4) and b.shape == (2, 3) and a.data_ptr() != b.data_ptr()
    base = a._base
    pool.give(a)
    assert pool.take((4,)).data_ptr() == base.data_ptr()
