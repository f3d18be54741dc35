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
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.seeding import (
    FeistelFamily,
    FeistelPermutation,
    _optional_seed,
    seed_from_components,
)

__all__ = ["EpochPlan", "canonical_templates", "materialize_epoch"]

logger = logging.getLogger(__name__)

Template = tuple[int, ...]

# Bins are computed in batches of about 128 ids per distinct length (numpy calls are made per
# length present in a batch, and per cycle-walking round, and must each do enough work to
# amortise their overhead), within [_MIN_BATCH_IDS, _BATCH_IDS]: smaller batches stay in cache;
# the cap bounds the batch's memory (a dozen int64 arrays of the batch size, ~25 MB at the cap).
_IDS_PER_LENGTH = 128
_BATCH_IDS = 1 << 18
_MIN_BATCH_IDS = 1 << 16
# Canonical bin -> template look-up: a table over buckets of 2**shift bins, at least this many
# buckets per template, so that at most 1/8 of the buckets straddle two templates (those, and
# only those, fall back to a binary search).
_BUCKETS_PER_TEMPLATE = 8
# Bins turned into Python lists at a time while iterating. The lists of a block are alive
# together while the consumer walks through it; small blocks keep few of them alive at each
# collection of the cyclic GC, which would otherwise promote and re-traverse them (2048-bin
# blocks iterate ~10% slower than 256-bin ones).
_LIST_BINS = 256
# Seed component that stands for the bin order; lengths are >= 1, so it never collides with
# the (seed, length) seeds of the pools.
_ORDER_COMPONENT = 0


