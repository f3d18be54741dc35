"""Column generation on one histogram: the pool of templates, the restricted LP, the rounds.

The restricted LP covers every length's count with templates of the pool (`min Σ x` subject to
`A x >= counts`, x >= 0) and is solved by HiGHS through `scipy.optimize.linprog`: by the interior
point method without crossover while generating (its duals are well centred, which takes a
handful of rounds where vertex duals take dozens), and with crossover at the end, for a vertex
solution, which uses few templates (the rounding loses less). That last solve runs on the
templates the interior solution uses and the last round's new ones only (a fraction of the pool:
crossover costs several times less), and the pool keeps every template in use. A coarse level of
`seqpack_cli.packing.lp`, whose templates only start the next level, skips it (`vertex=False`):
the last interior solution's templates in use are its result.

Before the first round, the pool gets the best templates under the duals of the cheap bound (a
token worth 1 / max_seq_len of a bin, or a sequence 1 / cap): full bins, most of an optimal
solution where that bound is tight, which spares the first rounds. (Dual smoothing around that
point (Wentges) and more templates per round were measured too: no fewer rounds here.)

A round prices every template under the duals (`seqpack_cli.packing.pricing`): the best template
holding each length joins the pool where it is worth more than a bin, and Farley's bound
`sum(count_i π_i) / V` (V: the value of the best template) raises the lower bound. Pricing is
exact integer arithmetic on duals floored onto a grid, and the division is exact, so the bound is
rigorous at every round.

A free "exchange" column per pair of adjacent lengths lets a slot of the longer take the shorter
(dual-optimal inequalities: the duals then increase with the length, as an optimal dual always
can); the rounding's slot assignment (`seqpack_cli.packing.lp_rounding`) does the same with whole
bins. The right-hand side is scaled to O(1), HiGHS' tolerances being absolute: nothing here grows
with the number of sequences; a row far below the largest is scaled up to `_LEAST_RHS`, so that a
length of a few sequences beside one of millions is not lost in those tolerances. Where the vertex
LP ends within a bin or so of the bound, its duals, read as exact fractions
(`seqpack_cli.packing.pricing.certified_bound`), certify the ceiling of the LP optimum at any
count (floats are a bin off at a billion sequences).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.packing.bounds import lower_bounds_of_lengths
from seqpack_cli.packing.pricing import certified_bound, price_templates

__all__ = ["ColumnGeneration", "LPSolution", "Template"]

logger = logging.getLogger(__name__)

Template = tuple[np.ndarray, np.ndarray]  # (item indices, ascending; copies of each)

# A template joins the pool when worth more than 1 + this under the duals: the interior point
# method's duals are accurate to about 1e-8, a vertex's to about 1e-9.
_REDUCED_COST_INTERIOR = 1e-7
_REDUCED_COST_VERTEX = 1e-9
_POOL_PER_LENGTH = 1  # the pool keeps about this many templates per distinct length
_IN_USE = 1e-7  # an interior solution's template is in use above this share of the largest
_IN_USE_RESULT = 1e-4  # ... and passed on as a coarse level's result (`vertex=False`)
# The exact certificate runs where the vertex LP is within 1 bin + this share of the bound.
_CERTIFY_WITHIN = 1e-6
# The restricted LP's rows are scaled to a right-hand side of at least this (the largest: 1).
_LEAST_RHS = 1e-4
# The work model of a round, in seconds of this project's reference machine (a deterministic
# estimate from the sizes, never a clock): the interior point method per nonzero of the
# restricted LP and per 1,024 lengths (rows), and the pricing per cell of its dynamic program.
_WORK_PER_NONZERO = 8.5e-6
_WORK_PER_CELL = 0.6e-9


@dataclass
class LPSolution:
    """The LP relaxation of one histogram, as far as column generation took it.

    lengths, counts: the histogram, lengths ascending. templates: the pool (without `vertex`:
    the last interior solution's templates in use). multiplicities: bins of each template in the
    last restricted LP's vertex solution (fractional; without `vertex`, its interior one). value:
    that LP's value (>= the LP optimum, equal when `optimal`). bound: a rigorous lower bound on
    the bins of any packing (the cheap bounds included).
    """

    lengths: np.ndarray
    counts: np.ndarray
    max_seq_len: int
    cap: int | None
    templates: list[Template]
    multiplicities: np.ndarray
    value: float
    bound: int
    optimal: bool
    rounds: int
    work: float = 0.0  # the estimated work spent (`ColumnGeneration`'s model), its levels' too
    duals: np.ndarray | None = None  # the last restricted LP's duals (per length)


class ColumnGeneration:
    """The pool of templates of one histogram, its restricted LP and the pricing rounds.

    `max_rounds`, `work_budget`: the most pricing rounds, and the estimated work they and the
    final vertex solve may take (`_WORK_PER_NONZERO`, `_WORK_PER_CELL`): work limits, so the
    result does not depend on the machine's speed. `stop_gap`: stop once the restricted LP is
    within this fraction of the lower bound. `polish_rounds`: the most rounds on vertex duals
    after that, for the exact LP optimum (the interior point method's accuracy, relative, is
    not enough for the ceiling of an LP of millions of bins). `worthless_at`: a bound the caller
    has already; generating stops once the restricted LP (above the LP optimum) is at most it.
    `vertex`: solve for a vertex at the end (else the result is the last interior solution).
    `stall_gap`: stop once a round lowers the restricted LP by less than this fraction.
    `start_duals`: duals to price in the first round instead of solving the restricted LP (a
    coarser level's: the pool then starts from them rather than from the cheap bound's duals).
    """

    def __init__(
        self,
        lengths: np.ndarray,
        counts: np.ndarray,
        max_seq_len: int,
        cap: int | None,
        *,
        max_rounds: int,
        work_budget: float,
        stop_gap: float,
        polish_rounds: int = 0,
        worthless_at: int | None = None,
        vertex: bool = True,
        stall_gap: float = 0.0,
        start_duals: np.ndarray | None = None,
    ) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.max_seq_len = max_seq_len
        self.cap = cap
        self.max_rounds = max_rounds
        self.work_budget = work_budget
        self.stop_gap = stop_gap
        self.polish_rounds = polish_rounds
        self.worthless_at = worthless_at
        self.vertex = vertex
        self.stall_gap = stall_gap
        self.start_duals = start_duals
        self.templates: list[Template] = []
        self._seen: set[bytes] = set()
        self._scale = float(self.counts.max())
        self.bound = lower_bounds_of_lengths(self.lengths, self.counts, max_seq_len, cap).value

    def add(self, templates: list[Template]) -> int:
        """Add the templates not in the pool yet; returns how many were new."""
        added = 0
        for items, copies in templates:
            items, copies = items.astype(np.int64), copies.astype(np.int64)
            key = _template_key(items, copies)
            if key not in self._seen:
                self._seen.add(key)
                self.templates.append((items, copies))
                added += 1
        return added

    def run(self) -> LPSolution:
        """Generate columns until the bound meets the restricted LP, no template is worth more
        than a bin, or `max_rounds`; then solve the restricted LP for a vertex (and polish)."""
        optimal = False
        rounds = 0
        spent = 0.0
        # the last interior solution's templates in use, and those added since
        support: np.ndarray | None = None
        # the last interior solve: its pool, value, bins per template and duals
        last: tuple[list[Template], float, np.ndarray, np.ndarray] | None = None
        # the pool starts with the best templates under the duals of the cheap bound: mostly
        # full bins, the bulk of an optimal solution where that bound is tight (not where no
        # round would follow: they would only make the final solve costlier, for nothing; nor
        # where `start_duals`, closer to the optimal ones, start it)
        affordable = 2 * self._pricing_work() + 1.5 * self._solve_work() <= self.work_budget
        if self.start_duals is None and affordable:
            self.add(self._price(self._cheap_bound_duals(), -np.inf))
            spent += self._pricing_work()
        for rounds in range(1, self.max_rounds + 1):
            solve_work = self._solve_work()
            round_work = solve_work + self._pricing_work()
            if spent + round_work + 0.5 * solve_work > self.work_budget:
                rounds -= 1  # no room for this round and the final solve (with crossover)
                break
            if rounds == 1 and self.start_duals is not None:
                # the given duals stand in for this first round's solve (budgeted as a round)
                spent += self._pricing_work()
                self.add(self._price(self.start_duals, _REDUCED_COST_INTERIOR))
                continue
            spent += round_work
            value, duals, bins = self.solve(interior=True)
            stalled = last is not None and last[1] - value < self.stall_gap * value
            last = (list(self.templates), value, bins, duals)
            # an interior solution uses every template a little: "in use" is above a fraction
            in_use = bins > _IN_USE * max(float(bins.max(initial=0.0)), 1.0)
            support = np.flatnonzero(in_use)
            if self._close(value) or self._worthless(value) or stalled:
                break
            new = self._price(duals, _REDUCED_COST_INTERIOR)
            logger.debug(
                "round %d: restricted LP %.3f bins, bound %d, %d templates (+%d)",
                rounds,
                value,
                self.bound,
                len(self.templates),
                len(new),
            )
            if self._close(value):
                break
            if not new:
                optimal = True  # no template is worth more than a bin: the LP optimum
                break
            in_use = self._prune(duals, in_use)
            kept = len(self.templates)
            if not self.add(new):
                break  # all in the pool already: the duals are as accurate as they get
            support = np.r_[np.flatnonzero(in_use[:kept]), kept : len(self.templates)]
        if not self.vertex and last is not None:
            return self._interior_solution(*last, rounds, spent)
        if support is not None:
            self._restrict(support)
        value, duals, multiplicities = self.solve(interior=False)
        for _ in range(self.polish_rounds):
            if value <= self.bound:
                break  # ceil(LP optimum) <= the bound: they are equal
            new = self._price(duals, _REDUCED_COST_VERTEX)
            if not new:
                optimal = True
                break
            if not self.add(new):
                break
            value, duals, multiplicities = self.solve(interior=False)
        if value - self.bound < 1.0 + _CERTIFY_WITHIN * value:
            # within a few bins of the LP, where the floats' error decides the ceiling: the
            # vertex duals read as exact fractions (`pricing.certified_bound`)
            exact = certified_bound(self.lengths, self.counts, duals, self.max_seq_len, self.cap)
            self.bound = max(self.bound, exact)
        return LPSolution(
            self.lengths,
            self.counts,
            self.max_seq_len,
            self.cap,
            self.templates,
            multiplicities,
            value,
            self.bound,
            optimal or value <= self.bound,
            rounds,
            spent + self._solve_work(),
            duals,
        )

    def _interior_solution(
        self,
        templates: list[Template],
        value: float,
        bins: np.ndarray,
        duals: np.ndarray,
        rounds: int,
        spent: float,
    ) -> LPSolution:
        """The last interior solution as the result, its templates in use only: a coarse
        level's, whose templates only start the next level (no vertex solve, which costs as much
        as a few rounds there)."""
        in_use = np.flatnonzero(bins > _IN_USE_RESULT * max(float(bins.max(initial=0.0)), 1.0))
        return LPSolution(
            self.lengths,
            self.counts,
            self.max_seq_len,
            self.cap,
            [templates[i] for i in in_use.tolist()],
            bins[in_use],
            value,
            self.bound,
            False,
            rounds,
            spent,
            duals,
        )

    def solve(self, *, interior: bool) -> tuple[float, np.ndarray, np.ndarray]:
        """Solve the restricted LP: (value in bins, duals >= 0, bins per template).

        `interior`: the interior point method's centred solution (no crossover), else a
        vertex (crossover: far faster here than the simplex method from scratch).
        """
        from scipy.optimize import OptimizeWarning, linprog

        # rows scaled up to a right-hand side of at least _LEAST_RHS: a length of a few
        # sequences beside one of millions stays a constraint within HiGHS' tolerances (at
        # 1 / 3e7 it was "covered" by nothing, its dual 0, and the bound bins short)
        rhs = self.counts / self._scale
        row_scale = np.maximum(1.0, _LEAST_RHS / rhs)
        matrix = self._matrix(row_scale)
        num_templates = len(self.templates)
        cost = np.concatenate((np.ones(num_templates), np.zeros(matrix.shape[1] - num_templates)))
        with warnings.catch_warnings():
            # "passed to HiGHS verbatim": run_crossover is a HiGHS option that linprog forwards
            warnings.simplefilter("ignore", OptimizeWarning)
            result = linprog(
                cost,
                A_ub=-matrix,
                b_ub=-(rhs * row_scale),
                bounds=(0, None),
                method="highs-ipm",
                options={"run_crossover": "off"} if interior else {},
            )
        if result.status != 0:
            raise RuntimeError(f"the restricted LP failed: {result.message}")
        marginals = -np.asarray(result.ineqlin.marginals, dtype=np.float64)
        duals = np.maximum(marginals, 0.0) * row_scale
        multiplicities = np.asarray(result.x[:num_templates], dtype=np.float64) * self._scale
        return float(result.fun) * self._scale, duals, multiplicities

    def _cheap_bound_duals(self) -> np.ndarray:
        """The duals of the cheap bound by volume (a token is worth 1 / max_seq_len of a bin)
        or, where larger, by number (a sequence is worth 1 / cap)."""
        tokens = float(self.lengths.astype(np.float64) @ self.counts)
        if self.cap is not None and float(self.counts.sum()) * self.max_seq_len > tokens * self.cap:
            return np.full(len(self.lengths), 1.0 / self.cap)
        return self.lengths / float(self.max_seq_len)

    def _solve_work(self) -> float:
        """The estimated work of solving the restricted LP over the pool as it is."""
        nonzeros = sum(len(items) for items, _ in self.templates) + 2 * len(self.lengths)
        return nonzeros * max(1.0, len(self.lengths) / 1024) * _WORK_PER_NONZERO

    def _pricing_work(self) -> float:
        """The estimated work of a pricing round (the staircase may make it less)."""
        layers = self.cap if self.cap is not None else self.max_seq_len.bit_length()
        return layers * len(self.lengths) * (self.max_seq_len + 1) * _WORK_PER_CELL

    def _worthless(self, value: float) -> bool:
        """Whether the LP optimum (<= `value`) cannot raise the bound past `worthless_at`."""
        return self.worthless_at is not None and value <= self.worthless_at

    def _close(self, value: float) -> bool:
        return value <= self.bound * (1.0 + self.stop_gap)

    def _matrix(self, row_scale: np.ndarray) -> Any:
        """The restricted LP's matrix: a column per template, then the exchange columns; row i
        multiplied by `row_scale[i]`."""
        from scipy.sparse import csc_array

        n = len(self.lengths)
        sizes = [len(items) for items, _ in self.templates]
        exchange = len(sizes) + np.arange(n - 1)
        rows = np.concatenate([items for items, _ in self.templates] + [np.arange(n - 1)])
        rows = np.concatenate((rows, np.arange(1, n)))
        cols = np.concatenate((np.repeat(np.arange(len(sizes)), sizes), exchange, exchange))
        data = np.concatenate(
            [copies.astype(np.float64) for _, copies in self.templates]
            + [np.ones(n - 1), -np.ones(n - 1)]
        )
        return csc_array((data * row_scale[rows], (rows, cols)), shape=(n, len(sizes) + n - 1))

    def _price(self, duals: np.ndarray, reduced_cost: float) -> list[Template]:
        """Price the templates under `duals`: raise the bound (Farley) and return the best
        template holding each length, where it is worth more than 1 + `reduced_cost` bins."""
        pricing = price_templates(self.lengths, duals, self.max_seq_len, self.cap)
        if pricing.best_units > 0:
            units = pricing.quantized.units.tolist()
            numerator = sum(c * u for c, u in zip(self.counts.tolist(), units, strict=True))
            self.bound = max(self.bound, -(-numerator // pricing.best_units))  # exact ceiling
        new = []
        for template in pricing.templates:
            if (
                template is not None
                and float(duals[template[0]] @ template[1]) > 1.0 + reduced_cost
            ):
                new.append(template)
        return new

    def _restrict(self, support: np.ndarray) -> None:
        """Keep only the singletons and the templates of `support` (indices, ascending): the
        final vertex solve then runs on the interior solution's templates and the last round's
        new ones, a fraction of the pool (crossover costs a few times less)."""
        n = len(self.lengths)
        keep = np.union1d(np.arange(n), support)
        for i in np.setdiff1d(np.arange(len(self.templates)), keep).tolist():
            self._seen.discard(_template_key(*self.templates[i]))
        self.templates = [self.templates[i] for i in keep.tolist()]

    def _prune(self, duals: np.ndarray, in_use: np.ndarray) -> np.ndarray:
        """Keep the singletons (they keep the restricted LP feasible), the templates `in_use`
        (its value) and, of the others, the `_POOL_PER_LENGTH` per length worth most under
        `duals`; returns `in_use` of the templates kept."""
        n = len(self.lengths)
        spare = np.flatnonzero(~in_use[n:]) + n
        limit = _POOL_PER_LENGTH * n
        if len(spare) <= limit:
            return in_use
        worth = np.array([float(duals[self.templates[i][0]] @ self.templates[i][1]) for i in spare])
        order = spare[np.argsort(-worth, kind="stable")]
        for i in order[limit:].tolist():  # dropped: a later round may bring one back
            self._seen.discard(_template_key(*self.templates[i]))
        keep = np.sort(
            np.concatenate((np.arange(n), np.flatnonzero(in_use[n:]) + n, order[:limit]))
        )
        self.templates = [self.templates[i] for i in keep.tolist()]
        return in_use[keep]


def _template_key(items: np.ndarray, copies: np.ndarray) -> bytes:
    """The pool's key of a template, its arrays int64 already (as the pool keeps them)."""
    return items.tobytes() + b"|" + copies.tobytes()
