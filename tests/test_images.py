"""Image workloads in-process on a tiny CNN: real JPEG decoding, phases, corrupt files, batch search."""

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import CORRUPT_JPEG

from dlbench import data
from dlbench.data import images
from dlbench.data.generate import generate
from dlbench.errors import UserError
from dlbench.launch import batchsize
from dlbench.models import registry
from dlbench.spec import BenchmarkSpec
from dlbench.system.info import fingerprint
from dlbench.launch.execute import execute
from dlbench.workloads.losses import LOSSES
from dlbench.workloads.pipeline import data_metrics
from dlbench.workloads.train import make_targets


def _tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 10))


@pytest.fixture(autouse=True)
def tiny_model(monkeypatch):
    monkeypatch.setitem(registry.MODELS, "tiny", registry.ModelEntry("tiny", "Tiny", _tiny, (3, 32, 32)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CI has 2 cores: keep the workers' and the model's threads apart
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    generate(root, 24, classes=3, seed=1, workers=1)
    return root


def spec(workload="train", **options) -> BenchmarkSpec:
    general = {k: options.pop(k) for k in ("batch", "steps", "min_seconds", "gpus") if k in options}
    base = dict(workload=workload, model="tiny", batch=4, device="cpu", warmup=1, warmup_seconds=0.0, steps=3,
                min_seconds=0.0)
    return BenchmarkSpec(**{**base, **general}, options={"workers": 0, **options})


def ok(s: BenchmarkSpec):
    result = execute(s, fingerprint())
    assert result.status == "ok", result.error
    return result.metrics, result.samples


def assert_phases_sum_to_step(samples, phases):
    for i, step in enumerate(samples["step"]):
        total = sum(samples[p][i] for p in phases)
        assert total <= step * 1.0001 + 1e-6
        assert total >= step * 0.9 - 1e-3, (total, step)


def test_generated_dataset_is_imagenet_like(jpegs):
    files = sorted(jpegs.glob("*/*.jpg"))
    assert [d.name for d in sorted(jpegs.iterdir())] == ["class0000", "class0001", "class0002"]
    assert len(files) == 24
    sizes = [Image.open(f).size for f in files]
    assert all(300 <= min(s) and max(s) <= 640 for s in sizes)
    assert len(set(sizes)) > 1  # varied sizes, like photos
    mean_kb = sum(f.stat().st_size for f in files) / len(files) / 1024
    assert 50 < mean_kb < 200
    assert Image.open(files[0]).format == "JPEG"


def test_generator_is_deterministic(tmp_path):
    generate(tmp_path / "a", 3, classes=1, seed=5, workers=1)
    generate(tmp_path / "b", 3, classes=1, seed=5, workers=1)
    for f in (tmp_path / "a").glob("*/*.jpg"):
        assert f.read_bytes() == (tmp_path / "b" / f.parent.name / f.name).read_bytes()


@pytest.mark.parametrize("source", ["synthetic", "dummy", "folder"])
def test_train_phases_sum_to_the_step(source, jpegs):
    m, s = ok(spec(data=f"folder:{jpegs}" if source == "folder" else source))
    phases = ("data", "h2d", "forward", "backward", "optimizer")
    assert_phases_sum_to_step(s, phases)
    assert m["throughput"] == pytest.approx(4 * m["steps"] / sum(s["step"]))
    assert m["throughput_unit"] == "img/s" and m["throughput_method"] == "images over total measured time"
    assert sum(m[f"{p}_share"] for p in phases) == pytest.approx(sum(map(sum, (s[p] for p in phases))) / sum(s["step"]))
    assert len(s["data_host"]) == m["steps"]
    if source != "synthetic":  # a host pipeline costs time in `data`; host wait and device phase agree
        assert m["data_ms"] > 0.1
        for host, phase in zip(s["data_host"], s["data"]):
            assert host <= phase + 1e-6


def test_train_with_workers_and_one_epoch(jpegs):
    m, s = ok(spec(data=f"folder:{jpegs}", workers=1, epochs=1, batch=8))
    assert m["steps"] == 24 // 8 and m["dataset_images"] == 24 and m["corrupt_files"] == 0


def test_infer_latency_and_phases(jpegs, monkeypatch):
    monkeypatch.setenv("DLBENCH_TEST_IMAGES", str(jpegs))
    m, s = ok(spec("infer", data="folder:$DLBENCH_TEST_IMAGES"))
    assert m["data_path"] == str(jpegs)  # as read: the report names the folder, not the variable
    assert_phases_sum_to_step(s, ("data", "h2d", "forward"))
    assert m["latency_p50_ms"] <= m["latency_p90_ms"] <= m["latency_p95_ms"] <= m["latency_p99_ms"]
    assert m["latency_avg_ms"] == pytest.approx(sum(s["step"]) / len(s["step"]) * 1e3)
    assert "backward_ms" not in m


def test_smooth_repeats_each_input_with_noise(jpegs):
    m, s = ok(spec("smooth", data=f"folder:{jpegs}", sigma=0.5, batch=6))
    assert m["data_path"] == str(jpegs)
    assert_phases_sum_to_step(s, ("data", "noise", "forward"))
    assert m["noise_copies"] == 6 and m["input_shape"] == [1, 3, 32, 32]
    assert m["throughput"] == pytest.approx(m["steps"] / sum(s["step"]))
    assert m["noisy_per_s"] == pytest.approx(6 * m["throughput"])


def _corrupt(folder: Path, names: list[str]) -> None:
    for name in names:
        (folder / "class0000" / name).write_bytes(CORRUPT_JPEG)


def test_a_corrupt_jpeg_is_skipped_and_counted(tmp_path):
    generate(tmp_path, 23, classes=2, seed=2, workers=1)  # 24 files with the broken one: no batch dropped
    _corrupt(tmp_path, ["broken.jpg"])
    m, _ = ok(spec(data=f"folder:{tmp_path}", epochs=1))
    assert m["corrupt_files"] == 1 and m["corrupt_examples"][0].endswith("broken.jpg")
    assert m["steps"] == 24 // 4


def test_too_many_corrupt_files_fail_and_say_which(tmp_path):
    generate(tmp_path, 8, classes=1, seed=3, workers=1)
    _corrupt(tmp_path, [f"bad{i}.jpg" for i in range(6)])
    with pytest.raises(UserError, match=r"could not be decoded .*bad\d\.jpg"):
        execute(spec(data=f"folder:{tmp_path}", epochs=1), fingerprint())


@pytest.mark.parametrize("make, needle", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: p, "is empty"),
    (lambda p: (p / "c").mkdir() or (p / "c" / "a.txt").write_text("x") and p, "no .jpg/.jpeg/.png"),
    (lambda p: (p / "c").mkdir() or (p / "c" / "a.jpg").write_text("not a jpeg") and p, "none of 1 files"),
])
def test_bad_folders_are_user_errors(tmp_path, make, needle):
    with pytest.raises(UserError, match=needle):
        data.check(spec(data=f"folder:{make(tmp_path)}"), torch.device("cpu"))


