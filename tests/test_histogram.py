"""Histogram packing: golden scenarios, exactness of the grouped strategies, invariants, errors."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from conftest import reference_packers as reference
from hypothesis import example, given, settings
from hypothesis import strategies as st
from work_counts import measure

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.packing.bounds import (
    LowerBound,
    lower_bound,
    lower_bounds,
    lower_bounds_of_lengths,
    residual_lower_bound,
)
from seqpack_cli.packing.dff import dff_lower_bound
from seqpack_cli.packing.fit import bfd_groups, ffd_groups
from seqpack_cli.packing.groups import count_bins, group_templates
from seqpack_cli.packing.histogram import (
    lower_bound_bins,
    pack_length_histogram,
    pack_length_histogram_batched,
    pack_length_histogram_bfd,
    pack_length_histogram_ffd,
    pack_length_histogram_greedy,
    pack_length_histogram_mffd,
)
from seqpack_cli.packing.lp import lp_lower_bound
from seqpack_cli.packing.mffd import mffd_groups
from seqpack_cli.packing.patterns import pattern_groups
from seqpack_cli.packing.slot_patterns import slot_pattern_groups

GROUPED = {
    "bfd": (pack_length_histogram_bfd, reference.bfd),
    "ffd": (pack_length_histogram_ffd, reference.ffd),
    "mffd": (pack_length_histogram_mffd, reference.mffd),
}
# Each strategy on groups, as the engine runs it.
CLASSICS = {"bfd": bfd_groups, "ffd": ffd_groups, "mffd": mffd_groups}
STRATEGIES = {"patterns": pattern_groups, **CLASSICS}


def flatten(templates: Counter[tuple[int, ...]]) -> Counter[int]:
    """The length histogram a packing holds."""
    out: Counter[int] = Counter()
    for template, num in templates.items():
        for length in template:
            out[length] += num
    return out


def per_item(lengths: list[int], packer, max_seq_len: int, cap: int | None = None):
    return reference.templates_of(packer(lengths, max_seq_len, cap), lengths)


# ---- golden scenarios --------------------------------------------------------------------------


def test_reference_example() -> None:
    # The reference README: lengths [7, 5, 5, 5, 5, 5, 3, 3, 3], max_seq_len 10.
    # 41 tokens need at least ceil(41 / 10) = 5 bins. The engine's first strategy starts a bin
    # with the longest length, 7, and closes its room of 3 exactly with a 3; then 5 closes a 5
    # (twice, the count of 5s allows two such bins); the last 5 cannot be closed exactly, so it
    # takes the longest that fits (3), and the last 3 is alone. That is 5 bins = the bound, so
    # no other strategy runs, and the result is the reference's output exactly.
    templates = pack_length_histogram_batched({7: 1, 5: 5, 3: 3}, 10)
    assert templates == Counter({(5, 5): 2, (7, 3): 1, (5, 3): 1, (3,): 1})


def test_per_item_wfd_reference_example() -> None:
    # Worst fit, longest first: 7 opens bin A (room 3); no room for a 5, so 5 opens B (room 5)
    # and the next 5 goes to the roomiest bin, B; then C = (5, 5); the fifth 5 opens D (room 5).
    # The 3s go to the roomiest bins: D (room 5 -> 2), then A (room 3 -> 0), then a new bin.
    templates = pack_length_histogram({7: 1, 5: 5, 3: 3}, 10)
    assert templates == Counter({(5, 5): 2, (7, 3): 1, (5, 3): 1, (3,): 1})


def test_grouped_bfd_fills_one_bin_before_the_next() -> None:
    # Identical lengths: BFD keeps putting 4s into the same bin (it stays the tightest fit)
    # until it has no room for another, so bins take floor(10 / 4) = 2 copies each.
    assert pack_length_histogram_bfd({4: 5}, 10) == Counter({(4, 4): 2, (4,): 1})
    # With a cap of one sequence per bin every 4 gets its own bin.
    assert pack_length_histogram_bfd({4: 5}, 10, max_seqs_per_bin=1) == Counter({(4,): 5})


def test_mffd_beats_bfd_and_the_engine_keeps_the_better() -> None:
    # max_seq_len 30. BFD: 20, 17, 16 open bins (rooms 10, 13, 14); 11 -> room 13; 8 -> room
    # 10; the 6s -> room 14; 3 opens a fourth bin. MFFD instead pairs the two 6s with the
    # 8 beside 16 (its step 3), and then 6, 3, 1 close the bin of 20: 3 bins, the lower bound.
    lengths = [20, 17, 16, 11, 8, 6, 6, 3, 1]
    histogram = Counter(lengths)
    assert sum(pack_length_histogram_bfd(histogram, 30).values()) == 4
    mffd = pack_length_histogram_mffd(histogram, 30)
    assert mffd == Counter({(20, 6, 3, 1): 1, (17, 11): 1, (16, 8, 6): 1})
    assert sum(pack_length_histogram_batched(histogram, 30).values()) == 3


def test_engine_beats_all_three_classics() -> None:
    # max_seq_len 20, 60 tokens: 3 bins are possible, (20), (12, 5, 3), (10, 7, 3), and the
    # pattern strategy finds them (it closes 12's room of 8 with 5 + 3 and 10's room with
    # 7 + 3), while BFD, FFD and MFFD all use 4.
    histogram = Counter([20, 12, 10, 7, 5, 3, 3])
    for strategy, _ in GROUPED.values():
        assert sum(strategy(histogram, 20).values()) == 4
    assert pack_length_histogram_batched(histogram, 20) == Counter(
        {(20,): 1, (12, 5, 3): 1, (10, 7, 3): 1}
    )


def test_lower_bound() -> None:
    assert lower_bound_bins({7: 1, 5: 5, 3: 3}, 10) == 5  # ceil(41 / 10)
    assert lower_bound_bins({6: 3, 1: 1}, 10) == 3  # three lengths > 10/2 never share
    assert lower_bound_bins({4: 6}, 10) == 3  # at most two lengths > 10/3 in a bin
    assert lower_bound_bins({1: 10}, 10, max_seqs_per_bin=3) == 4  # ceil(10 / 3)
    assert lower_bound_bins({}, 10) == 0


def test_lower_bounds_by_kind() -> None:
    # 9 sequences of 7 or 8 (longer than 20/3, so at most two share a bin) need 5 bins, while
    # their 72 tokens would fit in 4: the bound by number is the one that binds.
    assert lower_bounds([(8, 4), (7, 5), (5, 1)], 20, None) == LowerBound(4, 4, 5)
    # three sequences longer than 10/2 never share: by size (L2), 3; by volume, 2
    assert lower_bounds([(6, 3), (1, 1)], 10, None) == LowerBound(2, 3, 3)
    assert lower_bounds([(1, 10)], 10, 3) == LowerBound(1, 1, 4)  # ceil(10 / 3) when capped
    assert lower_bound([(1, 10)], 10, 3) == 4
    assert LowerBound(1, 1, 4).to_dict() == {"volume": 1, "size": 1, "number": 4}


def test_dual_feasible_bound_sees_what_only_the_lp_saw() -> None:
    # issue 21: `third_plus_one` at 4,096 tokens. Two of 1,366 fill a bin (1,364 left); one of
    # 1,365 fits beside one of them (with another 1,365) but not two: weights 2 and 1, at most
    # 4 in a bin, so (2 * 600 + 340) / 4 = 385 bins, where volume, size and number give 314.
    bounds = lower_bounds([(1366, 600), (1365, 340), (10, 100)], 4096, None)
    assert bounds == LowerBound(314, 314, 314, by_dff=385)
    assert bounds.value == 385 == lp_lower_bound({1366: 600, 1365: 340, 10: 100}, 4096)
    assert bounds.to_dict() == {"volume": 314, "size": 314, "number": 314, "dff": 385}
    # exact at any count: 1.2e18 + 3.4e17 weighs more than int64 holds
    huge = lower_bounds([(1366, 6 * 10**17), (1365, 34 * 10**16)], 4096, None)
    assert huge.by_dff == 385 * 10**15
    # where the dual-feasible functions add nothing, the report does not name them
    assert lower_bounds([(8, 4), (7, 5), (5, 1)], 20, None).by_dff is None


def brute_force_bins(lengths: list[int], max_seq_len: int, cap: int | None) -> int:
    """The fewest bins for a few sequences, by trying every bin for each in turn."""
    best = len(lengths)

    def place(index: int, bins: list[list[int]]) -> None:
        nonlocal best
        if len(bins) >= best:
            return
        if index == len(lengths):
            best = len(bins)
            return
        length = lengths[index]
        for contents in bins:
            if sum(contents) + length <= max_seq_len and (cap is None or len(contents) < cap):
                contents.append(length)
                place(index + 1, bins)
                contents.pop()
        place(index + 1, [*bins, [length]])

    place(0, [])
    return best


@settings(max_examples=200, deadline=None)
@given(
    st.integers(6, 40).flatmap(
        lambda m: st.tuples(
            st.just(m), st.dictionaries(st.integers(1, m), st.integers(1, 3), max_size=4)
        )
    ),
    st.one_of(st.none(), st.integers(1, 4)),
)
def test_dual_feasible_bound_never_exceeds_the_lp_bound_or_the_optimum(case, cap) -> None:
    """cheap bounds (the dual-feasible ones included) <= LP bound <= optimum (brute force)."""
    max_seq_len, histogram = case
    lengths = np.array(sorted(histogram), dtype=np.int64)
    counts = np.array([histogram[length] for length in lengths], dtype=np.int64)
    by_dff = dff_lower_bound(lengths, counts, max_seq_len, cap)
    bounds = lower_bounds(sorted(histogram.items(), reverse=True), max_seq_len, cap)
    assert bounds.value == max(by_dff, bounds.by_volume, bounds.by_size, bounds.by_number)
    assert bounds.by_dff is None or bounds.by_dff > max(
        bounds.by_volume, bounds.by_size, bounds.by_number
    )
    if histogram:
        assert bounds.value <= lp_lower_bound(histogram, max_seq_len, max_seqs_per_bin=cap)
    sequences = [length for length, count in histogram.items() for _ in range(count)]
    assert bounds.value <= brute_force_bins(sorted(sequences, reverse=True), max_seq_len, cap)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 64).flatmap(lambda m: st.tuples(st.just(m), st.data())),
    st.one_of(st.none(), st.integers(1, 4)),
)
def test_dual_feasible_bound_scales_with_the_counts(case, cap) -> None:
    """A histogram times c needs at most c times its bins, and its bound is within c of c times
    the original's (ceil(c x) against c ceil(x)): exact at any count, 1e15 times included."""
    max_seq_len, data = case
    histogram = data.draw(
        st.dictionaries(st.integers(1, max_seq_len), st.integers(1, 50), min_size=1, max_size=12)
    )
    scale = data.draw(st.sampled_from([1, 7, 10**6, 10**15]))
    lengths = np.array(sorted(histogram), dtype=np.int64)
    counts = np.array([histogram[length] for length in lengths], dtype=np.int64)
    bins = sum(pack_length_histogram_greedy(histogram, max_seq_len, max_seqs_per_bin=cap).values())
    scaled = dff_lower_bound(lengths, counts * scale, max_seq_len, cap)
    original = dff_lower_bound(lengths, counts, max_seq_len, cap)
    assert scale * (original - 1) < scaled <= scale * original <= scale * bins


