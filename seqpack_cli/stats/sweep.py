"""Which `max_seq_len`, which cap? seqpack against no seqpack at each candidate, from the length
histogram.

`sweep_max_seq_len` packs the histogram at every candidate `max_seq_len` and every per-bin cap
`max_seqs_per_bin` (every pair) with seqpack's histogram packer and puts the engine's lower
bound and both baselines (`seqpack_cli.stats.baselines`: no packing, sequential next-fit, under
the same cap) next to it, on the same sequences: those longer than a candidate are counted as
dropped there and left out of all three. Each row also says what its cap costs (its bins against
the uncapped packing's) and what it buys (sequences per bin, their largest number, and the
attention per bin). Everything works from the histogram, so the cost does not grow with the
number of sequences.

`seqpack stats --max-seq-len ...` is this sweep (`seqpack_cli.stats.describe`); a single packing
is described by `seqpack_cli.stats.profile`, the length summary and chart buckets come from
`seqpack_cli.stats.distribution`.

Each row also says what the cap costs (`seqpack_cli.stats.distribution.CapCost`): the share of
sequences over it, the tokens lost if they are dropped and cut if they are truncated (counts
and shares of all tokens), and the attention of the packed sequences against padded rows. A
handful of sequences over the cap can hold a large share of the tokens: that trade-off is what
picking `max_seq_len` is about.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqpack_cli.checks import check_max_seq_len, check_max_seqs_per_bin
from seqpack_cli.errors import ConfigError, option
from seqpack_cli.packing.bounds import LowerBound
from seqpack_cli.packing.efficiency import PackingStats
from seqpack_cli.packing.histogram import BinTemplate, pack_length_histogram_batched
from seqpack_cli.packing.packed import bound_of_packing
from seqpack_cli.progress import ProgressCallback
from seqpack_cli.seeding import check_required_seed
from seqpack_cli.stats.baselines import (
    DEFAULT_SAMPLE_SIZE,
    BaselineStats,
    check_sample_size,
    empty_baseline,
    estimate_sequential_packing,
    no_packing_stats,
)
from seqpack_cli.stats.distribution import (
    Bucket,
    CapCost,
    LengthSummary,
    bucket_lengths,
    cap_costs_of_arrays,
    histogram_arrays,
    power_of_two_edges,
    require_sequences,
    seqs_per_bin_buckets,
    summarize_lengths,
)

__all__ = [
    "SWEEP_PACKER",
    "SweepResult",
    "SweepRow",
    "check_candidates",
    "check_caps",
    "sweep_max_seq_len",
]

_PROGRESS_STEP = "sweep max_seq_len"
# The share of the LP's work budget each row's packing spends (`pack_length_histogram_batched`'s
# `lp_effort`): a sweep packs a histogram per candidate, and compares candidates whose
# efficiencies differ by far more than the hundredths of a percent the full budget adds (a
# quarter saves another quarter of the time, but costs up to 0.65% more bins at 8 per bin).
SWEEP_LP_EFFORT = 0.5
SWEEP_PACKER = f"pack_length_histogram_batched(lp_effort={SWEEP_LP_EFFORT})"
"""The packer every row of a sweep is packed with, as the report names it."""


@dataclass(frozen=True)
class SweepRow:
    """seqpack and both baselines at one `max_seq_len` and one `max_seqs_per_bin` (the same cap
    for all three), and what that `max_seq_len` costs (`cost`)."""

    max_seq_len: int
    max_seqs_per_bin: int | None  # the per-bin sequence cap of all three packings (None: none)
    num_over_cap: int  # sequences longer than max_seq_len: dropped, not packed
    num_tokens_over_cap: int
    packed: PackingStats
    lower_bound: LowerBound  # packed.lower_bound_bins is its value; by kind for --json
    no_packing: BaselineStats
    sequential: BaselineStats
    cost: CapCost  # tokens dropped or truncated, attention against padded rows
    uncapped_bins: int  # seqpack's bins at this max_seq_len with no cap: what the cap costs
    seqs_per_bin: list[Bucket]  # seqpack's bins per number of sequences, even-width buckets
    attention_max_bin: int  # the largest sum of length**2 in one of seqpack's bins
    # seqpack's packing itself, for the plans a run would deal from it (`rank_balance`)
    templates: Counter[BinTemplate] = field(default_factory=Counter, repr=False, compare=False)

    @property
    def bins_saved_vs_sequential(self) -> float:
        """Fraction of sequential packing's bins (so of its compute) that seqpack saves."""
        return self.sequential.bins_saved_by(self.packed.num_bins)

    @property
    def bins_vs_uncapped(self) -> float:
        """Extra bins the cap costs: seqpack's bins over its uncapped bins, minus 1."""
        return self.packed.num_bins / self.uncapped_bins - 1.0 if self.uncapped_bins else 0.0

    @property
    def attention_per_bin(self) -> float:
        """The mean sum of length**2 per seqpack bin (the total is the same at every cap)."""
        bins = self.packed.num_bins
        return self.cost.attention_packed / bins if bins else 0.0

    @property
    def attention_per_bin_vs_dense(self) -> float:
        """`attention_per_bin` over a dense row's attention, `max_seq_len**2`."""
        return self.attention_per_bin / (self.max_seq_len * self.max_seq_len)

    @property
    def attention_max_bin_vs_dense(self) -> float:
        """`attention_max_bin` over a dense row's attention, `max_seq_len**2`."""
        return self.attention_max_bin / (self.max_seq_len * self.max_seq_len)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_seq_len": self.max_seq_len,
            "max_seqs_per_bin": self.max_seqs_per_bin,
            "num_over_cap": self.num_over_cap,
            "num_tokens_over_cap": self.num_tokens_over_cap,
            "share_over_cap": self.cost.share_over_cap,
            "share_tokens_over_cap": self.cost.share_tokens_over_cap,
            "num_tokens_truncated": self.cost.num_tokens_truncated,
            "share_tokens_truncated": self.cost.share_tokens_truncated,
            "num_pieces_if_split": self.cost.num_pieces_if_split,
            "attention": {
                "packed": self.cost.attention_packed,
                "padded": self.cost.attention_padded,
                "packed_vs_padded": self.cost.attention_vs_padded,
                "per_bin_mean": self.attention_per_bin,
                "per_bin_max": self.attention_max_bin,
                "per_bin_max_vs_dense": self.attention_max_bin_vs_dense,
            },
            "seqpack": self.packed.to_dict(),
            "uncapped_bins": self.uncapped_bins,
            "bins_vs_uncapped": self.bins_vs_uncapped,
            "seqs_per_bin": [bucket.to_dict() for bucket in self.seqs_per_bin],
            "lower_bound_by": self.lower_bound.to_dict(),
            "no_packing": self.no_packing.to_dict(),
            "sequential": self.sequential.to_dict(),
            "bins_saved_vs_sequential": self.bins_saved_vs_sequential,
        }


