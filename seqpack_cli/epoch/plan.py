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
   is used exactly once per epoch, and bin j costs O(template size) to compute.
2. Sharding, exactly as torch's `DistributedSampler`: rank r takes the global order positions
   `g = r, r + world_size, r + 2*world_size, ...`; `len(plan)` is `ceil(B / world_size)` (the
   global order is padded by wrapping around: position g >= B means g mod B) or, with
   `drop_last=True`, `floor(B / world_size)` (the tail is dropped; the shards are disjoint).
3. With a seed, global position g visits canonical bin `order[g]`, `order` a FeistelPermutation
   of `[0, B)` seeded by `seed_from_components(seed, 0)`, so consecutive bins are not runs of one
   template; and pool position p of length L holds the id `pool_L[perm_L[p]]`, `perm_L` a
   FeistelPermutation seeded by `seed_from_components(seed, L)`. A new seed gives a new order and
   new pairings from the same templates. Without a seed both are the identity: the canonical
   order, deterministic.

How a batch of bins is computed (`EpochPlan._chunk`), in one vectorised pass of 60-90 ns per
id on one core: the batch's global positions go through the order permutation and a bucket table
to their templates; each id's slot and pool position follow from flat slot tables; the ids are
sorted by length (a radix sort), so the pool permutations run once per word width
(`FeistelFamily.permute_grouped`) and each pool is read with one `take` (the smallest pools
are copied into one array, read with one `take` for all of them); then the ids go back to bin
order. All batch-sized arrays are work arrays reused from batch to batch (`Scratch`). Python
lists cost as much again: bins of each frequent size are made by numpy in C, block by block
(see `_Chunk`). `bin_arrays` skips the lists: flat ids and offsets, ~1.7x faster.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.seeding import (
    FeistelFamily,
    FeistelPermutation,
    Scratch,
    _optional_seed,
    seed_from_components,
)
from seqpack_cli.templates import Template, canonical_templates, positive_int

__all__ = ["EpochPlan", "canonical_templates", "materialize_epoch"]

logger = logging.getLogger(__name__)

# Bins are computed in batches of about 256 ids per distinct length (numpy calls are made per
# length present in a batch, and per cycle-walking round, and must each do enough work to
# amortise their overhead), within [_MIN_BATCH_IDS, _BATCH_IDS] ids and at most
# _MAX_BATCH_BINS bins. The caps bound the work arrays of an iteration (see Scratch): ~10 int64
# arrays per id and per bin of a batch: 35-50 MiB at the caps.
_IDS_PER_LENGTH = 256
_BATCH_IDS = 1 << 19
_MIN_BATCH_IDS = 1 << 16
_MAX_BATCH_BINS = 1 << 18
# Small pools copied into one in-RAM array (see _merge_small_pools): at most this many ids
# (8 MiB), and only when at least _MIN_MERGED_POOLS pools fit.
_MERGED_POOL_IDS = 1 << 20
_MIN_MERGED_POOLS = 16
# Canonical bin -> template look-up: a table over buckets of 2**shift bins, at least this many
# buckets per template (at most _MAX_BUCKETS), so that ~2% of the bins fall in a bucket that
# straddles two templates (those, and only those, fall back to a binary search: ~3 ns per bin
# on average instead of ~8 with 8 buckets per template). int32 entries: 128-256 bytes per
# template.
_BUCKETS_PER_TEMPLATE = 32
_MAX_BUCKETS = 1 << 20
# Bins turned into Python lists at a time while iterating (at most 256: see _Chunk.lists). The
# lists of a block are alive together while the consumer walks through it; small blocks keep
# few of them alive at each collection of the cyclic GC, which would otherwise promote and
# re-traverse them (1024-bin blocks iterate ~10-30% slower than 256-bin ones).
_LIST_BINS = 256
# A size gets its own group in a block's layout (see _Chunk) when the batch has at least this
# many bins of it per block on average; one `tolist` call per group and block costs about as
# much as slicing a dozen bins from a flat list.
_MIN_GROUP_BINS = 24
_SIZE_CODE_BITS = 4
_SIZE_CODE_MASK = (1 << _SIZE_CODE_BITS) - 1
# Work arrays that share memory (see Scratch): each pair is never alive at the same time.
# "ids.a" holds the bin of each id, then the slot values, then (here) the permutations' keys,
# then the ids read from the pools; "ids.c" the positions, then (here) the pool sizes, then the
# ids in order. See _chunk and _pool_ids.
_ALIASES = {"family.keys": "ids.a", "family.sizes": "ids.c", "bins.buckets": "bins.work"}
# Seed component that stands for the bin order; lengths are >= 1, so it never collides with
# the (seed, length) seeds of the pools.
_ORDER_COMPONENT = 0