def _positive_int(value: Any, what: str, fix: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{what} is the bool {value!r}; expected a positive integer; {fix}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InputError(
            f"{what} is {value!r} of type {type(value).__name__}; expected a positive integer; "
            f"{fix}"
        ) from None
    if number <= 0:
        raise InputError(f"{what} is {number}; expected a positive integer; {fix}")
    return number


def canonical_templates(templates: Any) -> list[tuple[Template, int]]:
    """Validated `(template, multiplicity)` pairs in canonical order (templates descending).

    `templates` is a Mapping (a `Counter[BinTemplate]`) or an iterable of
    `(template, multiplicity)` pairs (the templates.json form, lists allowed). Each template's
    lengths are sorted descending; pairs naming the same template are merged.
    """
    fix = "templates come from pack_length_histogram_batched or a prepared/ templates.json"
    if isinstance(templates, Mapping):
        pairs: Iterable[Any] = templates.items()
    elif isinstance(templates, (str, bytes)) or not isinstance(templates, Iterable):
        raise InputError(
            f"templates is a {type(templates).__name__}; expected a Counter of length tuples "
            f"or (template, multiplicity) pairs; {fix}"
        )
    else:
        pairs = templates
    merged: dict[Template, int] = {}
    for number, pair in enumerate(pairs):
        try:
            raw_template, raw_multiplicity = pair
        except (TypeError, ValueError):
            raise InputError(
                f"templates entry {number} is {pair!r}; expected a (template, multiplicity) pair; "
                f"{fix}"
            ) from None
        if isinstance(raw_template, (str, bytes)) or not isinstance(raw_template, Iterable):
            raise InputError(
                f"template {number} is {raw_template!r}; expected a tuple of lengths; {fix}"
            )
        lengths = [
            _positive_int(length, f"length {length!r} in template {number}", fix)
            for length in raw_template
        ]
        if not lengths:
            raise InputError(f"template {number} is empty; a bin holds at least one length; {fix}")
        multiplicity = _positive_int(
            raw_multiplicity, f"multiplicity of template {tuple(lengths)}", fix
        )
        template = tuple(sorted(lengths, reverse=True))
        merged[template] = merged.get(template, 0) + multiplicity
    return sorted(merged.items(), reverse=True)


def _pool_arrays(pools: Any, needed: Mapping[int, int]) -> dict[int, np.ndarray]:
    """Each needed length's pool as a 1-d integer ndarray (memory-maps stay on disk)."""
    if not isinstance(pools, Mapping):
        raise InputError(
            f"pools is a {type(pools).__name__}; expected a mapping length -> array of ids "
            "(as returned by length_histogram_from_lengths or load_prepared)"
        )
    arrays: dict[int, np.ndarray] = {}
    for key, value in pools.items():
        length = _positive_int(
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
    `plan.bins(start, stop)` computes a batch at once. Bins are computed in batches of up to
    2**18 ids (~16 MB of temporaries at most, whatever the size of the epoch).
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

        total = self.num_bins_total
        if self.drop_last:
            self._len = total // self.world_size
        else:
            self._len = -(-total // self.world_size)
        mean_size = math.ceil(self.num_sequences / total) if total else 1
        batch_ids = min(_BATCH_IDS, max(_MIN_BATCH_IDS, _IDS_PER_LENGTH * len(self._lengths)))
        self._batch_bins = max(1, batch_ids // mean_size)
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
        return itertools.chain.from_iterable(self._blocks_from(int(start)))

    def _blocks_from(self, start: int) -> Iterator[list[list[int]]]:
        for first in range(start, self._len, self._batch_bins):
            ids, ends = self._ids_of(first, min(first + self._batch_bins, self._len))
            # Python lists are built a few hundred bins at a time, as they are consumed: the
            # memory of the previous lists is reused while it is still in cache.
            for row in range(0, len(ends), _LIST_BINS):
                yield _split_rows(ids, ends, row, row + _LIST_BINS)

    def bins(self, start: int, stop: int) -> list[list[int]]:
        """This rank's bins `start .. stop-1` (slice semantics: negative values count from the
        end, out-of-range values are clipped), computed vectorised."""
        first, last, _ = slice(start, stop).indices(self._len)
        out: list[list[int]] = []
        for batch in range(first, last, self._batch_bins):
            ids, ends = self._ids_of(batch, min(batch + self._batch_bins, last))
            out.extend(_split_rows(ids, ends, 0, len(ends)))
        return out

    def _ids_of(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
        """The ids of bins first..last-1 (0 <= first < last <= len), flat and bin after bin,
        and the end offset of each bin in them, in one vectorised pass.

        Batch-sized temporaries are dropped as soon as they are used (`del`): they are what the
        memory of an epoch consists of.
        """
        g = np.arange(first, last, dtype=np.int64)
        g *= self.world_size
        g += self.rank
        if not self.drop_last and g[-1] >= self.num_bins_total:
            g %= self.num_bins_total  # the DistributedSampler padding wraps around
        if self._order is not None:
            self._order.permute_inplace(g.view(np.uint64))  # values < 2**63: same bits
        t = self._templates_of(g)
        occurrence = g - self._bin_start.take(t)
        del g
        sizes = self._size.take(t)
        ends = np.cumsum(sizes)
        # q: the flat slot index of every id of the batch, bin after bin.
        q = np.repeat(self._slot_start.take(t) - (ends - sizes), sizes)
        del t
        q += np.arange(len(q))
        positions = np.repeat(occurrence, sizes)
        del occurrence, sizes
        positions *= self._slot_stride.take(q)
        positions += self._slot_base.take(q)
        members = self._slot_length.take(q)
        del q
        if len(self._pools) == 1:
            if self._family is not None:
                self._family.permute_inplace(members, positions.view(np.uint64))
            return self._pools[0].take(positions), ends
        # Sorted by length once: each pool is then read with one `take` on a contiguous run,
        # and the permutations' per-length parameters are looked up sequentially.
        order = np.argsort(members, kind="stable")
        members = members[order]
        positions = positions[order]
        if self._family is not None:
            self._family.permute_inplace(members, positions.view(np.uint64))
        cuts = np.flatnonzero(members[1:] != members[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(order)]
        heads = members[bounds[:-1]].tolist()
        del members, cuts
        taken = np.empty(len(order), dtype=np.int64)
        pools = self._pools
        for head, a, b in zip(heads, bounds[:-1], bounds[1:], strict=True):
            pool = pools[head]
            if pool.dtype == taken.dtype:
                # mode="clip" lets np.take write straight into `out` (no range-check buffer);
                # positions are in range by construction (the tests check every id once).
                pool.take(positions[a:b], out=taken[a:b], mode="clip")
            else:
                taken[a:b] = pool[positions[a:b]]
        del positions
        ids = np.empty_like(taken)
        ids[order] = taken
        return ids, ends

    def _templates_of(self, j: np.ndarray) -> np.ndarray:
        """The template index of each canonical bin in `j` (a binary search only where the
        bucket table is ambiguous: numpy's searchsorted costs ~50 ns per random query)."""
        t = self._bucket_template.take(j >> self._bucket_shift)
        straddling = np.flatnonzero(t < 0)
        if straddling.size:
            t[straddling] = np.searchsorted(self._bin_end, j[straddling], side="right")
        return t


def _bucket_table(bin_end: np.ndarray) -> tuple[int, np.ndarray]:
    """(shift, table): table[b] is the template of every canonical bin j with j >> shift == b,
    or -1 where bucket b straddles two templates."""
    num_bins = int(bin_end[-1]) if len(bin_end) else 0
    target = _BUCKETS_PER_TEMPLATE * max(1, len(bin_end))
    shift = max(0, (num_bins // target).bit_length() - 1) if num_bins else 0
    first = np.arange(0, num_bins, 1 << shift, dtype=np.int64)
    last = np.minimum(first + (1 << shift), num_bins) - 1
    first_template = np.searchsorted(bin_end, first, side="right")
    last_template = np.searchsorted(bin_end, last, side="right")
    return shift, np.where(first_template == last_template, first_template, -1)


def _width(n: int) -> int:
    """Bits of the words a FeistelPermutation of size n works on."""
    return (n - 1).bit_length() if n > 1 else 0


def _split_rows(ids: np.ndarray, ends: np.ndarray, first: int, last: int) -> list[list[int]]:
    """Bins first..last-1 of a batch as Python lists (`ends[k]`: end offset of bin k in `ids`)."""
    block = ends[first:last]
    if not len(block):
        return []
    begin = int(ends[first - 1]) if first > 0 else 0
    sizes = np.diff(block, prepend=begin)
    if sizes[0] == sizes.min() == sizes.max():  # bins of one size: numpy builds the lists
        return ids[begin : int(block[-1])].reshape(len(block), int(sizes[0])).tolist()
    bounds = block.tolist()
    flat = ids[begin : bounds[-1]].tolist()
    rows: list[list[int]] = []
    append = rows.append
    a = 0
    for end in bounds:
        b = end - begin
        append(flat[a:b])
        a = b
    return rows


def materialize_epoch(
    templates: Any,
    pools: Mapping[int, Any],
    seed: int | None = None,
    *,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
    start: int = 0,
) -> Iterator[list[int]]:
    """Yield the concrete bins (lists of ids) of one epoch: `EpochPlan(...).iter(start)`.

    The reference signature, plus sharding (`rank`, `world_size`, `drop_last`) and resume
    (`start`). Arguments are validated at the call, not at the first `next()`.
    """
    plan = EpochPlan(templates, pools, seed, rank=rank, world_size=world_size, drop_last=drop_last)
    return plan.iter(start)
