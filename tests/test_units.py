"""The parsers every layer shares: shapes, counts with decimal suffixes, did-you-mean."""

import pytest

from dlbench.errors import UserError
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