def test_pattern_heuristic_takes_complements_first() -> None:
    # max_seq_len 10. The tops longer than 10/2 first take their complements: 9 + 1 twice
    # (two 9s) and 8 + 2 once (one 2). Nothing a longer top uses can be a complement of a
    # shorter one, so these patterns are known before the main loop and merged in by top.
    # Then 8 is the top twice more with room 2: no 2 left, so the longest that fits is 1, and
    # the room closes exactly with 1 + 1 (once: three 1s left); the last 8 takes the last 1.
    # 5 bins: the lower bound, so no other strategy runs.
    histogram = {9: 2, 8: 3, 2: 1, 1: 5}
    groups = pattern_groups(sorted(histogram.items(), reverse=True), 10, None)
    assert groups == [
        ((None, (9, 1), 0), 2),
        ((None, (8, 2), 0), 1),
        ((None, (8, 1, 1), 0), 1),
        ((None, (8, 1), 0), 1),
    ]
    result = pack_length_histogram_batched(histogram, 10)
    assert list(result.items()) == [((9, 1), 2), ((8, 2), 1), ((8, 1, 1), 1), ((8, 1), 1)]
    assert lower_bound_bins(histogram, 10) == 5


def test_bfd_goes_first_where_the_number_of_sequences_binds() -> None:
    # max_seq_len 20, the histogram of test_lower_bounds_by_kind: the bound by number (5)
    # exceeds the others, so BFD runs first. It pairs the long sequences, 8 + 8 twice and
    # 7 + 7 twice, the 5 goes to the tightest room (6, beside two 7s) and the last 7 is alone:
    # 5 bins, the bound, so the pattern heuristic (also 5 bins, other templates) never runs.
    histogram = {8: 4, 7: 5, 5: 1}
    expected = Counter({(8, 8): 2, (7, 7, 5): 1, (7, 7): 1, (7,): 1})
    assert pack_length_histogram_bfd(histogram, 20) == expected
    assert pack_length_histogram_batched(histogram, 20) == expected
    patterns = group_templates(pattern_groups(sorted(histogram.items(), reverse=True), 20, None))
    assert sum(patterns.values()) == 5 and patterns != expected


