"""The figures behind `seqpack stats`: what each `max_seq_len` costs, seqpack against no seqpack.

Everything here works from the length histogram (and, for a prepared directory, its templates), so
its cost does not grow with the number of sequences.

Two baselines stand for "what a user gets without seqpack", on the same sequences seqpack packs
(those over the cap are dropped from all three):

- **no packing**: one sequence per row, padded to `max_seq_len`. Exact.
- **sequential packing**: the dataset shuffled, then sequences concatenated in that order, a new
  row started whenever the next sequence does not fit, none split (next-fit). This is what a
  streaming "concatenate until full" packer does. Its bin count depends on the order; a random
  order is the common case (shuffled data) and the only one the histogram determines, so it is
  simulated on a seeded random window of `sample_size` sequences drawn without replacement from
  the histogram, and scaled to the whole dataset (`estimated=True`). When the dataset has at most
  `sample_size` sequences the whole dataset is simulated (one seeded shuffle, `estimated=False`).
  With the default 1,000,000-sequence sample the estimate costs ~0.1 s per `max_seq_len` at any
  dataset size. For the exact figure in your own order, call `next_fit_num_bins(lengths, ...)`.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import (
    MAX_SEQ_LEN_LIMIT,
    check_max_seq_len,
    check_max_seqs_per_bin,
    validate_length_array,
)
from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.packing.bounds import LowerBound, lower_bounds_of_lengths
from seqpack_cli.packing.efficiency import PackingStats, fill_figures
from seqpack_cli.packing.histogram import BinTemplate, pack_length_histogram_batched
from seqpack_cli.progress import ProgressCallback
from seqpack_cli.templates import packed_lengths

__all__ = [
    "DEFAULT_SAMPLE_SIZE",
    "NO_PACKING_DESCRIPTION",
    "SEQUENTIAL_DESCRIPTION",
    "BaselineStats",
    "Bucket",
    "LengthSummary",
    "PackingProfile",
    "SweepResult",
    "SweepRow",
    "bucket_lengths",
    "estimate_sequential_packing",
    "linear_edges",
    "next_fit_num_bins",
    "no_packing_stats",
    "power_of_two_edges",
    "profile_packing",
    "summarize_lengths",
    "sweep_max_seq_len",
]

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE_SIZE = 1_000_000

# One wording of the baselines for --help, the terminal report and the HTML report.
NO_PACKING_DESCRIPTION = "no packing: one sequence per row, padded to max_seq_len (exact)"
SEQUENTIAL_DESCRIPTION = (
    "sequential: the dataset shuffled, then sequences concatenated in that order, a new row "
    "whenever the next one does not fit, none split (next-fit); simulated on a seeded random "
    "sample of up to {sample_size:,} sequences and scaled to the dataset (an estimate)"
)

# Bin fullness buckets, in percent of max_seq_len filled: coarse where few bins fall, fine near
# 100% where a good packing puts nearly all of them, so the chart separates "good" from "perfect".
_FULLNESS_EDGES_PERCENT: tuple[int, ...] = (0, 50, 75, 90, 95, 99, 100)


# ---- result types --------------------------------------------------------------------------


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


@dataclass(frozen=True)
class BaselineStats:
    """One way of filling rows without seqpack, in the same terms as `PackingStats`."""

    method: str  # "no_packing" or "sequential_random_order"
    num_bins: int
    num_sequences: int
    num_tokens: int
    capacity: int
    efficiency: float
    padding: int
    padding_ratio: float
    avg_seqs_per_bin: float
    num_simulated: int  # sequences actually packed to get num_bins (0: closed formula)
    estimated: bool  # True when num_bins was scaled up from a sample

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepRow:
    """seqpack and both baselines at one `max_seq_len`."""

    max_seq_len: int
    num_over_cap: int  # sequences longer than max_seq_len: dropped, not packed
    num_tokens_over_cap: int
    packed: PackingStats
    lower_bound: LowerBound  # packed.lower_bound_bins is its value; by kind for --json
    no_packing: BaselineStats
    sequential: BaselineStats

    @property
    def bins_saved_vs_sequential(self) -> float:
        """Fraction of sequential packing's rows (so of its compute) that seqpack saves."""
        if self.sequential.num_bins == 0:
            return 0.0
        return 1.0 - self.packed.num_bins / self.sequential.num_bins

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_seq_len": self.max_seq_len,
            "num_over_cap": self.num_over_cap,
            "num_tokens_over_cap": self.num_tokens_over_cap,
            "seqpack": self.packed.to_dict(),
            "lower_bound_by": self.lower_bound.to_dict(),
            "no_packing": self.no_packing.to_dict(),
            "sequential": self.sequential.to_dict(),
            "bins_saved_vs_sequential": self.bins_saved_vs_sequential,
        }


