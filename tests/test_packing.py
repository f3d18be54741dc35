"""Per-sequence packers and the in-memory histogram helper: golden cases, properties, errors."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import reference_packers as reference
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.packing import (
    greedy_pack_sequences,
    heap_pack_sequences,
    length_histogram_from_lengths,
    pack_length_histogram,
    sort_indices_by_length,
)

PACKERS = [greedy_pack_sequences, heap_pack_sequences]


def check_bins(bins, lengths, max_seq_len, cap=None) -> None:
    """Every index exactly once, no bin over the limits."""
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= max_seq_len for b in bins)
    assert all(b for b in bins)
    if cap is not None:
        assert all(len(b) <= cap for b in bins)


def pairings(bins) -> set[frozenset[int]]:
    return {frozenset(b) for b in bins}


# ---- golden ------------------------------------------------------------------------------------


def test_reference_readme_example() -> None:
    # lengths [128, 64, 32, 16, 200, 80, 50], max_seq_len 256: 570 tokens, 3 bins at least.
    # The histogram path starts a bin with 200 (room 56: nothing closes it exactly, so the
    # longest that fits, 50), then 128 (room 128, closed exactly by 80 + 32 + 16), then 64.
    # The reference shows [[4, 0], [5, 3], [1, 2, 6]] "or similar": also 3 bins.
    lengths = [128, 64, 32, 16, 200, 80, 50]
    for packer in PACKERS:
        bins = packer(lengths, max_seq_len=256)
        assert bins == [[4, 6], [0, 5, 2, 3], [1]]
        check_bins(bins, lengths, 256)


def test_length_histogram_from_lengths_reference_example() -> None:
    counts, pools = length_histogram_from_lengths([7, 5, 5, 5, 5, 5, 3, 3, 3])
    assert counts == Counter({5: 5, 3: 3, 7: 1})
    assert list(pools) == [7, 5, 3]
    assert [pools[7].tolist(), pools[5].tolist(), pools[3].tolist()] == [
        [0],
        [1, 2, 3, 4, 5],
        [6, 7, 8],
    ]
    assert all(pool.dtype == np.int64 for pool in pools.values())


def test_sort_indices_by_length() -> None:
    lengths = np.array([3, 9, 3, 7, 9, 3])
    # deterministic: longest first, ties by index
    assert sort_indices_by_length(lengths).tolist() == [1, 4, 3, 0, 2, 5]
    # seeded: the same lengths in the same places, ties shuffled, reproducible
    shuffled = sort_indices_by_length(lengths, seed=7)
    assert lengths[shuffled].tolist() == [9, 9, 7, 3, 3, 3]
    assert shuffled.tolist() == sort_indices_by_length(lengths, seed=7).tolist()
    # tolerance 4: buckets 9//4 = 2, 7//4 = 1, 3//4 = 0; 9 and 7 stay apart, the 3s together
    bucketed = sort_indices_by_length(lengths, tolerance=4, seed=1)
    assert lengths[bucketed].tolist() == [9, 9, 7, 3, 3, 3]
    # tolerance 8: 9 // 8 = 1 and 7 // 8 = 0, so 7 and the 3s share a bucket and mix
    orders = {
        tuple(lengths[sort_indices_by_length(lengths, 8, seed)].tolist()) for seed in range(20)
    }
    assert all(order[:2] == (9, 9) for order in orders) and len(orders) > 1


def test_tolerance_above_one_runs_the_reference_algorithms() -> None:
    # seed None: sorted longest first, then per-item FFD / WFD exactly as the reference.
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, 300).tolist()
    greedy = greedy_pack_sequences(lengths, 100, tolerance=2)
    assert reference.templates_of(greedy, lengths) == reference.templates_of(
        reference.ffd(lengths, 100), lengths
    )
    heap = heap_pack_sequences(lengths, 100, tolerance=2)
    assert reference.templates_of(heap, lengths) == pack_length_histogram(Counter(lengths), 100)
    check_bins(greedy, lengths, 100)
    check_bins(heap, lengths, 100)


def test_empty_and_dtypes() -> None:
    for packer in PACKERS:
        assert packer([], 10) == []
        assert packer(np.array([], dtype=np.int32), 10) == []
        for dtype in (np.int8, np.uint16, np.int32, np.uint64):
            lengths = np.array([5, 3, 2, 7], dtype=dtype)
            check_bins(packer(lengths, 10), lengths.tolist(), 10)
        check_bins(packer([5.0, 3.0], 10), [5, 3], 10)  # whole floats are token counts
    assert length_histogram_from_lengths([]) == (Counter(), {})


def test_seeds_change_pairings_not_templates() -> None:
    lengths = [5] * 20 + [3] * 20  # every bin is (5, 3): only the pairing can change
    for packer in PACKERS:
        first = packer(lengths, 8, seed=1)
        assert first == packer(lengths, 8, seed=1)
        second = packer(lengths, 8, seed=2)
        assert pairings(first) != pairings(second)
        assert reference.templates_of(first, lengths) == reference.templates_of(second, lengths)


# ---- properties --------------------------------------------------------------------------------


@st.composite
def inputs(draw: st.DrawFn) -> tuple[int, list[int]]:
    max_seq_len = draw(st.sampled_from([8, 16, 50, 100]))
    palette = draw(st.lists(st.integers(1, max_seq_len), min_size=1, max_size=8))
    return max_seq_len, draw(st.lists(st.sampled_from(palette), max_size=60))


@settings(max_examples=100, deadline=None)
@given(inputs(), st.one_of(st.none(), st.integers(1, 5)), st.sampled_from([1, 1, 3]))
def test_every_index_once_within_limits(case, cap, tolerance) -> None:
    max_seq_len, lengths = case
    for packer in PACKERS:
        for seed in (None, 11):
            bins = packer(lengths, max_seq_len, tolerance, seed, max_seqs_per_bin=cap)
            check_bins(bins, lengths, max_seq_len, cap)


@settings(max_examples=100, deadline=None)
@given(inputs(), st.one_of(st.none(), st.integers(1, 5)))
def test_no_more_bins_than_per_item_ffd_at_tolerance_one(case, cap) -> None:
    max_seq_len, lengths = case
    ffd_bins = len(reference.ffd(lengths, max_seq_len, cap))
    for packer in PACKERS:
        assert len(packer(lengths, max_seq_len, max_seqs_per_bin=cap)) <= ffd_bins


@settings(max_examples=60, deadline=None)
@given(inputs(), st.integers(0, 2**63 - 1), st.sampled_from([1, 4]))
def test_same_seed_same_bins(case, seed, tolerance) -> None:
    max_seq_len, lengths = case
    for packer in PACKERS:
        assert packer(lengths, max_seq_len, tolerance, seed) == packer(
            lengths, max_seq_len, tolerance, seed
        )


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 2**32), st.sampled_from([1, 2]))
def test_different_seeds_different_pairings(seed_a, seed_b, tolerance) -> None:
    if seed_a == seed_b:
        return
    # 30 bins of one 6 and one 4: two seeds give the same matching with probability 1/30!
    lengths = [6] * 30 + [4] * 30
    for packer in PACKERS:
        a = packer(lengths, 10, tolerance, seed_a)
        b = packer(lengths, 10, tolerance, seed_b)
        assert pairings(a) != pairings(b)


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("packer", PACKERS)
def test_length_over_max_seq_len(packer) -> None:
    with pytest.raises(InputError) as error:
        packer([100, 5000, 7], 4096)
    message = str(error.value)
    assert "5000" in message and "4096" in message and "index 1" in message
    # Python names the arguments; the command line shows the flags.
    assert "filter_over_cap=True" in message and "raise max_seq_len" in message
    flags = error.value.cli_message()
    assert "--filter-over-cap" in flags and "raise --max-seq-len" in flags


@pytest.mark.parametrize("packer", PACKERS)
@pytest.mark.parametrize(
    "bad", [[3, 0], [3, -2], [3.5], [True, 2], ["a"], [[1, 2]], [float("nan")]]
)
def test_bad_lengths(packer, bad) -> None:
    with pytest.raises(InputError):
        packer(bad, 10)


@pytest.mark.parametrize("bad", [[0], [2.5], [False]])
def test_bad_lengths_in_helpers(bad) -> None:
    with pytest.raises(InputError):
        length_histogram_from_lengths(bad)
    with pytest.raises(InputError):
        sort_indices_by_length(bad)


@pytest.mark.parametrize("packer", PACKERS)
@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_seq_len": 0}, "max_seq_len"),
        ({"max_seq_len": 8.5}, "max_seq_len"),
        ({"tolerance": 0}, "tolerance"),
        ({"seed": 2**63}, "seed"),  # the signed 64-bit range, as every seed
        ({"seed": 1.5}, "seed"),
        ({"max_seqs_per_bin": 0}, "max_seqs_per_bin"),
    ],
)
def test_bad_options_are_config_errors(packer, kwargs, option) -> None:
    arguments = {"lengths": [3, 4], "max_seq_len": 10, **kwargs}
    with pytest.raises(ConfigError, match=option):
        packer(**arguments)


def test_reference_names_import_from_packing() -> None:
    import seqpack_cli.packing as packing

    for name in (
        "sort_indices_by_length",
        "greedy_pack_sequences",
        "heap_pack_sequences",
        "pack_length_histogram",
        "pack_length_histogram_batched",
        "length_histogram_from_lengths",
        "materialize_epoch",
        "EpochPlan",
        "BinTemplate",
        "shuffle_bins",
        "seed_from_components",
    ):
        assert getattr(packing, name) is not None, name