def test_cost_does_not_grow_with_the_number_of_sequences() -> None:
    # A trillion sequences of three lengths: a handful of templates, and the work (Python lines
    # run, memory allocated: counted, not timed) of a million sequences of the same lengths.
    histogram = {512: 10**12, 1024: 3 * 10**12, 7: 5}
    million = measure(lambda: pack_length_histogram_batched({512: 10**6, 1024: 3 * 10**6}, 2048))
    work = measure(lambda: pack_length_histogram_batched(histogram, 2048))
    templates = work.result
    assert work.lines <= 2 * million.lines, (work.lines, million.lines)
    assert work.peak_bytes < 2**20 + 2 * million.peak_bytes, (work.peak_bytes, million.peak_bytes)
    assert flatten(templates) == Counter(histogram)
    assert all(sum(template) <= 2048 for template in templates)


def test_empty_histogram() -> None:
    for packer in (pack_length_histogram, pack_length_histogram_batched, pack_length_histogram_bfd):
        assert packer({}, 10) == Counter()
    assert pack_length_histogram_batched({5: 0}, 10) == Counter()


def test_accepts_pairs_and_numpy_integers() -> None:
    import numpy as np

    pairs = [(np.int64(5), np.int32(3)), (4, 2)]
    assert flatten(pack_length_histogram_batched(pairs, 10)) == Counter({5: 3, 4: 2})