@dataclass(frozen=True)
class SweepResult:
    """The answer to "which max_seq_len, which cap?": one row per (max_seq_len, cap), by
    max_seq_len ascending, then cap ascending (no cap last)."""

    lengths: LengthSummary
    rows: list[SweepRow]
    length_buckets: list[Bucket]
    sample_size: int
    seed: int
    max_seqs_per_bin: tuple[int | None, ...]  # the caps compared, ascending, None (no cap) last

    @property
    def is_capped(self) -> bool:
        """Whether any row packs under a per-bin sequence cap."""
        return any(cap is not None for cap in self.max_seqs_per_bin)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lengths": self.lengths.to_dict(),
            "length_histogram": [bucket.to_dict() for bucket in self.length_buckets],
            "sample_size": self.sample_size,
            "seed": self.seed,
            "max_seqs_per_bin": list(self.max_seqs_per_bin),
            "packer": SWEEP_PACKER,
            "rows": [row.to_dict() for row in self.rows],
        }


def check_candidates(max_seq_lens: Iterable[Any]) -> list[int]:
    """The candidate `max_seq_len` values sorted and unique, or `ConfigError` for a bad value
    or for none at all."""
    candidates = sorted({check_max_seq_len(value) for value in max_seq_lens})
    if not candidates:
        name = option("max_seq_len", python="max_seq_lens")
        raise ConfigError(
            f"{name} is empty; expected at least one context length to compare, e.g. 2048"
        )
    return candidates


def check_caps(max_seqs_per_bin: Any) -> tuple[int | None, ...]:
    """The caps to compare, ascending with None (no cap) last, unique: one cap or None, or an
    iterable of them; `ConfigError` for a bad value or for none at all."""
    values = (
        [max_seqs_per_bin]
        if max_seqs_per_bin is None or isinstance(max_seqs_per_bin, int | str)
        else list(max_seqs_per_bin)
    )
    caps = {check_max_seqs_per_bin(value) for value in values}
    if not caps:
        name = option("max_seqs_per_bin")
        raise ConfigError(f"{name} is empty; expected caps to compare, e.g. 8, or None for none")
    return (*sorted(cap for cap in caps if cap is not None), *([None] if None in caps else []))


@dataclass(frozen=True)
class _SweepOptions:
    """The baseline options every row of one sweep shares."""

    sample_size: int
    seed: int


def _pack(kept: dict[int, int], max_seq_len: int, cap: int | None) -> Counter[BinTemplate]:
    return pack_length_histogram_batched(
        kept, max_seq_len, max_seqs_per_bin=cap, lp_effort=SWEEP_LP_EFFORT
    )


