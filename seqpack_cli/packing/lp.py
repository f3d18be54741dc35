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
the LP of a coarser histogram, its lengths rounded up in groups that add at most `_MID_LOSS` of
its tokens (`seqpack_cli.packing.coarsening`; recursively, each level `_LOSS_GROWTH` times
coarser), where rounds are cheaper, and starts its own pool from the templates of that solution
(a rounded-up template fits the originals; the greedy packing's templates start each level,
their shortest sequences taken out where they no longer fit). The histogram's own level prices
the coarse level's last duals, interpolated between its lengths, in its first round instead of
solving its restricted LP: on thousands of lengths that solve is the costliest step of a round,
and the coarse duals are near the optimal ones (`sft`, 2,048 tokens, at 16 per bin: 0.99 s ->
0.81 s, and 8 fewer bins).

Each level stops once the restricted LP is within a gap of the bound (tiny for small histograms:
the LP optimum; a fraction of the packer's 0.1% target for large ones; about half their rounding
loss for coarse levels, which only give the next one a start, or once their rounds stall; their
last interior solution, no vertex, is that start) or at a work limit: the levels
share one budget (`_WORK_LONGEST`, the coarser ones up to `_COARSE_SHARE` of it), work
estimated from the sizes, never a clock, so that the result is the same on every machine. On
thousands of lengths a round costs a second or more, and the histogram's own level may afford
one or none (its restricted LP then solved once, over the coarse level's templates, the greedy
packing's and the singletons): its bound would then stay the cheap one. Where the cap binds, or
the coarse level's LP shows the cheap bound far below the optimum (`_relaxation_may_raise`), a
relaxation bounds it instead (`relaxed_lp`): lengths rounded down to multiples of a few
tokens, an LP of at most ~1,024 lengths that converges in a few rounds, within a few hundredths
of a percent of the LP optimum on capped histograms.

scipy is imported inside the functions: `import seqpack_cli.packing` does not load it.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np

from seqpack_cli.packing.coarsening import fitted_templates, groups_by_loss, merge_copies
from seqpack_cli.packing.column_generation import ColumnGeneration, LPSolution, Template

__all__ = ["LPSolution", "lp_lower_bound", "solve_lp"]

logger = logging.getLogger(__name__)

_COARSEN_ABOVE = 600
_MAX_ROUNDS = 40
# The estimated work (`column_generation`'s model: seconds of the reference machine) the
# levels' rounds may take in all: _WORK_LONGEST for bins of _WORK_LONGEST_AT tokens and more,
# less for shorter bins (by the ratio to the power _WORK_EXPONENT, down to _WORK_LEAST_SHARE of
# it), whose histograms pack in less. The histogram's coarser levels may take _COARSE_SHARE of it
# (its own level, on thousands of lengths, rarely affords a round: its final solve is what it
# needs), and each coarse level passes _COARSER_SHARE of its own on to the next.
_WORK_LONGEST = 6.0
_WORK_LONGEST_AT = 8192
_WORK_LEAST_SHARE = 0.1
_WORK_EXPONENT = 1.45
_COARSE_SHARE = 0.95
_COARSER_SHARE = 0.6
_GAP_EXACT = 1e-9  # small histograms: the LP optimum (then polished on vertex duals)
_POLISH_ROUNDS = 10
_GAP_FINE = 1e-4  # large ones: well within the packer's 0.1% target
# A coarse level stops once its restricted LP is within this share of its loss above the bound
# (the level just below the histogram's; the coarser ones, whose rounds are cheap, go closer: the
# next level then starts nearer its end), or once a round gains less than _STALL_SHARE of that
# gap (on capped histograms a coarse level's rounding up keeps it well above the bound: its rounds
# then gain little). On `sft` (2,048 tokens, caps 4-16) these take ~0.3 s off a second at the
# same 0.1% target.
_GAP_MID_SHARE = 0.6
_GAP_COARSER_SHARE = 0.25
_STALL_SHARE = 0.2
# The level just below a large histogram's own: lengths rounded up in groups that add at most
# this share of the tokens (`coarsening.groups_by_loss`); each level below, _LOSS_GROWTH times
# more.
_MID_LOSS = 1e-3
_LOSS_GROWTH = 4.0
# The relaxation that bounds large capped histograms: at most this many units per bin, and
# this share of the level's work.
_RELAXED_UNITS = 1024
_RELAXED_WORK_SHARE = 0.5
# ... and it also runs where the coarse level's LP is more than this over the bound known
_RELAXED_ABOVE = 0.01


def lp_lower_bound(counts: Any, max_seq_len: int, *, max_seqs_per_bin: int | None = None) -> int:
    """The LP lower bound on the bins of any packing of `counts` ({length: count} or pairs).

    At least every cheap bound of `seqpack_cli.packing.bounds`; ceil(LP optimum) wherever
    column generation reaches the optimum (every histogram of up to 600 distinct lengths, in
    practice), else the best Farley bound it met, on the histogram or (large capped ones) on
    the relaxation of `relaxed_lp`. Always a valid bound: the pricing that proves it is
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
    *,
    effort: float = 1.0,
    polish: bool = True,
) -> LPSolution:
    """The LP relaxation of the histogram (`lengths` distinct and ascending, `counts` > 0).

    `initial`: templates to start the pool with (e.g. the greedy packing's), as (item indices,
    copies). `effort`: the share of the work budget to spend (0 < effort <= 1). `polish`: on a
    histogram small enough for the exact LP optimum, polish its vertex on vertex duals (for the
    ceiling of that optimum, the bound: up to `_POLISH_ROUNDS` more solves); without it the
    result is the first vertex, enough to round into a packing. A function of
    its arguments alone (nothing is kept between calls): the packer returns the bound with its
    templates (`seqpack_cli.packing.packed`).
    """
    share = max(_WORK_LEAST_SHARE, min(1.0, max_seq_len / _WORK_LONGEST_AT) ** _WORK_EXPONENT)
    work = _WORK_LONGEST * share * effort
    solution = _solve_level(lengths, counts, max_seq_len, cap, initial or [], work, polish=polish)
    logger.debug(
        "LP of %d lengths: %.3f bins, bound %d (%d rounds%s)",
        len(lengths),
        solution.value,
        solution.bound,
        solution.rounds,
        ", optimal" if solution.optimal else "",
    )
    return solution


def _solve_level(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    initial: list[Template],
    work: float,
    loss: float = 0.0,
    *,
    polish: bool = True,
) -> LPSolution:
    """Column generation on one level, its pool started with a template per length alone (the
    restricted LP is always feasible), `initial` and, when large, the coarser level's. `loss`:
    0 on the histogram's own level, else the share of the tokens its rounding up may add.
    `polish`: as `solve_lp`'s."""
    num_lengths = len(lengths)
    if loss > 0:  # a coarser level, its lengths rounded up: the next level's start
        gap = max(_GAP_FINE, loss * (_GAP_MID_SHARE if loss <= _MID_LOSS else _GAP_COARSER_SHARE))
    elif num_lengths <= _COARSEN_ABOVE:
        gap = _GAP_EXACT
    else:
        gap = _GAP_FINE
    polish_rounds = _POLISH_ROUNDS if gap == _GAP_EXACT and polish else 0
    solver = ColumnGeneration(
        lengths,
        counts,
        max_seq_len,
        cap,
        max_rounds=_MAX_ROUNDS,
        work_budget=work,
        stop_gap=gap,
        polish_rounds=polish_rounds,
        vertex=loss == 0,  # a coarse level's interior solution is start enough for the next
        stall_gap=gap * _STALL_SHARE if loss > 0 else 0.0,
    )
    copies = max_seq_len // solver.lengths
    if cap is not None:
        copies = np.minimum(copies, cap)
    solver.add([(np.array([i]), np.array([c])) for i, c in enumerate(copies.tolist())])
    solver.add(initial)
    if num_lengths > _COARSEN_ABOVE:
        coarse = _coarse_start(
            solver.lengths,
            solver.counts,
            max_seq_len,
            cap,
            initial,
            work * (_COARSE_SHARE if loss == 0 else _COARSER_SHARE),
            loss * _LOSS_GROWTH if loss else _MID_LOSS,
        )
        solver.work_budget = work - coarse.work  # what the coarser levels left
        solver.add(coarse.templates)
        if loss == 0:  # its first round prices the coarser level's duals instead of solving
            solver.start_duals = coarse.duals
        if loss == 0 and cap is not None and _relaxation_may_raise(solver, cap, coarse.value):
            relaxed = relaxed_lp(
                solver.lengths,
                solver.counts,
                max_seq_len,
                cap,
                work,
                start=initial + coarse.templates,
                known=solver.bound,
            )
            solver.bound = max(solver.bound, relaxed.bound)
            solver.work_budget -= relaxed.work  # out of the level's budget, like its rounds
    solution = solver.run()
    solution.work += work - solver.work_budget
    return solution


def _relaxation_may_raise(solver: ColumnGeneration, cap: int, coarse_value: float) -> bool:
    """Whether the relaxation of `relaxed_lp` is worth its rounds: where the cap bounds the
    bins at least as much as the tokens do, or where the coarse level's LP (at least the
    histogram's LP optimum) is more than `_RELAXED_ABOVE` over the bound known, more than its
    rounding and stopping explain (`chat` at 2,048 tokens and 3 per bin: 3.3% over the volume
    bound, and the LP optimum is too). Where bins are full of tokens its own rounding loss
    (about half a unit per sequence) exceeds what it could add."""
    lengths, counts = solver.lengths.tolist(), solver.counts.tolist()
    tokens = sum(length * count for length, count in zip(lengths, counts, strict=True))
    cap_binds = -(-sum(counts) // cap) >= -(-tokens // solver.max_seq_len)
    if cap_binds:
        return True
    # Its LP optimum is at most the histogram's (<= coarse_value) less the bins of tokens its
    # rounding down drops, where bins are full: a coarse level far from converged (`code`-like
    # lengths at 8,192 tokens and 16 per bin: 1.2% over the volume bound) is no sign of a gap
    # the relaxation could prove, once its own loss (0.5% there) is taken off.
    merge = _relaxation_unit(solver.max_seq_len)
    units = sum((length // merge) * count for length, count in zip(lengths, counts, strict=True))
    dropped = tokens / solver.max_seq_len - units / (solver.max_seq_len // merge)
    return coarse_value - dropped > solver.bound * (1.0 + _RELAXED_ABOVE)


def _relaxation_unit(max_seq_len: int) -> int:
    """The relaxation's unit m: the least power of two (at least 2) with at most
    `_RELAXED_UNITS` units a bin."""
    merge = 2
    while max_seq_len // merge > _RELAXED_UNITS:
        merge *= 2
    return merge


def relaxed_lp(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int,
    work: float,
    *,
    start: list[Template] | None = None,
    known: int = 0,
) -> LPSolution:
    """The LP of a relaxation, as far as its rounds took it: its `bound` bounds the histogram
    (and its `work`, the level's budget pays). The relaxation: lengths rounded down to multiples
    of a power of two m, in units of m, and a bin of floor(max_seq_len / m) units.

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
    merge = _relaxation_unit(max_seq_len)
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
    solver.add(merge_copies([(group[items], copies) for items, copies in start or []]))
    solution = solver.run()
    logger.debug(
        "relaxed LP of %d lengths (units of %d tokens): %.3f bins, bound %d (%d rounds)",
        len(units),
        merge,
        solution.value,
        solution.bound,
        solution.rounds,
    )
    return solution


def _coarse_start(
    lengths: np.ndarray,
    counts: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    initial: list[Template],
    work: float,
    loss: float,
) -> _CoarseStart:
    """The LP of a coarser histogram, as a start for this one (`_CoarseStart`).

    The coarser histogram: groups of consecutive lengths, each rounded up to its longest (a
    template of the coarse lengths fits the originals they stand for), chosen so that the tokens
    added stay under `loss` of the total (`groups_by_loss`): lengths with many sequences stay
    alone, rare ones share a group, so that the coarse LP is within about `loss` of the
    histogram's and its templates pack it nearly as well. `initial`'s templates start it (they
    fit, rounded up, where they did)."""
    group_of = groups_by_loss(lengths, counts, loss)
    longest = np.flatnonzero(np.r_[group_of[1:] != group_of[:-1], True])  # each group's longest
    merged_counts = np.add.reduceat(counts, np.r_[0, longest[:-1] + 1])
    coarse_lengths = lengths[longest]
    fitting = fitted_templates(initial, group_of, coarse_lengths, max_seq_len)
    coarse = _solve_level(coarse_lengths, merged_counts, max_seq_len, cap, fitting, work, loss)
    logger.debug(
        "coarse LP of %d lengths: %.3f bins (%d rounds)", len(longest), coarse.value, coarse.rounds
    )
    # the templates of its vertex solution: a smaller pool for the (costlier) next level
    templates = [
        (longest[items], copies)
        for (items, copies), bins in zip(coarse.templates, coarse.multiplicities, strict=True)
        if bins > 0
    ]
    duals = None
    if coarse.duals is not None:
        duals = np.interp(lengths, np.r_[0, coarse_lengths], np.r_[0.0, coarse.duals])
    return _CoarseStart(templates, coarse.work, duals, coarse.value)


class _CoarseStart(NamedTuple):
    """What a coarser level's LP hands on: the templates its solution uses (of the finer
    lengths), the work it took, its last duals spread over the finer lengths (interpolated
    between the groups' longest lengths, so they rise with the length as the coarse ones do),
    and its value (at least the finer LP's optimum: its templates fit the finer lengths)."""

    templates: list[Template]
    work: float
    duals: np.ndarray | None
    value: float
