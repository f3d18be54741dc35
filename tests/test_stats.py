"""PackingStats: the same numbers from bins and from templates."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter

import numpy as np
import pytest
from conftest import REFERENCE_LENGTHS, REFERENCE_POOLS, REFERENCE_TEMPLATES
from hypothesis import given, settings
from hypothesis import strategies as st
from work_counts import measure

from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.packing.bounds import lower_bound
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.packing.lp import lp_lower_bound
from seqpack_cli.stats import PackingStats

SETTINGS = settings(max_examples=40, deadline=None)

FIELDS = [
    "num_bins",
    "num_sequences",
    "num_tokens",
    "capacity",
    "max_seq_len",
    "efficiency",
    "padding",
    "padding_ratio",
    "avg_seqs_per_bin",
    "max_seqs_in_bin",
    "bin_fullness_p50",
    "bin_fullness_p90",
    "bin_fullness_p99",
    "lower_bound_bins",
]

# The reference's worked example, shared with the other tests.
LENGTHS, TEMPLATES, POOLS = REFERENCE_LENGTHS, REFERENCE_TEMPLATES, REFERENCE_POOLS

template_strategy = st.dictionaries(
    keys=st.lists(st.integers(1, 12), min_size=1, max_size=4).map(
        lambda lengths: tuple(sorted(lengths, reverse=True))
    ),
    values=st.integers(1, 20),
    max_size=10,
).map(Counter)


def bins_and_lengths(templates: Counter, seed: int | None) -> tuple[list[list[int]], list[int]]:
    """A concrete packing of `templates`: its bins and the lengths of ids 0..N-1."""
    needed: Counter[int] = Counter()
    for template, multiplicity in templates.items():
        for length in template:
            needed[length] += multiplicity
    pools, lengths, offset = {}, [], 0
    for length in sorted(needed):
        pools[length] = np.arange(offset, offset + needed[length])
        lengths += [length] * needed[length]
        offset += needed[length]
    return list(EpochPlan(templates, pools, seed)), lengths


def test_reference_example() -> None:
    # Bins (5,5) (5,5) (7,3) hold 10 tokens, (5,3) 8 and (3,) 3: fullness 1, 1, 1, .8, .3.
    stats = PackingStats.from_templates(TEMPLATES, max_seq_len=10)
    assert (stats.num_bins, stats.num_sequences, stats.num_tokens, stats.capacity) == (5, 9, 41, 50)
    assert stats.efficiency == pytest.approx(0.82)
    assert (stats.padding, stats.padding_ratio) == (9, pytest.approx(0.18))
    assert (stats.avg_seqs_per_bin, stats.max_seqs_in_bin, stats.lower_bound_bins) == (1.8, 2, 5)
    # Sorted fullness .3 .8 1 1 1: the median is the 3rd value; p90 sits between 4th and 5th.
    assert (stats.bin_fullness_p50, stats.bin_fullness_p90, stats.bin_fullness_p99) == (1, 1, 1)
    bins = list(EpochPlan(TEMPLATES, POOLS, seed=3))
    assert PackingStats.from_bins(bins, LENGTHS, max_seq_len=10) == stats


def test_printed_block_matches_the_reference() -> None:
    stats = PackingStats(
        num_bins=5,
        num_sequences=15,
        num_tokens=1026,
        capacity=1280,
        max_seq_len=256,
        efficiency=1026 / 1280,
        padding=254,
        padding_ratio=254 / 1280,
        avg_seqs_per_bin=3.0,
        max_seqs_in_bin=4,
        bin_fullness_p50=0.961,
        bin_fullness_p90=0.988,
        bin_fullness_p99=0.999,
        lower_bound_bins=5,
    )
    assert str(stats) == (
        "PackingStats(\n"
        "  bins: 5\n"
        "  sequences: 15 (avg 3.00/bin)\n"
        "  tokens: 1,026 / 1,280 capacity\n"
        "  efficiency: 80.16%\n"
        "  padding: 254 (19.84%)\n"
        "  fullness: p50=96.1% p90=98.8% p99=99.9%\n"
        ")"
    )


def test_percentiles_interpolate_like_numpy() -> None:
    # Fullness .1 .2 .3 .4 (max_seq_len 10): numpy's linear p50 = .25, p90 = .37, p99 = .397.
    stats = PackingStats.from_bins([[0], [1], [2], [3]], [1, 2, 3, 4], max_seq_len=10)
    assert stats.bin_fullness_p50 == pytest.approx(0.25)
    assert stats.bin_fullness_p90 == pytest.approx(0.37)
    assert stats.bin_fullness_p99 == pytest.approx(0.397)


@SETTINGS
@given(template_strategy, st.one_of(st.none(), st.integers(0, 2**32)))
def test_bins_and_templates_of_one_packing_give_equal_stats(templates, seed) -> None:
    max_seq_len = max((sum(t) for t in templates), default=1)
    bins, lengths = bins_and_lengths(templates, seed)
    from_bins = PackingStats.from_bins(bins, lengths, max_seq_len)
    assert from_bins == PackingStats.from_templates(templates, max_seq_len)
    fullness = [sum(lengths[i] for i in b) / max_seq_len for b in bins]
    if fullness:
        expected = np.percentile(fullness, [50, 90, 99])
        got = [from_bins.bin_fullness_p50, from_bins.bin_fullness_p90, from_bins.bin_fullness_p99]
        assert got == pytest.approx(expected.tolist(), abs=1e-12)
        assert from_bins.efficiency == pytest.approx(sum(fullness) / len(fullness))
    assert from_bins.num_tokens + from_bins.padding == from_bins.capacity
    assert from_bins.lower_bound_bins <= from_bins.num_bins


def test_empty_input_gives_zeros() -> None:
    for stats in (PackingStats.from_bins([], [], 8), PackingStats.from_templates(Counter(), 8)):
        assert stats.to_dict() == {**dict.fromkeys(FIELDS, 0), "max_seq_len": 8}
        assert "bins: 0" in str(stats)


def test_to_dict_is_json_safe_and_complete() -> None:
    stats = PackingStats.from_templates([[[5, 5], 2], [[7, 3], 1]], 16)
    data = stats.to_dict()
    assert list(data) == FIELDS == [f.name for f in dataclasses.fields(PackingStats)]
    assert json.loads(json.dumps(data)) == data
    assert all(type(v) in (int, float) for v in data.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.num_bins = 3  # type: ignore[misc]


def test_from_templates_does_not_expand_bins() -> None:
    # A billion sequences in one template: O(distinct templates), the work (Python lines run,
    # memory allocated: counted, not timed) of a thousand, not a 2 GB array of bins.
    small = measure(lambda: PackingStats.from_templates({(512, 512, 512, 512): 250}, 2048))
    work = measure(lambda: PackingStats.from_templates({(512, 512, 512, 512): 250_000_000}, 2048))
    stats = work.result
    assert work.lines <= small.lines and work.peak_bytes < 2**20 + small.peak_bytes
    assert (stats.num_bins, stats.num_sequences, stats.efficiency) == (250_000_000, 10**9, 1.0)
    assert stats.bin_fullness_p50 == stats.bin_fullness_p99 == 1.0


def test_from_bins_accepts_numpy_lengths_and_empty_bins() -> None:
    stats = PackingStats.from_bins([[0, 2], [], [1]], np.array([3, 4, 5]), 8)
    assert (stats.num_bins, stats.num_tokens, stats.max_seqs_in_bin) == (3, 12, 2)


@pytest.mark.parametrize("bad", [0, -5, 2.0, True, None])
def test_bad_max_seq_len(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_seq_len"):
        PackingStats.from_templates(TEMPLATES, bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_seq_len"):
        PackingStats.from_bins([[0]], [1], bad)  # type: ignore[arg-type]


def test_bad_packings_are_named() -> None:
    with pytest.raises(
        InputError, match=r"template \(7, 5\) holds 12 tokens, more than max_seq_len 10"
    ):
        PackingStats.from_templates({(7, 5): 1}, 10)
    with pytest.raises(InputError, match="bin 1 holds 12 tokens, more than max_seq_len 10"):
        PackingStats.from_bins([[0], [1, 2]], [3, 7, 5], 10)
    with pytest.raises(InputError, match="id 3"):
        PackingStats.from_bins([[0, 3]], [3, 7, 5], 10)
    with pytest.raises(InputError, match="id -1"):
        PackingStats.from_bins([[-1]], [3, 7, 5], 10)
    with pytest.raises(InputError, match="positive lengths"):
        PackingStats.from_bins([[0]], [0], 10)
    with pytest.raises(InputError, match="integer lengths"):
        PackingStats.from_bins([[0]], [1.5], 10)
    with pytest.raises(InputError, match="length 0"):
        PackingStats.from_templates({(3, 0): 1}, 10)


# ---- the lower bound: the engine's, not ceil(tokens / max_seq_len) -------------------------------


def test_lower_bound_counts_sequences_that_cannot_share_a_bin() -> None:
    # Ten sequences of 600 and one of 10 at max_seq_len 1000: 6,010 tokens would fit in
    # ceil(6010 / 1000) = 7 bins by volume, but no two 600s share a bin (600 > 1000/2), so every
    # packing needs 10 bins; the engine's 10 (one bin holds 600 + 10) is optimal. The stats used to
    # say "lower bound 7", so 10 bins looked 43% above the optimum.
    templates = pack_length_histogram_batched({600: 10, 10: 1}, 1000)
    assert templates == Counter({(600,): 9, (600, 10): 1})
    stats = PackingStats.from_templates(templates, 1000)
    assert (stats.num_bins, stats.lower_bound_bins) == (10, 10)
    assert stats.efficiency == pytest.approx(6010 / 10_000)  # tokens / capacity, as before
    lengths = [600] * 10 + [10]
    bins = [[i] for i in range(9)] + [[9, 10]]
    assert PackingStats.from_bins(bins, lengths, 1000) == stats


def test_lower_bound_with_a_cap_counts_sequences_per_bin() -> None:
    # Ten sequences of 1 token at max_seq_len 10: 1 bin by volume; with max_seqs_per_bin=3 every
    # packing needs ceil(10 / 3) = 4 bins, and the engine uses 4. Without the cap the stats
    # cannot know it, and the bound is the uncapped one.
    templates = pack_length_histogram_batched({1: 10}, 10, max_seqs_per_bin=3)
    assert sum(templates.values()) == 4
    capped = PackingStats.from_templates(templates, 10, max_seqs_per_bin=3)
    assert (capped.num_bins, capped.lower_bound_bins) == (4, 4)
    assert PackingStats.from_templates(templates, 10).lower_bound_bins == 1
    bins = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert PackingStats.from_bins(bins, [1] * 10, 10, max_seqs_per_bin=3) == capped


def test_a_bin_over_the_cap_is_refused() -> None:
    with pytest.raises(InputError) as error:
        PackingStats.from_templates({(1, 1, 1, 1): 1}, 10, max_seqs_per_bin=3)
    assert "template (1, 1, 1, 1) holds 4 sequences, more than max_seqs_per_bin 3" in str(
        error.value
    )
    assert "pass the --max-seqs-per-bin the packing was made for" in error.value.cli_message()
    with pytest.raises(InputError, match="bin 1 holds 3 sequences, more than max_seqs_per_bin 2"):
        PackingStats.from_bins([[0], [1, 2, 3]], [1] * 4, 10, max_seqs_per_bin=2)
    with pytest.raises(ConfigError, match="max_seqs_per_bin"):
        PackingStats.from_templates({(1,): 1}, 10, max_seqs_per_bin=0)


@st.composite
def packed_histograms(draw: st.DrawFn) -> tuple[int, dict[int, int], int | None]:
    max_seq_len = draw(st.sampled_from([8, 10, 17, 64, 100, 1000]))
    palette = draw(st.lists(st.integers(1, max_seq_len), min_size=1, max_size=6, unique=True))
    histogram = {length: draw(st.integers(1, 30)) for length in palette}
    return max_seq_len, histogram, draw(st.one_of(st.none(), st.integers(1, 5)))


@settings(max_examples=80, deadline=None)
@given(packed_histograms())
def test_reported_bound_is_the_engines(case) -> None:
    max_seq_len, histogram, cap = case
    templates = pack_length_histogram_batched(histogram, max_seq_len, max_seqs_per_bin=cap)
    stats = PackingStats.from_templates(templates, max_seq_len, max_seqs_per_bin=cap)
    items = sorted(histogram.items(), reverse=True)
    cheap = lower_bound(items, max_seq_len, cap)
    if stats.num_bins > cheap:  # the engine solved the LP: its bound is the one reported
        assert stats.lower_bound_bins == lp_lower_bound(
            histogram, max_seq_len, max_seqs_per_bin=cap
        )
    else:
        assert stats.lower_bound_bins == cheap
    assert stats.lower_bound_bins >= math.ceil(stats.num_tokens / max_seq_len)
    if cap is not None:
        assert stats.lower_bound_bins >= math.ceil(stats.num_sequences / cap)
    assert stats.lower_bound_bins <= stats.num_bins == sum(templates.values())
    # the bound travels with the packer's result (issue 21): the same bins as plain lists or a
    # plain Counter carry none, and show the cheap bounds of what they hold
    plain = PackingStats.from_templates(Counter(templates), max_seq_len, max_seqs_per_bin=cap)
    assert plain == dataclasses.replace(stats, lower_bound_bins=cheap)
    bins, lengths = bins_and_lengths(templates, seed=0)
    assert PackingStats.from_bins(bins, lengths, max_seq_len, max_seqs_per_bin=cap) == plain


def test_stats_sit_below_epochs() -> None:
    # stats summarises a packing; epoch draws bins from one: stats must not depend on epoch.
    from test_architecture import import_graph

    graph = import_graph()
    reached, todo = set(), ["seqpack_cli.packing.efficiency"]
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    assert "seqpack_cli.epoch.plan" not in reached, sorted(reached)
