import numpy as np
import pytest

from dlbench.data.blocking import Blocking, _reflect
from dlbench.errors import UserError

CASES = [((13, 17, 19), (4, 5, 6), (2, 3, 4)), ((8, 8, 8), (8, 8, 8), (0, 0, 0)), ((10, 33, 7), (3, 32, 7), (1, 5, 6)),
         ((5, 9, 11), (2, 2, 2), (4, 8, 10))]


@pytest.mark.parametrize("shape, block, halo", CASES)
def test_every_voxel_is_written_exactly_once(shape, block, halo):
    blocking = Blocking(shape, block, halo)
    count = np.zeros(shape, dtype=np.uint8)
    for blk in blocking:
        count[blk.box] += 1
    assert (count == 1).all()
    assert len(blocking) == int(np.prod([-(-s // b) for s, b in zip(shape, block)]))
    last = blocking[len(blocking) - 1]
    assert last.end == shape  # the far-border blocks are cut, not dropped


def read_tile(blocking: Blocking, read, blk) -> np.ndarray:
    """The tile as the run reads it, into a buffer of its own (by `read`, no `read_into`)."""
    first = read(tuple(slice(0, 1) for _ in blocking.shape))
    out = np.full(blocking.tile, 7, first.dtype)
    blocking.read_tile_into(read, blk, out)
    return out


@pytest.mark.parametrize("shape, block, halo", CASES)
def test_tiles_are_reflect_padded_crops(shape, block, halo):
    blocking = Blocking(shape, block, halo)
    volume = np.random.default_rng(0).random(shape)
    reads = []

    def read(box):
        reads.append(box)
        return volume[box]

    for blk in blocking:
        tile = read_tile(blocking, read, blk)
        assert tile.shape == blocking.tile
        # The crop of the tile is the block itself.
        assert np.array_equal(tile[blocking.crop(blk)], volume[blk.box])
        # Where the padding fits numpy's reflect, the tile is exactly that padding.
        if all(p < s for p, s in zip(halo, shape)) and all(t + b - h <= s + h for t, b, h, s in
                                                          zip(blocking.tile, blk.begin, halo, shape)):
            padded = np.pad(volume, [(h, h) for h in halo], mode="reflect")
            assert np.array_equal(tile, padded[tuple(slice(b, b + t) for b, t in zip(blk.begin, blocking.tile))])
    assert all(box[0].start >= 0 and box[0].stop <= shape[0] for box in reads)  # reads never leave the volume


def test_bad_blockings():
    with pytest.raises(UserError, match="block 20x8x8 is larger than the volume 10x10x10"):
        Blocking((10, 10, 10), (20, 8, 8), (1, 1, 1))
    with pytest.raises(UserError, match="halo 1x10x1 must be"):
        Blocking((10, 10, 10), (5, 5, 5), (1, 10, 1))
    with pytest.raises(UserError, match="need 3 sizes"):
        Blocking((10, 10, 10), (5, 5), (1, 1, 1))


def test_fill_and_kept_shares_count_cut_blocks_and_halos():
    # The seed's volume depth 200 in blocks of 32: 7 blocks, the last cut to 8 slices, so the
    # model computes 224 slices' worth of blocks for 200.
    blocking = Blocking((200, 768, 768), (32, 384, 384), (16, 64, 64))
    assert blocking.fill == pytest.approx(200 / 224)
    assert blocking.kept == pytest.approx(200 * 768 * 768 / (7 * 2 * 2 * 64 * 512 * 512))
    assert Blocking((64, 64, 64), (32, 32, 32), (0, 0, 0)).kept == 1.0


def test_a_run_with_cut_blocks_says_how_much_work_they_waste():
    from dlbench.results.measurement import Measurement
    from dlbench.workloads.volume import describe

    metrics = {"voxels": 2e6, "total_s": 1.0, "mvox_per_s": 2.0, "blocks": 7, "blocks_skipped": 0}
    assert "11% of the model's work is outside the volume" in describe(Measurement.read({**metrics, "block_fill": 200 / 224}))
    assert "outside" not in describe(Measurement.read({**metrics, "block_fill": 1.0}))


def random_blockings(rng: np.random.Generator, tries: int):
    """Valid blockings of small random volumes, halos up to wider than the volume (refused ones skipped)."""
    for _ in range(tries):
        shape = tuple(int(v) for v in rng.integers(1, 12, 3))
        block = tuple(int(rng.integers(1, s + 1)) for s in shape)
        halo = tuple(int(rng.integers(0, s + 3)) for s in shape)
        try:
            yield Blocking(shape, block, halo)
        except UserError:
            continue


def test_padded_and_gathered_tiles_are_the_same_reflection():
    """Tiles whose halo one reflection covers are read and reflected in place, the rest gathered
    index by index: both are the periodic reflection of the volume."""
    rng = np.random.default_rng(1)
    padded = total = 0
    for blocking in random_blockings(rng, 300):
        shape, halo = blocking.shape, blocking.halo
        volume = rng.random(shape)
        reads = []

        def read(box):
            reads.append(box)
            return volume[box]

        for blk in blocking:
            indices = [_reflect(np.arange(b - h, b - h + t), s) for b, h, t, s in
                       zip(blk.begin, halo, blocking.tile, shape)]
            assert np.array_equal(read_tile(blocking, read, blk), volume[np.ix_(*indices)])
            total += 1
            padded += reads[-1] == tuple(slice(max(b - h, 0), min(b - h + t, s)) for b, h, t, s in
                                         zip(blk.begin, halo, blocking.tile, shape))
    assert 100 < padded < total - 100  # both ways were taken


def test_tiles_read_into_place_equal_the_reflection():
    """read_tile_into with a `read_into` (the volume decoding into the buffer): every blocking kind
    (one reflection, gathered) gives the periodic reflection of the volume."""
    rng = np.random.default_rng(2)
    checked = 0
    for blocking in random_blockings(rng, 200):
        volume = rng.integers(0, 255, blocking.shape).astype(np.uint8)

        def read_into(box, out, where):
            out[where] = volume[box]

        for blk in blocking:
            out = np.full(blocking.tile, 7, np.uint8)
            blocking.read_tile_into(lambda box: volume[box], blk, out, read_into)
            indices = [_reflect(np.arange(b - h, b - h + t), s) for b, h, t, s in
                       zip(blk.begin, blocking.halo, blocking.tile, blocking.shape)]
            assert np.array_equal(out, volume[np.ix_(*indices)])
            checked += 1
    assert checked > 1000