def _pool_arrays(pools: Any, needed: Mapping[int, int]) -> dict[int, np.ndarray]:
    """Each needed length's pool as a 1-d integer ndarray (memory-maps stay on disk)."""
    if not isinstance(pools, Mapping):
        raise InputError(
            f"pools is a {type(pools).__name__}; expected a mapping length -> array of ids "
            "(as returned by length_histogram_from_lengths or load_prepared)"
        )
    arrays: dict[int, np.ndarray] = {}
    for key, value in pools.items():
        length = positive_int(
            key, "a pool key", "pool keys are sequence lengths (convert JSON keys with int())"
        )
        # asarray keeps a np.memmap's buffer (a view, no copy) and drops the subclass, whose
        # per-operation bookkeeping would slow every gather.
        array = np.asarray(value)
        if array.size == 0 and length not in needed:
            continue
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise InputError(
                f"pool for length {length} is a {array.ndim}-d array of dtype {array.dtype}; "
                "expected a 1-d integer array of sequence ids"
            )
        if length not in needed:
            raise InputError(
                f"pool for length {length} has {array.size} ids but no template uses length "
                f"{length}, so they would never be visited; re-pack the templates from the "
                "histogram of these pools (or drop this pool)"
            )
        if array.size != needed[length]:
            raise InputError(
                f"pool for length {length} has {array.size} ids but the templates need "
                f"{needed[length]}; templates and pools come from different histograms: re-pack "
                "the templates from these pools' counts (or load both from one prepared/ dir)"
            )
        arrays[length] = array
    missing = sorted(set(needed) - set(arrays))
    if missing:
        length = missing[0]
        raise InputError(
            f"no pool for length {length} (the templates need {needed[length]} ids of that "
            f"length; {len(missing)} length(s) missing in all); pass pools[{length}] with the ids "
            "of the sequences of that length"
        )
    return arrays


def _rank_options(rank: Any, world_size: Any) -> tuple[int, int]:
    for name, value in (("world_size", world_size), ("rank", rank)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"{name} is {value!r}; expected an integer")
    world_size, rank = int(world_size), int(rank)
    if world_size < 1:
        raise ConfigError(
            f"world_size is {world_size}; expected >= 1 (the number of data-parallel ranks)"
        )
    if not 0 <= rank < world_size:
        raise ConfigError(
            f"rank is {rank} with world_size {world_size}; expected 0 <= rank < world_size"
        )
    return rank, world_size