def test_data_option_errors_and_warnings(jpegs):
    cpu = torch.device("cpu")
    with pytest.raises(UserError, match="unknown data source"):
        data.check(spec(data="imagenet"), cpu)
    assert data.parse_source(str(jpegs)) == data.parse_source(f"folder:{jpegs}") == ("folder", str(jpegs))
    assert data.check(spec(data=str(jpegs)), cpu) == []  # a folder's path alone is its images
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        data.check(spec(data=f"folder:{jpegs}", decode="gpu"), cpu)
    with pytest.raises(UserError, match="needs a JPEG folder"):
        data.check(spec(decode="gpu"), cpu)
    (warning,) = data.check(spec(data="dummy", workers=(os.cpu_count() or 1) + 1), cpu)
    assert "more than this machine's" in warning
    with pytest.raises(UserError, match="--optimizer must be one of sgd, adam, adamw, got 'lamb'"):
        execute(spec(optimizer="lamb"), fingerprint())
    with pytest.raises(UserError, match="fewer than one batch"):
        data.make_loader(spec(data=f"folder:{jpegs}", batch=32), cpu)


@pytest.mark.parametrize("cores, world, options, expected", [
    (16, 1, {}, 15),  # the workers decode: every core but the training loop's
    (16, 2, {}, 7),  # two GPUs' processes share the cores
    (16, 1, {"decode": "gpu"}, 8),  # they only read files for the GPU
    (16, 1, {"decode": "gpu", "cpu_share": 0.3}, 15),  # they decode a share beside it
    (1, 1, {}, 1),
    (2, 4, {}, 1),
    (16, 1, {"workers": 3}, 3),  # asked for: as asked, whatever the cores
])
def test_default_workers_follow_who_decodes(monkeypatch, cores, world, options, expected):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    s = BenchmarkSpec(workload="train", model="tiny", device="cpu", options=options)
    assert data.workers(s, world) == expected


