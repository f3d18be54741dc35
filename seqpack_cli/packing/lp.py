"""The LP relaxation of packing a histogram (Gilmore and Gomory): the packer's guide and bound.

A histogram `{length: count}` is a cutting-stock instance: cover `count` copies of each length
with bins (templates) of total length <= max_seq_len (and at most `max_seqs_per_bin`
sequences). The LP relaxation, "fewest bins when a template may be used a fractional number of
times", is both the packer's guide (`seqpack_cli.packing.lp_rounding` turns its solution into
templates) and a lower bound at least as strong as the cheap ones of
`seqpack_cli.packing.bounds`. It is solved by column generation
(`seqpack_cli.packing.column_generation`).

Coarse to fine: column generation on thousands of lengths needs many rounds, each a restricted LP
over thousands of rows. A histogram of more than `_COARSEN_ABOVE` lengths therefore first solves
the LP of its lengths rounded up to multiples of 4 tokens, in units of 4 tokens (recursively),
where rounds are cheap (at most a quarter of the rows, a bin a quarter as long to price), and
starts its own pool from the templates of that solution (a rounded-up template fits the
originals).

Each level stops once the restricted LP is within a gap of the bound (tiny for small histograms:
the LP optimum; a fraction of the packer's 0.1% target for large ones; more for coarse levels,
which only give the next one a start) or at a work limit (`_WORK_LONGEST`): work estimated from
the sizes, never a clock, so that the result is the same on every machine. On thousands of
lengths with a cap a round costs a second or more, and the histogram's own level may afford one
or none (its restricted LP then solved once, over the coarse level's templates, the greedy
packing's and the singletons): its bound would then stay the cheap one. Where the cap binds
(`_cap_binds`), a relaxation bounds it instead (`relaxed_bound`): lengths rounded down to
multiples of a few tokens, an LP of at most ~1,024 lengths that converges in a few rounds, within
a few hundredths of a percent of the LP optimum on capped histograms.

scipy is imported inside the functions: `import seqpack_cli.packing` does not load it.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np

from seqpack_cli.packing.bounds import remember_lp_bound
from seqpack_cli.packing.column_generation import ColumnGeneration, LPSolution, Template

__all__ = ["LPSolution", "lp_lower_bound", "solve_lp"]

logger = logging.getLogger(__name__)

_COARSEN_ABOVE = 600
_MERGE = 4  # a coarser level rounds lengths up to multiples of this many tokens
_MAX_ROUNDS = 40
# The estimated work (`column_generation`'s model: seconds of the reference machine) each
# level's rounds may take: _WORK_LONGEST for bins of _WORK_LONGEST_AT tokens and more, less for
# shorter bins (by the square root of the ratio), whose histograms pack in less.
_WORK_LONGEST = 4.0
_WORK_LONGEST_AT = 8192
_GAP_EXACT = 1e-9  # small histograms: the LP optimum (then polished on vertex duals)
_POLISH_ROUNDS = 10
_GAP_FINE = 1e-4  # large ones: well within the packer's 0.1% target
_GAP_COARSE = 1e-3  # coarse levels: a start for the next
# The relaxation that bounds large capped histograms: at most this many units per bin, and
# this share of the level's work.
_RELAXED_UNITS = 1024
_RELAXED_WORK_SHARE = 0.5


def lp_lower_bound(counts: Any, max_seq_len: int, *, max_seqs_per_bin: int | None = None) -> int:
    """The LP lower bound on the bins of any packing of `counts` ({length: count} or pairs).

    At least every cheap bound of `seqpack_cli.packing.bounds`; ceil(LP optimum) wherever
    column generation reaches the optimum (every histogram of up to 600 distinct lengths, in
    practice), else the best Farley bound it met, on the histogram or (large capped ones) on
    the relaxation of `relaxed_bound`. Always a valid bound: the pricing that proves it is
    exact.
    """
    from seqpack_cli.checks import check_max_seqs_per_bin, validate_length_counts

    items = validate_length_counts(counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    if not items:
        return 0
    lengths = np.array([length for length, _ in reversed(items)], dtype=np.int64)
    numbers = np.array([count for _, count in reversed(items)], dtype=np.int64)
    return solve_lp(lengths, numbers, max_seq_len, cap).bound


def solve_lp(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    initial: list[Template] | None = None,
) -> LPSolution:
    """The LP relaxation of the histogram (`lengths` distinct and ascending, `counts` > 0).

    `initial`: templates to start the pool with (e.g. the greedy packing's), as (item indices,
    copies). The solution is kept for the next call with the same arguments (the solution
    depends on them all: a call never gets one started from other templates), and its bound is
    remembered (`bounds.remember_lp_bound`) for the reports of that histogram.
    """
    key = _key(lengths, counts, max_seq_len, cap, initial or [])
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    work = _WORK_LONGEST * min(1.0, max_seq_len / _WORK_LONGEST_AT) ** 0.5
    solution = _solve_level(lengths, counts, max_seq_len, cap, initial or [], work, finest=True)
    logger.debug(
        "LP of %d lengths: %.3f bins, bound %d (%d rounds%s)",
        len(lengths),
        solution.value,
        solution.bound,
        solution.rounds,
        ", optimal" if solution.optimal else "",
    )
    remember_lp_bound(lengths, counts, max_seq_len, cap, solution.bound)
    _CACHE[key] = solution
    while len(_CACHE) > _CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]
    return solution


def _solve_level(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    initial: list[Template],
    work: float,
    *,
    finest: bool,
) -> LPSolution:
    """Column generation on one level, its pool started with a template per length alone (the
    restricted LP is always feasible), `initial` and, when large, the coarser level's."""
    num_lengths = len(lengths)
    if not finest:
        gap = _GAP_COARSE  # a start for the next level is all it gives
    elif num_lengths <= _COARSEN_ABOVE:
        gap = _GAP_EXACT
    else:
        gap = _GAP_FINE
    polish = _POLISH_ROUNDS if gap == _GAP_EXACT else 0
    solver = ColumnGeneration(
        lengths,
        counts,
        max_seq_len,
        cap,
        max_rounds=_MAX_ROUNDS,
        work_budget=work,
        stop_gap=gap,
        polish_rounds=polish,
    )
    copies = max_seq_len // solver.lengths
    if cap is not None:
        copies = np.minimum(copies, cap)
    solver.add([(np.array([i]), np.array([c])) for i, c in enumerate(copies.tolist())])
    solver.add(initial)
    if num_lengths > _COARSEN_ABOVE:
        coarse = _coarse_start(solver.lengths, solver.counts, max_seq_len, cap, initial, work)
        solver.add(coarse)
        if (
            finest
            and cap is not None
            and _cap_binds(solver.lengths, solver.counts, max_seq_len, cap)
        ):
            relaxed = relaxed_bound(
                solver.lengths,
                solver.counts,
                max_seq_len,
                cap,
                work,
                start=initial + coarse,
                known=solver.bound,
            )
            solver.bound = max(solver.bound, relaxed)
    return solver.run()


