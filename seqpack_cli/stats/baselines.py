"""What a user gets without seqpack: the two baselines `seqpack stats` compares packings with.

Both stand for "no seqpack" on the same sequences seqpack packs (those over the cap are dropped
from all three), and both work from the length histogram, so their cost does not grow with the
number of sequences:

- **no packing**: one sequence per row, padded to `max_seq_len`. Exact.
- **sequential packing**: the dataset shuffled, then sequences concatenated in that order, a new
  row started whenever the next sequence does not fit (or, with `max_seqs_per_bin`, the row
  already holds that many), none split (next-fit). This is what a streaming "concatenate until
  full" packer does; under a cap it obeys the same cap as seqpack, or the comparison would set a
  capped packing against an uncapped one. Its bin count depends on the order; a random
  order is the common case (shuffled data) and the only one the histogram determines, so it is
  simulated on a seeded random window of `sample_size` sequences drawn without replacement from
  the histogram, and scaled to the whole dataset (`estimated=True`). When the dataset has at most
  `sample_size` sequences the whole dataset is simulated (one seeded shuffle, `estimated=False`).
  With the default 1,000,000-sequence sample the estimate costs ~0.1 s per `max_seq_len` at any
  dataset size. For the exact figure in your own order, call `next_fit_num_bins(lengths, ...)`.

The sweep (`seqpack_cli.stats.sweep`) and the packing profile (`seqpack_cli.stats.profile`)
report both next to seqpack's own figures.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import (
    check_int,
    check_max_seq_len,
    check_max_seqs_per_bin,
    validate_length_array,
)
from seqpack_cli.errors import option
from seqpack_cli.packing.bounds import lower_bounds_of_lengths
from seqpack_cli.packing.efficiency import fill_figures
from seqpack_cli.seeding import check_required_seed, numpy_seed
from seqpack_cli.stats.distribution import histogram_arrays

__all__ = [
    "DEFAULT_SAMPLE_SIZE",
    "NO_PACKING_DESCRIPTION",
    "SEQUENTIAL_DESCRIPTION",
    "BaselineStats",
    "check_sample_size",
    "empty_baseline",
    "estimate_sequential_packing",
    "next_fit_num_bins",
    "no_packing_stats",
    "sequential_description",
]

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE_SIZE = 1_000_000

# One wording of the baselines for --help, the terminal report and the HTML report.
NO_PACKING_DESCRIPTION = "no packing: one sequence per row, padded to max_seq_len (exact)"
SEQUENTIAL_DESCRIPTION = (
    "sequential: the dataset shuffled, then sequences concatenated in that order, a new row "
    "whenever the next one does not fit{cap_clause}, none split (next-fit); simulated on a "
    "seeded random "
    "sample of up to {sample_size:,} sequences and scaled to the dataset (an estimate)"
)

_NO_PACKING = "no_packing"
_MARGINALS_LIMIT = 10**9  # numpy's multivariate_hypergeometric(method="marginals"): sum < 1e9
_SEQUENTIAL = "sequential_random_order"


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
    max_seqs_per_bin: int | None = None  # the per-bin cap it obeys, as seqpack does (None: none)

    def bins_saved_by(self, packed_bins: int) -> float:
        """The share of this baseline's bins (so of its compute) a packing into `packed_bins`
        does without (0.0 for a baseline with no bins)."""
        return 1.0 - packed_bins / self.num_bins if self.num_bins else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_sample_size(sample_size: Any) -> int:
    """Return `sample_size` as an int, or raise `ConfigError` unless it is a positive integer."""
    name = option("sample_size")
    return check_int(
        name,
        sample_size,
        minimum=1,
        expected="a positive integer (sequences simulated for the sequential baseline)",
        fix=f"pass {name} 1 or more, e.g. {DEFAULT_SAMPLE_SIZE}",
    )


def sequential_description(
    sample_size: int, max_seqs_per_bin: int | None, *, several_caps: bool = False
) -> str:
    """`SEQUENTIAL_DESCRIPTION` for one report: its sample size, and the cap where there is one
    (`several_caps`: the report compares caps, each row's own)."""
    if several_caps:
        cap_clause = " or the row holds its cap's number of sequences"
    elif max_seqs_per_bin is None:
        cap_clause = ""
    else:
        cap_clause = f" or the row holds {max_seqs_per_bin:,}"
    return SEQUENTIAL_DESCRIPTION.format(sample_size=sample_size, cap_clause=cap_clause)


def next_fit_num_bins(
    lengths: Sequence[int] | np.ndarray, max_seq_len: int, max_seqs_per_bin: int | None = None
) -> int:
    """Rows used by sequential (next-fit) packing of `lengths` in the order given.

    Each sequence goes into the current row if it fits (and, with `max_seqs_per_bin`, the row
    holds fewer than that many), else it opens a new row; nothing is split. Exact, O(n) in pure
    Python (~60 ns per sequence).
    """
    array = validate_length_array(lengths, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    if cap is None:
        return _next_fit_uncapped(array, max_seq_len)
    num_bins = 0
    fill, held = max_seq_len + 1, 0  # "no open row": the first sequence always opens one
    for start in range(0, int(array.size), 1 << 20):
        for length in array[start : start + (1 << 20)].tolist():
            fill += length
            held += 1
            if fill > max_seq_len or held > cap:
                num_bins += 1
                fill, held = length, 1
    return num_bins


def _next_fit_uncapped(array: np.ndarray, max_seq_len: int) -> int:
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
    num_simulated: int = 0,
    estimated: bool = False,
    max_seqs_per_bin: int | None = None,
) -> BaselineStats:
    return BaselineStats(
        method=method,
        **fill_figures(num_bins, num_sequences, num_tokens, max_seq_len),
        num_simulated=num_simulated,
        estimated=estimated,
        max_seqs_per_bin=max_seqs_per_bin,
    )


def empty_baseline(
    max_seq_len: int, method: str = _NO_PACKING, max_seqs_per_bin: int | None = None
) -> BaselineStats:
    """A baseline with nothing to pack: every sequence is over the cap `max_seq_len`."""
    return _baseline(method, 0, 0, 0, max_seq_len, max_seqs_per_bin=max_seqs_per_bin)


def _kept_histogram(
    length_counts: Mapping[int, int], max_seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, counts) of the sequences that fit `max_seq_len`, lengths as int64."""
    lengths, counts = histogram_arrays(length_counts)
    keep = lengths <= max_seq_len
    return lengths[keep].astype(np.int64), counts[keep]


def no_packing_stats(
    length_counts: Mapping[int, int], max_seq_len: int, max_seqs_per_bin: int | None = None
) -> BaselineStats:
    """One sequence per row, padded to `max_seq_len` (lengths over the cap are left out); it
    obeys any `max_seqs_per_bin`, which it records."""
    max_seq_len = check_max_seq_len(max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    lengths, counts = _kept_histogram(length_counts, max_seq_len)
    num_sequences = int(counts.sum())
    num_tokens = int((lengths * counts).sum())
    return _baseline(
        _NO_PACKING, num_sequences, num_sequences, num_tokens, max_seq_len, max_seqs_per_bin=cap
    )


def _shuffled_sample(
    lengths: np.ndarray, counts: np.ndarray, sample_size: int, seed: int
) -> np.ndarray:
    """`min(sample_size, N)` lengths drawn without replacement from the histogram, shuffled.

    A uniformly random window of a shuffled dataset has exactly this distribution.
    """
    rng = np.random.default_rng(numpy_seed(seed))
    total = int(counts.sum())
    if total <= sample_size:
        drawn = counts
    elif total < _MARGINALS_LIMIT:
        # "marginals" draws one hypergeometric count per length: O(distinct lengths) memory.
        drawn = rng.multivariate_hypergeometric(counts, sample_size, method="marginals")
    else:
        # numpy refuses "marginals" from 1e9 sequences on: draw `sample_size` distinct
        # positions of the dataset sorted by length instead (O(sample) memory, as exact).
        positions = rng.choice(total, sample_size, replace=False)
        sample = lengths[np.searchsorted(np.cumsum(counts), positions, side="right")]
        rng.shuffle(sample)
        return sample
    sample = np.repeat(lengths, drawn)
    rng.shuffle(sample)
    return sample


def _scaled_num_bins(
    sample_bins: int,
    sample_size: int,
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    max_seqs_per_bin: int | None,
) -> int:
    """The sample's row count scaled to the dataset by N / sample (a ratio estimator).

    Never below what any packing under the same cap needs (the engine's lower bound): a small
    sample can miss the few sequences that need rows of their own.
    """
    num_sequences = int(counts.sum())
    num_bins = round(sample_bins * num_sequences / sample_size)
    bound = lower_bounds_of_lengths(lengths, counts, max_seq_len, max_seqs_per_bin)
    return max(num_bins, bound.value)


def estimate_sequential_packing(
    length_counts: Mapping[int, int],
    max_seq_len: int,
    *,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    max_seqs_per_bin: int | None = None,
) -> BaselineStats:
    """Sequential (next-fit) packing of the shuffled dataset, lengths over the cap left out,
    at most `max_seqs_per_bin` sequences per row where given (the cap seqpack packs under).

    Simulates next-fit on `min(sample_size, N)` sequences drawn without replacement from the
    histogram in random order (a uniformly random window of a shuffled dataset has exactly this
    distribution) and scales the row count by N / sample. Deterministic in (histogram,
    max_seq_len, sample_size, seed), whatever else is analysed alongside.
    """
    max_seq_len = check_max_seq_len(max_seq_len)
    sample_size = check_sample_size(sample_size)
    seed = check_required_seed(seed)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    lengths, counts = _kept_histogram(length_counts, max_seq_len)
    num_sequences = int(counts.sum())
    if num_sequences == 0:
        return empty_baseline(max_seq_len, _SEQUENTIAL, cap)
    num_tokens = int((lengths * counts).sum())
    sample = _shuffled_sample(lengths, counts, sample_size, seed)
    sample_bins = next_fit_num_bins(sample, max_seq_len, cap)
    estimated = sample.size < num_sequences
    num_bins = (
        _scaled_num_bins(sample_bins, int(sample.size), lengths, counts, max_seq_len, cap)
        if estimated
        else sample_bins
    )
    logger.debug(
        "sequential packing at max_seq_len=%d, max_seqs_per_bin=%s: %d rows on %d simulated "
        "sequences -> %d rows",
        max_seq_len,
        cap,
        sample_bins,
        sample.size,
        num_bins,
    )
    return _baseline(
        _SEQUENTIAL,
        num_bins,
        num_sequences,
        num_tokens,
        max_seq_len,
        num_simulated=int(sample.size),
        estimated=estimated,
        max_seqs_per_bin=cap,
    )