def test_default_workers_reach_the_loader(monkeypatch, jpegs):
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    loader = data.make_loader(spec(data=f"folder:{jpegs}", workers=None), torch.device("cpu"))
    try:
        assert loader.loader.num_workers == 2
    finally:
        loader.close()


def test_device_decoder_on_the_cpu(jpegs):
    """The --decode gpu pipeline (batched decode_jpeg, crops on the device, a decode thread) run on the CPU."""
    items, _ = images.scan_folder(jpegs)
    config = images.ImageConfig(size=(32, 48), batch=4, train=True, workers=0, prefetch=2, seed=0, max_corrupt=0.5)
    dataset = images.FolderImages(items, config, decode=False)
    host = images.HostLoader(images.data_loader(dataset, config, torch.device("cpu"), images.collate_bytes),
                             images.Corrupt(len(items), 0.5))
    decoder = images.DeviceDecoder(host, config, torch.device("cpu"))
    batches = iter(decoder)
    for _ in range(7):  # more than one epoch
        x, y = next(batches)
        assert x.shape == (4, 3, 32, 48) and x.dtype == torch.uint8 and y.shape == (4,)
    decoder.close()
    encoded = [images._read(p) for p, _ in items[:3]]
    bad = torch.frombuffer(bytearray(CORRUPT_JPEG), dtype=torch.uint8)
    out = decoder.decode_batch(encoded + [bad], ["a", "b", "c", "bad.jpg"])
    assert out.shape == (4, 3, 32, 48)
    assert decoder.corrupt.paths == ["bad.jpg"]
    figures = data_metrics(decoder, [])
    assert figures.cpu_share == 0.0 and figures.cuda_max_connections == os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    eval_config = images.ImageConfig(size=(32, 32), batch=2, train=False, workers=0, prefetch=1, seed=0, max_corrupt=0)
    assert images.DeviceDecoder(host, eval_config, torch.device("cpu")).decode_batch(encoded[:2], ["a", "b"]).shape == (2, 3, 32, 32)


@pytest.mark.parametrize("task, shape", [("classify", (2, 10)), ("segment", (2, 3, 4, 4)), ("mask", (2, 1, 4, 4)),
                                         ("affinities", (2, 3, 4, 4, 4))])
def test_losses_follow_the_model_task(task, shape):
    out = torch.randn(shape, requires_grad=True)
    loss = LOSSES[task](out, make_targets(task, out, 0))
    loss.backward()
    assert loss.dim() == 0 and math.isfinite(loss.item()) and out.grad.abs().sum() > 0


def test_train_refuses_a_task_without_loss(monkeypatch):
    monkeypatch.setitem(registry.MODELS, "odd", registry.ModelEntry("odd", "Odd", _tiny, (3, 32, 32), "regress"))
    with pytest.raises(UserError, match="no loss"):
        execute(BenchmarkSpec(**{**spec().to_dict(), "model": "odd"}), fingerprint())


