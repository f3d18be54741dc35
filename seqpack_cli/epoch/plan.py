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
   the identity: the canonical order, deterministic.

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
from seqpack_cli.epoch.permutations import FeistelPermutation
from seqpack_cli.epoch.pools import IdPools
from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.epoch.tables import TemplateTables, ids_needed
from seqpack_cli.epoch.tuning import EpochTuning
from seqpack_cli.errors import ConfigError
from seqpack_cli.seeding import check_optional_seed, seed_from_components
from seqpack_cli.templates import Template, canonical_templates

__all__ = ["EpochPlan", "canonical_templates", "materialize_epoch"]

logger = logging.getLogger(__name__)

# Seed component that stands for the bin order; lengths are >= 1, so it never collides with
# the (seed, length) seeds of the pools.
_ORDER_COMPONENT = 0


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

    `templates`: a `Counter[BinTemplate]` or (template, multiplicity) pairs. `pools`: length ->
    1-d integer array of ids (np.memmap welcome), one per length the templates use, holding
    exactly as many ids as the templates have slots of that length (an empty pool for an unused
    length is ignored; anything else is an InputError). `seed`: None for the canonical order, an
    int (e.g. `seed_from_components(epoch)`) for a shuffled epoch. `rank`, `world_size`,
    `drop_last`: sharding as torch's DistributedSampler. `tuning`: batch sizes and look-up tables
    (`EpochTuning()` by default); it changes the speed and the memory, never the bins.

    `plan[k]` is the list of ids of this rank's k-th bin, `plan.lengths(k)` its template;
    `iter(plan)` / `plan.iter(start)` yield the bins in order (resume at any bin);
    `plan.bins(start, stop)` computes a batch at once, and `plan.bin_arrays(start, stop)` the
    same as flat int64 arrays (ids, CSR offsets). Bins are computed in batches of up to 2**19
    ids: an iteration holds 35-50 MiB of work arrays, whatever the size of the epoch; the plan
    itself holds its tables and a copy of the smallest pools (at most 8 MiB).
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
    ) -> None:
        self.seed = check_optional_seed(seed)
        self.rank, self.world_size = _rank_options(rank, world_size)
        self.drop_last = bool(drop_last)
        self.tuning = _check_tuning(tuning)
        pairs = canonical_templates(templates)
        needed = ids_needed(pairs)
        self._pools = IdPools(pools, needed, self.seed, self.tuning)
        self._tables = TemplateTables(
            pairs, self._pools.lengths, self._pools.member_dtype, self.tuning
        )
        self.num_bins_total = total = self._tables.num_bins
        self.num_sequences = sum(needed.values())
        self.max_seq_len_needed = max((sum(t) for t in self._tables.templates), default=0)
        self._len = total // self.world_size if self.drop_last else -(-total // self.world_size)
        self._order: FeistelPermutation | None = None
        if total and self.seed is not None:
            order_seed = seed_from_components(self.seed, _ORDER_COMPONENT)
            self._order = FeistelPermutation(total, order_seed)
        batch_bins = self.tuning.batch_bins(len(needed), self.num_sequences, total)
        self._drawer = BatchDrawer(self._tables, self._pools, self.tuning, batch_bins)
        logger.debug(
            "epoch plan: %d templates, %d lengths, %d bins (%d for rank %d/%d), seed %s",
            len(self._tables.templates),
            len(needed),
            total,
            self._len,
            self.rank,
            self.world_size,
            self.seed,
        )

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (
            f"EpochPlan(bins={self._len}, num_bins_total={self.num_bins_total}, "
            f"num_sequences={self.num_sequences}, seed={self.seed}, rank={self.rank}, "
            f"world_size={self.world_size}, drop_last={self.drop_last})"
        )

    def lengths(self, k: int) -> Template:
        """The template (lengths, descending) of this rank's bin k."""
        return self._tables.templates[self._tables.template_of(self._canonical_bin(k))]

    def __getitem__(self, k: int) -> list[int]:
        return self._pools.ids_at(self._tables.slots(self._canonical_bin(k)))

    def __iter__(self) -> Iterator[list[int]]:
        return self.iter()

    def iter(self, start: int = 0) -> Iterator[list[int]]:
        """Yield this rank's bins from bin `start` on (resume: start = bins already consumed)."""
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
        """This rank's bins `start .. stop-1` (slice semantics: negative values count from the
        end, out-of-range values are clipped), computed vectorised."""
        first, last, _ = slice(start, stop).indices(self._len)
        return list(itertools.chain.from_iterable(self._blocks(first, last, ramp=False)))

    def bin_arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's bins `start .. stop-1` (slice semantics, as `bins`) as arrays, with no
        Python object per id: `(ids, offsets)`, int64, bin i's ids being
        `ids[offsets[i]:offsets[i + 1]]` (CSR layout; `len(offsets)` is the number of bins
        plus one). Equal to `bins(start, stop)`, ~1.7x faster; memory is the output plus
        one batch of work arrays."""
        first, last, _ = slice(start, stop).indices(self._len)
        scratch = self._drawer.scratch()
        batch_bins = self._drawer.batch_bins
        parts: list[np.ndarray] = []
        offsets = [np.zeros(1, dtype=np.int64)]
        num_ids = 0
        for batch in range(first, last, batch_bins):
            bins = self._canonical_bins(batch, min(batch + batch_bins, last), scratch)
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
        g = (self.rank + i * self.world_size) % self.num_bins_total
        return self._order[g] if self._order is not None else g

    def _canonical_bins(self, first: int, last: int, scratch: Scratch) -> np.ndarray:
        """The canonical bins of this rank's bins first..last-1 (0 <= first < last <= len), as
        an int64 work array of `scratch`: `_canonical_bin`, vectorised."""
        num_bins = last - first
        g = scratch.array("bins.g", num_bins, np.int64)
        np.add(scratch.iota(num_bins), first, out=g)
        if self.world_size > 1:
            g *= self.world_size
            g += self.rank
        if not self.drop_last and g[-1] >= self.num_bins_total:
            g %= self.num_bins_total  # the DistributedSampler padding wraps around
        if self._order is not None:
            self._order.permute_inplace(g.view(np.uint64), scratch)  # values < 2**63
        return g


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
    sharding (`rank`, `world_size`, `drop_last`) and resume (`start`). Arguments are validated
    at the call, not at the first `next()`.
    """
    plan = EpochPlan(
        templates, length_to_indices, seed, rank=rank, world_size=world_size, drop_last=drop_last
    )
    return plan.iter(start)
