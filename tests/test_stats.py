import numpy as np
import pytest

from dlbench.results.stats import summarize


def test_summary_matches_numpy():
    rng = np.random.default_rng(1)
    samples = rng.gamma(4.0, 0.01, size=257)
    s = summarize(samples.tolist())
    assert s["n"] == 257
    assert s["mean"] == pytest.approx(samples.mean())
    assert s["median"] == pytest.approx(np.median(samples))
    assert s["std"] == pytest.approx(samples.std(ddof=1))
    assert s["cv"] == pytest.approx(samples.std(ddof=1) / samples.mean())
    for p in (50, 90, 95, 99):
        assert s[f"p{p}"] == pytest.approx(np.percentile(samples, p))
    assert s["min"] == samples.min() and s["max"] == samples.max()


def test_single_sample_has_zero_spread():
    s = summarize([0.5])
    assert s["median"] == 0.5 and s["std"] == 0.0 and s["cv"] == 0.0


def test_no_samples_is_an_error():
    with pytest.raises(ValueError):
        summarize([])
