"""Lower bounds on the number of bins a length histogram needs: the one place they are computed.

The histogram engine stops as soon as a strategy reaches `lower_bound` (nothing can do better),
and `residual_lower_bound` lets a strategy that is part-way through prove that it can no longer
beat the best packing found so far. Every figure a user sees (`PackingStats.lower_bound_bins`,
the prepared manifest, `seqpack stats`, the sweep) is `LowerBound.value` of the packed lengths,
through `lower_bounds_of_lengths`, so the reports and the engine agree on what "optimal" means.

The bounds of dual-feasible functions (`seqpack_cli.packing.dff`) see what volume, size and
number cannot (`third_plus_one`: the LP bound, in a millisecond). The LP bound
(`seqpack_cli.packing.lp`) is the strongest, and costs a linear program: the
packer computes it only where the greedy packing misses the cheap bounds, and returns it with
its templates (`seqpack_cli.packing.packed`), so that the reports of that packing show it
(`LowerBound.by_lp`) without solving the LP again. Nothing here remembers anything: a bound is a
function of its histogram alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from seqpack_cli.packing.dff import dff_lower_bound

__all__ = [
    "LowerBound",
    "length_histogram",
    "lower_bound",
    "lower_bounds",
    "lower_bounds_of_lengths",
    "residual_lower_bound",
]


@dataclass(frozen=True)
class LowerBound:
    """Lower bounds on the bins of a histogram, by kind; `value` is the one that counts.

    by_volume: ceil(total tokens / max_seq_len).
    by_size: Martello and Toth's L2: the sequences longer than M/2 (no two share a bin) plus
        the volume of the shorter ones that cannot fit beside them.
    by_number: the sequences longer than M/(k+1) divided by k, for every k (at most k of them
        share a bin), and ceil(sequences / cap) when capped: bins filled by how many
        sequences they hold rather than by their tokens.
    by_lp: the LP bound (`seqpack_cli.packing.lp`), where it was computed (else None).
    by_dff: the best bound of the dual-feasible functions of `seqpack_cli.packing.dff`, where
        it is above the three before (else None: they are among those functions).
    """

    by_volume: int
    by_size: int
    by_number: int
    by_lp: int | None = None
    by_dff: int | None = None

    @property
    def value(self) -> int:
        return max(self.by_volume, self.by_size, self.by_number, self.by_lp or 0, self.by_dff or 0)

    @property
    def is_lp(self) -> bool:
        """Whether `value` is the LP bound (computed, and at least the cheap ones)."""
        return self.by_lp is not None and self.by_lp == self.value

    def to_dict(self) -> dict[str, int]:
        """`{"volume": .., "size": .., "number": ..}`, `"dff"` where above those, and `"lp"`
        where computed: which bound binds, for a JSON report."""
        bounds = {"volume": self.by_volume, "size": self.by_size, "number": self.by_number}
        if self.by_dff is not None:
            bounds["dff"] = self.by_dff
        if self.by_lp is not None:
            bounds["lp"] = self.by_lp
        return bounds


def lower_bound(items: list[tuple[int, int]], max_seq_len: int, cap: int | None) -> int:
    """A lower bound for `items` (length, count), lengths descending and distinct."""
    return lower_bounds(items, max_seq_len, cap).value


def lower_bounds(items: list[tuple[int, int]], max_seq_len: int, cap: int | None) -> LowerBound:
    """The bounds of `LowerBound` for `items` (length, count), lengths descending, distinct."""
    if not items:
        return LowerBound(0, 0, 0)
    lengths = np.array([length for length, _ in reversed(items)], dtype=np.int64)  # ascending
    counts = np.array([count for _, count in reversed(items)], dtype=np.int64)
    return _with_dff(lengths, counts, max_seq_len, cap)


def lower_bounds_of_lengths(
    lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int | None = None
) -> LowerBound:
    """`lower_bounds` of `counts[i]` sequences of `lengths[i]` tokens, in any order.

    Lengths may repeat (their counts add up) and counts may be 0; every length must be in
    [1, max_seq_len] (callers have checked it). `cap`: `max_seqs_per_bin`, or None.
    """
    # only the lengths present: the dual-feasible functions' parameters come from the lengths
    # (a length of no sequence once chose a weaker staircase: 2 bins where 3 is the bound)
    size_array, num_array = length_histogram(lengths, counts)
    if not size_array.size:
        return LowerBound(0, 0, 0)
    return _with_dff(size_array, num_array, max_seq_len, cap)


def length_histogram(lengths: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`counts[i]` sequences of `lengths[i]` tokens (any order, lengths may repeat, counts may
    be 0) as (lengths distinct and ascending, their counts > 0), in exact int64 arithmetic."""
    size_array = np.asarray(lengths, dtype=np.int64).ravel()
    num_array = np.asarray(counts, dtype=np.int64).ravel()
    if not size_array.size:
        return size_array, num_array
    order = np.argsort(size_array, kind="stable")
    size_array, num_array = size_array[order], num_array[order]
    starts = np.flatnonzero(np.concatenate(([True], size_array[1:] != size_array[:-1])))
    num_array = np.add.reduceat(num_array, starts)
    present = num_array > 0
    return size_array[starts][present], num_array[present]