def _cap_binds(lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int) -> bool:
    """Whether the cap bounds the bins at least as much as the tokens do: there the
    relaxation of `relaxed_bound` is worth its rounds; where bins are full of tokens its
    rounding loss (about half a unit per sequence) exceeds what it could add."""
    tokens = sum(
        length * count for length, count in zip(lengths.tolist(), counts.tolist(), strict=True)
    )
    return -(-int(counts.sum()) // cap) >= -(-tokens // max_seq_len)


def relaxed_bound(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int,
    work: float,
    *,
    start: list[Template] | None = None,
    known: int = 0,
) -> int:
    """A lower bound from the LP of a relaxation: lengths rounded down to multiples of a
    power of two m, in units of m, and a bin of floor(max_seq_len / m) units.

    Any packing of the histogram is one of the relaxation (floor(a / m) + floor(b / m) <=
    floor((a + b) / m)), so the relaxation's LP bound (exact Farley pricing) bounds it too. With
    at most `_RELAXED_UNITS` units per bin it has few lengths and converges in a few cheap
    rounds where the histogram's own LP, on thousands of lengths, may not converge in its work
    budget: on capped histograms it is within a few hundredths of a percent of the LP optimum.
    A sequence shorter than m becomes an item of 0 units, which still counts against the cap.
    `start`: templates of the histogram (item indices, copies) to start the relaxation's pool
    with (the coarse level's: its rounds then only close the tail), each one of the relaxation
    too. `known`: a bound already known; the relaxation gives up once its restricted LP shows
    that it cannot beat it (its own loss, about half a unit per sequence of a bin, is larger
    where the cap lets bins hold many sequences).
    """
    merge = 2
    while max_seq_len // merge > _RELAXED_UNITS:
        merge *= 2
    units, group = np.unique(np.asarray(lengths, dtype=np.int64) // merge, return_inverse=True)
    merged_counts = np.bincount(group, weights=counts).astype(np.int64)
    capacity = max_seq_len // merge
    solver = ColumnGeneration(
        units,
        merged_counts,
        capacity,
        cap,
        max_rounds=_MAX_ROUNDS,
        work_budget=work * _RELAXED_WORK_SHARE,
        stop_gap=_GAP_EXACT,
        worthless_at=known,
    )
    copies = np.minimum(capacity // np.maximum(units, 1), cap)
    solver.add([(np.array([i]), np.array([c])) for i, c in enumerate(copies.tolist())])
    solver.add(_merge_copies([(group[items], copies) for items, copies in start or []]))
    solution = solver.run()
    logger.debug(
        "relaxed LP of %d lengths (units of %d tokens): %.3f bins, bound %d (%d rounds)",
        len(units),
        merge,
        solution.value,
        solution.bound,
        solution.rounds,
    )
    return solution.bound


def _coarse_start(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    initial: list[Template],
    work: float,
) -> list[Template]:
    """The templates used by the LP of the coarser histogram: lengths rounded up to multiples
    of `_MERGE` tokens, in units of `_MERGE` (max_seq_len rounded down), so that a coarse
    template holding the longest length of each merged group fits max_seq_len. The coarse
    level prices a `_MERGE` times shorter bin and has up to that many times fewer lengths;
    `initial`'s templates start it where they still fit once rounded up."""
    units = -(-lengths // _MERGE)
    longest = np.flatnonzero(np.r_[units[1:] != units[:-1], True])  # each group's longest
    merged_counts = np.add.reduceat(counts, np.r_[0, longest[:-1] + 1])
    coarse_len = max_seq_len // _MERGE
    group_of = np.cumsum(np.r_[0, units[1:] != units[:-1]])  # length index -> group
    fitting = []
    for items, copies in initial:  # the initial templates that still fit, rounded up
        if int(units[items] @ copies) <= coarse_len:
            fitting.append((group_of[items], copies))
    coarse = _solve_level(
        units[longest], merged_counts, coarse_len, cap, _merge_copies(fitting), work, finest=False
    )
    logger.debug(
        "coarse LP of %d lengths: %.3f bins (%d rounds)", len(longest), coarse.value, coarse.rounds
    )
    # the templates of its vertex solution: a smaller pool for the (costlier) next level
    return [
        (longest[items], copies)
        for (items, copies), bins in zip(coarse.templates, coarse.multiplicities, strict=True)
        if bins > 0
    ]


def _merge_copies(templates: list[Template]) -> list[Template]:
    """Templates whose item indices may repeat (merged groups), with the copies added up."""
    merged = []
    for items, copies in templates:
        unique, inverse = np.unique(items, return_inverse=True)
        merged.append((unique, np.bincount(inverse, weights=copies).astype(np.int64)))
    return merged


# The last few solutions: the packer and the reports of one histogram share one.
_CACHE: dict[tuple[Any, ...], LPSolution] = {}
_CACHE_SIZE = 8


def _key(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    initial: list[Template],
) -> tuple[Any, ...]:
    digest = hashlib.blake2b(digest_size=16)
    for items, copies in initial:
        digest.update(np.asarray(items, dtype=np.int64).tobytes() + b"|")
        digest.update(np.asarray(copies, dtype=np.int64).tobytes() + b";")
    return (
        max_seq_len,
        cap,
        np.asarray(lengths, dtype=np.int64).tobytes(),
        np.asarray(counts, dtype=np.int64).tobytes(),
        digest.digest(),
    )