def test_batch_parsing():
    assert batchsize.parse("16") == [16] and batchsize.parse("1,2, 4") == [1, 2, 4]
    assert batchsize.parse("Sweep") == "sweep" and batchsize.parse("auto") == "auto"
    for bad in ("0", "x", "1,-2", ""):
        with pytest.raises(UserError, match="bad --batch"):
            batchsize.parse(bad)
    assert batchsize.sweep_sizes(20) == [1, 2, 4, 8, 16]


def test_batch_search_finds_the_largest_batch_that_fits():
    def probe(batch):  # memory runs out above 100; throughput peaks at 64
        return ("ok", 1000 - abs(64 - batch)) if batch <= 100 else ("oom", None)

    found = batchsize.search(probe, limit=1024)
    assert 94 <= found.largest <= 100
    assert found.best_throughput_batch == 64
    assert [t.batch for t in found.tried][:8] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert all(t.status == "oom" for t in found.tried if t.batch > 100)
    assert batchsize.search(lambda b: ("ok", float(b)), limit=12).largest == 12
    assert batchsize.search(lambda b: ("oom", None)).largest is None


def test_batch_search_with_real_runs():
    probe = batchsize.probe_with(lambda s: execute(s, fingerprint()), spec(data="synthetic"))
    found = batchsize.search(probe, limit=4)
    assert found.largest == 4 and {t.status for t in found.tried} == {"ok"}


def test_jade_suite_reproduces_seed_002(monkeypatch, tmp_path):
    from dlbench import suites

    loaded = suites.load("jade")
    # 3 workloads x 2 precisions x 2 data sources x (1 GPU, all GPUs); on a machine with at most
    # one GPU "all" is 1 and the identical specs run once.
    all_gpus = max(1, torch.cuda.device_count())
    assert len(loaded.specs) == (24 if all_gpus > 1 else 12)
    assert {s.gpus for s in loaded.specs} == {1, all_gpus}
    assert {s.workload for s in loaded.specs} == {"train", "infer", "smooth"}
    assert {s.precision for s in loaded.specs} == {"fp32", "bf16"} and {s.model for s in loaded.specs} == {"resnet50"}
    sources = {s.options["data"] for s in loaded.specs}
    assert sources == {"dummy", "folder:$DLBENCH_IMAGES"}
    monkeypatch.setenv("DLBENCH_IMAGES", str(tmp_path))
    assert data.parse_source("folder:$DLBENCH_IMAGES") == ("folder", str(tmp_path))
    monkeypatch.delenv("DLBENCH_IMAGES")
    with pytest.raises(UserError, match="environment variable that is not set"):
        data.parse_source("folder:$DLBENCH_IMAGES")


def test_batched_device_crops_match_torchvision_resized_crop():
    from torchvision.transforms import v2

    y, x = torch.meshgrid(torch.linspace(0, 1, 120), torch.linspace(0, 1, 160), indexing="ij")
    smooth = torch.stack([x * 255, y * 255, (x * y) * 255]).round().to(torch.uint8)  # a photo-like gradient
    other = smooth[:, :100, :90].contiguous()
    boxes = np.array([(10, 20, 130, 110), (0, 0, 90, 100)])
    out = images.resized_crops([smooth, other], boxes, (32, 32), np.array([False, True]))
    assert out.shape == (2, 3, 32, 32) and out.dtype == torch.uint8
    expected = v2.functional.resized_crop(smooth, 20, 10, 90, 120, [32, 32], antialias=True)
    assert (out[0].float() - expected.float()).abs().mean() < 2.0
    unflipped = images.resized_crops([other], boxes[1:], (32, 32), np.array([False]))
    assert torch.equal(out[1], unflipped[0].flip(-1))