@dataclass(frozen=True)
class SweepResult:
    """The answer to "which max_seq_len?": one row per candidate, ascending."""

    lengths: LengthSummary
    rows: list[SweepRow]
    length_buckets: list[Bucket]
    sample_size: int
    seed: int
    max_seqs_per_bin: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "lengths": self.lengths.to_dict(),
            "length_histogram": [bucket.to_dict() for bucket in self.length_buckets],
            "sample_size": self.sample_size,
            "seed": self.seed,
            "max_seqs_per_bin": self.max_seqs_per_bin,
            "rows": [row.to_dict() for row in self.rows],
        }


@dataclass(frozen=True)
class PackingProfile:
    """One packing (a prepared directory) described for a person: numbers and chart data."""

    max_seq_len: int
    stats: PackingStats
    lower_bound: LowerBound  # stats.lower_bound_bins is its value; by kind for --json
    lengths: LengthSummary
    no_packing: BaselineStats
    sequential: BaselineStats
    length_buckets: list[Bucket]  # sequences per length range
    fullness_buckets: list[Bucket]  # bins per fullness range (fraction of max_seq_len)
    seqs_per_bin_buckets: list[Bucket]  # bins per number of sequences they hold
    top_templates: list[tuple[BinTemplate, int]]  # most common first, ties by template
    num_templates: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_seq_len": self.max_seq_len,
            "stats": self.stats.to_dict(),
            "lower_bound_by": self.lower_bound.to_dict(),
            "lengths": self.lengths.to_dict(),
            "no_packing": self.no_packing.to_dict(),
            "sequential": self.sequential.to_dict(),
            "length_histogram": [bucket.to_dict() for bucket in self.length_buckets],
            "bin_fullness": [bucket.to_dict() for bucket in self.fullness_buckets],
            "seqs_per_bin": [bucket.to_dict() for bucket in self.seqs_per_bin_buckets],
            "num_templates": self.num_templates,
            "top_templates": [
                {"template": list(template), "num_bins": count}
                for template, count in self.top_templates
            ],
        }


# ---- histogram helpers ---------------------------------------------------------------------


