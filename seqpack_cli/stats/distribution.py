"""The length distribution behind `seqpack stats`: summary numbers and chart buckets.

Everything here works from a length histogram `{length: count}`, so its cost grows with the
number of distinct lengths, not of sequences. `histogram_arrays` is the one place a histogram is
checked (`InputError` for a bad length or count); the baselines (`seqpack_cli.stats.baselines`),
the packing profile (`seqpack_cli.stats.profile`) and the sweep (`seqpack_cli.stats.sweep`) all
read their histograms through it.

`cap_costs` gives what a cap costs, per candidate `max_seq_len`: the sequences over it, the
tokens lost if they are dropped and cut if they are truncated, and the attention of the
sequences that fit (packed, each attending only within itself) against padded rows. It reads
exact prefix sums of the histogram (int64 where the totals provably fit, Python ints otherwise),
so it costs O(distinct lengths) once, then O(log) per candidate, at any number of sequences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import MAX_SEQ_LEN_LIMIT, check_int, check_max_seq_len
from seqpack_cli.errors import InputError

__all__ = [
    "Bucket",
    "CapCost",
    "LengthSummary",
    "bucket_lengths",
    "cap_costs",
    "cap_costs_of_arrays",
    "histogram_arrays",
    "linear_edges",
    "power_of_two_edges",
    "require_sequences",
    "seqs_per_bin_buckets",
    "summarize_lengths",
]


@dataclass(frozen=True)
class Bucket:
    """One bar of a chart: `count` items with a value in [low, high] (labelled for display)."""

    label: str
    low: float
    high: float
    count: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LengthSummary:
    """The length distribution in numbers (percentiles are nearest-rank)."""

    num_sequences: int
    num_tokens: int
    num_distinct_lengths: int
    min_length: int
    max_length: int
    mean_length: float
    p50_length: int
    p90_length: int
    p99_length: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _checked_entry(length: Any, count: Any) -> tuple[int, int]:
    """One histogram entry as ints, or `InputError` naming the bad length or count."""
    length = check_int(
        "length histogram: length",
        length,
        minimum=1,
        expected="a positive integer (a sequence length in tokens)",
        fix="every key must be the length of a sequence, so check the length column",
        error=InputError,
    )
    count = check_int(
        f"length histogram: count for length {length}",
        count,
        minimum=0,
        expected="a non-negative integer",
        fix="every value must be the number of sequences of that length",
        error=InputError,
    )
    return length, count


def histogram_arrays(length_counts: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Validated (lengths ascending, counts) arrays; zero counts dropped.

    Lengths are int64, or Python ints (an object array) where some length is over
    `MAX_SEQ_LEN_LIMIT`: such a length (a uint64 column may hold up to 2**64 - 1) is over every
    cap and only counted, and its token totals are exact instead of wrapping around in int64.
    """
    lengths: list[int] = []
    counts: list[int] = []
    for length, count in (_checked_entry(*item) for item in length_counts.items()):
        if count:
            lengths.append(length)
            counts.append(count)
    dtype = np.int64 if not lengths or max(lengths) <= MAX_SEQ_LEN_LIMIT else object
    length_array = np.asarray(lengths, dtype=dtype)
    order = np.argsort(length_array, kind="stable")
    return length_array[order], np.asarray(counts, dtype=np.int64)[order]


def require_sequences(lengths: np.ndarray) -> None:
    """Raise `InputError` when a histogram (from `histogram_arrays`) holds no sequence."""
    if lengths.size == 0:
        raise InputError(
            "length histogram is empty: there are no sequences to analyse; "
            "check the inputs and the length column"
        )


def summarize_lengths(length_counts: Mapping[int, int]) -> LengthSummary:
    """Count, tokens, min/max/mean and nearest-rank p50/p90/p99 of a length histogram."""
    lengths, counts = histogram_arrays(length_counts)
    require_sequences(lengths)
    num_sequences = int(counts.sum())
    num_tokens = int((lengths * counts).sum())
    cumulative = np.cumsum(counts)

    def percentile(fraction: float) -> int:
        # nearest rank: the smallest length with at least ceil(fraction * N) sequences at or below
        rank = max(1, math.ceil(fraction * num_sequences))
        return int(lengths[int(np.searchsorted(cumulative, rank, side="left"))])

    return LengthSummary(
        num_sequences=num_sequences,
        num_tokens=num_tokens,
        num_distinct_lengths=int(lengths.size),
        min_length=int(lengths[0]),
        max_length=int(lengths[-1]),
        mean_length=num_tokens / num_sequences,
        p50_length=percentile(0.50),
        p90_length=percentile(0.90),
        p99_length=percentile(0.99),
    )