def test_random_crop_boxes_follow_random_resized_crop():
    from torchvision.transforms import v2

    rng = np.random.default_rng(0)
    sizes = np.array([(375, 500), (500, 333), (480, 640)] * 400)
    boxes = images.random_crop_boxes(sizes, rng)
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= sizes[:, 1]).all() and (boxes[:, 3] <= sizes[:, 0]).all()
    share = w * h / (sizes[:, 0] * sizes[:, 1])
    torch.manual_seed(0)
    theirs = [h * w / (375 * 500) for h, w in (v2.RandomResizedCrop.get_params(  # (top, left, height, width)
        torch.empty(3, 375, 500), [0.08, 1.0], [3 / 4, 4 / 3])[2:] for _ in range(1200))]
    assert share.min() > 0.07 and share.max() <= 1.0
    assert abs(np.median(share[::3]) - np.median(theirs)) < 0.05  # torchvision's distribution
    assert (w / h > 0.74).all() and (w / h < 1.35).all()
    assert len({tuple(b) for b in boxes}) > 1000  # random, not one box repeated


def test_random_crop_boxes_fall_back_to_a_centred_box_for_extreme_images():
    boxes = images.random_crop_boxes(np.array([(10, 1000), (1000, 10)]), np.random.default_rng(0))
    # no random box of 8-100% of the area fits a 10-pixel side within ratio 3/4-4/3: the whole
    # short side, the long side cut to 4/3 of it (13 pixels), centred
    assert boxes.tolist() == [[493, 0, 506, 10], [0, 493, 10, 506]]


def test_center_boxes_are_the_eval_transform():
    boxes = images.center_boxes(np.array([(375, 500)]), (224, 224))
    # short side 375 -> 256, so a 224 crop covers 224 * 375 / 256 = 328.1 source pixels, centred
    assert np.allclose(boxes, [[250 - 164.0625, 187.5 - 164.0625, 250 + 164.0625, 187.5 + 164.0625]])


def test_device_decoder_joins_the_images_the_workers_decoded(jpegs):
    """--cpu-share: workers decode a share of each batch themselves; the batch and its labels stay whole."""
    items, _ = images.scan_folder(jpegs)
    config = images.ImageConfig(size=(32, 48), batch=8, train=True, workers=2, prefetch=2, seed=0, max_corrupt=0.5,
                                cpu_share=0.5)
    dataset = images.FolderImages(items, config, decode=False)
    on_cpu = [dataset._on_cpu(i) for i in range(len(items))]
    assert 0.2 < sum(on_cpu) / len(on_cpu) < 0.8
    host = images.HostLoader(images.data_loader(dataset, config, torch.device("cpu"), images.collate_bytes), None)
    encoded, labels, _, paths = next(host.batches())
    assert len(encoded) == 8 and 0 < len(encoded.sizes) < 8 and encoded.decoded.shape[1:] == (3, 32, 48)
    assert len(paths) == len(encoded.sizes)
    # labels list the encoded files first, then the decoded images: each file's label sits at its place
    names = {Path(p).name: label for p, label in items}
    assert labels[: len(paths)].tolist() == [names[Path(p).name] for p in paths]
    decoder = images.DeviceDecoder(host, config, torch.device("cpu"))
    x, y = next(iter(decoder))
    assert x.shape == (8, 3, 32, 48) and x.dtype == torch.uint8 and y.shape == (8,)
    decoder.close()
    for share, expected in ((0.0, 0), (1.0, len(items))):
        only = images.FolderImages(items, images.ImageConfig(**{**config.__dict__, "cpu_share": share}), decode=False)
        assert sum(only._on_cpu(i) for i in range(len(items))) == expected


def test_cpu_share_is_checked(jpegs):
    with pytest.raises(UserError, match="--cpu-share must be"):
        data.check(spec(data=f"folder:{jpegs}", cpu_share=1.5), torch.device("cpu"))


