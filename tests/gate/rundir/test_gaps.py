"""Per-token ITL gaps (`gate.rundir.gaps.itl_gaps`): the slice-by-slice one-token path equals the
whole-array definition for any cut of requests, also when written into a given array."""

import numpy as np
import pytest

from gate.rundir import gaps


def _reference(times: np.ndarray, num_chunks: np.ndarray) -> np.ndarray:
    ends = np.cumsum(num_chunks)[:-1]
    same = np.ones(len(times) - 1, dtype=bool)
    same[ends[(ends > 0) & (ends < len(times))] - 1] = False
    return np.diff(times)[same].astype(np.float32)


@pytest.mark.parametrize("slice_size", [1, 2, 3, 7, 1 << 19])
def test_one_token_gaps_equal_the_whole_array_definition(monkeypatch, slice_size):
    monkeypatch.setattr(gaps, "_SLICE", slice_size)
    rng = np.random.default_rng(slice_size)
    for _ in range(100):
        num_chunks = rng.integers(0, 6, rng.integers(0, 25))
        times = np.cumsum(rng.random(int(num_chunks.sum())))
        values, counts = gaps.itl_gaps(times, None, num_chunks)
        expected = _reference(times, num_chunks) if len(times) >= 2 else np.zeros(0)
        np.testing.assert_array_equal(values, expected)
        assert counts.tolist() == np.maximum(num_chunks - 1, 0).tolist()
        out = np.full(len(expected), np.nan, dtype=np.float32)
        into, _ = gaps.itl_gaps(times, None, num_chunks, out=out)
        assert into is out
        np.testing.assert_array_equal(out, expected)


def test_an_out_array_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="float32 of shape"):
        gaps.itl_gaps(np.arange(5.0), None, np.array([5]), out=np.zeros(3, dtype=np.float32))