def _with_dff(
    lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int | None
) -> LowerBound:
    """Every cheap bound of `counts[i]` sequences of `lengths[i]` tokens (lengths distinct and
    ascending); the dual-feasible functions' where they beat the others."""
    bound = _capped(_bounds_of_sizes(lengths, counts, max_seq_len), counts, cap)
    by_dff = dff_lower_bound(lengths, counts, max_seq_len, cap)
    return replace(bound, by_dff=by_dff) if by_dff > bound.value else bound


def _capped(bound: LowerBound, counts: np.ndarray, cap: int | None) -> LowerBound:
    """`bound` with ceil(sequences / cap) added to the bound by number when capped."""
    if cap is None:
        return bound
    by_cap = -(-int(counts.sum()) // cap)
    return LowerBound(bound.by_volume, bound.by_size, max(bound.by_number, by_cap))


def _bounds_of_sizes(lengths: np.ndarray, counts: np.ndarray, max_seq_len: int) -> LowerBound:
    if not lengths.size:
        return LowerBound(0, 0, 0)
    tokens = lengths * counts
    num_cum = np.concatenate(([0], np.cumsum(counts)))  # sequences with index < i
    tok_cum = np.concatenate(([0], np.cumsum(tokens)))
    by_volume = -(-int(tok_cum[-1]) // max_seq_len)
    # L2(a) for a in {0} and every length <= M/2:
    #   J1: length > M - a;  J2: M/2 < length <= M - a;  J3: a <= length <= M/2
    #   L2(a) = |J1| + |J2| + max(0, ceil((sum J3 - (|J2| M - sum J2)) / M))
    alphas = np.concatenate(([0], lengths[2 * lengths <= max_seq_len]))
    half = int(np.searchsorted(lengths, max_seq_len // 2, side="right"))  # first index > M/2
    j2_end = np.searchsorted(lengths, max_seq_len - alphas, side="right")  # first > M - a
    j3_start = np.searchsorted(lengths, alphas, side="left")
    num_large = int(num_cum[-1] - num_cum[half])
    num_j2 = num_cum[j2_end] - num_cum[half]
    sum_j2 = tok_cum[j2_end] - tok_cum[half]
    sum_j3 = tok_cum[half] - tok_cum[j3_start]
    spill = sum_j3 - (num_j2 * max_seq_len - sum_j2)
    by_size = num_large + int(np.maximum(0, -(-spill // max_seq_len)).max())
    # at most k sequences longer than M/(k+1) share a bin (k = 2: two of M/3 + 1 already fill it)
    ks = np.arange(1, min(max_seq_len, 4096) + 1)
    longer = num_cum[-1] - num_cum[np.searchsorted(lengths, max_seq_len // (ks + 1), side="right")]
    return LowerBound(by_volume, by_size, int((-(-longer // ks)).max()))


def residual_lower_bound(sizes: list[int], nums: list[int], max_seq_len: int) -> int:
    """A lower bound on the final bins of a packing that is part-way through.

    `sizes[i]`, `nums[i]`: `nums[i]` items of `sizes[i]` tokens, in any order, repeats allowed;
    the open bins are given as items (the tokens already in one bin) and the sequences not
    placed yet as themselves. However the rest is placed, the final packing is a packing of
    that instance (each open bin taken whole), so a bound on the instance (uncapped: a
    relaxation when a cap applies) bounds the final number of bins from below.
    """
    if not sizes:
        return 0
    return lower_bounds_of_lengths(
        np.array(sizes, dtype=np.int64), np.array(nums, dtype=np.int64), max_seq_len
    ).value