def linear_edges(max_value: int, num_buckets: int = 16) -> list[int]:
    """Upper edges of equal-width integer buckets over [1, max_value] (the last is max_value)."""
    width = max(1, math.ceil(max_value / num_buckets))
    return [min(width * k, max_value) for k in range(1, math.ceil(max_value / width) + 1)]


def power_of_two_edges(max_value: int, min_value: int = 1) -> list[int]:
    """Upper edges ..., 2^k, 2^(k+1), ... from the first >= min_value to the first >= max_value.

    Log-width buckets suit length distributions (roughly log-normal) and put the usual
    power-of-two `max_seq_len` values on bucket edges.
    """
    first = max(0, (max(1, min_value) - 1).bit_length())
    return [1 << k for k in range(first, max(first, (max_value - 1).bit_length()) + 1)]


def bucket_lengths(length_counts: Mapping[int, int], upper_edges: Sequence[int]) -> list[Bucket]:
    """Sequences per length range `(previous edge, edge]`; lengths above the last edge go last."""
    lengths, counts = histogram_arrays(length_counts)
    buckets: list[Bucket] = []
    low = 1
    for edge in upper_edges:
        if edge < low:
            continue
        mask = (lengths >= low) & (lengths <= edge)
        label = f"{low:,}" if low == edge else f"{low:,}–{edge:,}"
        buckets.append(Bucket(label, low, edge, int(counts[mask].sum())))
        low = edge + 1
    beyond = lengths >= low
    if beyond.any():
        high = int(lengths[-1])
        buckets.append(Bucket(f"{low:,}–{high:,}", low, high, int(counts[beyond].sum())))
    return buckets


