"""Segmentation data: DICE, k-fold splits, the generator's files and the reader's checks."""

import numpy as np
import pytest
import torch
from PIL import Image

from dlbench.data import generate_seg, segmentation
from dlbench.errors import UserError


def _dice(pred: torch.Tensor, truth: torch.Tensor) -> list[float]:
    return segmentation.dice_from_counts(segmentation.confusion(pred, truth))


def test_dice_on_hand_made_masks():
    truth = torch.tensor([[1, 1, 0, 0],
                          [1, 1, 0, 0]])
    pred = torch.tensor([[1, 0, 0, 0],
                         [1, 1, 1, 0]])
    # class 1: |P n T| = 3, |P| = 4, |T| = 4 -> 0.75; class 0: 3, 4, 4 -> 0.75
    assert _dice(pred, truth) == pytest.approx([0.75, 0.75])
    assert _dice(truth, truth) == [1.0, 1.0]
    assert _dice(1 - truth, truth) == [0.0, 0.0]
    # a class absent from both counts as perfect: all-background prediction of an all-background mask
    zeros = torch.zeros(3, 3, dtype=torch.long)
    assert _dice(zeros, zeros) == [1.0, 1.0]
    counts = segmentation.confusion(pred, truth)
    assert counts.tolist() == [[3.0, 4.0, 4.0], [3.0, 4.0, 4.0]]


@pytest.mark.parametrize("n, k", [(30, 5), (7, 3), (2, 2)])
def test_kfold_splits_are_disjoint_and_cover(n, k):
    splits = segmentation.kfold(n, k, seed=1)
    assert len(splits) == k
    vals = [set(v) for _, v in splits]
    assert set().union(*vals) == set(range(n)) and sum(map(len, vals)) == n
    for train, val in splits:
        assert not set(train) & set(val) and set(train) | set(val) == set(range(n))
        assert abs(len(val) - n / k) < 1
    assert segmentation.kfold(n, k, seed=1) == splits


def test_kfold_rejects_too_few_images_or_folds():
    with pytest.raises(UserError, match="cannot be split into 5 folds"):
        segmentation.kfold(4, 5)
    with pytest.raises(UserError, match="at least 2 folds"):
        segmentation.kfold(4, 1)


@pytest.mark.parametrize("format", ["tif", "png"])
def test_generated_set_reads_back(tmp_path, format):
    root = generate_seg.write(tmp_path / "seg", n=3, size=48, format=format, seed=3)
    data = segmentation.load(root)
    assert data.images.shape == (3, 48, 48) and data.masks.shape == (3, 48, 48)
    assert data.names == ["seg_000", "seg_001", "seg_002"]
    membrane = 1 - data.masks.mean()
    assert 0.05 < membrane < 0.6  # both classes present in sensible shares
    assert abs(float(data.images.mean())) < 1e-4 and abs(float(data.images.std()) - 1) < 1e-3
    again = generate_seg.arrays(1, 48, seed=3)
    assert np.array_equal(np.asarray(Image.open(root / "images" / f"seg_000.{format}")), again[0][0])


def test_generator_refuses_to_mix_with_an_existing_set(tmp_path):
    root = generate_seg.write(tmp_path / "seg", n=2, size=32)
    before = sorted(p.name for p in (root / "images").iterdir())
    with pytest.raises(UserError, match="not empty; give --overwrite"):
        generate_seg.write(root, n=1, size=32)
    assert sorted(p.name for p in (root / "images").iterdir()) == before
    generate_seg.write(root, n=1, size=32, format="png", overwrite=True)
    assert [p.name for p in (root / "images").iterdir()] == ["seg_000.png"]


def _folder(tmp_path, images, masks):
    for sub, arrays in (("images", images), ("masks", masks)):
        (tmp_path / sub).mkdir(exist_ok=True)
        for name, array in arrays.items():
            Image.fromarray(np.asarray(array, dtype=np.uint8)).save(tmp_path / sub / name)
    return tmp_path


GOOD = np.tile(np.array([[0, 255]], dtype=np.uint8), (8, 4))


def test_reader_accepts_0_1_masks_and_rgb_images(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 255, (8, 8, 3))
    root = _folder(tmp_path, {"a.png": rgb}, {"a.tif": GOOD // 255})
    data = segmentation.load(root)
    assert data.masks.sum() == 32 and data.images.shape == (1, 8, 8)


@pytest.mark.parametrize("images, masks, needle", [
    ({"a.png": GOOD, "b.png": GOOD}, {"a.png": GOOD}, "image b.png has no mask"),
    ({"a.png": GOOD}, {"a.png": GOOD, "c.png": GOOD}, "mask c.png has no image"),
    ({"a.png": GOOD}, {"a.png": GOOD[:, :6]}, "image a.png is 8x8 but its mask is 6x8"),
    ({"a.png": GOOD, "b.png": GOOD[:4]}, {"a.png": GOOD, "b.png": GOOD[:4]}, "images differ in size"),
    ({"a.png": GOOD}, {"a.png": GOOD // 2 + 3}, "label values 3, 130; expected 0/1 or 0/255"),
    ({}, {"a.png": GOOD}, "holds no .tif, .tiff or .png files"),
])
def test_reader_rejects_bad_sets(tmp_path, images, masks, needle):
    root = _folder(tmp_path, images, masks)
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        segmentation.load(root)


def test_reader_needs_both_folders(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        segmentation.load(tmp_path / "nothing")
    (tmp_path / "images").mkdir()
    with pytest.raises(UserError, match="has no 'masks' folder"):
        segmentation.load(tmp_path)
