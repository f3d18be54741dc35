"""The length distribution behind `seqpack stats`: summary numbers and chart buckets.

Everything here works from a length histogram `{length: count}`, so its cost grows with the
number of distinct lengths, not of sequences. `histogram_arrays` is the one place a histogram is
checked (`InputError` for a bad length or count); the baselines (`seqpack_cli.stats.baselines`),
the packing profile (`seqpack_cli.stats.profile`) and the sweep (`seqpack_cli.stats.sweep`) all
read their histograms through it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import MAX_SEQ_LEN_LIMIT, check_int
from seqpack_cli.errors import InputError

__all__ = [
    "Bucket",
    "LengthSummary",
    "bucket_lengths",
    "histogram_arrays",
    "linear_edges",
    "power_of_two_edges",
    "require_sequences",
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
