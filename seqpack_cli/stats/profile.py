"""One packing described for a person: what `seqpack stats PREPARED_DIR` shows.

`profile_packing` turns a packing (a length histogram and its bin templates, e.g. a prepared
directory's counts.json and templates.json) into a `PackingProfile`: the `PackingStats`, the
engine's lower bound, both baselines (`seqpack_cli.stats.baselines`), the length summary and the
chart data (`seqpack_cli.stats.distribution`). `seqpack_cli.stats.describe` builds the
`--json` document from it; `seqpack_cli.stats.render` (`terminal`, `html`) draws it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int, check_max_seq_len, check_max_seqs_per_bin
from seqpack_cli.errors import option
from seqpack_cli.packing.bounds import LowerBound
from seqpack_cli.packing.efficiency import PackingStats
from seqpack_cli.packing.histogram import BinTemplate
from seqpack_cli.packing.lp import lp_lower_bound
from seqpack_cli.packing.packed import bound_of_packing
from seqpack_cli.stats.baselines import (
    DEFAULT_SAMPLE_SIZE,
    BaselineStats,
    estimate_sequential_packing,
    no_packing_stats,
)
from seqpack_cli.stats.distribution import (
    Bucket,
    LengthSummary,
    bucket_lengths,
    linear_edges,
    seqs_per_bin_buckets,
    summarize_lengths,
)
from seqpack_cli.templates import packed_lengths

__all__ = ["PackingProfile", "check_top", "profile_packing"]

# Bin fullness buckets, in percent of max_seq_len filled: coarse where few bins fall, fine near
# 100% where a good packing puts nearly all of them, so the chart separates "good" from "perfect".
_FULLNESS_EDGES_PERCENT: tuple[int, ...] = (0, 50, 75, 90, 95, 99, 100)


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
    seqs_per_bin_buckets: list[Bucket]  # bins per number of sequences, even-width buckets
    top_templates: list[tuple[BinTemplate, int]]  # most common first, ties by template
    num_templates: int
    max_seqs_per_bin: int | None = None  # the cap it was packed with; the baselines obey it
    # the packing itself, for the plans a run would deal from it (`rank_balance`)
    templates: dict[BinTemplate, int] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_seq_len": self.max_seq_len,
            "max_seqs_per_bin": self.max_seqs_per_bin,
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


def check_top(top: Any) -> int:
    """Return `top` (templates listed) as an int, or raise `ConfigError` unless it is >= 0."""
    name = option("top")
    return check_int(
        name,
        top,
        minimum=0,
        expected="a non-negative integer (the number of templates listed)",
        fix=f"pass {name} 0 to list none",
    )


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


def _ranked(pairs: list[tuple[BinTemplate, int]]) -> list[tuple[BinTemplate, int]]:
    """Most common first; ties broken by the template itself so the listing is deterministic."""
    return sorted(pairs, key=lambda pair: (-pair[1], tuple(-x for x in pair[0])))


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


def _packing_bound(
    templates: Any,
    pairs: list[tuple[BinTemplate, int]],
    num_bins: int,
    max_seq_len: int,
    cap: int | None,
) -> LowerBound:
    """The lower bound on the packed lengths: the one the packer returned with `templates`
    where it did; else, where the packing misses the cheap bounds, the LP bound too."""
    lengths, counts = packed_lengths(pairs)
    bound = bound_of_packing(templates, lengths, counts, max_seq_len, cap)
    if bound.by_lp is None and num_bins > bound.value:
        distinct, inverse = np.unique(lengths, return_inverse=True)
        totals = np.zeros(len(distinct), dtype=np.int64)
        np.add.at(totals, inverse, counts)
        histogram = dict(zip(distinct.tolist(), totals.tolist(), strict=True))
        by_lp = lp_lower_bound(histogram, max_seq_len, max_seqs_per_bin=cap)
        bound = dataclasses.replace(bound, by_lp=by_lp)
    return bound


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
    `config.max_seqs_per_bin`); it counts in the lower bound, and the sequential baseline obeys
    it too.
    """
    max_seq_len = check_max_seq_len(max_seq_len)
    max_seqs_per_bin = check_max_seqs_per_bin(max_seqs_per_bin)
    top = check_top(top)
    pairs, sums, sizes, multiplicities = _template_arrays(templates)
    stats = PackingStats.from_templates(dict(pairs), max_seq_len, max_seqs_per_bin=max_seqs_per_bin)
    bound = _packing_bound(templates, pairs, stats.num_bins, max_seq_len, max_seqs_per_bin)
    if bound.value != stats.lower_bound_bins:  # the LP bound, computed after the stats
        stats = dataclasses.replace(stats, lower_bound_bins=bound.value)
    return PackingProfile(
        max_seq_len=max_seq_len,
        stats=stats,
        lower_bound=bound,
        lengths=summarize_lengths(length_counts),
        no_packing=no_packing_stats(length_counts, max_seq_len, max_seqs_per_bin),
        sequential=estimate_sequential_packing(
            length_counts,
            max_seq_len,
            sample_size=sample_size,
            seed=seed,
            max_seqs_per_bin=max_seqs_per_bin,
        ),
        length_buckets=bucket_lengths(length_counts, linear_edges(max_seq_len)),
        fullness_buckets=_fullness_buckets(sums, multiplicities, max_seq_len),
        seqs_per_bin_buckets=seqs_per_bin_buckets(sizes, multiplicities),
        top_templates=_ranked(pairs)[:top],
        num_templates=len(pairs),
        max_seqs_per_bin=max_seqs_per_bin,
        templates=dict(pairs),
    )
