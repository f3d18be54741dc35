"""Lower bounds from dual-feasible functions: cheap bounds that see what volume cannot.

A function f on lengths is *dual feasible* for bins of `max_seq_len` tokens when no bin's
sequences weigh more than F = f(max_seq_len) in all: then any packing needs at least
ceil(sum count * f(length) / F) bins (Fekete and Schepers, 2001; Carlier, Clautiaux and
Moukrim, 2007). Each bound here costs O(distinct lengths) or O(log distinct lengths), in exact
integer arithmetic, for a small set of parameters derived from the lengths present:

- Fekete and Schepers' u^(k) (k = 1.._MAX_K): a length is rounded down to a multiple of
  M/(k+1) (kept where it is one), so that k+1 sequences of just over M/(k+1) weigh more than
  the bin while at most k of them fit.
- Two-level staircases: the sequences of at least `big` tokens weigh `weight` each, those of at
  least `mid` tokens (and under `big`) weigh 1, the others 0. F is the heaviest bin those weights
  allow, found by enumerating how many of each level fit (`big` and `mid` are the lightest of
  their levels; with a cap, at most `cap` of them): a bin's real sequences are at least that
  long, so no bin can weigh more, whatever the rest of the histogram. `big` is the shortest
  length over M/(k+1) (at most k share a bin), `mid` the shortest over (M - i*big)/(j+1) (at
  most j, 0 included, fit beside i of them). On `third_plus_one` at 4,096 tokens (60% of the
  sequences of 1,366 tokens, two to a bin) this is what the LP sees: those of 1,365 tokens
  fit beside one of them but not two, so 2 for each of 1,366, 1 for each of 1,365, 4 in a bin
  (the LP bound, 0.038% above the bound by number, in about a millisecond).
"""

from __future__ import annotations

import numpy as np

__all__ = ["dff_lower_bound"]

_MAX_K = 16  # u^(k) and the staircases' `big`: lengths over M/(k+1), k up to this
_MAX_MIDS = 4  # a staircase's `mid`: at most j fit beside i bigs, j up to this
_MAX_WEIGHT = 6  # a big sequence weighs 1 to this many mid ones


def dff_lower_bound(
    lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int | None
) -> int:
    """The best bound of the dual-feasible functions above on `counts[i]` sequences of
    `lengths[i]` tokens (lengths distinct and ascending, all in [0, max_seq_len], counts >= 0)."""
    if not lengths.size:
        return 0
    return max(
        _best_u_k(lengths, counts, max_seq_len), _best_staircase(lengths, counts, max_seq_len, cap)
    )


def _weighted_total(counts: np.ndarray, weights: np.ndarray) -> int:
    """sum(counts * weights) exactly: in int64 where it cannot overflow, else in Python ints."""
    if int(counts.sum()) * int(weights.max(initial=0)) < 2**62:
        return int(np.dot(counts, weights))
    return sum(int(c) * int(w) for c, w in zip(counts.tolist(), weights.tolist(), strict=True))


def _best_u_k(lengths: np.ndarray, counts: np.ndarray, max_seq_len: int) -> int:
    """max over k of ceil(sum count * u^(k)(length) / u^(k)(M)), scaled by k*M to integers:
    u^(k)(l) = k*l where (k+1)*l is a multiple of M, else M * floor((k+1)*l / M)."""
    best = 0
    for k in range(1, min(_MAX_K, max_seq_len) + 1):
        scaled = (k + 1) * lengths
        weights = np.where(
            scaled % max_seq_len == 0, k * lengths, max_seq_len * (scaled // max_seq_len)
        )
        best = max(best, -(-_weighted_total(counts, weights) // (k * max_seq_len)))
    return best


def _best_staircase(
    lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int | None
) -> int:
    """The best two-level staircase bound (module docstring) over its derived parameters, all
    the (i, j, weight) of one `big` at once."""
    above = np.concatenate((np.cumsum(counts[::-1])[::-1], [0]))  # sequences at index >= i
    # exact numerators: in Python ints where int64 could overflow (1e18 sequences)
    numerator_type = object if int(above[0]) * _MAX_WEIGHT >= 2**62 else np.int64
    limit = max_seq_len if cap is None else cap  # sequences in a bin
    weights = np.arange(1, _MAX_WEIGHT + 1)
    # lengths of 0 (`lp.relaxed_lp`'s units: sequences shorter than one) always weigh 0
    first_positive = int(np.searchsorted(lengths, 0, side="right"))
    best = 0
    for k in range(1, min(_MAX_K, max_seq_len) + 1):
        # a length l is over a/b (b > 0) exactly when l > floor(a/b)
        big_at = int(np.searchsorted(lengths, max_seq_len // (k + 1), side="right"))
        if big_at == len(lengths):
            continue
        big, num_big = int(lengths[big_at]), above[big_at]
        beside = np.arange(1, k + 1)[:, None]  # i bigs ...
        fit = np.arange(0, _MAX_MIDS + 1)[None, :]  # ... and at most j mids beside them
        mid_at = np.searchsorted(lengths, (max_seq_len - beside * big) // (fit + 1), side="right")
        mid_at = np.unique(np.maximum(mid_at, first_positive))
        mid_at = mid_at[mid_at < big_at]  # no length in between: the bound by number
        if not mid_at.size:
            continue
        mids = lengths[mid_at][:, None]
        num_mids = (above[mid_at] - num_big).astype(numerator_type)
        # the heaviest bin: every number of bigs that fits, then as many mids as fit beside them
        num_bigs = np.arange(0, min(max_seq_len // big, limit) + 1)[None, :]
        mids_beside = np.minimum((max_seq_len - num_bigs * big) // mids, limit - num_bigs)
        heaviest = (num_bigs[:, :, None] * weights + mids_beside[:, :, None]).max(axis=1)
        totals = weights.astype(numerator_type) * num_big + num_mids[:, None]
        best = max(best, int((-(-totals // heaviest)).max()))
    return best