def test_the_decoding_stream_runs_above_the_step_unless_the_internal_setting_says_otherwise_and_refuses_a_bad_one(monkeypatch):
    from dlbench.data import prefetch

    monkeypatch.delenv(prefetch.PRIORITY_ENV, raising=False)
    assert prefetch.priority() == -1  # CUDA: lower is higher; the step's stream has torch's default, 0
    monkeypatch.setenv(prefetch.PRIORITY_ENV, "0")
    assert prefetch.priority() == 0
    monkeypatch.setenv(prefetch.PRIORITY_ENV, "high")
    with pytest.raises(UserError, match="DLBENCH_PREFETCH_PRIORITY is a CUDA stream priority.*'high'"):
        prefetch.priority()


def test_a_bad_decoding_stream_priority_is_refused_before_the_thread_starts(monkeypatch):
    from dlbench.data import prefetch

    monkeypatch.setenv(prefetch.PRIORITY_ENV, "1.5")
    with pytest.raises(UserError, match="CUDA stream priority"):
        prefetch.DevicePrefetch(lambda: iter([(torch.zeros(1),)]), torch.device("cpu"), depth=1, name="t")


def test_epoch_batches_run_epoch_after_epoch_reshuffled():
    """One iteration serves every epoch: whole batches only, each epoch all the sampler's indices in a new order."""
    batches = images.EpochBatches(torch.utils.data.RandomSampler(range(24), generator=torch.Generator().manual_seed(0)), 5)
    assert len(batches) == 4  # one epoch; the last 4 indices of each epoch are dropped
    first = list(zip(range(12), iter(batches)))
    epochs = [sum((b for _, b in first[i:i + 4]), []) for i in (0, 4, 8)]
    assert all(len(e) == len(set(e)) == 20 for e in epochs) and epochs[0] != epochs[1] != epochs[2]
    assert all(len(b) == 5 for _, b in first)
    ranked = images.EpochBatches(torch.utils.data.DistributedSampler(range(24), num_replicas=2, rank=0, seed=3), 4)
    two = [b for _, b in zip(range(6), iter(ranked))]
    assert sorted(sum(two[:3], [])) != sorted(sum(two[3:], []))  # set_epoch: another half of the data next epoch
    assert list(iter(images.EpochBatches(torch.utils.data.SequentialSampler(range(3)), 4))) == []  # no whole batch


def test_the_workers_serve_every_epoch_from_one_iterator(jpegs, monkeypatch):
    """The workers go on into the next epoch: the step never waits at an epoch's end for a new iterator to start."""
    started = []
    plain = torch.utils.data.DataLoader.__iter__
    monkeypatch.setattr(torch.utils.data.DataLoader, "__iter__", lambda self: started.append(1) or plain(self))
    items, _ = images.scan_folder(jpegs)
    config = images.ImageConfig(size=(32, 32), batch=5, train=True, workers=2, prefetch=2, seed=0, max_corrupt=0)
    host = images.HostLoader(images.data_loader(images.FolderImages(items, config), config, torch.device("cpu")), None)
    try:
        seen = [labels for _, (x, labels) in zip(range(3 * len(host)), host)]
    finally:
        host.close()
    assert len(seen) == 12 and all(x.shape == (5,) for x in seen) and started == [1]


def test_large_photos_are_cropped_in_chunks_that_give_the_same_batch(monkeypatch):
    """256 large photos padded as floats are more elements than roi_align can index: the batch
    goes in chunks, and the chunks give what one pass gives."""
    torch.manual_seed(0)
    photos = [torch.randint(0, 256, (3, 60 + 7 * i, 80 - 3 * i), dtype=torch.uint8) for i in range(5)]
    boxes = np.array([(2, 3, 50, 40)] * 5)
    flips = np.array([False, True, False, True, False])
    whole = images.resized_crops(photos, boxes, (16, 16), flips)
    monkeypatch.setattr(images, "PADDED_ELEMENTS", 3 * 88 * 80 * 2)  # two photos a chunk
    chunked = images.resized_crops(photos, boxes, (16, 16), flips)
    assert chunked.shape == (5, 3, 16, 16) and torch.equal(chunked, whole)
