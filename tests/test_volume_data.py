import itertools
import subprocess
import sys
import time
import tracemalloc

import h5py
import numpy as np
import pytest
import torch

from dlbench.data import augment, targets
from dlbench.data.generate_volume import generate
from dlbench.data.patches import make_patch_loader
from dlbench.data.volumes import LABEL_KEY, RAW_KEY, check_fits, open_pair, open_volume, split_path_key
from dlbench.errors import UserError
from dlbench.workloads.losses import binary_cross_entropy, loss_for, sorensen_dice

SHAPE = (12, 40, 48)


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    root = tmp_path_factory.mktemp("volumes")
    return {fmt: generate(root / f"v.{ext}", SHAPE, fmt, chunks=(4, 16, 16), seed=3)
            for fmt, ext in (("hdf5", "h5"), ("zarr", "zarr"), ("n5", "n5"))}


def test_split_path_key():
    assert split_path_key("a/b.h5:volumes/raw") == (__import__("pathlib").Path("a/b.h5"), "volumes/raw")
    assert split_path_key("b.zarr")[1] == RAW_KEY
    assert split_path_key("x.n5:/labels", "k")[1] == "labels"


def test_all_formats_hold_the_same_em_like_volume(volumes):
    arrays = []
    for fmt, path in volumes.items():
        raw, labels = open_pair(str(path))
        assert raw.format == fmt and raw.shape == SHAPE and raw.dtype == np.uint8
        everything = (slice(None),) * 3
        r, lab = raw.read(everything), labels.read(everything)
        arrays.append((r, lab))
        raw.close(), labels.close()
    for r, lab in arrays[1:]:
        assert np.array_equal(r, arrays[0][0]) and np.array_equal(lab, arrays[0][1])
    r, lab = arrays[0]
    membrane = lab == 0
    assert 0.05 < membrane.mean() < 0.5  # walls between cells
    assert len(np.unique(lab)) > 4  # several cells
    assert r[membrane].mean() < r[~membrane].mean() - 50  # dark membranes
    assert r[~membrane].std() > 5  # texture and noise, not flat


@pytest.mark.parametrize("fmt", ["hdf5", "zarr", "n5"])
def test_read_into_a_part_of_a_buffer(volumes, fmt):
    raw = open_volume(str(volumes[fmt]))
    box, where = (slice(2, 9), slice(5, 40), slice(0, 31)), (slice(1, 8), slice(2, 37), slice(1, 32))
    buffer = np.zeros((9, 39, 33), np.uint8)
    raw.read_into(box, buffer, where)  # where a tile's inside part goes
    assert np.array_equal(buffer[where], raw.read(box)) and buffer[0].max() == 0 and buffer[:, :, 0].max() == 0
    wide = np.zeros((9, 39, 33), np.float32)  # another type than the volume's: converted
    raw.read_into(box, wide, where)
    assert np.array_equal(wide[where], raw.read(box).astype(np.float32))
    raw.close()


def test_generator_is_chunked_cremi_layout(volumes):
    with h5py.File(volumes["hdf5"], "r") as f:
        assert f[RAW_KEY].chunks == (4, 16, 16) and f[LABEL_KEY].dtype == np.uint32


