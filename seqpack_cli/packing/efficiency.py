"""PackingStats: one summary for either packing shape.

Per-sequence packers give bins (lists of ids); histogram packers give templates (a Counter of
length tuples). Both reduce to the same thing, a distribution of tokens per bin, and the numbers
are computed from it in one place, so the two shapes of the same packing give equal stats.

Bin fullness is tokens / max_seq_len per bin. Its percentiles use numpy's default ("linear")
definition over all bins: with the fullness values of the B bins sorted, p_q is the value at the
virtual index h = (B - 1) * q, interpolated linearly between the two neighbouring bins. The
template path evaluates the same formula on (distinct fullness, number of bins) pairs, without
expanding the bins, so it costs O(distinct templates) whatever the multiplicities.

`lower_bound_bins` is the engine's bound (`seqpack_cli.packing.bounds`) on the packed lengths:
by volume, Martello and Toth's L2, the sequences that cannot share a bin, and
ceil(sequences / cap) when the packing was made with `max_seqs_per_bin`, or the LP bound where
the engine computed it (it does where its greedy packing misses the others) and returned it with
these templates (`seqpack_cli.packing.packed.PackedTemplates`, for the same lengths, max_seq_len
and cap). Pass that cap, or the bound leaves it out.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import check_max_seq_len, check_max_seqs_per_bin
from seqpack_cli.errors import InputError, option
from seqpack_cli.packing.bounds import LowerBound, lower_bounds_of_lengths
from seqpack_cli.packing.packed import bound_of_packing
from seqpack_cli.templates import canonical_templates, packed_lengths

__all__ = ["PackingStats"]

_QUANTILES = (0.5, 0.9, 0.99)


def fill_figures(
    num_bins: int, num_sequences: int, num_tokens: int, max_seq_len: int
) -> dict[str, Any]:
    """The fields `PackingStats` and the sweep's baselines share, for rows of `max_seq_len`.

    `num_bins`, `num_sequences`, `num_tokens`, then `capacity`, `efficiency`, `padding`,
    `padding_ratio` and `avg_seqs_per_bin` derived from them (0.0 where there are no bins).
    """
    capacity = num_bins * max_seq_len
    return {
        "num_bins": num_bins,
        "num_sequences": num_sequences,
        "num_tokens": num_tokens,
        "capacity": capacity,
        "efficiency": num_tokens / capacity if capacity else 0.0,
        "padding": capacity - num_tokens,
        "padding_ratio": (capacity - num_tokens) / capacity if capacity else 0.0,
        "avg_seqs_per_bin": num_sequences / num_bins if num_bins else 0.0,
    }


def _weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """numpy's linear percentile of the multiset {values[i] repeated counts[i] times}.

    `values` ascending and distinct, `counts` positive. The k-th smallest element (0-based) is
    values[searchsorted(cumsum(counts), k, side="right")].
    """
    total = int(counts.sum())
    if total == 0:
        return 0.0
    cumulative = np.cumsum(counts)
    h = (total - 1) * q
    low = math.floor(h)
    high = min(low + 1, total - 1)
    at_low, at_high = np.searchsorted(cumulative, [low, high], side="right").tolist()
    value_low, value_high = float(values[at_low]), float(values[at_high])
    return value_low + (h - low) * (value_high - value_low)


@dataclass(frozen=True)
class PackingStats:
    """Packing quality: bins, sequences, tokens, efficiency, padding, fullness percentiles.

    `efficiency` = num_tokens / capacity (capacity = num_bins * max_seq_len) and the fullness
    percentiles are fractions in [0, 1]; `lower_bound_bins` is the strongest bound the engine
    knows on the bins any packing of these sequences needs
    (`seqpack_cli.packing.bounds.LowerBound`), at least ceil(num_tokens / max_seq_len). Empty
    input gives all zeros. Build one with `from_templates` or `from_bins`, which compute every
    field; the constructor takes the fields as they are.

    Args:
        num_bins: bins in the packing.
        num_sequences: sequences packed.
        num_tokens: tokens packed (the sum of their lengths).
        capacity: `num_bins * max_seq_len`.
        max_seq_len: the most tokens in one bin.
        efficiency: `num_tokens / capacity` (0 for no bins).
        padding: `capacity - num_tokens`.
        padding_ratio: `padding / capacity` (0 for no bins).
        avg_seqs_per_bin: `num_sequences / num_bins` (0 for no bins).
        max_seqs_in_bin: the most sequences in one bin.
        bin_fullness_p50, bin_fullness_p90, bin_fullness_p99: the median, 90th and 99th
            percentile of a bin's tokens over `max_seq_len`.
        lower_bound_bins: the lower bound on the bins (see above).
    """

    num_bins: int
    num_sequences: int
    num_tokens: int
    capacity: int
    max_seq_len: int
    efficiency: float
    padding: int
    padding_ratio: float
    avg_seqs_per_bin: float
    max_seqs_in_bin: int
    bin_fullness_p50: float
    bin_fullness_p90: float
    bin_fullness_p99: float
    lower_bound_bins: int

    @classmethod
    def from_bins(
        cls,
        bins: Iterable[Sequence[int]],
        lengths: Sequence[int],
        max_seq_len: int,
        *,
        max_seqs_per_bin: int | None = None,
    ) -> PackingStats:
        """Stats of a per-sequence packing: `bins` are lists of ids indexing `lengths`.

        Args:
            bins: the packing, each bin a sequence of ids (indices into `lengths`).
            lengths: every sequence's length (tokens), indexed by id: a flat sequence of
                positive integers.
            max_seq_len: the most tokens in one bin, as the packing was made with.
            max_seqs_per_bin: the cap the packing was made with (None, the default: none); it
                counts in the lower bound, and a bin holding more sequences is refused.

        Returns:
            The packing's `PackingStats`.

        Raises:
            InputError: for lengths that are not a flat integer sequence, an id outside
                `lengths`, a packed length that is not positive, or a bin over `max_seq_len`
                or `max_seqs_per_bin`.
            ConfigError: for a bad `max_seq_len` or `max_seqs_per_bin`.
        """
        limit = check_max_seq_len(max_seq_len)
        cap = check_max_seqs_per_bin(max_seqs_per_bin)
        bins = [list(b) for b in bins]
        length_array = np.asarray(lengths)
        if length_array.ndim != 1 or (length_array.size and length_array.dtype.kind not in "iu"):
            raise InputError(
                f"lengths is a {length_array.ndim}-d array of dtype {length_array.dtype}; "
                "expected a flat sequence of integer lengths, one per id"
            )
        sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
        ids = np.fromiter(
            itertools.chain.from_iterable(bins), dtype=np.int64, count=int(sizes.sum())
        )
        if ids.size and (ids.min() < 0 or ids.max() >= len(length_array)):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise InputError(
                f"bins name id {bad}, but lengths has {len(length_array)} entries (ids 0.."
                f"{len(length_array) - 1}); pass the lengths list the bins were packed from"
            )
        token_lengths = length_array.astype(np.int64)[ids]
        if token_lengths.size and token_lengths.min() <= 0:
            raise InputError(
                f"lengths holds {int(token_lengths.min())} for a packed id; expected positive "
                "lengths (tokens per sequence)"
            )
        # Tokens of each bin: a cumulative sum read at the bin boundaries (empty bins hold 0).
        ends = np.cumsum(sizes)
        cumulative = np.concatenate(([0], np.cumsum(token_lengths)))
        tokens = cumulative[ends] - cumulative[ends - sizes]
        return cls._from_distribution(
            tokens,
            sizes,
            np.ones_like(sizes),
            (token_lengths, np.ones_like(token_lengths)),
            limit,
            cap,
            lambda i: f"bin {i}",
        )

    @classmethod
    def from_templates(
        cls, templates: Any, max_seq_len: int, *, max_seqs_per_bin: int | None = None
    ) -> PackingStats:
        """Stats of a histogram packing, in O(distinct templates).

        Args:
            templates: the packing: a Counter of templates (tuples of lengths) or
                `(template, count)` pairs. The bound a packer returned with its templates
                (`pack_length_histogram_batched`'s `PackedTemplates.bound`) is used as
                `lower_bound_bins` where it applies to these sequences; otherwise the cheap
                bounds are computed.
            max_seq_len: the most tokens in one bin, as the packing was made with.
            max_seqs_per_bin: the cap the packing was made with (None, the default: none); it
                counts in the lower bound, and a template holding more sequences is refused.

        Returns:
            The packing's `PackingStats`.

        Raises:
            InputError: for a malformed template or one over `max_seq_len` or
                `max_seqs_per_bin`.
            ConfigError: for a bad `max_seq_len` or `max_seqs_per_bin`.
        """
        limit = check_max_seq_len(max_seq_len)
        cap = check_max_seqs_per_bin(max_seqs_per_bin)
        pairs = canonical_templates(templates)
        tokens = np.array([sum(template) for template, _ in pairs], dtype=np.int64)
        sizes = np.array([len(template) for template, _ in pairs], dtype=np.int64)
        counts = np.array([count for _, count in pairs], dtype=np.int64)
        lengths, numbers = packed_lengths(pairs)
        return cls._from_distribution(
            tokens,
            sizes,
            counts,
            (lengths, numbers),
            limit,
            cap,
            lambda i: f"template {pairs[i][0]}",
            bound_of_packing(templates, lengths, numbers, limit, cap),
        )

    @classmethod
    def _from_distribution(
        cls,
        tokens: np.ndarray,
        sizes: np.ndarray,
        counts: np.ndarray,
        packed: tuple[np.ndarray, np.ndarray],
        limit: int,
        cap: int | None,
        describe: Callable[[int], str],
        bound: LowerBound | None = None,
    ) -> PackingStats:
        """Stats of `counts[i]` bins holding `sizes[i]` sequences and `tokens[i]` tokens each;
        `packed`: (lengths, counts) of the sequences they hold, in any order; `bound`: their
        lower bound where the packer gave it (else the cheap bounds of `packed`)."""
        if tokens.size and tokens.max() > limit:
            worst = int(np.argmax(tokens))
            name = option("max_seq_len")
            raise InputError(
                f"{describe(worst)} holds {int(tokens[worst])} tokens, more than {name} "
                f"{limit}; pass the {name} the packing was made for"
            )
        if cap is not None and sizes.size and sizes.max() > cap:
            worst = int(np.argmax(sizes))
            name = option("max_seqs_per_bin")
            raise InputError(
                f"{describe(worst)} holds {int(sizes[worst])} sequences, more than {name} "
                f"{cap}; pass the {name} the packing was made for"
            )
        num_bins = int(counts.sum())
        num_sequences = int((sizes * counts).sum())
        num_tokens = int((tokens * counts).sum())
        # One representation for both paths: distinct token counts with their number of bins.
        values, inverse = np.unique(tokens, return_inverse=True)
        weights = np.bincount(inverse.ravel(), weights=counts, minlength=len(values))
        weights = weights.astype(np.int64)
        p50, p90, p99 = (_weighted_percentile(values, weights, q) / limit for q in _QUANTILES)
        if bound is None:
            bound = lower_bounds_of_lengths(*packed, limit, cap)
        return cls(
            **fill_figures(num_bins, num_sequences, num_tokens, limit),
            max_seq_len=limit,
            max_seqs_in_bin=int(sizes.max()) if sizes.size else 0,
            bin_fullness_p50=p50,
            bin_fullness_p90=p90,
            bin_fullness_p99=p99,
            lower_bound_bins=bound.value,
        )

    def to_dict(self) -> dict[str, int | float]:
        """The fields as a JSON-safe dict.

        Returns:
            `{field name: value}` for every field, in declaration order (plain ints and floats).
        """
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def __str__(self) -> str:
        return "\n".join(
            (
                "PackingStats(",
                f"  bins: {self.num_bins:,}",
                f"  sequences: {self.num_sequences:,} (avg {self.avg_seqs_per_bin:.2f}/bin)",
                f"  tokens: {self.num_tokens:,} / {self.capacity:,} capacity",
                f"  efficiency: {self.efficiency:.2%}",
                f"  padding: {self.padding:,} ({self.padding_ratio:.2%})",
                f"  fullness: p50={self.bin_fullness_p50:.1%} p90={self.bin_fullness_p90:.1%} "
                f"p99={self.bin_fullness_p99:.1%}",
                ")",
            )
        )
