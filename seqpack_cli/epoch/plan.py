"""Epoch plans: the concrete bins of one epoch, computed on demand (DESIGN.md decision 3).

An `EpochPlan` is a pure function of (templates, pools, seed). Nothing of the size of the
pools or of the number of bins is ever built, so pools may be memory-mapped files far larger
than RAM; memory is O(distinct templates + distinct lengths).

How bin k of rank r is found:

1. Canonical order. Templates are sorted descending; template t occupies the canonical bins
   `[bin_start[t], bin_start[t] + multiplicity[t])`, so canonical bin j is occurrence
   `o = j - bin_start[t]` of template t. For each length L the templates consume the positions
   `0, 1, ...` of pool L in canonical order: if t holds `m` slots of length L, slot `s` of them
   (counting within the template) in occurrence o takes pool position `base[t, L] + o*m + s`,
   with `base[t, L]` the number of L-slots of all earlier templates. Every position of every pool
   is used exactly once per epoch, and bin j costs O(template size) to compute
   (`seqpack_cli.epoch.tables`).
2. Sharding, exactly as torch's `DistributedSampler`: rank r takes the global order positions
   `g = r, r + world_size, r + 2*world_size, ...`; `len(plan)` is `ceil(B / world_size)` (the
   global order is padded by wrapping around: position g >= B means g mod B) or, with
   `drop_last=True`, `floor(B / world_size)` (the tail is dropped; the shards are disjoint).
3. With a seed, global position g visits canonical bin `order[g]`, `order` a FeistelPermutation
   of `[0, B)` seeded by `seed_from_components(seed, 0)`, so consecutive bins are not runs of one
   template; and pool position p of length L holds the id `pool_L[perm_L[p]]`, `perm_L` a
   FeistelPermutation seeded by `seed_from_components(seed, L)` (`seqpack_cli.epoch.pools`). A
   new seed gives a new order and new pairings from the same templates. Without a seed both are
   the identity: the canonical order, deterministic. A pool given as a `ConcatPool` (a slot
   length's exact-length pools, under a length multiple) is its parts one after the other:
   position p of it is read from the part it falls in, through that part's permutation,
   seeded by its exact length (`seqpack_cli.epoch.tables`).

Bins are computed a batch at a time, in one vectorised pass of 60-90 ns per id on one core
(`seqpack_cli.epoch.batches`); Python lists cost as much again. `bin_arrays` skips the lists:
flat ids and offsets, ~1.7x faster. How big a batch is, and the other trade-offs of speed
against memory, are an `EpochTuning` (`seqpack_cli.epoch.tuning`): they never change a bin.
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.epoch.batches import BatchDrawer
from seqpack_cli.epoch.cursor import EpochCursor, Stream
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW, BalancedDeal, StridedDeal
from seqpack_cli.epoch.permutations import FeistelPermutation
from seqpack_cli.epoch.pools import IdPools
from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.epoch.tables import TemplateTables, ids_needed
from seqpack_cli.epoch.tuning import EpochTuning
from seqpack_cli.errors import ConfigError
from seqpack_cli.seeding import check_seed, seed_from_components
from seqpack_cli.templates import Template, canonical_templates

__all__ = [
    "BALANCES",
    "EpochPlan",
    "check_cost_per_token",
    "materialize_epoch",
]

logger = logging.getLogger(__name__)

# Seed component that stands for the bin order; lengths are >= 1, so it never collides with
# the (seed, length) seeds of the pools.
_ORDER_COMPONENT = 0

BALANCES = (None, "cost")
"""The values of `EpochPlan(balance=...)`: None (the strided order of `DistributedSampler`) or
"cost" (each step's bins dealt so that the ranks' attention costs are equal)."""


def _rank_options(rank: Any, world_size: Any) -> tuple[int, int]:
    """(rank, world_size) as ints, or `ConfigError` unless 0 <= rank < world_size."""
    world_size = check_int(
        "world_size",
        world_size,
        minimum=1,
        fix="pass the number of data-parallel ranks (1 without data parallelism)",
    )
    rank = check_int(
        "rank",
        rank,
        minimum=0,
        maximum=world_size - 1,
        expected=f"an integer from 0 to {world_size - 1} (world_size is {world_size})",
        fix="pass this process's data-parallel rank, e.g. torch.distributed.get_rank()",
    )
    return rank, world_size


class EpochPlan:
    """The bins of one epoch (of one rank), computed on demand; see the module docstring.

    Steps (`seqpack_cli.epoch.dealing`): a step is `world_size x rows_per_rank` bins, the rows
    every rank trains on at once; every rank gets `num_steps` steps, and step s of this rank is
    its bins `s*B .. s*B + B - 1` (`plan.step(s)`).

    `plan[k]` is the list of ids of this rank's k-th bin, `plan.lengths(k)` its template;
    `iter(plan)` / `plan.iter(start)` yield the bins in order (resume at any bin);
    `plan.bins(start, stop)` computes a batch at once, and `plan.bin_arrays(start, stop)` the
    same as flat int64 arrays (ids, CSR offsets). Bins are computed in batches of up to 2**19
    ids: an iteration holds 35-50 MiB of work arrays, whatever the size of the epoch; the plan
    itself holds its tables and a copy of the smallest pools (at most 8 MiB).

    Args:
        templates: a `Counter[BinTemplate]` or (template, multiplicity) pairs.
        pools: length -> 1-d integer array of ids (np.memmap welcome), one per length the
            templates use, holding exactly as many ids as the templates have slots of that
            length (an empty pool for an unused length is ignored; anything else is an
            InputError).
        seed: None (the default) for the canonical order, any int64 (e.g.
            `seed_from_components(epoch)`) for a shuffled epoch.
        rank, world_size, drop_last: sharding as torch's DistributedSampler (defaults 0, 1,
            False: one rank, the whole epoch).
        tuning: batch sizes and look-up tables (None: `EpochTuning()`); it changes the speed
            and the memory, never the bins.
        rows_per_rank: the bins each rank trains on per step (default 1).
        balance: None (the default) deals the steps' bins as DistributedSampler (today's
            order, whatever `rows_per_rank`); "cost" deals each step's bins so that the ranks'
            costs are equal, a bin costing the sum over its sequences of
            `cost_per_token * l + l**2`, from windows of `balance_window` steps.
        cost_per_token: c of that cost, a finite number >= 0 (see
            `seqpack_cli.hf.cost_per_token`); required with balance="cost".
        balance_window: the steps per balancing window.
        cursor: deal only what an earlier run left of the epoch (`cursor_after(steps)` of that
            run's plan, or its `to_state()` dict), with this plan's world size, rows and
            balance; None (the default): the whole epoch.

    Raises:
        ConfigError: for a bad seed, rank, world_size, rows_per_rank, balance, cost_per_token,
            balance_window, tuning or cursor.
        InputError: for pools that do not match the templates' slots.
    """

    def __init__(
        self,
        templates: Any,
        pools: Mapping[int, Any],
        seed: int | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        tuning: EpochTuning | None = None,
        rows_per_rank: int = 1,
        balance: str | None = None,
        cost_per_token: float | None = None,
        balance_window: int = DEFAULT_BALANCE_WINDOW,
        cursor: EpochCursor | Mapping[str, Any] | None = None,
    ) -> None:
        self.seed = check_seed(seed)
        self.rank, self.world_size = _rank_options(rank, world_size)
        self.drop_last = bool(drop_last)
        self.tuning = _check_tuning(tuning)
        self.rows_per_rank, self.balance, self.cost_per_token, self.balance_window = _step_options(
            rows_per_rank, balance, cost_per_token, balance_window
        )
        self.cursor = _check_cursor(cursor)
        pairs = canonical_templates(templates)
        needed = ids_needed(pairs)
        self._pools = IdPools(pools, needed, self.seed, self.tuning)
        self._tables = TemplateTables(
            pairs, self._pools.lengths, self._pools.member_dtype, self.tuning, self._pools.parts
        )
        self.templates: list[Template] = self._tables.templates
        self.num_bins_total = total = self._tables.num_bins
        self.num_sequences = sum(needed.values())
        self.max_seq_len_needed = max((sum(t) for t in self._tables.templates), default=0)
        self._order: FeistelPermutation | None = None
        if total and self.seed is not None:
            order_seed = seed_from_components(self.seed, _ORDER_COMPONENT)
            self._order = FeistelPermutation(total, order_seed)
        self._stream = Stream(self.cursor, total)
        self._deal: StridedDeal | BalancedDeal
        if self.balance is None:
            self._deal = StridedDeal(
                len(self._stream), self.rank, self.world_size, self.rows_per_rank, self.drop_last
            )
        else:
            self._template_costs = template_costs(self.templates, self.cost_per_token or 0.0)
            self._deal = BalancedDeal(
                len(self._stream),
                self.rank,
                self.world_size,
                self.rows_per_rank,
                self.balance_window,
                self.drop_last,
                self.seed,
                self._stream_templates,
                self._template_costs,
            )
        self._len = self._deal.num_bins
        self.num_steps = self._deal.num_steps
        # Per pool read, not per slot length: a multiple's slot pools are read part by part.
        num_pools = len(self._pools.lengths)
        batch_bins = self.tuning.batch_bins(num_pools, self.num_sequences, total)
        self._drawer = BatchDrawer(self._tables, self._pools, self.tuning, batch_bins)
        logger.debug(
            "epoch plan: %d templates, %d lengths, %d bins (%d for rank %d/%d), seed %s, "
            "%d steps of %d rows, balance %s",
            len(self._tables.templates),
            len(needed),
            total,
            self._len,
            self.rank,
            self.world_size,
            self.seed,
            self.num_steps,
            self.rows_per_rank,
            self.balance,
        )

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (
            f"EpochPlan(bins={self._len}, num_bins_total={self.num_bins_total}, "
            f"num_sequences={self.num_sequences}, seed={self.seed}, rank={self.rank}, "
            f"world_size={self.world_size}, drop_last={self.drop_last}, "
            f"rows_per_rank={self.rows_per_rank}, balance={self.balance!r})"
        )

    def lengths(self, k: int) -> Template:
        """The template of this rank's bin k.

        Args:
            k: the bin's index among this rank's bins (negative counts from the end).

        Returns:
            The template, a tuple of lengths, descending.
        """
        return self._tables.templates[self._tables.template_of(self._canonical_bin(k))]

    def __getitem__(self, k: int) -> list[int]:
        return self._pools.ids_at(self._tables.slots(self._canonical_bin(k)))

    def __iter__(self) -> Iterator[list[int]]:
        return self.iter()

    def iter(self, start: int = 0) -> Iterator[list[int]]:
        """This rank's bins from bin `start` on, in order.

        Args:
            start: the first bin (resume: the bins already consumed), 0 to `len(plan)`.

        Returns:
            An iterator of bins, each a list of ids.

        Raises:
            ConfigError: for a `start` outside 0 .. len(plan).
        """
        start = check_int(
            "start",
            start,
            minimum=0,
            maximum=self._len,
            expected=f"a bin index from 0 to {self._len} (the bins of this rank)",
            fix="resume at the number of bins already consumed",
        )
        # chain.from_iterable hands out the bins of each block in C: the generator below
        # resumes once per block of lists, not once per bin.
        return itertools.chain.from_iterable(self._blocks(start, self._len, ramp=True))

    def bins(self, start: int, stop: int) -> list[list[int]]:
        """This rank's bins `start .. stop-1`, computed vectorised.

        Args:
            start, stop: the bins' range, with slice semantics (negative values count from the
                end, out-of-range values are clipped).

        Returns:
            The bins, each a list of ids.
        """
        first, last, _ = slice(start, stop).indices(self._len)
        return list(itertools.chain.from_iterable(self._blocks(first, last, ramp=False)))

    def step(self, s: int) -> list[list[int]]:
        """This rank's bins of step `s`.

        Args:
            s: the step, 0 to `num_steps - 1`.

        Returns:
            The bins, each a list of ids: `rows_per_rank` of them; fewer only in the last step of
            an unbalanced plan whose rank's bins `rows_per_rank` does not divide.

        Raises:
            ConfigError: for a step outside the epoch.
        """
        s = check_int(
            "step",
            s,
            minimum=0,
            maximum=max(0, self.num_steps - 1),
            expected=f"a step from 0 to {self.num_steps - 1} (the steps of this epoch)",
            fix="pass a step of this epoch",
        )
        return self.bins(s * self.rows_per_rank, (s + 1) * self.rows_per_rank)

    def bin_arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's bins `start .. stop-1` as arrays, with no Python object per id. Equal to
        `bins(start, stop)`, ~1.7x faster; memory is the output plus one batch of work arrays.

        Args:
            start, stop: the bins' range, with slice semantics (as `bins`).

        Returns:
            `(ids, offsets)`, int64, bin i's ids being `ids[offsets[i]:offsets[i + 1]]` (CSR
            layout; `len(offsets)` is the number of bins plus one).
        """
        first, last, _ = slice(start, stop).indices(self._len)
        scratch = self._drawer.scratch()
        return self._draw_arrays(
            (
                self._canonical_bins(batch, min(batch + self._drawer.batch_bins, last), scratch)
                for batch in range(first, last, self._drawer.batch_bins)
            ),
            scratch,
        )

    def step_templates(self, first: int, last: int) -> np.ndarray:
        """What each rank trains on in each step, known to every rank without communication.

        Args:
            first, last: the steps `first .. last-1`, with slice semantics over the steps.

        Returns:
            The templates (indices into `plan.templates`) of every rank's bins, int64
            `[steps, world_size, rows_per_rank]`, -1 where a rank has no bin.
        """
        bins = self._step_bins(first, last)
        missing = bins < 0
        scratch = Scratch()
        t = self._tables.templates_of(np.where(missing, 0, bins).ravel(), scratch)
        t = t.astype(np.int64).reshape(bins.shape)
        t[missing] = -1
        return t

    def step_costs(self, first: int, last: int) -> np.ndarray:
        """Each rank's cost in each step.

        Args:
            first, last: the steps `first .. last-1`, with slice semantics over the steps.

        Returns:
            float64 `[steps, world_size]`: the sum over a rank's bins of the template costs
            (`cost_per_token * l + l**2` summed over the sequences; c = 0 when the plan has no
            cost_per_token).
        """
        costs = getattr(self, "_template_costs", None)
        if costs is None:
            costs = template_costs(self.templates, self.cost_per_token or 0.0)
        t = self.step_templates(first, last)
        per_bin = np.where(t < 0, 0.0, costs.take(np.maximum(t, 0)))
        return per_bin.sum(axis=2)

    def step_id_arrays(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every rank's bins in some steps.

        Args:
            first, last: the steps `first .. last-1`, with slice semantics over the steps.

        Returns:
            `(ids, offsets)` as `bin_arrays` gives them, the bins in `[step, rank, row]` order
            (missing bins left out).
        """
        bins = self._step_bins(first, last).ravel()
        bins = bins[bins >= 0]
        scratch = self._drawer.scratch()
        size = self._drawer.batch_bins
        chunks = (bins[i : i + size].copy() for i in range(0, len(bins), size))
        return self._draw_arrays(chunks, scratch)

    def cursor_after(self, steps: int) -> EpochCursor:
        """What is left of the epoch once every rank has taken `steps` steps.

        Args:
            steps: the steps taken, 0 to `num_steps`.

        Returns:
            The `EpochCursor`: pass it as `EpochPlan(..., cursor=...)` (any world size, rows per
            rank and balance) to deal exactly the bins not dealt yet, each once.

        Raises:
            ConfigError: for a number of steps outside 0 .. num_steps.
        """
        steps = check_int(
            "steps",
            steps,
            minimum=0,
            maximum=self.num_steps,
            expected=f"a number of steps from 0 to {self.num_steps}",
            fix="pass the steps this epoch's plan has taken",
        )
        consumed, unplayed = self._deal.consumed_after(steps)
        return self._stream.cursor_after(consumed, unplayed)

    def _draw_arrays(
        self, batches: Iterator[np.ndarray], scratch: Scratch
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ids of batches of canonical bins, concatenated as `(ids, offsets)`."""
        parts: list[np.ndarray] = []
        offsets = [np.zeros(1, dtype=np.int64)]
        num_ids = 0
        for bins in batches:
            chunk = self._drawer.draw(bins, scratch, grouped=False)
            parts.append(chunk.ids.copy())  # the work arrays are reused by the next batch
            offsets.append(chunk.ends + num_ids)
            num_ids += len(chunk.ids)
        if len(parts) == 1:
            return parts[0], np.concatenate(offsets)
        return np.concatenate([np.empty(0, dtype=np.int64), *parts]), np.concatenate(offsets)

    def _blocks(self, first: int, last: int, ramp: bool) -> Iterator[Sequence[list[int]]]:
        """Bins first..last-1 as Python lists, in blocks of up to `tuning.list_bins` bins. With
        `ramp`, the first batch is small: an iteration yields its first bin ~8x sooner."""
        scratch = self._drawer.scratch()
        batch_bins = self._drawer.batch_bins
        batch = first
        while batch < last:
            small = ramp and batch == first
            size = max(1, batch_bins // 8) if small else batch_bins
            # Each batch's lists are all built before the next batch reuses the work arrays.
            bins = self._canonical_bins(batch, min(batch + size, last), scratch)
            yield from self._drawer.draw(bins, scratch).lists(scratch)
            batch += size

    def _canonical_bin(self, k: Any) -> int:
        """The canonical bin index of this rank's bin k (negative k counts from the end)."""
        if isinstance(k, (bool, np.bool_)):
            raise TypeError("bin index is a bool; expected an integer")
        i = operator.index(k)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"bin {k} is out of range for an epoch plan of {self._len} bins")
        if self.balance is None and not self.cursor.pending:
            u = self.rank + i * self.world_size  # the stream index; past its end, wrapped
            g = self.cursor.next_position + u % (self.num_bins_total - self.cursor.next_position)
            return self._order[g] if self._order is not None else g
        return int(self._canonical_bins(i, i + 1, Scratch())[0])

    def _canonical_bins(self, first: int, last: int, scratch: Scratch) -> np.ndarray:
        """The canonical bins of this rank's bins first..last-1 (0 <= first < last <= len), as
        an int64 work array of `scratch`: `_canonical_bin`, vectorised."""
        u = self._deal.rank_indices(first, last, scratch.array("bins.g", last - first, np.int64))
        return self._canonical_of_stream(u, scratch)

    def _canonical_of_stream(self, u: np.ndarray, scratch: Scratch | None = None) -> np.ndarray:
        """The canonical bins of the stream indices `u` (int64, overwritten and returned)."""
        g = self._stream.positions(u)  # past the stream's end: wrapped (padding)
        if self._order is not None:
            self._order.permute_inplace(g.view(np.uint64), scratch)  # values < 2**63
        return g

    def _step_bins(self, first: int, last: int) -> np.ndarray:
        """The canonical bins of steps first..last-1, `[steps, W, B]`, -1 where missing."""
        first, last, _ = slice(first, last).indices(self.num_steps)
        u = self._deal.steps(first, max(first, last)).copy()
        present = u >= 0
        u[present] = self._canonical_of_stream(u[present])
        return u

    def _stream_templates(self, u: np.ndarray) -> np.ndarray:
        """The templates of the bins at stream indices `u` (what `BalancedDeal` sorts by cost)."""
        return self._tables.templates_of(self._canonical_of_stream(u), Scratch())


def template_costs(templates: Sequence[Template], cost_per_token: float) -> np.ndarray:
    """Each template's cost, `sum(cost_per_token * l + l**2 for l in template)` (float64): the
    linear layers' work grows with the tokens, attention's with the squares of the sequences'
    lengths."""
    return np.array(
        [cost_per_token * sum(t) + float(sum(length * length for length in t)) for t in templates],
        dtype=np.float64,
    )


COST_PER_TOKEN_FIX = (
    "derive it with seqpack_cli.hf.cost_per_token(model.config), e.g. 12 * hidden_size "
    "(24576 for hidden 2048)"
)


def check_cost_per_token(cost_per_token: Any, name: str = "cost_per_token") -> float:
    """c of a bin's cost `c*l + l**2` as a float, or `ConfigError` unless it is a finite
    number >= 0 (`name`: the argument or option as the message shows it)."""
    if isinstance(cost_per_token, (bool, np.bool_)) or not isinstance(
        cost_per_token, (int, float, np.integer, np.floating)
    ):
        raise ConfigError(
            f"{name} is {cost_per_token!r}; expected a number >= 0: {COST_PER_TOKEN_FIX}"
        )
    value = float(cost_per_token)
    if not (value >= 0 and np.isfinite(value)):
        raise ConfigError(
            f"{name} is {value!r}; expected a finite number >= 0: {COST_PER_TOKEN_FIX}"
        )
    return value


def _step_options(
    rows_per_rank: Any, balance: Any, cost_per_token: Any, balance_window: Any
) -> tuple[int, str | None, float | None, int]:
    """The step options checked: (rows_per_rank, balance, cost_per_token, balance_window)."""
    rows_per_rank = check_int(
        "rows_per_rank",
        rows_per_rank,
        minimum=1,
        fix="pass the packed rows each rank trains on per step (its batch size)",
    )
    if balance not in BALANCES:
        raise ConfigError(
            f"balance is {balance!r}; expected None (DistributedSampler's order) or 'cost' "
            "(ranks balanced by attention cost)"
        )
    if cost_per_token is not None:
        cost_per_token = check_cost_per_token(cost_per_token)
    elif balance == "cost":
        raise ConfigError(
            "balance='cost' needs cost_per_token (the linear layers' work per token relative to "
            "attention's per token pair); derive it with seqpack_cli.hf.cost_per_token("
            "model.config), e.g. 12 * hidden_size for a standard transformer"
        )
    balance_window = check_int(
        "balance_window",
        balance_window,
        minimum=1,
        fix=f"pass the steps per balancing window (default {DEFAULT_BALANCE_WINDOW})",
    )
    return rows_per_rank, balance, cost_per_token, balance_window


def _check_cursor(cursor: Any) -> EpochCursor:
    if cursor is None:
        return EpochCursor()
    if isinstance(cursor, EpochCursor):
        return cursor
    if isinstance(cursor, Mapping):
        return EpochCursor.from_state(cursor)
    raise ConfigError(
        f"cursor is a {type(cursor).__name__}; expected an EpochCursor (EpochPlan.cursor_after) "
        "or its to_state() dict, or None for the whole epoch"
    )


def _check_tuning(tuning: Any) -> EpochTuning:
    if tuning is None:
        return EpochTuning()
    if not isinstance(tuning, EpochTuning):
        raise ConfigError(
            f"tuning is a {type(tuning).__name__}; expected an EpochTuning "
            "(seqpack_cli.epoch.EpochTuning), or None for the defaults"
        )
    return tuning


def materialize_epoch(
    templates: Any,
    length_to_indices: Mapping[int, Any],
    seed: int | None = None,
    *,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
    start: int = 0,
) -> Iterator[list[int]]:
    """Yield the concrete bins (lists of ids) of one epoch: `EpochPlan(...).iter(start)`.

    The reference signature, `materialize_epoch(templates, length_to_indices, seed=None)`
    (`length_to_indices`: length -> ids of that length, the pools of an `EpochPlan`), plus
    sharding and resume. Arguments are validated at the call, not at the first `next()`.

    Args:
        templates: a `Counter[BinTemplate]` or (template, multiplicity) pairs.
        length_to_indices: length -> ids of that length (the pools of an `EpochPlan`).
        seed: None (the default) for the canonical order, any int64 for a shuffled epoch.
        rank, world_size, drop_last: sharding as torch's DistributedSampler (defaults 0, 1,
            False: the whole epoch).
        start: the first bin of this rank to yield (resume: the bins already consumed).

    Returns:
        An iterator of this rank's bins, each a list of ids.

    Raises:
        ConfigError: as `EpochPlan` and `EpochPlan.iter`.
        InputError: for pools that do not match the templates' slots.
    """
    plan = EpochPlan(
        templates, length_to_indices, seed, rank=rank, world_size=world_size, drop_last=drop_last
    )
    return plan.iter(start)
