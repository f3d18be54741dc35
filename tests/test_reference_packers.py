"""Graphcore's histogram packers as rewritten in benchmarks/reference_packers.py.

SPFHP, LPFHP and NNLSHP must return real packings of the histogram (every sequence once, no pack
over max_seq_len or the depth), reproduce the figures the packedBERT README publishes for the
Wikipedia histogram, and agree with the per-item fits they are grouped versions of.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import reference_packers as reference
from hypothesis import given, settings
from hypothesis import strategies as st

PACKEDBERT = Path(__file__).parents[1] / "benchmarks" / "data" / "packedbert_histograms.json"


def check_packing(
    templates: Counter[tuple[int, ...]],
    histogram: dict[int, int],
    max_seq_len: int,
    depth: int | None,
) -> None:
    """Fails unless `templates` packs exactly `histogram` within max_seq_len and depth."""
    held: Counter[int] = Counter()
    for template, count in templates.items():
        assert count > 0, (template, count)
        assert template and list(template) == sorted(template, reverse=True), template
        assert min(template) >= 1 and sum(template) <= max_seq_len, template
        assert depth is None or len(template) <= depth, (template, depth)
        for length in template:
            held[length] += count
    assert held == Counter({length: count for length, count in histogram.items() if count})


def histograms(max_len: int = 64, max_count: int = 40):
    """(histogram, max_seq_len): small random histograms over lengths 1..max_seq_len."""
    return st.integers(4, max_len).flatmap(
        lambda m: st.tuples(
            st.dictionaries(st.integers(1, m), st.integers(0, max_count), max_size=12),
            st.just(m),
        )
    )


def num_bins(templates: Counter[tuple[int, ...]]) -> int:
    return sum(templates.values())


@settings(max_examples=300, deadline=None)
@given(histograms(), st.sampled_from([None, 1, 2, 3, 5]))
def test_spfhp_and_lpfhp_pack_the_histogram_within_the_limits(case, depth) -> None:
    histogram, max_seq_len = case
    for packer in (reference.spfhp, reference.lpfhp):
        check_packing(packer(histogram, max_seq_len, depth), histogram, max_seq_len, depth)


@settings(max_examples=60, deadline=None)
@given(histograms(max_len=24), st.sampled_from([2, 3]))
def test_nnlshp_packs_the_histogram_within_the_limits(case, depth) -> None:
    histogram, max_seq_len = case
    templates = reference.nnlshp(histogram, max_seq_len, depth)
    check_packing(templates, histogram, max_seq_len, depth)


def per_item_spfhp_bins(histogram: dict[int, int], max_seq_len: int) -> int:
    """SPFHP's rule one sequence at a time: longest first, each into the roomiest pack that fits;
    when none does, every sequence of that length still to place opens a pack of its own."""
    rooms: list[int] = []  # -room of every pack (a max-heap)
    for length in sorted(histogram, reverse=True):
        left = histogram[length]
        while left and rooms and -rooms[0] >= length:
            heapq.heapreplace(rooms, rooms[0] + length)
            left -= 1
        for _ in range(left):
            heapq.heappush(rooms, length - max_seq_len)
    return len(rooms)


@settings(max_examples=200, deadline=None)
@given(histograms())
def test_uncapped_spfhp_uses_the_bins_of_its_per_item_rule(case) -> None:
    # Without a depth, packs with the same room are interchangeable, so grouping them (and the
    # order among them) cannot change the number of packs.
    histogram, max_seq_len = case
    expected = per_item_spfhp_bins(histogram, max_seq_len)
    assert num_bins(reference.spfhp(histogram, max_seq_len)) == expected


def test_spfhp_opens_one_pack_per_sequence_that_fits_nowhere() -> None:
    # as published: it does not put a second copy into the pack the first one opened
    assert reference.spfhp({1: 2}, 4) == Counter({(1,): 2})
    assert reference.spfhp({3: 1, 1: 3}, 4) == Counter({(3, 1): 1, (1,): 2})


@settings(max_examples=200, deadline=None)
@given(histograms())
def test_uncapped_lpfhp_uses_the_bins_of_per_item_best_fit(case) -> None:
    # Putting every copy that fits into the best-fit pack at once is what per-item best fit
    # does one copy at a time: the pack stays the tightest fit until it cannot take another.
    histogram, max_seq_len = case
    lengths = [length for length, count in sorted(histogram.items()) for _ in range(count)]
    expected = len(reference.bfd(lengths, max_seq_len))
    assert num_bins(reference.lpfhp(histogram, max_seq_len)) == expected


@pytest.mark.parametrize(("max_seq_len", "depth"), [(1, 3), (7, 1), (12, 2), (12, 3), (17, 4)])
def test_nnlshp_strategies_are_every_exact_fill(max_seq_len: int, depth: int) -> None:
    strategies = reference._exact_fill_strategies(max_seq_len, depth)
    brute_force = {
        tuple(sorted(combination, reverse=True))
        for size in range(1, depth + 1)
        for combination in itertools.combinations_with_replacement(range(1, max_seq_len + 1), size)
        if sum(combination) == max_seq_len
    }
    assert len(strategies) == len(set(strategies)) == len(brute_force)
    assert set(strategies) == brute_force
    assert reference.nnlshp_num_strategies(max_seq_len, depth) == len(brute_force)


def test_nnlshp_finds_an_exact_decomposition_and_pairs_the_leftovers() -> None:
    assert reference.nnlshp({7: 100, 3: 100}, 10, 2) == Counter({(7, 3): 100})
    # no 8s to pair the 2s with: each 2 goes alone into the (8, 2) strategy, the 8 slot empty
    templates = reference.nnlshp({7: 100, 3: 100, 2: 5}, 10, 2)
    assert templates == Counter({(7, 3): 100, (2,): 5})


def test_nnlshp_needs_a_depth_of_two() -> None:
    with pytest.raises(ValueError, match="depth"):
        reference.nnlshp({3: 1}, 10, 1)


def test_a_length_outside_the_range_is_refused() -> None:
    for packer in (reference.spfhp, reference.lpfhp):
        with pytest.raises(ValueError, match="outside"):
            packer({11: 1}, 10)


def load_published() -> dict:
    return json.loads(PACKEDBERT.read_text())


def test_the_published_histograms_add_up() -> None:
    data = load_published()
    wikipedia, squad = data["histograms"]["wikipedia_512"], data["histograms"]["squad_384"]
    assert (len(wikipedia["counts"]), sum(wikipedia["counts"])) == (512, 16_279_552)
    assert (len(squad["counts"]), sum(squad["counts"])) == (384, 88_641)
    assert data["source"]["commit"] == "2d8b565326ef6ba730492ad8badd984b067645bc"


@pytest.mark.parametrize("packer_name", ["SPFHP", "LPFHP"])
def test_the_packedbert_readme_figures_are_reproduced(packer_name: str) -> None:
    # The README prints each packer's efficiency and speed-up (sequences / packs) on Wikipedia
    # at 12 sequences per pack; the rewrite must print the same, to the digits shown.
    data = load_published()
    entry = data["histograms"]["wikipedia_512"]
    histogram = {i + 1: count for i, count in enumerate(entry["counts"]) if count}
    (published,) = [
        row for row in data["published_results"]["wikipedia_512"] if row["packer"] == packer_name
    ]
    packer = {"SPFHP": reference.spfhp, "LPFHP": reference.lpfhp}[packer_name]
    templates = packer(histogram, 512, published["max_sequences_per_pack"])
    check_packing(templates, histogram, 512, published["max_sequences_per_pack"])
    bins = num_bins(templates)
    tokens = sum(length * count for length, count in histogram.items())
    assert f"{entry['num_sequences'] / bins:.5f}" == f"{published['speed_up']:.5f}"
    assert f"{100 * tokens / (bins * 512):.4f}" == f"{published['efficiency_percent']:.4f}"
