"""The parsers every layer shares (shapes, counts with decimal suffixes, did-you-mean) and the
rates people plan with, checked against the seeds' own figures (and where the seeds are wrong)."""

import pytest

from dlbench import units
from dlbench.errors import UserError
from dlbench.figures import DASH, fixed
from dlbench.units import parse_count, parse_shape, suggest


def test_shape_parsing():
    assert parse_shape("3x224x224") == (3, 224, 224)
    assert parse_shape([1, 40, 432, 432]) == (1, 40, 432, 432)
    for bad in ("3x0x2", "axb", ""):
        with pytest.raises(UserError):
            parse_shape(bad)


def test_count_parsing():
    assert parse_count("8.1T", "--extrapolate") == pytest.approx(8.1e12)
    assert parse_count("1.9G", "--extrapolate") == pytest.approx(1.9e9)
    assert parse_count(1000, "--extrapolate") == 1000 and parse_count("1.9e9", "--extrapolate") == 1.9e9
    for bad in ("lots", "0", "-5G"):
        with pytest.raises(UserError, match="bad --extrapolate"):
            parse_count(bad, "--extrapolate")


def test_suggest_names_close_matches_only():
    assert suggest("resnet5", ["resnet50", "vgg16"]) == " (did you mean resnet50?)"
    assert suggest("xyz", ["resnet50"]) == ""


# Seed 000: 1001 training iterations; seconds -> iterations per minute as printed there.
SEED_000_TRAINING = {
    "VM:P40-Grid": (1816.7, "33.1"), "Cluster:1080Ti": (1754.2, "34.2"), "1080Ti (x4)": (2371.4, "25.3"),
    "Cluster:P100": (2238.6, "26.8"), "P100 (x2)": (2556.7, "23.5"), "SMC: P100": (2071.7, "29.0"),
    "SMC P100 (x2)": (2239.1, "26.8"), "P100 (x4)": (2509.9, "23.9"), "SMC: V100": (1866.3, "32.2"),
    "V100 (x2)": (2017.1, "29.8"), "V100 (x4)": (2308.8, "26.0"),
}


@pytest.mark.parametrize("system", sorted(SEED_000_TRAINING))
def test_iters_per_min_matches_seed_000(system):
    seconds, printed = SEED_000_TRAINING[system]
    assert fixed(units.iters_per_min(1001, seconds), 1) == printed


def test_seed_000_1080ti_x2_iters_per_min_is_a_typo():
    # 1001 iterations in 2053.8 s is 29.2 iterations/min; the seed prints 29.4.
    assert fixed(units.iters_per_min(1001, 2053.8), 1) == "29.2"


def test_days_to_100k_matches_seed_001():
    per_min = units.iters_per_min(1001, 1754.2)
    assert fixed(units.days_to(100_000, per_min), 1) == "2.0"
    printed = {"29.4": "2.4", "26.8": "2.6", "23.5": "3.0", "29.0": "2.4", "32.2": "2.2", "29.8": "2.3"}
    for rate, days in printed.items():
        assert fixed(units.days_to(100_000, float(rate)), 1) == days


def test_missing_inputs_give_none_which_prints_as_dash():
    assert units.iters_per_min(1001, None) is None and units.days_to(100_000, 0) is None
    assert fixed(None, 1) == DASH
