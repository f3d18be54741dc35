"""A batch of bins of an epoch: its ids in one vectorised pass (`BatchDrawer`), and the bins as
Python lists (`Chunk`).

How a batch is computed, in 60-90 ns per id on one core: the batch's canonical bins go through a
bucket table to their templates (or segments of them, `seqpack_cli.epoch.tables`); each id's
slot and pool position follow from flat slot tables; the ids are sorted by pool (a radix
sort), so the pool permutations run once per word width and each pool is read with one `take`
(`seqpack_cli.epoch.pools`); then the ids go back to bin order. All batch-sized arrays are work
arrays reused from batch to batch (`seqpack_cli.epoch.scratch`). Python lists cost as much
again: bins of each frequent size are made by numpy in C, block by block (see `Chunk`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence

import numpy as np

from seqpack_cli.epoch.pools import IdPools
from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.epoch.tables import TemplateTables
from seqpack_cli.epoch.tuning import EpochTuning

__all__ = ["BatchDrawer", "Chunk"]

# A block's layout key is (block << _SIZE_CODE_BITS) | size code: up to 15 frequent sizes get a
# code of their own, code 0 is shared by the others (see Chunk).
_SIZE_CODE_BITS = 4
_SIZE_CODE_MASK = (1 << _SIZE_CODE_BITS) - 1
# Work arrays that share memory (see Scratch): each pair is never alive at the same time.
# "ids.a" holds the bin of each id, then the slot values, then the permutations' keys, then the
# ids read from the pools; "ids.c" the positions, then the pool sizes, then the ids in order.
# See TemplateTables.pool_positions, IdPools.read and FeistelFamily.permute_grouped.
_ALIASES = {"family.keys": "ids.a", "family.sizes": "ids.c", "bins.buckets": "bins.work"}


class BatchDrawer:
    """Computes the ids of batches of up to `batch_bins` canonical bins of one epoch."""

    __slots__ = ("_block_key_cache", "_pools", "_tables", "_tuning", "batch_bins")

    def __init__(
        self, tables: TemplateTables, pools: IdPools, tuning: EpochTuning, batch_bins: int
    ) -> None:
        self._tables = tables
        self._pools = pools
        self._tuning = tuning
        self.batch_bins = batch_bins
        self._block_key_cache: np.ndarray | None = None

    @staticmethod
    def scratch() -> Scratch:
        """Work arrays for one iteration (or one call) of batches."""
        return Scratch(_ALIASES)

    def draw(self, bins: np.ndarray, scratch: Scratch, grouped: bool = True) -> Chunk:
        """The ids of the canonical bins `bins` (an int64 work array of `scratch`, overwritten),
        in one vectorised pass.

        With `grouped`, the bins of each block of `EpochTuning.list_bins` are laid out by size
        (see `Chunk`), so that `lists()` builds the lists of equal-sized bins in C; without, they
        stay in order (`ids` flat, bin after bin). All the batch-sized arrays come from
        `scratch`, and stay valid until its next batch.
        """
        num_bins = len(bins)
        tables = self._tables
        t = tables.segments_of(bins, scratch)
        sizes = tables.segment_sizes.take(
            t, out=scratch.array("bins.sizes", num_bins, np.int64), mode="clip"
        )
        chunk = Chunk(sizes, self._tuning)
        if grouped:
            chunk.group(self._block_keys, scratch)
            if chunk.order is not None:
                t = t.take(
                    chunk.order, out=scratch.array("bins.t2", num_bins, t.dtype), mode="clip"
                )
                bins = bins.take(
                    chunk.order, out=scratch.array("bins.g2", num_bins, np.int64), mode="clip"
                )
                sizes = chunk.sizes
        positions, members, ends = tables.pool_positions(bins, t, sizes, scratch)
        chunk.ids, chunk.ends = self._pools.read(positions, members, scratch), ends
        return chunk

    @property
    def _block_keys(self) -> np.ndarray:
        """`(i // list_bins) << _SIZE_CODE_BITS` for i < the bins of a batch (see `Chunk`), in
        the narrowest dtype that holds them: numpy radix-sorts uint16 keys."""
        if self._block_key_cache is None:
            blocks = np.arange(self.batch_bins) // self._tuning.list_bins
            num_keys = (int(blocks[-1]) + 1) << _SIZE_CODE_BITS
            dtype = np.uint16 if num_keys <= 1 << 16 else np.uint32
            self._block_key_cache = (blocks << _SIZE_CODE_BITS).astype(dtype)
        return self._block_key_cache


class Chunk:
    """The ids of a batch of bins, and how to cut them into Python lists.

    Building a Python list per bin is most of the cost of an epoch. Bins of one size come out of
    numpy as lists in C (`ids.reshape(-1, size).tolist()`), ~2x faster per bin than slicing a
    flat list in a Python loop. So `group` lays the bins of each block of `list_bins` out by
    size: each size frequent in the batch (at least `min_group_bins` bins per block on average;
    up to 15 of them) gets a code 1.., the other sizes share code 0 (sliced from one flat list),
    and the bins are sorted by (block, code), stably. `lists()` then builds each block group by
    group and puts the bins back in order with one `itemgetter`. Blocks stay small: the lists of
    a block are alive together, and the cyclic GC, which traverses the young lists, gets slow
    with many. (`list_bins`, `min_group_bins`: see `EpochTuning`.)
    """

    __slots__ = (
        "ends",
        "ids",
        "keys",
        "list_bins",
        "min_group_bins",
        "order",
        "size_of_code",
        "sizes",
    )

    def __init__(self, sizes: np.ndarray, tuning: EpochTuning) -> None:
        self.sizes = sizes  # ids per bin, in the layout's order
        self.list_bins = tuning.list_bins
        self.min_group_bins = tuning.min_group_bins
        self.order: np.ndarray | None = None  # layout position -> bin of the batch
        self.keys: np.ndarray | None = None  # (block, code) key of each layout position
        self.size_of_code: list[int] = []
        self.ids = np.empty(0, dtype=np.int64)  # flat, bin after bin in the layout's order
        self.ends = np.empty(0, dtype=np.int64)  # end of each bin in `ids`

    def group(self, block_keys: np.ndarray, scratch: Scratch) -> None:
        """Lay the bins out by (block, size code); `block_keys[i]` is bin i's block key."""
        sizes = self.sizes
        num_bins = len(sizes)
        counts = np.bincount(sizes)
        block = min(self.list_bins, num_bins)
        frequent = np.flatnonzero(counts * block >= self.min_group_bins * num_bins)
        frequent = frequent[:_SIZE_CODE_MASK]
        if len(frequent) == 1 and counts[frequent[0]] == num_bins:
            self.size_of_code = [int(frequent[0])]  # bins of one size: no reordering at all
            return
        if not len(frequent):
            return
        codes = np.zeros(len(counts), dtype=block_keys.dtype)
        codes[frequent] = np.arange(1, len(frequent) + 1)
        keys = codes.take(
            sizes, out=scratch.array("group.keys", num_bins, codes.dtype), mode="clip"
        )
        keys |= block_keys[:num_bins]
        self.order = np.argsort(keys, kind="stable")
        scratch.hold("layout order", self.order)
        self.keys = keys.take(
            self.order, out=scratch.array("group.sorted", num_bins, keys.dtype), mode="clip"
        )
        self.sizes = sizes.take(
            self.order, out=scratch.array("group.sizes", num_bins, np.int64), mode="clip"
        )
        self.size_of_code = [0, *frequent.tolist()]

    def lists(self, scratch: Scratch) -> Iterator[Sequence[list[int]]]:
        """The bins as lists, in blocks of `list_bins`, in the batch's order."""
        num_bins = len(self.ends)
        step = self.list_bins
        if self.keys is not None and self.order is not None:
            yield from self._grouped_lists(self.keys, self.order, scratch)
        elif self.size_of_code:  # bins of one size
            rows = self.ids.reshape(num_bins, self.size_of_code[0])
            for first in range(0, num_bins, step):
                yield rows[first : first + step].tolist()
        else:
            for first in range(0, num_bins, step):
                yield _sliced(self.ids, self.ends, first, min(first + step, num_bins))

    def _grouped_lists(
        self, keys: np.ndarray, order: np.ndarray, scratch: Scratch
    ) -> Iterator[Sequence[list[int]]]:
        ids, ends = self.ids, self.ends
        num_bins = len(ends)
        step = self.list_bins
        # Where each bin of the batch is in its block's layout: < list_bins, so the ints come
        # from Python's small-int cache (list_bins <= 256), nothing is allocated.
        where = scratch.array("group.where", num_bins, np.intp)
        where[order] = scratch.iota(num_bins)
        where %= step
        cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        group_first = [0, *cuts.tolist(), num_bins]
        group_code = (keys.take(group_first[:-1]) & _SIZE_CODE_MASK).tolist()
        group_ids = [0, *ends.take(cuts - 1).tolist(), int(ends[-1])]
        size_of_code = self.size_of_code
        group = 0
        for first in range(0, num_bins, step):
            last = min(first + step, num_bins)
            rows: list[list[int]] = []
            while group_first[group] < last:
                size = size_of_code[group_code[group]]
                a, b = group_ids[group], group_ids[group + 1]
                if size:
                    rows += ids[a:b].reshape(-1, size).tolist()
                else:
                    rows += _sliced(ids, ends, group_first[group], group_first[group + 1])
                group += 1
            if last - first > 1:
                yield operator.itemgetter(*where[first:last].tolist())(rows)
            else:
                yield rows


def _sliced(ids: np.ndarray, ends: np.ndarray, first: int, last: int) -> list[list[int]]:
    """Bins first..last-1 of a batch as lists, sliced from one flat list (`ends[k]`: end
    offset of bin k in `ids`)."""
    begin = int(ends[first - 1]) if first else 0
    bounds = ends[first:last].tolist()
    flat = ids[begin : bounds[-1]].tolist()
    rows: list[list[int]] = []
    append = rows.append
    a = 0
    for end in bounds:
        b = end - begin
        append(flat[a:b])
        a = b
    return rows
