"""`LengthCounter.add_counts`: histograms added (the Dask driver's groups) count as their
sequences added one by one."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from seqpack_cli.prepare.length_counter import LengthCounter

_lengths = st.sampled_from([1, 2, 7, 5000, 2**20 - 1, 2**20, 2**31 - 1, 2**40])


@given(st.lists(st.dictionaries(_lengths, st.integers(1, 2**40), max_size=6), max_size=6))
def test_added_histograms_sum_like_a_counter(histograms: list[dict[int, int]]) -> None:
    counter = LengthCounter()
    for histogram in histograms:
        lengths = np.array(list(histogram), dtype=np.int64)
        counts = np.array(list(histogram.values()), dtype=np.int64)
        counter.add_counts(lengths, counts)
    expected: Counter[int] = Counter()
    for histogram in histograms:
        expected.update(histogram)
    assert counter.histogram() == dict(sorted(expected.items()))
    assert list(counter.histogram()) == sorted(expected)


@given(st.lists(_lengths, max_size=20), st.dictionaries(_lengths, st.integers(1, 99), max_size=5))
def test_lengths_and_histograms_mix(lengths: list[int], histogram: dict[int, int]) -> None:
    counter = LengthCounter()
    counter.add(np.array(lengths, dtype=np.int64))
    counter.add_counts(
        np.array(list(histogram), dtype=np.int64), np.array(list(histogram.values()), np.int64)
    )
    assert counter.histogram() == dict(sorted((Counter(lengths) + Counter(histogram)).items()))