# ---- properties --------------------------------------------------------------------------------

max_seq_lens = st.sampled_from([8, 10, 17, 30, 64, 100])
caps = st.one_of(st.none(), st.integers(1, 6))


@st.composite
def histograms(draw: st.DrawFn) -> tuple[int, list[int]]:
    max_seq_len = draw(max_seq_lens)
    # few distinct lengths so that ties (and therefore grouping) happen a lot
    palette = draw(st.lists(st.integers(1, max_seq_len), min_size=1, max_size=6))
    lengths = draw(st.lists(st.sampled_from(palette), max_size=40))
    return max_seq_len, lengths


@settings(max_examples=150, deadline=None)
@given(histograms(), caps)
def test_grouped_strategies_equal_their_per_item_versions(case, cap) -> None:
    max_seq_len, lengths = case
    for name, (grouped, per_item_packer) in GROUPED.items():
        got = grouped(Counter(lengths), max_seq_len, max_seqs_per_bin=cap)
        assert got == per_item(lengths, per_item_packer, max_seq_len, cap), name


@settings(max_examples=150, deadline=None)
@given(histograms(), caps)
def test_engine_invariants_and_never_worse(case, cap) -> None:
    max_seq_len, lengths = case
    histogram = Counter(lengths)
    templates = pack_length_histogram_batched(histogram, max_seq_len, max_seqs_per_bin=cap)
    assert flatten(templates) == histogram
    assert all(sum(template) <= max_seq_len for template in templates)
    assert all(list(template) == sorted(template, reverse=True) for template in templates)
    if cap is not None:
        assert all(len(template) <= cap for template in templates)
    num_bins = sum(templates.values())
    assert num_bins >= lower_bound_bins(histogram, max_seq_len, max_seqs_per_bin=cap)
    for packer in (reference.bfd, reference.ffd, reference.mffd):
        assert num_bins <= len(packer(lengths, max_seq_len, cap))