class EpochPlan:
    """The bins of one epoch (of one rank), computed on demand; see the module docstring.

    `templates`: a `Counter[BinTemplate]` or (template, multiplicity) pairs. `pools`: length ->
    1-d integer array of ids (np.memmap welcome), one per length the templates use, holding
    exactly as many ids as the templates have slots of that length (an empty pool for an unused
    length is ignored; anything else is an InputError). `seed`: None for the canonical order, an
    int (e.g. `seed_from_components(epoch)`) for a shuffled epoch. `rank`, `world_size`,
    `drop_last`: sharding as torch's DistributedSampler.

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
    ) -> None:
        self.seed = _optional_seed(seed, "seed")
        self.rank, self.world_size = _rank_options(rank, world_size)
        self.drop_last = bool(drop_last)
        pairs = canonical_templates(templates)
        self._templates: list[Template] = [template for template, _ in pairs]
        multiplicities = [multiplicity for _, multiplicity in pairs]

        needed: dict[int, int] = {}
        for template, multiplicity in pairs:
            for length in template:
                needed[length] = needed.get(length, 0) + multiplicity
        arrays = _pool_arrays(pools, needed)
        # Lengths ordered by the bit width of their pool size, then by length: the batch sorts
        # its ids by this index, which groups them by width for the FeistelFamily kernel.
        self._lengths = sorted(needed, key=lambda length: (_width(needed[length]), length))
        self._pools = [arrays[length] for length in self._lengths]
        length_index = {length: i for i, length in enumerate(self._lengths)}

        # Flat slot tables: slot q of template t (q in [slot_start[t], slot_start[t] + size))
        # takes pool position slot_base[q] + o * slot_stride[q] of length slot_length[q].
        slot_length: list[int] = []
        slot_base: list[int] = []
        slot_stride: list[int] = []
        slot_start: list[int] = []
        consumed = dict.fromkeys(self._lengths, 0)
        for template, multiplicity in pairs:
            slot_start.append(len(slot_base))
            per_length: dict[int, int] = {}
            for length in template:
                per_length[length] = per_length.get(length, 0) + 1
            seen: dict[int, int] = {}
            for length in template:
                slot_length.append(length_index[length])
                slot_base.append(consumed[length] + seen.get(length, 0))
                slot_stride.append(per_length[length])
                seen[length] = seen.get(length, 0) + 1
            for length, count in per_length.items():
                consumed[length] += multiplicity * count

        bin_end = np.cumsum(np.array(multiplicities, dtype=np.int64))
        self.num_bins_total = int(bin_end[-1]) if len(bin_end) else 0
        self.num_sequences = sum(needed.values())
        self.max_seq_len_needed = max((sum(t) for t in self._templates), default=0)
        self._bin_end = bin_end
        self._bin_start = bin_end - np.array(multiplicities, dtype=np.int64)
        self._bin_end_list = bin_end.tolist()
        self._bucket_shift, self._bucket_template = _bucket_table(bin_end)
        self._size = np.array([len(t) for t in self._templates], dtype=np.int64)
        self._slot_start = np.array(slot_start, dtype=np.int64)
        # uint16 when possible: numpy sorts small unsigned keys with a radix sort.
        index_dtype = np.uint16 if len(self._lengths) <= 1 << 16 else np.int64
        self._slot_length = np.array(slot_length, dtype=index_dtype)
        self._slot_base = np.array(slot_base, dtype=np.int64)
        self._slot_stride = np.array(slot_stride, dtype=np.int64)
        self._slot_lists = (slot_start, slot_length, slot_base, slot_stride)
        self._merged, self._merged_offsets = _merge_small_pools(self._pools)
        self._block_key_cache: np.ndarray | None = None
        self._member_index = np.arange(len(self._lengths), dtype=self._slot_length.dtype)

        total = self.num_bins_total
        if self.drop_last:
            self._len = total // self.world_size
        else:
            self._len = -(-total // self.world_size)
        mean_size = math.ceil(self.num_sequences / total) if total else 1
        batch_ids = min(_BATCH_IDS, max(_MIN_BATCH_IDS, _IDS_PER_LENGTH * len(self._lengths)))
        self._batch_bins = max(1, min(_MAX_BATCH_BINS, batch_ids // mean_size))
        if total and self.seed is not None:
            self._order: FeistelPermutation | None = FeistelPermutation(
                total, seed_from_components(self.seed, _ORDER_COMPONENT)
            )
            self._perms: list[FeistelPermutation] | None = [
                FeistelPermutation(len(pool), seed_from_components(self.seed, length))
                for length, pool in zip(self._lengths, self._pools, strict=True)
            ]
            self._family: FeistelFamily | None = FeistelFamily(self._perms)
        else:
            self._order, self._perms, self._family = None, None, None
        logger.debug(
            "epoch plan: %d templates, %d lengths, %d bins (%d for rank %d/%d), seed %s",
            len(self._templates),
            len(self._lengths),
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

    def lengths(self, k: int) -> Template:
        """The template (lengths, descending) of this rank's bin k."""
        j = self._canonical_bin(k)
        return self._templates[bisect.bisect_right(self._bin_end_list, j)]

    def __getitem__(self, k: int) -> list[int]:
        j = self._canonical_bin(k)
        t = bisect.bisect_right(self._bin_end_list, j)
        occurrence = j - (self._bin_end_list[t - 1] if t else 0)
        slot_start, slot_length, slot_base, slot_stride = self._slot_lists
        ids = []
        for q in range(slot_start[t], slot_start[t] + len(self._templates[t])):
            li = slot_length[q]
            position = slot_base[q] + occurrence * slot_stride[q]
            if self._perms is not None:
                position = self._perms[li][position]
            ids.append(int(self._pools[li][position]))
        return ids

    def __iter__(self) -> Iterator[list[int]]:
        return self.iter()

    def iter(self, start: int = 0) -> Iterator[list[int]]:
        """Yield this rank's bins from bin `start` on (resume: start = bins already consumed)."""
        if isinstance(start, (bool, np.bool_)) or not isinstance(start, (int, np.integer)):
            raise ConfigError(f"start is {start!r}; expected an integer bin index")
        if not 0 <= start <= self._len:
            raise ConfigError(
                f"start is {start}; expected 0 <= start <= {self._len} (the bins of this rank)"
            )
        # chain.from_iterable hands out the bins of each block in C: the generator below
        # resumes once per block of lists, not once per bin.
        return itertools.chain.from_iterable(self._blocks(int(start), self._len, ramp=True))

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
        scratch = Scratch(_ALIASES)
        parts: list[np.ndarray] = []
        offsets = [np.zeros(1, dtype=np.int64)]
        num_ids = 0
        for batch in range(first, last, self._batch_bins):
            chunk = self._chunk(batch, min(batch + self._batch_bins, last), scratch, False)
            parts.append(chunk.ids.copy())  # the work arrays are reused by the next batch
            offsets.append(chunk.ends + num_ids)
            num_ids += len(chunk.ids)
        if len(parts) == 1:
            return parts[0], np.concatenate(offsets)
        return np.concatenate([np.empty(0, dtype=np.int64), *parts]), np.concatenate(offsets)

    def _blocks(self, first: int, last: int, ramp: bool) -> Iterator[Sequence[list[int]]]:
        """Bins first..last-1 as Python lists, in blocks of up to `_LIST_BINS` bins. With
        `ramp`, the first batch is small: an iteration yields its first bin ~8x sooner."""
        scratch = Scratch(_ALIASES)
        batch = first
        while batch < last:
            small = ramp and batch == first
            size = max(1, self._batch_bins // 8) if small else self._batch_bins
            # Each batch's lists are all built before the next batch reuses the work arrays.
            chunk = self._chunk(batch, min(batch + size, last), scratch)
            yield from chunk.lists(scratch)
            batch += size

    def _chunk(self, first: int, last: int, scratch: Scratch, grouped: bool = True) -> _Chunk:
        """The ids of bins first..last-1 (0 <= first < last <= len), in one vectorised pass.

        With `grouped`, the bins of each block of `_LIST_BINS` are laid out by size (see
        `_Chunk`), so that `lists()` builds the lists of equal-sized bins in C; without, they
        stay in order (`ids` flat, bin after bin). All the batch-sized arrays come from
        `scratch`, and stay valid until its next batch.
        """
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
        t = self._templates_of(g, scratch)
        sizes = self._size.take(t, out=scratch.array("bins.sizes", num_bins, np.int64), mode="clip")
        chunk = _Chunk(sizes)
        if grouped:
            chunk.group(self._block_keys, scratch)
            if chunk.order is not None:
                t = t.take(
                    chunk.order, out=scratch.array("bins.t2", num_bins, t.dtype), mode="clip"
                )
                g = g.take(
                    chunk.order, out=scratch.array("bins.g2", num_bins, np.int64), mode="clip"
                )
                sizes = chunk.sizes
        work = self._bin_start.take(
            t, out=scratch.array("bins.work", num_bins, np.int64), mode="clip"
        )
        g -= work  # g is now the occurrence of the bin's template
        ends = np.cumsum(sizes, out=scratch.array("bins.ends", num_bins, np.int64))
        starts = self._slot_start.take(t, out=work, mode="clip")
        starts -= ends
        starts += sizes
        num_ids = int(ends[-1])
        # The bin of each id: 1 at the first id of every bin but the first, summed.
        bin_of_id = scratch.array("ids.a", num_ids, np.int64)
        bin_of_id.fill(0)
        bin_of_id[ends[:-1]] = 1
        np.cumsum(bin_of_id, out=bin_of_id)
        # q: the flat slot index of every id of the batch, bin after bin.
        q = starts.take(bin_of_id, out=scratch.array("ids.b", num_ids, np.int64), mode="clip")
        q += scratch.iota(num_ids)
        positions = g.take(bin_of_id, out=scratch.array("ids.c", num_ids, np.int64), mode="clip")
        slot_values = self._slot_stride.take(q, out=bin_of_id, mode="clip")
        positions *= slot_values
        positions += self._slot_base.take(q, out=slot_values, mode="clip")
        dtype = self._slot_length.dtype
        members = self._slot_length.take(
            q, out=scratch.array("ids.members", num_ids, dtype), mode="clip"
        )
        chunk.ids, chunk.ends = self._pool_ids(positions, members, scratch), ends
        return chunk

    @property
    def _block_keys(self) -> np.ndarray:
        """`(i // _LIST_BINS) << _SIZE_CODE_BITS` for i < the bins of a batch (see `_Chunk`),
        in the narrowest dtype that holds them: numpy radix-sorts uint16 keys."""
        if self._block_key_cache is None:
            blocks = np.arange(self._batch_bins) // _LIST_BINS
            num_keys = (int(blocks[-1]) + 1) << _SIZE_CODE_BITS
            dtype = np.uint16 if num_keys <= 1 << 16 else np.uint32
            self._block_key_cache = (blocks << _SIZE_CODE_BITS).astype(dtype)
        return self._block_key_cache

    def _pool_ids(self, positions: np.ndarray, members: np.ndarray, scratch: Scratch) -> np.ndarray:
        """`pools[members[i]][perm[members[i]][positions[i]]]` for every i, as int64 ids (a
        work array of `scratch`). `positions` (int64, in range) is overwritten."""
        num_ids = len(positions)
        order = None
        if len(self._pools) == 1:
            # The permutations run on "ids.b" either way ("ids.c" lends its memory to them).
            moved = scratch.array("ids.b", num_ids, np.int64)
            np.copyto(moved, positions)
            positions = moved
        else:
            # Sorted by length once (a radix sort of uint16 keys): the permutations then run
            # once per width over contiguous runs, and each pool is read with one `take`.
            order = np.argsort(members, kind="stable")
            scratch.hold("member order", order)
            sorted_members = members.take(
                order, out=scratch.array("ids.d", num_ids, members.dtype), mode="clip"
            )
            members = sorted_members
            # "ids.b" held q, which is dead by now.
            positions = positions.take(
                order, out=scratch.array("ids.b", num_ids, np.int64), mode="clip"
            )
        bounds = np.searchsorted(members, self._member_index)
        starts = [*bounds.tolist(), num_ids]
        if self._family is not None:
            self._family.permute_grouped(positions.view(np.uint64), members, starts, scratch)
        nonempty = np.flatnonzero(np.diff(bounds, append=num_ids)).tolist()
        taken = self._gather(positions, members, starts, nonempty, scratch)
        if order is None:
            return taken
        ids = scratch.array("ids.c", num_ids, np.int64)  # held positions, dead by now
        ids[order] = taken
        return ids

    def _gather(
        self,
        positions: np.ndarray,
        members: np.ndarray,
        starts: list[int],
        nonempty: list[int],
        scratch: Scratch,
    ) -> np.ndarray:
        """Read the pools: pool m's (permuted) positions are `positions[starts[m]:starts[m+1]]`
        (`members` sorted; `nonempty`: the m with any). Returns the int64 ids at them (a work
        array); `positions` is overwritten."""
        taken = scratch.array("ids.a", len(positions), np.int64)
        num_merged = len(self._merged_offsets)
        if num_merged:
            # The smallest pools, copied into one array: one `take` for all of them.
            end = starts[num_merged]
            head = positions[:end]
            offsets = self._merged_offsets.take(members[:end], out=taken[:end], mode="clip")
            head += offsets
            self._merged.take(head, out=taken[:end], mode="clip")
        pools = self._pools
        for m in nonempty:
            if m < num_merged:
                continue
            a, b = starts[m], starts[m + 1]
            pool = pools[m]
            if pool.dtype == taken.dtype:
                # mode="clip" lets np.take write straight into `out` (no range-check buffer);
                # positions are in range by construction (the tests check every id once).
                pool.take(positions[a:b], out=taken[a:b], mode="clip")
            else:
                taken[a:b] = pool[positions[a:b]]
        return taken

    def _templates_of(self, j: np.ndarray, scratch: Scratch) -> np.ndarray:
        """The template index of each canonical bin in `j` (a binary search only where the
        bucket table is ambiguous: numpy's searchsorted costs ~50 ns per random query)."""
        buckets = scratch.array("bins.buckets", len(j), np.int64)
        np.right_shift(j, self._bucket_shift, out=buckets)
        table = self._bucket_template
        t = table.take(buckets, out=scratch.array("bins.t", len(j), table.dtype), mode="clip")
        straddling = np.flatnonzero(t < 0)
        if straddling.size:
            t[straddling] = np.searchsorted(self._bin_end, j[straddling], side="right")
        return t


class _Chunk:
    """The ids of a batch of bins, and how to cut them into Python lists.

    Building a Python list per bin is most of the cost of an epoch. Bins of one size come out of
    numpy as lists in C (`ids.reshape(-1, size).tolist()`), ~2x faster per bin than slicing a
    flat list in a Python loop. So `group` lays the bins of each block of `_LIST_BINS` out by
    size: each size frequent in the batch (at least `_MIN_GROUP_BINS` bins per block on
    average; up to 15 of them) gets a code 1.., the other sizes share code 0 (sliced from one
    flat list), and the bins are sorted by (block, code), stably. `lists()` then builds each
    block group by group and puts the bins back in order with one `itemgetter`. Blocks stay
    small: the lists of a block are alive together, and the cyclic GC, which traverses the
    young lists, gets slow with many.
    """

    __slots__ = ("ends", "ids", "keys", "order", "size_of_code", "sizes")

    def __init__(self, sizes: np.ndarray) -> None:
        self.sizes = sizes  # ids per bin, in the layout's order
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
        block = min(_LIST_BINS, num_bins)
        frequent = np.flatnonzero(counts * block >= _MIN_GROUP_BINS * num_bins)
        frequent = frequent[: (1 << _SIZE_CODE_BITS) - 1]
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
        """The bins as lists, in blocks of `_LIST_BINS`, in the batch's order."""
        num_bins = len(self.ends)
        if self.keys is not None and self.order is not None:
            yield from self._grouped_lists(self.keys, self.order, scratch)
        elif self.size_of_code:  # bins of one size
            rows = self.ids.reshape(num_bins, self.size_of_code[0])
            for first in range(0, num_bins, _LIST_BINS):
                yield rows[first : first + _LIST_BINS].tolist()
        else:
            for first in range(0, num_bins, _LIST_BINS):
                yield _sliced(self.ids, self.ends, first, min(first + _LIST_BINS, num_bins))

    def _grouped_lists(
        self, keys: np.ndarray, order: np.ndarray, scratch: Scratch
    ) -> Iterator[Sequence[list[int]]]:
        ids, ends = self.ids, self.ends
        num_bins = len(ends)
        # Where each bin of the batch is in its block's layout: < _LIST_BINS, so the ints come
        # from Python's small-int cache (_LIST_BINS <= 256), nothing is allocated.
        where = scratch.array("group.where", num_bins, np.intp)
        where[order] = scratch.iota(num_bins)
        where %= _LIST_BINS
        cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        group_first = [0, *cuts.tolist(), num_bins]
        group_code = (keys.take(group_first[:-1]) & _SIZE_CODE_MASK).tolist()
        group_ids = [0, *ends.take(cuts - 1).tolist(), int(ends[-1])]
        size_of_code = self.size_of_code
        group = 0
        for first in range(0, num_bins, _LIST_BINS):
            last = min(first + _LIST_BINS, num_bins)
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


def _bucket_table(bin_end: np.ndarray) -> tuple[int, np.ndarray]:
    """(shift, table): table[b] is the template of every canonical bin j with j >> shift == b,
    or -1 where bucket b straddles two templates."""
    num_bins = int(bin_end[-1]) if len(bin_end) else 0
    target = min(_MAX_BUCKETS, _BUCKETS_PER_TEMPLATE * max(1, len(bin_end)))
    shift = max(0, (num_bins // target).bit_length() - 1) if num_bins else 0
    first = np.arange(0, num_bins, 1 << shift, dtype=np.int64)
    last = np.minimum(first + (1 << shift), num_bins) - 1
    first_template = np.searchsorted(bin_end, first, side="right")
    last_template = np.searchsorted(bin_end, last, side="right")
    table = np.where(first_template == last_template, first_template, -1)
    return shift, table.astype(np.int32 if len(bin_end) < 1 << 31 else np.int64)


def _merge_small_pools(pools: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(merged, offsets): copies of the first pools (the smallest: pools are ordered by width)
    concatenated as int64, as many as fit in `_MERGED_POOL_IDS` ids, and where each starts.

    Reading a pool costs one numpy call (~1-2 us) per batch, however few ids the batch takes
    from it; in a long-tailed length distribution thousands of pools give a batch a handful of
    ids each. Copying them once (a bounded amount of memory, whatever the pool sizes) lets one
    `take` read them all. Nothing is copied unless at least `_MIN_MERGED_POOLS` pools fit.
    """
    sizes = np.array([len(pool) for pool in pools], dtype=np.int64)
    num = int(np.searchsorted(np.cumsum(sizes), _MERGED_POOL_IDS, side="right"))
    if num < _MIN_MERGED_POOLS:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    merged = np.concatenate([np.asarray(pool, dtype=np.int64) for pool in pools[:num]])
    offsets = np.cumsum(sizes[:num]) - sizes[:num]
    return merged, offsets


def _width(n: int) -> int:
    """Bits of the words a FeistelPermutation of size n works on."""
    return (n - 1).bit_length() if n > 1 else 0


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