def _histogram_arrays(length_counts: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Validated (lengths ascending, counts) arrays; zero counts dropped.

    Lengths are int64, or Python ints (an object array) where some length is over
    `MAX_SEQ_LEN_LIMIT`: such a length (a uint64 column may hold up to 2**64 - 1) is over every
    cap and only counted, and its token totals are exact instead of wrapping around in int64.
    """
    lengths: list[int] = []
    counts: list[int] = []
    for length, count in length_counts.items():
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length <= 0:
            raise InputError(
                f"length histogram: length {length!r} is not a positive integer; "
                "every key must be a sequence length in tokens (>= 1)"
            )
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise InputError(
                f"length histogram: count {count!r} for length {length} is not a non-negative "
                "integer; every value must be the number of sequences of that length"
            )
        if count:
            lengths.append(int(length))
            counts.append(int(count))
    dtype = np.int64 if not lengths or max(lengths) <= MAX_SEQ_LEN_LIMIT else object
    length_array = np.asarray(lengths, dtype=dtype)
    order = np.argsort(length_array, kind="stable")
    return length_array[order], np.asarray(counts, dtype=np.int64)[order]


def _require_sequences(lengths: np.ndarray) -> None:
    if lengths.size == 0:
        raise InputError(
            "length histogram is empty: there are no sequences to analyse; "
            "check the inputs and the length column"
        )


def summarize_lengths(length_counts: Mapping[int, int]) -> LengthSummary:
    """Count, tokens, min/max/mean and nearest-rank p50/p90/p99 of a length histogram."""
    lengths, counts = _histogram_arrays(length_counts)
    _require_sequences(lengths)
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
    lengths, counts = _histogram_arrays(length_counts)
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


# ---- baselines -----------------------------------------------------------------------------


def next_fit_num_bins(lengths: Sequence[int] | np.ndarray, max_seq_len: int) -> int:
    """Rows used by sequential (next-fit) packing of `lengths` in the order given.

    Each sequence goes into the current row if it fits, else it opens a new row; nothing is
    split. Exact, O(n) in pure Python (~60 ns per sequence).
    """
    array = validate_length_array(lengths, max_seq_len)
    num_bins = 0
    fill = max_seq_len + 1  # "no open row": the first sequence always opens one
    # Next-fit is inherently sequential (each decision depends on the previous row's fill);
    # chunked .tolist() keeps the loop on plain ints without materialising one huge list.
    for start in range(0, int(array.size), 1 << 20):
        for length in array[start : start + (1 << 20)].tolist():
            fill += length
            if fill > max_seq_len:
                num_bins += 1
                fill = length
    return num_bins


def _baseline(
    method: str,
    num_bins: int,
    num_sequences: int,
    num_tokens: int,
    max_seq_len: int,
    *,
    num_simulated: int,
    estimated: bool,
) -> BaselineStats:
    return BaselineStats(
        method=method,
        **fill_figures(num_bins, num_sequences, num_tokens, max_seq_len),
        num_simulated=num_simulated,
        estimated=estimated,
    )


def no_packing_stats(length_counts: Mapping[int, int], max_seq_len: int) -> BaselineStats:
    """One sequence per row, padded to `max_seq_len` (lengths over the cap are left out)."""
    max_seq_len = check_max_seq_len(max_seq_len)
    lengths, counts = _histogram_arrays(length_counts)
    keep = lengths <= max_seq_len
    num_sequences = int(counts[keep].sum())
    num_tokens = int((lengths[keep] * counts[keep]).sum())
    return _baseline(
        "no_packing",
        num_sequences,
        num_sequences,
        num_tokens,
        max_seq_len,
        num_simulated=0,
        estimated=False,
    )


def estimate_sequential_packing(
    length_counts: Mapping[int, int],
    max_seq_len: int,
    *,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
) -> BaselineStats:
    """Sequential (next-fit) packing of the shuffled dataset, lengths over the cap left out.

    Simulates next-fit on `min(sample_size, N)` sequences drawn without replacement from the
    histogram in random order (a uniformly random window of a shuffled dataset has exactly this
    distribution) and scales the row count by N / sample. Deterministic in (histogram,
    max_seq_len, sample_size, seed), whatever else is analysed alongside.
    """
    max_seq_len = check_max_seq_len(max_seq_len)
    if isinstance(sample_size, bool) or not isinstance(sample_size, int) or sample_size <= 0:
        raise ConfigError(
            f"{option('sample_size')} {sample_size!r} must be a positive integer, e.g. 1000000"
        )
    lengths, counts = _histogram_arrays(length_counts)
    keep = lengths <= max_seq_len
    lengths, counts = lengths[keep].astype(np.int64), counts[keep]
    num_sequences = int(counts.sum())
    num_tokens = int((lengths * counts).sum())
    if num_sequences == 0:
        return _baseline(
            "sequential_random_order",
            0,
            0,
            0,
            max_seq_len,
            num_simulated=0,
            estimated=False,
        )
    rng = np.random.default_rng(seed)
    if num_sequences <= sample_size:
        drawn = counts
    else:
        # "marginals" draws one hypergeometric count per length: O(distinct lengths) memory.
        drawn = rng.multivariate_hypergeometric(counts, sample_size, method="marginals")
    sample = np.repeat(lengths, drawn)
    rng.shuffle(sample)
    sample_bins = next_fit_num_bins(sample, max_seq_len)
    estimated = sample.size < num_sequences
    if estimated:
        # ratio estimator, never below what any packing needs (the lower bound; next-fit has
        # no cap on sequences per row)
        num_bins = round(sample_bins * num_sequences / sample.size)
        num_bins = max(num_bins, lower_bounds_of_lengths(lengths, counts, max_seq_len).value)
    else:
        num_bins = sample_bins
    logger.debug(
        "sequential packing at max_seq_len=%d: %d rows on %d simulated sequences -> %d rows",
        max_seq_len,
        sample_bins,
        sample.size,
        num_bins,
    )
    return _baseline(
        "sequential_random_order",
        num_bins,
        num_sequences,
        num_tokens,
        max_seq_len,
        num_simulated=int(sample.size),
        estimated=estimated,
    )


# ---- the analyses --------------------------------------------------------------------------


def _check_sweep_options(max_seqs_per_bin: int | None, sample_size: int) -> None:
    check_max_seqs_per_bin(max_seqs_per_bin)
    if isinstance(sample_size, bool) or not isinstance(sample_size, int) or sample_size <= 0:
        raise ConfigError(
            f"{option('sample_size')} {sample_size!r} must be a positive integer, e.g. 1000000"
        )


def sweep_max_seq_len(
    length_counts: Mapping[int, int],
    max_seq_lens: Iterable[int],
    *,
    max_seqs_per_bin: int | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    progress: ProgressCallback | None = None,
) -> SweepResult:
    """seqpack's packing and both baselines at each candidate `max_seq_len` (sorted, unique).

    Sequences longer than a candidate are counted as dropped at that candidate and the rest are
    packed, by seqpack's histogram packer and by both baselines.
    """
    candidates = sorted({check_max_seq_len(value) for value in max_seq_lens})
    if not candidates:
        name = option("max_seq_len", python="max_seq_lens")
        raise ConfigError(f"{name}: give at least one value, e.g. 2048")
    _check_sweep_options(max_seqs_per_bin, sample_size)
    lengths, counts = _histogram_arrays(length_counts)
    _require_sequences(lengths)
    histogram = dict(zip(lengths.tolist(), counts.tolist(), strict=True))
    rows: list[SweepRow] = []
    for done, max_seq_len in enumerate(candidates):
        if progress is not None:
            progress("sweep max_seq_len", done, len(candidates))
        kept = {length: count for length, count in histogram.items() if length <= max_seq_len}
        over = lengths > max_seq_len
        templates = pack_length_histogram_batched(
            kept, max_seq_len, max_seqs_per_bin=max_seqs_per_bin
        )
        packed = PackingStats.from_templates(
            templates, max_seq_len, max_seqs_per_bin=max_seqs_per_bin
        )
        rows.append(
            SweepRow(
                max_seq_len=max_seq_len,
                num_over_cap=int(counts[over].sum()),
                num_tokens_over_cap=int((lengths[over] * counts[over]).sum()),
                packed=packed,
                lower_bound=lower_bounds_of_lengths(
                    lengths[~over].astype(np.int64), counts[~over], max_seq_len, max_seqs_per_bin
                ),
                no_packing=no_packing_stats(kept, max_seq_len) if kept else _empty(max_seq_len),
                sequential=estimate_sequential_packing(
                    kept, max_seq_len, sample_size=sample_size, seed=seed
                )
                if kept
                else _empty(max_seq_len, "sequential_random_order"),
            )
        )
    if progress is not None:
        progress("sweep max_seq_len", len(candidates), len(candidates))
    return SweepResult(
        lengths=summarize_lengths(histogram),
        rows=rows,
        length_buckets=bucket_lengths(
            histogram, power_of_two_edges(int(lengths[-1]), int(lengths[0]))
        ),
        sample_size=sample_size,
        seed=seed,
        max_seqs_per_bin=max_seqs_per_bin,
    )


def _empty(max_seq_len: int, method: str = "no_packing") -> BaselineStats:
    return _baseline(method, 0, 0, 0, max_seq_len, num_simulated=0, estimated=False)


def _template_arrays(
    templates: Mapping[BinTemplate, int] | Iterable[tuple[BinTemplate, int]],
) -> tuple[list[tuple[BinTemplate, int]], np.ndarray, np.ndarray, np.ndarray]:
    """(pairs, template sums, template sizes, multiplicities) with zero multiplicities dropped."""
    items = templates.items() if isinstance(templates, Mapping) else templates
    pairs = [(tuple(int(x) for x in template), int(count)) for template, count in items]
    pairs = [(template, count) for template, count in pairs if count > 0]
    sums = np.fromiter((sum(t) for t, _ in pairs), dtype=np.int64, count=len(pairs))
    sizes = np.fromiter((len(t) for t, _ in pairs), dtype=np.int64, count=len(pairs))
    multiplicities = np.fromiter((c for _, c in pairs), dtype=np.int64, count=len(pairs))
    return pairs, sums, sizes, multiplicities


def _fullness_buckets(sums: np.ndarray, weights: np.ndarray, max_seq_len: int) -> list[Bucket]:
    buckets: list[Bucket] = []
    percent = sums * 100  # integer comparisons: a bin at exactly 95% lands in 95–99%, always
    edges = _FULLNESS_EDGES_PERCENT
    for low, high in itertools.pairwise(edges):
        mask = (percent >= low * max_seq_len) & (percent < high * max_seq_len)
        buckets.append(Bucket(f"{low}–{high}%", low / 100, high / 100, int(weights[mask].sum())))
    full = sums >= max_seq_len
    buckets.append(Bucket("100% (full)", 1.0, 1.0, int(weights[full].sum())))
    return buckets


def _seqs_per_bin_buckets(sizes: np.ndarray, weights: np.ndarray) -> list[Bucket]:
    """Bins per number of sequences: one row each for 1..8, then power-of-two ranges."""
    if sizes.size == 0:
        return []
    largest = int(sizes.max())
    ranges = [(k, k) for k in range(1, min(largest, 8) + 1)]
    low = 9
    while low <= largest:
        ranges.append((low, min(2 * (low - 1), largest)))
        low = 2 * (low - 1) + 1
    buckets: list[Bucket] = []
    for low, high in ranges:
        mask = (sizes >= low) & (sizes <= high)
        label = str(low) if low == high else f"{low}–{high}"
        buckets.append(Bucket(label, low, high, int(weights[mask].sum())))
    return buckets


def profile_packing(
    length_counts: Mapping[int, int],
    templates: Mapping[BinTemplate, int] | Iterable[tuple[BinTemplate, int]],
    max_seq_len: int,
    *,
    top: int = 10,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    max_seqs_per_bin: int | None = None,
) -> PackingProfile:
    """Describe an existing packing (e.g. a prepared directory): figures, baselines, chart data.

    `max_seqs_per_bin`: the cap the packing was made with (a prepared directory's
    `config.max_seqs_per_bin`); it counts in the lower bound.
    """
    max_seq_len = check_max_seq_len(max_seq_len)
    if top < 0:
        raise ConfigError(f"{option('top')} {top} must be >= 0 (the number of templates listed)")
    pairs, sums, sizes, multiplicities = _template_arrays(templates)
    # most common first; ties broken by the template itself so the listing is deterministic
    ranked = sorted(pairs, key=lambda pair: (-pair[1], tuple(-x for x in pair[0])))
    stats = PackingStats.from_templates(dict(pairs), max_seq_len, max_seqs_per_bin=max_seqs_per_bin)
    return PackingProfile(
        max_seq_len=max_seq_len,
        stats=stats,
        lower_bound=lower_bounds_of_lengths(*packed_lengths(pairs), max_seq_len, max_seqs_per_bin),
        lengths=summarize_lengths(length_counts),
        no_packing=no_packing_stats(length_counts, max_seq_len),
        sequential=estimate_sequential_packing(
            length_counts, max_seq_len, sample_size=sample_size, seed=seed
        ),
        length_buckets=bucket_lengths(length_counts, linear_edges(max_seq_len)),
        fullness_buckets=_fullness_buckets(sums, multiplicities, max_seq_len),
        seqs_per_bin_buckets=_seqs_per_bin_buckets(sizes, multiplicities),
        top_templates=ranked[:top],
        num_templates=len(pairs),
    )