@settings(max_examples=150, deadline=None)
@given(histograms(), st.integers(0, 12))
def test_limits_agree_with_the_strategies(case, limit_offset) -> None:
    # The engine gives each classic strategy the best packing so far as its limit: a stop must
    # mean "no fewer bins than the limit", and a finish must give exactly the strategy's
    # templates (the engine keeps them without running it again).
    max_seq_len, lengths = case
    items = sorted(Counter(lengths).items(), reverse=True)
    if not items:
        return
    for name, strategy in CLASSICS.items():
        for cap in (None, 3):
            full = strategy(items, max_seq_len, cap)
            assert full is not None
            num_bins = count_bins(full)
            limit = max(num_bins - 6 + limit_offset, 0)
            limited = strategy(items, max_seq_len, cap, limit)
            if num_bins >= limit:
                assert limited is None, name
            else:
                assert limited is not None and group_templates(limited) == group_templates(full)


@st.composite
def varied_histograms(draw: st.DrawFn) -> tuple[int, dict[int, int]]:
    """Histograms with large counts and up to 30 lengths; a third of them with every length
    over M/6 or M/3, where the bound by number binds and BFD runs first."""
    max_seq_len = draw(st.sampled_from([10, 30, 64, 100, 257, 1000, 4096]))
    low = draw(st.sampled_from([1, max_seq_len // 6 + 1, max_seq_len // 3 + 1]))
    lengths = draw(st.lists(st.integers(low, max_seq_len), min_size=1, max_size=30, unique=True))
    counts = draw(
        st.lists(
            st.one_of(st.integers(1, 5), st.integers(1, 10**6)),
            min_size=len(lengths),
            max_size=len(lengths),
        )
    )
    return max_seq_len, dict(zip(lengths, counts, strict=True))


def _selection_without_limits(
    items: list[tuple[int, int]], max_seq_len: int, cap: int | None
) -> Counter[tuple[int, ...]]:
    """What the engine must return: every strategy run to the end (no limit, no early stop at
    the bound), the fewest bins, the earliest in the engine's order on a tie."""
    bounds = lower_bounds(items, max_seq_len, cap)
    by_number = bounds.by_number > max(bounds.by_volume, bounds.by_size)
    order = ("bfd", "patterns", "ffd", "mffd") if by_number else ("patterns", "bfd", "ffd", "mffd")
    packings = [STRATEGIES[name](items, max_seq_len, cap) for name in order]
    fewest = min(packings, key=lambda groups: count_bins(groups or []))
    assert fewest is not None
    return group_templates(fewest)


@settings(max_examples=300, deadline=None)
@given(st.one_of(varied_histograms(), histograms().map(lambda c: (c[0], Counter(c[1])))), caps)
def test_greedy_engine_selects_the_first_best_strategy_as_without_limits(case, cap) -> None:
    # The limits (a strategy stops once it cannot beat the best so far) and the stop at the
    # lower bound only save work: the templates, and so the bins, are those of the best
    # strategy run to completion.
    max_seq_len, histogram = case
    items = sorted((item for item in histogram.items() if item[1]), reverse=True)
    got = pack_length_histogram_greedy(histogram, max_seq_len, max_seqs_per_bin=cap)
    if not items:
        assert got == Counter()
        return
    expected = _selection_without_limits(items, max_seq_len, cap)
    assert got == expected
    assert sum(got.values()) == sum(expected.values())


@settings(max_examples=150, deadline=None)
@given(histograms(), caps)
def test_pattern_templates_are_valid_and_all_different(case, cap) -> None:
    max_seq_len, lengths = case
    items = sorted(Counter(lengths).items(), reverse=True)
    if not items:
        return
    groups = pattern_groups(items, max_seq_len, cap)
    templates = [node[1] for node, _ in groups]
    assert len(set(templates)) == len(templates)  # what the engine relies on
    assert all(num_bins >= 1 for _, num_bins in groups)
    packed = group_templates(groups)
    assert flatten(packed) == Counter(lengths)
    assert all(sum(t) <= max_seq_len and list(t) == sorted(t, reverse=True) for t in packed)
    if cap is not None:
        assert all(len(t) <= cap for t in packed)


def reference_pattern_groups(
    items: list[tuple[int, int]], max_seq_len: int, cap: int | None, tries: int
) -> list[tuple[tuple[None, tuple[int, ...], int], int]]:
    """The pattern heuristic as `pattern_groups` states it, one candidate at a time: no
    complements found ahead, no bitsets, no triple candidates counted without a try."""
    max_slots = cap if cap is not None else max_seq_len
    counts = Counter(dict(items))
    groups = []
    while +counts:
        used = _reference_bin(counts, max_seq_len, max_slots, tries)
        num_bins = min(counts[length] // copies for length, copies in used.items())
        for length, copies in used.items():
            counts[length] -= num_bins * copies
        groups.append(((None, tuple(sorted(used.elements(), reverse=True)), 0), num_bins))
    return groups


def _reference_bin(counts: Counter[int], max_seq_len: int, max_slots: int, tries: int):
    """The bin of the longest available length: the longest lengths that fit, until one, two
    or three available lengths close its room exactly."""
    lengths = sorted(+counts, reverse=True)  # the available lengths, longest first
    top = lengths[0]
    used = Counter({top: 1})
    room, slots, x = max_seq_len - top, max_slots - 1, top
    while room and slots:
        fitting = [y for y in lengths if y <= min(x, room) and counts[y] > used[y]]
        if not fitting:
            break
        x = fitting[0]
        if room > 3 * x:  # three lengths <= x cannot close it: copies of x first
            copies = min((room - 2 * x - 1) // x, counts[x] - used[x], slots)
            used[x] += copies
            room, slots = room - copies * x, slots - copies
            continue
        closing = (room,) if counts[room] > used[room] else None
        if closing is None and slots >= 2:
            closing = _reference_pair(counts, used, room, x)
        if closing is None and slots >= 3:
            closing = _reference_triple(counts, used, lengths, room, x, tries)
        if closing is not None:
            used.update(closing)
            break
        used[x] += 1
        room, slots = room - x, slots - 1
    return +used  # without the lengths a failed triple tried


def _reference_pair(counts: Counter[int], used: Counter[int], room: int, longest: int):
    """y <= x <= longest with x + y == room, both with a copy left: the largest y first."""
    for y in range(room // 2, max(room - longest, 1) - 1, -1):
        x = room - y
        if counts[x] > used[x] + (x == y) and counts[y] > used[y]:
            return x, y
    return None


def _reference_triple(counts, used, lengths, room: int, longest: int, tries: int):
    """z + a pair, z down the available lengths <= longest, at most `tries` of them tried."""
    tried = 0
    for z in (length for length in lengths if length <= longest):
        if tried == tries or 3 * z < room:
            return None
        if counts[z] > used[z] and z < room:
            tried += 1
            used[z] += 1
            found = _reference_pair(counts, used, room - z, z)
            used[z] -= 1
            if found:
                return z, *found
    return None


@st.composite
def dense_histograms(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    """Up to M lengths below a max_seq_len M up to 600, few or many copies each: long windows
    of pair candidates (the bitset search), triples, complements and lengths that run out."""
    max_seq_len = draw(st.integers(2, 600))
    density = draw(st.sampled_from([0.03, 0.1, 0.3, 0.7, 1.0]))
    most = draw(st.sampled_from([1, 3, 50, 10**5]))
    rng = draw(st.randoms(use_true_random=False))
    lengths = [x for x in range(1, max_seq_len + 1) if rng.random() < density]
    lengths = lengths or [rng.randint(1, max_seq_len)]
    return max_seq_len, [(x, rng.randint(1, most)) for x in reversed(lengths)]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(dense_histograms(), histograms().map(lambda c: (c[0], _items(c[1])))),
    caps,
    st.sampled_from([32, 1, 2, 3]),
)
def test_pattern_groups_equal_the_one_candidate_at_a_time_reference(case, cap, tries) -> None:
    # The complements found ahead, the bitset search for pairs and the triple candidates
    # counted without a try are shortcuts: the groups, in order, are the plain algorithm's.
    max_seq_len, items = case
    if not items:
        return
    expected = reference_pattern_groups(items, max_seq_len, cap, tries)
    assert pattern_groups(items, max_seq_len, cap, tries) == expected


def _items(lengths: list[int]) -> list[tuple[int, int]]:
    return sorted(Counter(lengths).items(), reverse=True)


@settings(max_examples=150, deadline=None)
@given(histograms(), st.randoms(use_true_random=False))
def test_residual_lower_bound_never_exceeds_a_packing(case, rng) -> None:
    # Take a packing, call some of its bins "open" (given by their tokens) and the sequences
    # of the others "not placed yet": the packing itself completes that state, so the bound
    # on the final bins may not exceed its bins. With no open bin it is the plain bound.
    max_seq_len, lengths = case
    histogram = Counter(lengths)
    items = sorted(histogram.items(), reverse=True)
    packed = pack_length_histogram_bfd(histogram, max_seq_len)
    bins = [template for template, num in packed.items() for _ in range(num)]
    open_bins = [template for template in bins if rng.random() < 0.5]
    rest = flatten(Counter(bins)) - flatten(Counter(open_bins))
    sizes = [sum(template) for template in open_bins] + list(rest)
    nums = [1] * len(open_bins) + list(rest.values())
    assert residual_lower_bound(sizes, nums, max_seq_len) <= len(bins)
    assert residual_lower_bound(list(histogram), list(histogram.values()), max_seq_len) == (
        lower_bound(items, max_seq_len, None)
    )


def test_bounds_of_lengths_ignore_lengths_of_no_sequence() -> None:
    # found by the property below: a length of no sequence (16) between the others made the
    # dual-feasible bound pick a weaker staircase (None: no better than 2) where it is 3
    lengths, counts = np.array([21, 10, 10, 10, 16]), np.array([1, 1, 1, 1, 0])
    got = lower_bounds_of_lengths(lengths, counts, 30, 2)
    assert got == lower_bounds([(21, 1), (10, 3)], 30, 2)
    assert got.value == 3
    assert lower_bounds_of_lengths(np.array([5, 7]), np.array([0, 0]), 30, 2).value == 0


@settings(max_examples=100, deadline=None)
@given(histograms(), caps, st.randoms(use_true_random=False))
def test_bounds_of_lengths_in_any_order_equal_the_histograms(case, cap, rng) -> None:
    # The bounds of (length, count) pairs in any order, a length split over several pairs and
    # zero counts mixed in, are those of the histogram: what PackingStats reports.
    max_seq_len, lengths = case
    histogram = Counter(lengths)
    pairs = [(length, 1) for length in lengths] + [(rng.randint(1, max_seq_len), 0)]
    rng.shuffle(pairs)
    got = lower_bounds_of_lengths(
        np.array([length for length, _ in pairs]),
        np.array([count for _, count in pairs]),
        max_seq_len,
        cap,
    )
    # (an LP bound an earlier test remembered for the same histogram may have joined in)
    cheap = replace(got, by_lp=None)
    assert cheap == lower_bounds(sorted(histogram.items(), reverse=True), max_seq_len, cap)


@settings(max_examples=100, deadline=None)
@given(histograms(), caps)
def test_per_item_wfd_invariants(case, cap) -> None:
    max_seq_len, lengths = case
    templates = pack_length_histogram(Counter(lengths), max_seq_len, max_seqs_per_bin=cap)
    assert flatten(templates) == Counter(lengths)
    assert all(sum(t) <= max_seq_len and (cap is None or len(t) <= cap) for t in templates)


# ---- errors ------------------------------------------------------------------------------------

ALL_PACKERS = [pack_length_histogram, pack_length_histogram_batched, pack_length_histogram_mffd]


@pytest.mark.parametrize("packer", ALL_PACKERS)
def test_length_over_max_seq_len_names_length_limit_and_fix(packer) -> None:
    with pytest.raises(InputError) as error:
        packer({4: 2, 9000: 1}, 8192)
    message = str(error.value)
    assert "9000" in message and "8192" in message
    # Python names the arguments; the command line shows the flags.
    assert "filter_over_cap=True" in message and "raise max_seq_len" in message
    flags = error.value.cli_message()
    assert "--filter-over-cap" in flags and "raise --max-seq-len" in flags


@pytest.mark.parametrize("packer", ALL_PACKERS)
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "5", None])
def test_bad_lengths_are_input_errors(packer, bad) -> None:
    with pytest.raises(InputError, match="length"):
        packer({bad: 1}, 10)


@pytest.mark.parametrize("bad", [-1, 1.5, "2"])
def test_bad_counts_are_input_errors(bad) -> None:
    with pytest.raises(InputError, match="count"):
        pack_length_histogram_batched({5: bad}, 10)


@pytest.mark.parametrize("packer", ALL_PACKERS)
@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_bad_max_seq_len_is_a_config_error(packer, bad) -> None:
    with pytest.raises(ConfigError, match="max_seq_len"):
        packer({5: 1}, bad)


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_bad_max_seqs_per_bin_is_a_config_error(bad) -> None:
    with pytest.raises(ConfigError, match="max_seqs_per_bin"):
        pack_length_histogram_batched({5: 1}, 10, max_seqs_per_bin=bad)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(8, 300).flatmap(
        lambda m: st.tuples(
            st.just(m),
            st.dictionaries(st.integers(1, m), st.integers(1, 60), min_size=1, max_size=60),
        )
    ),
    st.integers(1, 9),
)
@example((1024, {273: 52, 149: 2, 146: 41, 145: 38, 13: 1, 600: 3, 140: 9}), 8)
def test_slot_patterns_pack_every_sequence_within_length_and_cap(case, cap):
    """The slot-aware pattern heuristic is a packing: every sequence once, no bin over
    max_seq_len or the cap, whatever target it aims at."""
    max_seq_len, counts = case
    items = sorted(counts.items(), reverse=True)
    groups = slot_pattern_groups(items, max_seq_len, cap)
    packed: Counter[int] = Counter()
    for (_, template, _), num_bins in groups:
        assert num_bins > 0
        assert list(template) == sorted(template, reverse=True)
        assert 1 <= len(template) <= cap and sum(template) <= max_seq_len
        for length in template:
            packed[length] += num_bins
    assert packed == Counter(counts)