def _seqs_per_bin(templates: Counter[BinTemplate]) -> tuple[list[Bucket], int]:
    """Bins per number of sequences (even-width buckets) and the largest sum of length**2 in
    one bin, from the templates."""
    sizes = np.fromiter((len(t) for t in templates), dtype=np.int64, count=len(templates))
    weights = np.fromiter(templates.values(), dtype=np.int64, count=len(templates))
    attention = max((sum(length * length for length in t) for t in templates), default=0)
    return seqs_per_bin_buckets(sizes, weights), attention


def _sweep_rows(
    lengths: np.ndarray,
    counts: np.ndarray,
    cost: CapCost,
    caps: tuple[int | None, ...],
    options: _SweepOptions,
) -> list[SweepRow]:
    """seqpack, its lower bound and both baselines on the sequences that fit `cost.max_seq_len`,
    at each cap; the baselines obey the same cap as seqpack."""
    max_seq_len = cost.max_seq_len
    over = lengths > max_seq_len
    kept_lengths, kept_counts = lengths[~over].astype(np.int64), counts[~over]
    kept = dict(zip(kept_lengths.tolist(), kept_counts.tolist(), strict=True))
    packings = {cap: _pack(kept, max_seq_len, cap) for cap in caps}
    # The reference a cap is weighed against: the same packer with no cap.
    uncapped = packings[None] if None in packings else _pack(kept, max_seq_len, None)
    rows = []
    for cap, templates in packings.items():
        if kept:
            no_packing = no_packing_stats(kept, max_seq_len, cap)
            sequential = estimate_sequential_packing(
                kept,
                max_seq_len,
                sample_size=options.sample_size,
                seed=options.seed,
                max_seqs_per_bin=cap,
            )
        else:  # every sequence is over this max_seq_len: nothing to pack, by any method
            no_packing = empty_baseline(max_seq_len, max_seqs_per_bin=cap)
            sequential = empty_baseline(max_seq_len, "sequential_random_order", cap)
        buckets, attention_max_bin = _seqs_per_bin(templates)
        rows.append(
            SweepRow(
                max_seq_len=max_seq_len,
                max_seqs_per_bin=cap,
                num_over_cap=cost.num_over_cap,
                num_tokens_over_cap=cost.num_tokens_over_cap,
                packed=PackingStats.from_templates(templates, max_seq_len, max_seqs_per_bin=cap),
                lower_bound=bound_of_packing(
                    templates, kept_lengths, kept_counts, max_seq_len, cap
                ),
                no_packing=no_packing,
                sequential=sequential,
                cost=cost,
                uncapped_bins=sum(uncapped.values()),
                seqs_per_bin=buckets,
                attention_max_bin=attention_max_bin,
                templates=templates,
            )
        )
    return rows


def sweep_max_seq_len(
    length_counts: Mapping[int, int],
    max_seq_lens: Iterable[int],
    *,
    max_seqs_per_bin: int | Iterable[int | None] | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    progress: ProgressCallback | None = None,
) -> SweepResult:
    """seqpack's packing and both baselines at each candidate `max_seq_len` (sorted, unique)
    and each cap `max_seqs_per_bin` (one, None for none, or several to compare: every pair).

    Sequences longer than a candidate are counted as dropped at that candidate and the rest are
    packed, by seqpack's histogram packer and by both baselines under the same cap; each row's
    `cost` says what dropping (or truncating) them costs in tokens, and the attention of the
    packed sequences against padded rows; `uncapped_bins` what the cap costs in bins.
    """
    candidates = check_candidates(max_seq_lens)
    caps = check_caps(max_seqs_per_bin)
    options = _SweepOptions(check_sample_size(sample_size), check_required_seed(seed))
    lengths, counts = histogram_arrays(length_counts)
    require_sequences(lengths)
    rows: list[SweepRow] = []
    for done, cost in enumerate(cap_costs_of_arrays(lengths, counts, candidates)):
        if progress is not None:
            progress(_PROGRESS_STEP, done, len(candidates))
        rows.extend(_sweep_rows(lengths, counts, cost, caps, options))
    if progress is not None:
        progress(_PROGRESS_STEP, len(candidates), len(candidates))
    histogram = dict(zip(lengths.tolist(), counts.tolist(), strict=True))
    return SweepResult(
        lengths=summarize_lengths(histogram),
        rows=rows,
        length_buckets=bucket_lengths(
            histogram, power_of_two_edges(int(lengths[-1]), int(lengths[0]))
        ),
        sample_size=options.sample_size,
        seed=options.seed,
        max_seqs_per_bin=caps,
    )