def _round_width(at_least: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... at or above `at_least`: round bucket edges."""
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale >= at_least:
                return step * scale
        scale *= 10


def seqs_per_bin_buckets(
    sizes: np.ndarray, weights: np.ndarray, max_buckets: int = 16
) -> list[Bucket]:
    """Bins per number of sequences they hold, in even-width buckets from 1 to the largest.

    `sizes[i]` sequences are in each of `weights[i]` bins. The width is the smallest of 1, 2,
    5, 10, 20, ... that needs at most `max_buckets` buckets, so the edges are round numbers
    (1–5, 6–10, ...); the last bucket ends at the largest size, which its label shows.
    """
    if sizes.size == 0:
        return []
    largest = int(sizes.max())
    width = _round_width(largest / max_buckets)
    buckets: list[Bucket] = []
    for low in range(1, largest + 1, width):
        high = min(low + width - 1, largest)
        mask = (sizes >= low) & (sizes <= high)
        label = f"{low:,}" if low == high else f"{low:,}–{high:,}"
        buckets.append(Bucket(label, low, high, int(weights[mask].sum())))
    return buckets


_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class CapCost:
    """What cutting the lengths at `max_seq_len` costs, exactly (Python ints, any size).

    Sequences longer than `max_seq_len` are either dropped (all `num_tokens_over_cap` of their
    tokens lost) or truncated to `max_seq_len` (`num_tokens_truncated` = the sum of
    `length - max_seq_len` over them cut). Attention is counted in query-key pairs (its FLOPs
    are proportional) on the sequences that fit: `attention_packed` = the sum of `length**2`,
    each sequence attending only within itself (a varlen kernel, e.g. flash-attn's cu_seqlens),
    whatever packing holds them; `attention_padded` = their number times `max_seq_len**2`, one
    sequence per row padded to `max_seq_len` with dense attention. Causal attention halves both.
    """

    max_seq_len: int
    num_sequences: int  # all of them, over the cap or not
    num_tokens: int
    num_over_cap: int
    num_tokens_over_cap: int  # lost if the sequences over the cap are dropped
    num_tokens_truncated: int  # cut if they are truncated to max_seq_len
    num_pieces_if_split: int  # sequences they become if split into max_seq_len pieces
    attention_packed: int  # sum of length**2 over the sequences that fit
    attention_padded: int  # (sequences that fit) * max_seq_len**2

    @property
    def share_over_cap(self) -> float:
        """Share of all sequences that are longer than `max_seq_len`."""
        return self.num_over_cap / self.num_sequences if self.num_sequences else 0.0

    @property
    def share_tokens_over_cap(self) -> float:
        """Share of all tokens lost if the sequences over the cap are dropped."""
        return self.num_tokens_over_cap / self.num_tokens if self.num_tokens else 0.0

    @property
    def share_tokens_truncated(self) -> float:
        """Share of all tokens cut if the sequences over the cap are truncated."""
        return self.num_tokens_truncated / self.num_tokens if self.num_tokens else 0.0

    @property
    def attention_vs_padded(self) -> float:
        """Attention of the packed sequences over that of padded rows (0.0 when none fits)."""
        return self.attention_packed / self.attention_padded if self.attention_padded else 0.0


def _exact_prefix_sums(
    values: np.ndarray, weights: np.ndarray, power: int, bound: int
) -> np.ndarray:
    """[0, s1, s1 + s2, ...] with s_i = values[i]**power * weights[i], exactly: in int64 when
    `bound` (at least every partial sum; all terms are non-negative) fits, else in Python ints
    (an object array, ~0.3 s per million distinct lengths)."""
    dtype: Any = np.int64 if bound <= _INT64_MAX else object
    terms = values.astype(dtype) ** power * weights.astype(dtype)
    sums = np.zeros(terms.size + 1, dtype=dtype)
    np.cumsum(terms, out=sums[1:])
    return sums


def cap_costs(length_counts: Mapping[int, int], max_seq_lens: Sequence[int]) -> list[CapCost]:
    """`CapCost` at each of `max_seq_lens` (in the order given), exactly, from the histogram.

    Three prefix sums over the ascending lengths (of counts, lengths and squared lengths), each
    in int64 only where a bound on its total fits, then a binary search per cap: 1e9 sequences,
    or lengths past int64, stay exact and cost O(distinct lengths).
    """
    lengths, counts = histogram_arrays(length_counts)
    require_sequences(lengths)
    return cap_costs_of_arrays(lengths, counts, max_seq_lens)


def _pieces(lengths: np.ndarray, counts: np.ndarray, cap: int) -> int:
    """The sum of ceil(length / cap) * count, exactly (Python ints: counts of 1e9 sequences of
    2**31 tokens overflow int64)."""
    pieces = (lengths + (cap - 1)) // cap
    return int(np.dot(pieces.astype(object), counts.astype(object))) if lengths.size else 0


def cap_costs_of_arrays(
    lengths: np.ndarray, counts: np.ndarray, max_seq_lens: Sequence[int]
) -> list[CapCost]:
    """`cap_costs` on the (lengths, counts) arrays of `histogram_arrays`, not empty."""
    caps = [check_max_seq_len(cap) for cap in max_seq_lens]
    ones = np.ones_like(counts)
    sequences = _exact_prefix_sums(ones, counts, 1, int(counts.max()) * int(counts.size))
    num_sequences = int(sequences[-1])
    tokens = _exact_prefix_sums(lengths, counts, 1, int(lengths[-1]) * num_sequences)
    num_tokens = int(tokens[-1])
    # Squared lengths only up to the largest cap (<= MAX_SEQ_LEN_LIMIT): no longer one fits.
    fits = int(np.searchsorted(lengths, max(caps, default=0), side="right"))
    longest_fit = int(lengths[fits - 1]) if fits else 0
    squares = _exact_prefix_sums(
        lengths[:fits], counts[:fits], 2, longest_fit * longest_fit * num_sequences
    )
    costs: list[CapCost] = []
    for cap in caps:
        index = int(np.searchsorted(lengths, cap, side="right"))
        num_fit = int(sequences[index])
        num_over, tokens_over = num_sequences - num_fit, num_tokens - int(tokens[index])
        costs.append(
            CapCost(
                max_seq_len=cap,
                num_sequences=num_sequences,
                num_tokens=num_tokens,
                num_over_cap=num_over,
                num_tokens_over_cap=tokens_over,
                num_tokens_truncated=tokens_over - cap * num_over,
                num_pieces_if_split=_pieces(lengths[index:], counts[index:], cap),
                attention_packed=int(squares[index]),
                attention_padded=num_fit * cap * cap,
            )
        )
    return costs
