"""The id pools of an epoch (`IdPools`): one array of ids per length, each read through its seeded
permutation.

Pool position p of length L holds the id `pool_L[perm_L[p]]`, `perm_L` a `FeistelPermutation`
(`seqpack_cli.epoch.permutations`) seeded by `seed_from_components(seed, L)`; without a seed,
`pool_L[p]`. The pools are checked against the templates here (`pool_arrays`), and ordered by the
bit width of their size: a batch sorts its ids by pool, which groups them by width for the
`FeistelFamily` kernel. The smallest pools are copied into one array, read with one `take` for all
of them (`EpochTuning.merged_pool_ids`).

A pool may be a `ConcatPool` (the exact-length pools a rounded length's slots take, under a
length multiple): each of its parts becomes a member of its own, keyed and seeded by its exact
length, so every read is a plain pool's `take`; `parts` tells `TemplateTables` which members
make each slot length's pool, in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.epoch.concat_pools import ConcatPool
from seqpack_cli.epoch.feistel import word_width
from seqpack_cli.epoch.permutations import FeistelFamily, FeistelPermutation
from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.epoch.tuning import EpochTuning
from seqpack_cli.errors import InputError
from seqpack_cli.seeding import seed_from_components

__all__ = ["IdPools", "pool_arrays"]


def pool_arrays(pools: Any, needed: Mapping[int, int]) -> dict[int, Any]:
    """Each needed length's pool as a 1-d integer ndarray (memory-maps stay on disk) or a
    `ConcatPool` (kept as it is: its parts are never concatenated), or `InputError` unless
    `pools` holds exactly the ids the templates need (`needed`: length -> ids of that length)."""
    if not isinstance(pools, Mapping):
        raise InputError(
            f"pools is a {type(pools).__name__}; expected a mapping length -> array of ids "
            "(as returned by length_histogram_from_lengths or load_prepared)"
        )
    arrays: dict[int, Any] = {}
    for key, value in pools.items():
        length = check_int(
            "a pool key",
            key,
            minimum=1,
            fix="pool keys are sequence lengths (convert JSON keys with int())",
            error=InputError,
        )
        # asarray keeps a np.memmap's buffer (a view, no copy) and drops the subclass, whose
        # per-operation bookkeeping would slow every gather.
        array = value if isinstance(value, ConcatPool) else np.asarray(value)
        if array.size == 0 and length not in needed:
            continue
        _check_pool(length, array, needed)
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


def _check_pool(length: int, array: Any, needed: Mapping[int, int]) -> None:
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


class IdPools:
    """The pools of an epoch and their permutations; see the module docstring.

    `pools` and `needed` as for `pool_arrays`; `seed` None for the identity permutations.
    Member m is the pool of `lengths[m]` (a slot length, or a `ConcatPool` part's exact length);
    `member_dtype` is the narrowest dtype of a member index. `parts[R]`: the (length, size) of
    the parts of slot length R's `ConcatPool`, in order (slots with a plain array are absent).
    """

    __slots__ = (
        "_family",
        "_member_index",
        "_perms",
        "arrays",
        "lengths",
        "member_dtype",
        "merged",
        "merged_offsets",
        "parts",
    )

    def __init__(
        self, pools: Any, needed: Mapping[int, int], seed: int | None, tuning: EpochTuning
    ) -> None:
        arrays, sizes, self.parts = _split_concat_pools(pool_arrays(pools, needed))
        # Ordered by the bit width of their pool size, then by length (see the module docstring).
        self.lengths = sorted(sizes, key=lambda length: (word_width(sizes[length]), length))
        self.arrays = [arrays[length] for length in self.lengths]
        # uint16 when possible: numpy sorts small unsigned keys with a radix sort.
        self.member_dtype = np.dtype(np.uint16 if len(self.lengths) <= 1 << 16 else np.int64)
        self._member_index = np.arange(len(self.lengths), dtype=self.member_dtype)
        self.merged, self.merged_offsets = _merge_small_pools(self.arrays, tuning)
        self._perms: list[FeistelPermutation] | None = None
        self._family: FeistelFamily | None = None
        if seed is not None and self.lengths:
            self._perms = [
                FeistelPermutation(len(pool), seed_from_components(seed, length))
                for length, pool in zip(self.lengths, self.arrays, strict=True)
            ]
            self._family = FeistelFamily(self._perms)

    def ids_at(self, slots: Iterable[tuple[int, int]]) -> list[int]:
        """The id at each (pool member, pool position) of `slots`, one by one (for `plan[k]`)."""
        arrays, perms = self.arrays, self._perms
        if perms is None:
            return [int(arrays[member][position]) for member, position in slots]
        return [int(arrays[member][perms[member][position]]) for member, position in slots]

    def read(self, positions: np.ndarray, members: np.ndarray, scratch: Scratch) -> np.ndarray:
        """`pools[members[i]][perm[members[i]][positions[i]]]` for every i, as int64 ids (a
        work array of `scratch`). `positions` (int64, in range) is overwritten."""
        num_ids = len(positions)
        order = None
        if len(self.arrays) == 1:
            # The permutations run on "ids.b" either way ("ids.c" lends its memory to them).
            moved = scratch.array("ids.b", num_ids, np.int64)
            np.copyto(moved, positions)
            positions = moved
        else:
            # Sorted by pool once (a radix sort of uint16 keys): the permutations then run
            # once per width over contiguous runs, and each pool is read with one `take`.
            order = np.argsort(members, kind="stable")
            scratch.hold("member order", order)
            members = members.take(
                order, out=scratch.array("ids.d", num_ids, members.dtype), mode="clip"
            )
            # "ids.b" held the slot indices, which are dead by now.
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
        num_merged = len(self.merged_offsets)
        if num_merged:
            # The smallest pools, copied into one array: one `take` for all of them.
            end = starts[num_merged]
            head = positions[:end]
            offsets = self.merged_offsets.take(members[:end], out=taken[:end], mode="clip")
            head += offsets
            self.merged.take(head, out=taken[:end], mode="clip")
        arrays = self.arrays
        for m in nonempty:
            if m < num_merged:
                continue
            a, b = starts[m], starts[m + 1]
            pool = arrays[m]
            if pool.dtype == taken.dtype:
                # mode="clip" lets np.take write straight into `out` (no range-check buffer);
                # positions are in range by construction (the tests check every id once).
                pool.take(positions[a:b], out=taken[a:b], mode="clip")
            else:
                taken[a:b] = pool[positions[a:b]]
        return taken


def _split_concat_pools(
    arrays: Mapping[int, Any],
) -> tuple[dict[int, np.ndarray], dict[int, int], dict[int, list[tuple[int, int]]]]:
    """(pools, sizes, parts): every `ConcatPool` of `arrays` (slot length -> pool) replaced by
    its nonempty parts, keyed by their exact lengths; `parts` as `IdPools.parts`. A `ValueError`
    if an exact length is the key of two pools (their permutations would share a seed)."""
    pools: dict[int, np.ndarray] = {}
    parts: dict[int, list[tuple[int, int]]] = {}
    for slot, array in arrays.items():
        if isinstance(array, ConcatPool):
            parts[slot] = [
                (length, len(part))
                for length, part in zip(array.lengths, array.parts, strict=True)
                if len(part)
            ]
            members = [
                (length, part) for length, part in zip(array.lengths, array.parts, strict=True)
            ]
        else:
            members = [(slot, array)]
        for length, part in members:
            if length in pools:
                raise ValueError(
                    f"the pools hold two pools of length {length} (slot {slot} and another); "
                    "give each exact length to one ConcatPool or plain pool"
                )
            if len(part) or not isinstance(array, ConcatPool):
                pools[length] = np.asarray(part)
    return pools, {length: len(pool) for length, pool in pools.items()}, parts


def _merge_small_pools(
    pools: list[np.ndarray], tuning: EpochTuning
) -> tuple[np.ndarray, np.ndarray]:
    """(merged, offsets): copies of the first pools (the smallest: pools are ordered by width)
    concatenated as int64, as many as fit in `tuning.merged_pool_ids` ids, and where each starts.

    Reading a pool costs one numpy call (~1-2 us) per batch, however few ids the batch takes
    from it; in a long-tailed length distribution thousands of pools give a batch a handful of
    ids each. Copying them once (a bounded amount of memory, whatever the pool sizes) lets one
    `take` read them all. Nothing is copied unless at least `tuning.min_merged_pools` pools fit.
    """
    sizes = np.array([len(pool) for pool in pools], dtype=np.int64)
    num = int(np.searchsorted(np.cumsum(sizes), tuning.merged_pool_ids, side="right"))
    if num < tuning.min_merged_pools:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    merged = np.concatenate([np.asarray(pool, dtype=np.int64) for pool in pools[:num]])
    offsets = np.cumsum(sizes[:num]) - sizes[:num]
    return merged, offsets
