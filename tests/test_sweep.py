"""The figures behind `seqpack stats`: sweep, baselines, distributions (no I/O)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from work_counts import measure

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.packing.bounds import LowerBound
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.stats import PackingStats
from seqpack_cli.stats.baselines import (
    _shuffled_sample,
    estimate_sequential_packing,
    next_fit_num_bins,
    no_packing_stats,
)
from seqpack_cli.stats.distribution import (
    CapCost,
    bucket_lengths,
    cap_costs,
    linear_edges,
    power_of_two_edges,
    seqs_per_bin_buckets,
    summarize_lengths,
)
from seqpack_cli.stats.profile import profile_packing
from seqpack_cli.stats.sweep import sweep_max_seq_len

# A small dataset whose figures can be worked out by hand: 7 sequences, 40 tokens.
#   lengths 3,3 | 5,5,5 | 7 | 12
SMALL = {3: 2, 5: 3, 7: 1, 12: 1}


def test_sweep_golden_small_dataset() -> None:
    result = sweep_max_seq_len(SMALL, [16, 10, 10, 6], sample_size=1000, seed=0)
    # candidates come back sorted and unique
    assert [row.max_seq_len for row in result.rows] == [6, 10, 16]
    by_cap = {row.max_seq_len: row for row in result.rows}

    # max_seq_len 6: 7 and 12 are over the cap (2 sequences, 19 tokens dropped).
    # Kept 3,3,5,5,5 = 21 tokens. 5s cannot share (5+5 > 6, 5+3 > 6): three bins of one 5;
    # the two 3s share one bin (3+3 = 6): 4 bins, capacity 24, efficiency 21/24.
    row = by_cap[6]
    assert (row.num_over_cap, row.num_tokens_over_cap) == (2, 19)
    assert row.packed.num_bins == 4
    assert row.packed.efficiency == pytest.approx(21 / 24)
    # no packing: one row per kept sequence, 5 rows of 6 tokens
    assert (row.no_packing.num_bins, row.no_packing.capacity) == (5, 30)
    assert row.no_packing.efficiency == pytest.approx(21 / 30)

    # max_seq_len 10: only 12 is over. Kept 7,5,5,5,3,3 = 28 tokens. Decreasing fit:
    # 7 opens A; 5 opens B; 5 joins B (5+5 = 10); 5 opens C; 3 fills A (7+3); 3 joins C (5+3).
    # 3 bins: the bound by volume, ceil(28 / 10), and by L2; by number, 2 (at most two of 7, 5,
    # 5, 5 share a bin). So 3 is optimal; efficiency 28/30.
    row = by_cap[10]
    assert (row.num_over_cap, row.num_tokens_over_cap) == (1, 12)
    assert row.packed.num_bins == 3 == row.packed.lower_bound_bins
    assert row.lower_bound == LowerBound(by_volume=3, by_size=3, by_number=2)
    assert row.packed.efficiency == pytest.approx(28 / 30)
    assert row.no_packing.efficiency == pytest.approx(28 / 60)

    # max_seq_len 16: everything kept, 40 tokens: ceil(40 / 16) = 3 bins are enough
    # (12+3, 7+5+3, 5+5), efficiency 40/48.
    row = by_cap[16]
    assert row.num_over_cap == 0
    assert row.packed.num_bins == 3
    assert row.packed.efficiency == pytest.approx(40 / 48)

    # the seqpack figures are exactly PackingStats of the engine's templates on the kept lengths
    kept = {length: count for length, count in SMALL.items() if length <= 10}
    direct = PackingStats.from_templates(pack_length_histogram_batched(kept, 10), 10)
    assert by_cap[10].packed.to_dict() == direct.to_dict()

    # the dataset (7 sequences) is smaller than the sample: simulated whole, not scaled
    for row in result.rows:
        assert not row.sequential.estimated
        assert row.sequential.num_simulated == row.packed.num_sequences


def test_sweep_length_summary_and_histogram() -> None:
    result = sweep_max_seq_len(SMALL, [10])
    lengths = result.lengths
    assert (lengths.num_sequences, lengths.num_tokens) == (7, 40)
    assert (lengths.min_length, lengths.max_length) == (3, 12)
    assert lengths.mean_length == pytest.approx(40 / 7)
    # power-of-two buckets from the shortest (3: first edge 4) to the longest (12: last edge 16):
    # [1, 4] holds the 3s, (4, 8] the 5s and the 7, (8, 16] the 12
    counts = {bucket.label: bucket.count for bucket in result.length_buckets}
    assert counts == {"1–4": 2, "5–8": 4, "9–16": 1}
    assert sum(counts.values()) == 7


def test_next_fit_golden() -> None:
    # cap 10, in this order: 7 | 5+5 | 5+3 | 3  -> 4 rows (the 3 does not fit 5+3+3 = 11)
    assert next_fit_num_bins([7, 5, 5, 5, 3, 3], 10) == 4
    # the same lengths ascending: 3+3 | 5+5 | 5 | 7 -> 4 rows (3+3+5 = 11 does not fit)
    assert next_fit_num_bins([3, 3, 5, 5, 5, 7], 10) == 4
    # order matters: 5,5 | 7,3 | 5,3 -> 3 rows
    assert next_fit_num_bins([5, 5, 7, 3, 5, 3], 10) == 3
    assert next_fit_num_bins([], 10) == 0
    assert next_fit_num_bins(np.array([10, 10, 1], dtype=np.int32), 10) == 3


def test_next_fit_rejects_lengths_over_the_cap() -> None:
    with pytest.raises(InputError, match="exceeds max_seq_len 10"):
        next_fit_num_bins([3, 11], 10)
    with pytest.raises(ConfigError):
        next_fit_num_bins([3], 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), max_size=200), st.integers(50, 120))
def test_next_fit_bounds(lengths: list[int], max_seq_len: int) -> None:
    num_bins = next_fit_num_bins(lengths, max_seq_len)
    total = sum(lengths)
    # never fewer rows than the token lower bound, never more than one per sequence, and any
    # two consecutive next-fit rows hold more than max_seq_len tokens together: < 2*total/cap + 1
    assert math.ceil(total / max_seq_len) <= num_bins <= len(lengths)
    assert num_bins <= 2 * total / max_seq_len + 1


def test_sequential_order_free_golden() -> None:
    # equal lengths make next-fit independent of the order: 10 sequences of 3 in rows of 10
    # hold 3 each -> 3+3+3 | 3+3+3 | 3+3+3 | 3 = 4 rows, 30 tokens in 40.
    baseline = estimate_sequential_packing({3: 10}, 10)
    assert (baseline.num_bins, baseline.capacity, baseline.padding) == (4, 40, 10)
    assert baseline.efficiency == pytest.approx(0.75)
    assert baseline.avg_seqs_per_bin == pytest.approx(2.5)
    # sampled and scaled: 1,000,000 sequences of 3 from a 9,999-sequence sample
    # -> 3,333 rows per 9,999 -> 333,333.3 -> 333,333 rows (exact answer: 333,334)
    scaled = estimate_sequential_packing({3: 1_000_000}, 10, sample_size=9_999)
    assert scaled.estimated and scaled.num_simulated == 9_999
    assert scaled.num_bins == pytest.approx(333_334, abs=1)


def test_sequential_estimate_close_to_the_full_shuffle() -> None:
    rng = np.random.default_rng(7)
    lengths = np.minimum(rng.lognormal(4.0, 0.8, 200_000).astype(np.int64) + 1, 512)
    values, counts = np.unique(lengths, return_counts=True)
    histogram = dict(zip(values.tolist(), counts.tolist(), strict=True))
    # the exact figure for one shuffled order of the whole dataset
    shuffled = lengths.copy()
    rng.shuffle(shuffled)
    exact = next_fit_num_bins(shuffled, 512)
    estimate = estimate_sequential_packing(histogram, 512, sample_size=20_000, seed=3)
    assert estimate.estimated
    assert estimate.num_bins == pytest.approx(exact, rel=0.02)
    # deterministic in the seed
    again = estimate_sequential_packing(histogram, 512, sample_size=20_000, seed=3)
    assert again == estimate


def test_sequential_estimate_from_a_billion_sequences_and_more() -> None:
    # numpy draws hypergeometric samples from fewer than 1e9 items: past that the sample is
    # drawn by position (it used to raise ValueError from 1e9 kept sequences on).
    equal = estimate_sequential_packing({3: 3 * 10**9}, 10, sample_size=9_999, seed=1)
    assert equal.estimated and equal.num_simulated == 9_999
    assert equal.num_bins == pytest.approx(10**9, abs=10**9 // 9_999 + 1)  # 3 a row
    # half 1s, half 9s in random order: next-fit rows hold 9+1 or 1+...: between the bounds,
    # and with the two lengths drawn in their proportions (about 5,000 of 10,000 each)
    mixed = estimate_sequential_packing({1: 10**9, 9: 10**9}, 10, sample_size=10_000, seed=2)
    assert 10**9 <= mixed.num_bins <= 2 * 10**9
    for seed in range(3):
        sample = _shuffled_sample(
            np.array([1, 9]), np.array([10**9, 10**9]), sample_size=10_000, seed=seed
        )
        assert sample.size == 10_000 and abs(int((sample == 1).sum()) - 5_000) < 250


def test_no_packing_leaves_out_lengths_over_the_cap() -> None:
    baseline = no_packing_stats(SMALL, 6)
    assert (baseline.num_bins, baseline.num_tokens, baseline.capacity) == (5, 21, 30)
    assert baseline.padding_ratio == pytest.approx(9 / 30)
    assert not baseline.estimated


def test_summarize_lengths_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 300, 5_000)
    values, counts = np.unique(lengths, return_counts=True)
    summary = summarize_lengths(dict(zip(values.tolist(), counts.tolist(), strict=True)))
    assert summary.num_sequences == lengths.size
    assert summary.num_tokens == int(lengths.sum())
    assert summary.mean_length == pytest.approx(lengths.mean())
    for field, q in (("p50_length", 50), ("p90_length", 90), ("p99_length", 99)):
        # nearest rank == numpy's inverted_cdf percentile
        assert getattr(summary, field) == int(np.percentile(lengths, q, method="inverted_cdf"))


def test_edges_and_buckets() -> None:
    assert linear_edges(100, 4) == [25, 50, 75, 100]
    assert linear_edges(10, 4) == [3, 6, 9, 10]
    assert power_of_two_edges(12) == [1, 2, 4, 8, 16]
    assert power_of_two_edges(1) == [1]
    assert power_of_two_edges(12, 3) == [4, 8, 16]
    assert power_of_two_edges(17, 16) == [16, 32]
    buckets = bucket_lengths({1: 1, 25: 2, 26: 3, 100: 4, 150: 5}, [25, 50, 75, 100])
    assert [(b.low, b.high, b.count) for b in buckets] == [
        (1, 25, 3),
        (26, 50, 3),
        (51, 75, 0),
        (76, 100, 4),
        (101, 150, 5),  # past the last edge: one overflow bucket up to the longest length
    ]


def test_profile_golden() -> None:
    # max_seq_len 10; 6 bins: (5,5) x3 full, (7,) x2 at 70%, (4, 3, 2) x1 at 90%
    templates = Counter({(5, 5): 3, (7,): 2, (4, 3, 2): 1})
    counts = {5: 6, 7: 2, 4: 1, 3: 1, 2: 1}
    profile = profile_packing(counts, templates, 10, top=2, sample_size=100)
    assert profile.stats.to_dict() == PackingStats.from_templates(templates, 10).to_dict()
    # 53 tokens: 6 bins by volume and by L2; by number, 5 (9 sequences over 10/3, at most two
    # a bin). The 6 bins are optimal.
    assert profile.lower_bound == LowerBound(by_volume=6, by_size=6, by_number=5)
    assert profile.stats.lower_bound_bins == 6
    fullness = {bucket.label: bucket.count for bucket in profile.fullness_buckets}
    assert fullness["50–75%"] == 2  # the two 7s
    assert fullness["90–95%"] == 1  # 4+3+2 = 9: exactly 90% goes in 90–95%
    assert fullness["100% (full)"] == 3
    assert sum(fullness.values()) == 6
    per_bin = {bucket.label: bucket.count for bucket in profile.seqs_per_bin_buckets}
    assert per_bin == {"1": 2, "2": 3, "3": 1}
    # even-width buckets up to the largest: at most 16, the width a round 1, 2, 5, 10, ...
    # (20 sequences at most: width 2, ten buckets 1–2, 3–4, ..., 19–20)
    many = profile_packing({1: 1}, Counter({(1,) * 20: 2, (1,) * 5: 1}), 20, sample_size=10)
    per_bin = {bucket.label: bucket.count for bucket in many.seqs_per_bin_buckets}
    assert per_bin["5–6"] == 1 and per_bin["19–20"] == 2 and sum(per_bin.values()) == 3
    assert list(per_bin) == [f"{low}–{low + 1}" for low in range(1, 20, 2)]
    # most common first, only `top` of them
    assert profile.top_templates == [((5, 5), 3), ((7,), 2)]
    assert profile.num_templates == 3
    data = profile.to_dict()
    assert data["top_templates"][0] == {"template": [5, 5], "num_bins": 3}


def test_bad_inputs_are_one_line_errors() -> None:
    # Python names the argument, the command line the flag.
    for options, python, flag in [
        (
            {"max_seq_lens": []},
            "max_seq_lens is empty; expected at least one",
            "--max-seq-len is empty; expected",
        ),
        (
            {"max_seq_lens": [0]},
            "max_seq_len is 0; expected a positive",
            "--max-seq-len is 0; expected",
        ),
        (
            {"sample_size": 0},
            "sample_size is 0; expected a positive",
            "--sample-size is 0; expected",
        ),
        (
            {"max_seqs_per_bin": 0},
            "max_seqs_per_bin is 0; expected a",
            "--max-seqs-per-bin is 0; expected",
        ),
    ]:
        with pytest.raises(ConfigError) as error:
            sweep_max_seq_len(SMALL, **{"max_seq_lens": [10], **options})
        assert python in str(error.value) and flag in error.value.cli_message()
    with pytest.raises(InputError, match="empty"):
        sweep_max_seq_len({}, [10])
    with pytest.raises(InputError, match="length is -3"):
        sweep_max_seq_len({-3: 1}, [10])


def test_a_cap_below_every_length_packs_nothing() -> None:
    result = sweep_max_seq_len({100: 5}, [10, 200])
    low, high = result.rows
    assert (low.num_over_cap, low.packed.num_bins, low.sequential.num_bins) == (5, 0, 0)
    assert (high.num_over_cap, high.packed.num_bins) == (0, 3)  # 100+100 | 100+100 | 100


def test_max_seqs_per_bin_is_respected() -> None:
    result = sweep_max_seq_len({1: 100}, [100], max_seqs_per_bin=4)
    assert result.rows[0].packed.num_bins == 25
    assert result.rows[0].packed.max_seqs_in_bin == 4
    # 100 tokens fit one bin by volume, but 4 sequences a bin need ceil(100 / 4) = 25 bins:
    # the bound is the capped one, so 25 bins read as optimal (it used to say 1).
    assert result.rows[0].packed.lower_bound_bins == 25
    assert result.rows[0].to_dict()["lower_bound_by"] == {"volume": 1, "size": 1, "number": 25}


def test_sweep_bound_counts_sequences_that_cannot_share_a_bin() -> None:
    # {600: 10, 10: 1} at 1000: 7 bins by volume, but no two 600s share a bin: 10, and the
    # engine's 10 bins are optimal. At 1200 two 600s fill a bin: 5 + the 10 alone = 6 bins, and
    # the bound (6,010 tokens: 6 by volume) agrees.
    rows = sweep_max_seq_len({600: 10, 10: 1}, [1000, 1200], sample_size=100).rows
    figures = [(row.packed.num_bins, row.packed.lower_bound_bins) for row in rows]
    assert figures == [(10, 10), (6, 6)]
    assert rows[0].lower_bound == LowerBound(by_volume=7, by_size=10, by_number=10)
    assert rows[0].to_dict()["lower_bound_by"] == {"volume": 7, "size": 10, "number": 10}
    assert rows[0].to_dict()["seqpack"]["lower_bound_bins"] == 10


def test_sequential_estimate_never_below_the_lower_bound() -> None:
    # 10 sequences of 600 (no two share a row of 1000) among 1,000 of 1 token: any packing needs
    # 10 rows, though the 6,990 tokens fit 7. A 400-sequence sample holds ~4 of the 600s, often
    # fewer, and scaling its rows up can land below 10: the estimate is floored at the bound
    # the engine uses, not at the bound by volume.
    for seed in range(20):
        estimate = estimate_sequential_packing({600: 10, 1: 1000}, 1000, sample_size=400, seed=seed)
        assert estimate.estimated and estimate.num_bins >= 10, seed


def test_profile_bound_uses_the_cap_of_the_packing() -> None:
    # 12 one-token sequences, 4 per bin at max_seq_len 10: 2 bins by volume, 3 by the cap.
    templates = Counter({(1, 1, 1, 1): 3})
    uncapped = profile_packing({1: 12}, templates, 10, sample_size=10)
    capped = profile_packing({1: 12}, templates, 10, sample_size=10, max_seqs_per_bin=4)
    assert (uncapped.stats.lower_bound_bins, capped.stats.lower_bound_bins) == (2, 3)
    assert capped.to_dict()["lower_bound_by"] == {"volume": 2, "size": 2, "number": 3}
    with pytest.raises(InputError, match="holds 4 sequences, more than max_seqs_per_bin 3"):
        profile_packing({1: 12}, templates, 10, sample_size=10, max_seqs_per_bin=3)


# ---- what a cap costs: tokens dropped or truncated, attention against padded rows ----------


def _cap_cost_oracle(histogram: dict[int, int], cap: int) -> CapCost:
    """Brute force: one Python loop over the sequences themselves (small histograms only)."""
    sequences = [length for length, count in histogram.items() for _ in range(count)]
    over = [length for length in sequences if length > cap]
    fit = [length for length in sequences if length <= cap]
    return CapCost(
        max_seq_len=cap,
        num_sequences=len(sequences),
        num_tokens=sum(sequences),
        num_over_cap=len(over),
        num_tokens_over_cap=sum(over),
        num_tokens_truncated=sum(length - cap for length in over),
        num_pieces_if_split=sum(len(range(0, length, cap)) for length in over),
        attention_packed=sum(length * length for length in fit),
        attention_padded=len(fit) * cap * cap,
    )


def _cap_cost_by_entry(histogram: dict[int, int], cap: int) -> CapCost:
    """The same with Python ints per distinct length: exact for counts of any size."""
    over = {length: count for length, count in histogram.items() if length > cap}
    fit = {length: count for length, count in histogram.items() if length <= cap}
    return CapCost(
        max_seq_len=cap,
        num_sequences=sum(histogram.values()),
        num_tokens=sum(length * count for length, count in histogram.items()),
        num_over_cap=sum(over.values()),
        num_tokens_over_cap=sum(length * count for length, count in over.items()),
        num_tokens_truncated=sum((length - cap) * count for length, count in over.items()),
        num_pieces_if_split=sum(-(-length // cap) * count for length, count in over.items()),
        attention_packed=sum(length * length * count for length, count in fit.items()),
        attention_padded=sum(fit.values()) * cap * cap,
    )


def test_cap_costs_golden_small_dataset() -> None:
    # SMALL: lengths 3,3 | 5,5,5 | 7 | 12 (7 sequences, 40 tokens)
    at6, at10, at16 = cap_costs(SMALL, [6, 10, 16])
    # at 6: 7 and 12 are over: 19 tokens lost if dropped, 1 + 6 = 7 cut if truncated;
    # the five that fit attend to 9+9+25+25+25 = 93 query-key pairs, padded rows to 5 * 36.
    assert (at6.num_over_cap, at6.num_tokens_over_cap, at6.num_tokens_truncated) == (2, 19, 7)
    assert (at6.attention_packed, at6.attention_padded) == (93, 180)
    assert at6.num_pieces_if_split == 2 + 2  # split: 7 -> 6 + 1, 12 -> 6 + 6
    assert at6.share_over_cap == pytest.approx(2 / 7)
    assert at6.share_tokens_over_cap == pytest.approx(19 / 40)
    assert at6.share_tokens_truncated == pytest.approx(7 / 40)
    assert at6.attention_vs_padded == pytest.approx(93 / 180)
    # at 10: only 12 is over (2 cut if truncated); 93 + 49 = 142 against 6 * 100
    assert (at10.num_over_cap, at10.num_tokens_over_cap, at10.num_tokens_truncated) == (1, 12, 2)
    assert (at10.attention_packed, at10.attention_padded) == (142, 600)
    assert at10.num_pieces_if_split == 2  # 12 -> 10 + 2
    # at 16: nothing over; 142 + 144 = 286 against 7 * 256
    assert (at16.num_over_cap, at16.num_tokens_truncated, at16.attention_packed) == (0, 0, 286)
    assert at16.attention_padded == 7 * 256
    assert at16.num_pieces_if_split == 0
    # in the order given, and nothing fits: no attention, a 0.0 ratio rather than a division
    (none,) = cap_costs({100: 5}, [10])
    assert (none.attention_packed, none.attention_padded, none.attention_vs_padded) == (0, 0, 0.0)
    assert none.share_tokens_truncated == pytest.approx(450 / 500)
    assert none.num_pieces_if_split == 5 * 10


def test_sweep_rows_carry_the_cap_costs() -> None:
    result = sweep_max_seq_len(SMALL, [6, 10, 16], sample_size=100)
    for row, cost in zip(result.rows, cap_costs(SMALL, [6, 10, 16]), strict=True):
        assert row.cost == cost
        assert (row.num_over_cap, row.num_tokens_over_cap) == (
            cost.num_over_cap,
            cost.num_tokens_over_cap,
        )
        document = row.to_dict()
        assert document["share_over_cap"] == cost.share_over_cap
        assert document["share_tokens_over_cap"] == cost.share_tokens_over_cap
        assert document["num_tokens_truncated"] == cost.num_tokens_truncated
        assert document["share_tokens_truncated"] == cost.share_tokens_truncated
        attention = document["attention"]
        assert (attention["packed"], attention["padded"]) == (
            cost.attention_packed,
            cost.attention_padded,
        )
        assert attention["packed_vs_padded"] == cost.attention_vs_padded
        assert attention["per_bin_mean"] == cost.attention_packed / row.packed.num_bins
        assert attention["per_bin_max"] <= row.max_seq_len**2
        # padded rows are the no-packing baseline's rows, each max_seq_len wide
        assert cost.attention_padded == row.no_packing.num_bins * row.max_seq_len**2


_small_histograms = st.dictionaries(st.integers(1, 60), st.integers(0, 6), max_size=12).filter(
    lambda histogram: any(histogram.values())
)


@settings(max_examples=150, deadline=None)
@given(_small_histograms, st.lists(st.integers(1, 80), min_size=1, max_size=5))
def test_cap_costs_match_a_brute_force_oracle(histogram: dict[int, int], caps: list[int]) -> None:
    assert cap_costs(histogram, caps) == [_cap_cost_oracle(histogram, cap) for cap in caps]


@settings(max_examples=40, deadline=None)
@given(_small_histograms, st.integers(8, 80))
def test_attention_is_the_sum_over_seqpacks_rows(histogram: dict[int, int], cap: int) -> None:
    # Summed over the rows seqpack packs (each sequence attending only within itself), the
    # attention is the histogram's sum of length**2 over the sequences that fit, exactly.
    (row,) = sweep_max_seq_len(histogram, [cap], sample_size=50).rows
    fit = {length: count for length, count in histogram.items() if length <= cap}
    templates = pack_length_histogram_batched(fit, cap)
    by_rows = sum(count * sum(length * length for length in t) for t, count in templates.items())
    assert row.cost.attention_packed == by_rows
    assert row.cost.attention_padded == sum(fit.values()) * cap * cap


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.one_of(st.integers(1, 2**31 - 1), st.integers(2**31, 2**64 - 1)),
        st.integers(0, 2**40),
        min_size=1,
        max_size=8,
    ).filter(lambda histogram: any(histogram.values())),
    st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=4),
)
def test_cap_costs_are_exact_past_int64(histogram: dict[int, int], caps: list[int]) -> None:
    # Counts up to 2**40 and lengths past int64: the sums need Python ints; int64 would wrap.
    assert cap_costs(histogram, caps) == [_cap_cost_by_entry(histogram, cap) for cap in caps]


def test_cap_costs_on_both_sides_of_the_int64_bound() -> None:
    longest = 2**31 - 1
    # 2 * longest**2 < 2**63: summed in int64; one sequence more and the bound is past 2**63
    # (Python ints); 4 * longest**2 > 2**64 would wrap twice in int64.
    for histogram in ({longest: 2}, {longest: 2, 1: 1}, {longest: 4}, {longest: 3, 2: 2**62}):
        (cost,) = cap_costs(histogram, [longest])
        assert cost == _cap_cost_by_entry(histogram, longest), histogram
    assert cap_costs({longest: 4}, [longest])[0].attention_packed == 4 * longest**2


def test_cap_costs_of_a_billion_sequences_are_exact_and_cheap() -> None:
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, rng.lognormal(6.5, 1.0, 1_000_000)).astype(np.int64)
    values, counts = np.unique(lengths, return_counts=True)
    histogram = dict(zip(values.tolist(), (counts * 1000).tolist(), strict=True))  # 1e9
    caps = [1024, 2048, 4096, 8192, 65536, 2**31 - 1]
    # O(distinct lengths), not O(sequences): the work (Python lines run, memory allocated;
    # counted, not timed) of the million sequences, not an 8 GB array of a billion lengths.
    million = measure(
        lambda: cap_costs(dict(zip(values.tolist(), counts.tolist(), strict=True)), caps)
    )
    work = measure(lambda: cap_costs(histogram, caps))
    costs = work.result
    assert costs == [_cap_cost_by_entry(histogram, cap) for cap in caps]
    assert costs[0].num_sequences == 10**9
    assert work.lines <= million.lines, (work.lines, million.lines)
    assert work.peak_bytes < 2**26, work.peak_bytes


# ---- the cap (max_seqs_per_bin): baselines under it, swept like lengths ----------------------


def test_capped_sweep_compares_against_capped_baselines() -> None:
    # 100 one-token sequences at max_seq_len 100, at most 2 a bin: 50 bins for any packing.
    # The sequential baseline ignored the cap (1 bin), so seqpack "saved" -4,900% of its bins.
    (row,) = sweep_max_seq_len({1: 100}, [100], max_seqs_per_bin=2, sample_size=1000).rows
    assert row.max_seqs_per_bin == 2
    assert (row.packed.num_bins, row.sequential.num_bins, row.no_packing.num_bins) == (50, 50, 100)
    assert row.bins_saved_vs_sequential == 0.0
    assert row.sequential.max_seqs_per_bin == 2 == row.no_packing.max_seqs_per_bin
    document = row.to_dict()
    assert document["max_seqs_per_bin"] == 2 == document["sequential"]["max_seqs_per_bin"]
    # what the cap costs: 50 bins where one holds them all without it
    assert (row.uncapped_bins, row.bins_vs_uncapped) == (1, 49.0)


def test_capped_sequential_estimate_is_scaled_under_the_cap() -> None:
    # 1e7 sequences of 100 tokens at 8,192, at most 16 a row: exactly 625,000 rows. Uncapped
    # next-fit holds 81 a row: the 10,000 sampled take 124 rows, scaled by 1,000. The sample
    # must be simulated under the cap.
    capped = estimate_sequential_packing(
        {100: 10**7}, 8192, sample_size=10_000, max_seqs_per_bin=16
    )
    assert capped.estimated and capped.num_bins == 625_000
    assert estimate_sequential_packing({100: 10**7}, 8192, sample_size=10_000).num_bins == 124_000


def _next_fit_oracle(lengths: list[int], max_seq_len: int, cap: int | None) -> list[list[int]]:
    rows: list[list[int]] = []
    for length in lengths:
        if rows and sum(rows[-1]) + length <= max_seq_len and (cap is None or len(rows[-1]) < cap):
            rows[-1].append(length)
        else:
            rows.append([length])
    return rows


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 50), max_size=200),
    st.integers(50, 120),
    st.one_of(st.none(), st.integers(1, 12)),
)
def test_capped_next_fit_matches_the_oracle(
    lengths: list[int], max_seq_len: int, cap: int | None
) -> None:
    rows = _next_fit_oracle(lengths, max_seq_len, cap)
    assert next_fit_num_bins(lengths, max_seq_len, cap) == len(rows)
    if cap is not None:
        assert all(len(row) <= cap for row in rows)
        assert len(rows) >= math.ceil(len(lengths) / cap)


def test_caps_are_swept_like_lengths() -> None:
    # Every (max_seq_len, cap) pair, by max_seq_len, then cap ascending with no cap last; each
    # row names its cap and is weighed against the uncapped packing at its max_seq_len.
    result = sweep_max_seq_len(SMALL, [16, 10], max_seqs_per_bin=[None, 2, 2, 3], sample_size=50)
    assert result.max_seqs_per_bin == (2, 3, None)
    assert [(row.max_seq_len, row.max_seqs_per_bin) for row in result.rows] == [
        (10, 2), (10, 3), (10, None), (16, 2), (16, 3), (16, None),
    ]  # fmt: skip
    by_key = {(row.max_seq_len, row.max_seqs_per_bin): row for row in result.rows}
    for (max_seq_len, cap), row in by_key.items():
        uncapped = by_key[max_seq_len, None]
        assert row.uncapped_bins == uncapped.packed.num_bins
        assert row.packed.num_bins >= row.uncapped_bins
        if cap is not None:
            assert row.packed.max_seqs_in_bin <= cap
            assert row.sequential.max_seqs_per_bin == cap
    # 16 tokens, 2 a bin: the 7 sequences need 4 bins where 3 hold them uncapped (12+3, ...)
    assert (by_key[16, 2].packed.num_bins, by_key[16, None].packed.num_bins) == (4, 3)
    assert by_key[16, 2].bins_vs_uncapped == pytest.approx(1 / 3)
    # --json names the caps compared and each row's
    document = result.to_dict()
    assert document["max_seqs_per_bin"] == [2, 3, None]
    assert [row["max_seqs_per_bin"] for row in document["rows"]] == [2, 3, None] * 2
    assert document["packer"] == "pack_length_histogram_batched(lp_effort=0.5)"


def test_a_cap_list_is_checked() -> None:
    with pytest.raises(ConfigError, match="max_seqs_per_bin is 0"):
        sweep_max_seq_len(SMALL, [10], max_seqs_per_bin=[4, 0])
    with pytest.raises(ConfigError, match="max_seqs_per_bin is empty"):
        sweep_max_seq_len(SMALL, [10], max_seqs_per_bin=[])


@settings(max_examples=40, deadline=None)
@given(_small_histograms, st.integers(8, 80), st.integers(1, 6))
def test_sweep_seqs_per_bin_and_attention_per_bin(
    histogram: dict[int, int], max_seq_len: int, cap: int
) -> None:
    # The distribution of sequences per bin accounts for every bin, in even-width buckets
    # ending at the largest; the largest bin attention is one of the packing's bins'.
    for row in sweep_max_seq_len(
        histogram, [max_seq_len], max_seqs_per_bin=[cap, None], sample_size=50
    ).rows:
        buckets = row.seqs_per_bin
        assert sum(bucket.count for bucket in buckets) == row.packed.num_bins
        if row.packed.num_bins:
            assert buckets[-1].high == row.packed.max_seqs_in_bin
            widths = {bucket.high - bucket.low + 1 for bucket in buckets[:-1]}
            assert len(widths) <= 1 and len(buckets) <= 16
            assert row.attention_max_bin <= max_seq_len**2
            assert row.attention_max_bin >= row.attention_per_bin


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(1, 5000), st.integers(1, 50), min_size=1, max_size=20))
def test_seqs_per_bin_buckets_are_even(sizes_to_bins: dict[int, int]) -> None:
    sizes = np.array(list(sizes_to_bins), dtype=np.int64)
    weights = np.array(list(sizes_to_bins.values()), dtype=np.int64)
    buckets = seqs_per_bin_buckets(sizes, weights)
    width = buckets[0].high - buckets[0].low + 1
    assert width in {1, 2, 5} or str(width).rstrip("0") in {"1", "2", "5"}  # round widths
    assert len(buckets) <= 16 and buckets[0].low == 1 and buckets[-1].high == sizes.max()
    for previous, bucket in itertools.pairwise(buckets):
        assert bucket.low == previous.high + 1
        assert previous.high - previous.low + 1 == width
    assert sum(bucket.count for bucket in buckets) == weights.sum()