def test_generator_streams_without_holding_the_volume(tmp_path):
    shape = (160, 128, 128)  # raw + uint32 labels are 13 MB; a slab is 2 planes
    tracemalloc.start()
    generate(tmp_path / "big.zarr", shape, chunks=(2, 64, 64), workers=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    volume_bytes = np.prod(shape) * 5
    assert peak < volume_bytes / 5, (peak, volume_bytes)


def test_generator_refuses_existing_and_bad_format(tmp_path):
    generate(tmp_path / "a.h5", (4, 8, 8))
    with pytest.raises(UserError, match="already exists"):
        generate(tmp_path / "a.h5", (4, 8, 8))
    with pytest.raises(UserError, match="unknown volume format"):
        generate(tmp_path / "a.tif", (4, 8, 8))
    with pytest.raises(UserError, match="3 sizes"):
        generate(tmp_path / "b.zarr", (4, 8))


def test_reader_errors(volumes, tmp_path):
    with pytest.raises(UserError, match=r"has no dataset 'volumes/nope'; datasets present: .*volumes/raw"):
        open_volume(f"{volumes['hdf5']}:volumes/nope")
    with pytest.raises(UserError, match=r"has no dataset 'nope'; datasets present: .*volumes/raw"):
        open_volume(f"{volumes['zarr']}:nope")
    with pytest.raises(UserError, match="has no dataset"):
        open_volume(f"{volumes['n5']}:volumes/labels")
    with pytest.raises(UserError, match="does not exist"):
        open_volume(str(tmp_path / "missing.h5"))
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not an hdf5 file at all")
    with pytest.raises(UserError, match="cannot read"):
        open_volume(str(bad))
    flat = tmp_path / "flat.h5"
    with h5py.File(flat, "w") as f:
        f.create_dataset(RAW_KEY, data=np.zeros((4, 5), np.uint8))
        f.create_dataset(LABEL_KEY, data=np.zeros((4, 5, 6), np.uint32))
    with pytest.raises(UserError, match="has 2 dimensions"):
        open_volume(str(flat))
    mismatch = tmp_path / "mismatch.h5"
    with h5py.File(mismatch, "w") as f:
        f.create_dataset(RAW_KEY, data=np.zeros((4, 5, 6), np.uint8))
        f.create_dataset(LABEL_KEY, data=np.zeros((4, 5, 7), np.uint32))
    with pytest.raises(UserError, match="must have the same shape"):
        open_pair(str(mismatch))
    raw = open_volume(str(volumes["hdf5"]))
    with pytest.raises(UserError, match="larger than the volume"):
        check_fits(raw, (13, 8, 8))


def test_affinities_on_a_hand_made_label_volume():
    labels = np.array([[[1, 1, 2],
                        [1, 0, 2]],
                       [[1, 1, 2],
                        [3, 3, 2]]], dtype=np.uint32)
    aff = targets.affinities(labels)
    assert aff.shape == (3, 2, 2, 3) and aff.dtype == np.float32
    # z offset [-1, 0, 0]: plane 0 has no neighbour; plane 1 matches plane 0 where labels agree and are non-zero
    assert aff[0, 0].sum() == 0
    assert aff[0, 1].tolist() == [[1, 1, 1], [0, 0, 1]]
    # y offset [0, -1, 0]
    assert aff[1, :, 0].sum() == 0
    assert aff[1, 0, 1].tolist() == [1, 0, 1] and aff[1, 1, 1].tolist() == [0, 0, 1]
    # x offset [0, 0, -1]
    assert aff[2, :, :, 0].sum() == 0
    assert aff[2, 0].tolist() == [[0, 1, 0], [0, 0, 0]] and aff[2, 1].tolist() == [[0, 1, 0], [0, 1, 0]]
    assert targets.foreground(labels)[0, 0, 1].tolist() == [1, 0, 1]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_elastic_and_flips_keep_raw_and_labels_aligned(axis):
    # Raw and labels both hold one voxel coordinate; trilinear raw and nearest labels may only differ by rounding.
    shape = (8, 40, 40)
    coord = np.broadcast_to(np.arange(shape[axis]).reshape([-1 if a == axis else 1 for a in range(3)]), shape)
    rng = np.random.default_rng(axis)
    raw, labels = augment.augment(coord.astype(np.float32), coord.astype(np.int64), rng)
    assert raw.shape == labels.shape == shape
    assert np.abs(raw - labels).max() <= 0.5 + 1e-4
    moved = augment.elastic(coord.astype(np.float32), coord.astype(np.int64), np.random.default_rng(9))[0]
    assert np.abs(moved - coord).mean() > 0.05  # the field really deforms


def test_patch_loader_in_process(volumes):
    loader = make_patch_loader(str(volumes["zarr"]), (4, 16, 16), batch=2, target="affinities", workers=0,
                               augment=True, seed=1)
    raw, target = next(iter(loader))
    assert raw.shape == (2, 1, 4, 16, 16) and raw.dtype == torch.float32 and 0 <= float(raw.min()) <= float(raw.max()) <= 1
    assert target.shape == (2, 3, 4, 16, 16) and set(target.unique().tolist()) <= {0.0, 1.0}
    again = next(iter(make_patch_loader(str(volumes["zarr"]), (4, 16, 16), 2, "affinities", 0, True, 1)))
    assert torch.equal(raw, again[0])  # a seed gives the same patches


def test_patch_loader_workers(volumes):
    loader = make_patch_loader(f"{volumes['hdf5']}:{RAW_KEY}", (4, 16, 16), batch=3, target="mask", workers=2,
                               augment=False, seed=0)
    batches = list(itertools.islice(loader, 2))
    assert batches[0][1].shape == (3, 1, 4, 16, 16)
    assert not torch.equal(batches[0][0], batches[1][0])  # the two workers draw different patches


def test_patch_loader_errors(volumes):
    with pytest.raises(UserError, match="larger than the volume"):
        make_patch_loader(str(volumes["n5"]), (40, 16, 16), 1, "mask", 0, False, 0)
    with pytest.raises(UserError, match="unknown target"):
        make_patch_loader(str(volumes["n5"]), (4, 16, 16), 1, "edges", 0, False, 0)


def test_losses():
    target = (torch.rand(2, 3, 4, 6, 6) > 0.5).float()
    assert float(sorensen_dice(target, target)) == pytest.approx(0.0, abs=1e-6)
    assert float(sorensen_dice(1 - target, target)) == pytest.approx(1.0, abs=1e-6)
    half = torch.full_like(target, 0.5)
    assert float(binary_cross_entropy(half, target)) == pytest.approx(np.log(2), rel=1e-5)
    assert float(binary_cross_entropy(target, target)) < 1e-5
    prediction = torch.rand(2, 3, 4, 6, 6, requires_grad=True)
    loss_for("affinities")(prediction, target).backward()
    assert prediction.grad is not None and prediction.grad.abs().sum() > 0
    assert loss_for("mask") is binary_cross_entropy


def test_slab_workers_are_as_many_as_the_memory_available_holds():
    from dlbench.data.generate_volume import slab_bytes, slab_workers

    shape, chunks = (200, 6144, 6144), (8, 256, 256)
    assert slab_bytes(shape, chunks) == 8 * 6144 * 6144 * 46
    assert slab_workers(shape, chunks, 32, 256 * 10**9) == 13
    assert slab_workers(shape, chunks, 4, 256 * 10**9) == 4
    assert slab_workers(shape, chunks, 32, 10**9) == 1  # one slab always runs
    assert slab_workers(shape, chunks, 32, None) == 32  # memory unknown: as asked


def test_data_volume_says_when_it_computes_fewer_slabs_than_asked(tmp_path):
    from dlbench.data.generate_volume import slab_bytes

    two = int(slab_bytes((4, 32, 32), (4, 32, 32)) * 2.5 / 0.75)  # room for two slabs
    code = ("import sys\nfrom dlbench import cli\nfrom dlbench.data import generate_volume\n"
            f"generate_volume.available_memory = lambda: {two}\n"
            "sys.argv = ['dlbench', *sys.argv[1:]]\ncli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code, "data", "volume", str(tmp_path / "v.h5"), "--shape", "4x32x32",
                           "--workers", "8"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "computing 2 slabs at a time, not 8: a slab of 4x32x32 takes about" in proc.stdout + proc.stderr
    assert open_volume(str(tmp_path / "v.h5")).shape == (4, 32, 32)


@pytest.mark.parametrize("name", ["v.h5", "v.zarr"])
def test_a_failed_generation_keeps_the_old_volume_and_leaves_nothing_else(tmp_path, monkeypatch, name):
    from dlbench.data import generate_volume

    path = generate(tmp_path / name, (8, 16, 16), chunks=(2, 16, 16), seed=1)
    old = open_volume(str(path)).read((slice(0, 8), slice(0, 16), slice(0, 16)))
    real, made = generate_volume.slab, []

    def failing(fields, z0, z1, seed):
        if made:
            raise OSError(28, "No space left on device")
        made.append(z0)
        return real(fields, z0, z1, seed)

    monkeypatch.setattr(generate_volume, "slab", failing)
    with pytest.raises(OSError, match="No space left"):
        generate(path, (8, 16, 16), chunks=(2, 16, 16), seed=2, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert np.array_equal(open_volume(str(path)).read((slice(0, 8), slice(0, 16), slice(0, 16))), old)


def test_a_killed_generation_leaves_no_volume_at_its_path(tmp_path):
    path = tmp_path / "v.h5"
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "data", "volume", str(path), "--shape", "400x256x256",
                             "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = tmp_path / "v.h5.partial"
    deadline = time.monotonic() + 120
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert partial.exists() and not path.exists()  # killed while writing: nothing at the volume's path
    generate(path, (8, 16, 16))  # the next generation starts over
    assert open_volume(str(path)).shape == (8, 16, 16) and not partial.exists()
