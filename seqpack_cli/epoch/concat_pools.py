"""`ConcatPool`: one pool made of several id arrays, read as their concatenation without a copy.

With a length multiple m (`Prepared.repack(length_multiple=m)`, `prepare --length-multiple m`),
a template slot of rounded length R takes any sequence whose length lies in (R - m, R], so the
pool of R is the pools of those exact lengths one after the other. They stay where they are
(memory-mapped files stay mapped): a read of positions finds each position's part by comparing
it with the few part boundaries, groups the positions by part, then reads each part with one
`take`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ConcatPool"]


class ConcatPool:
    """The concatenation of 1-d integer id arrays `parts`, read in place.

    Behaves as the 1-d int64 array of the parts back to back where the epoch reads pools:
    `len`, `size`, `ndim`, `dtype`, `shape`, `pool[i]`, `pool[positions]` and
    `pool.take(positions, out=..., mode=...)`. `np.asarray(pool)` builds the concatenated copy
    (for the epoch's small pools only, which it copies anyway).
    """

    __slots__ = ("_starts", "offsets", "parts")

    ndim = 1
    dtype = np.dtype(np.int64)

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = tuple(np.asarray(part) for part in parts)
        for part in self.parts:
            if part.ndim != 1 or part.dtype.kind not in "iu":
                raise ValueError(
                    f"a ConcatPool part is a {part.ndim}-d array of dtype {part.dtype}; "
                    "expected 1-d integer ids"
                )
        sizes = np.array([part.shape[0] for part in self.parts], dtype=np.int64)
        self.offsets = np.zeros(len(self.parts) + 1, dtype=np.int64)
        """Where each part starts in the concatenation; the last entry is its size."""
        np.cumsum(sizes, out=self.offsets[1:])
        # The inner boundaries: searchsorted(side="right") on them gives a position's part.
        self._starts = self.offsets[1:-1]

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def __len__(self) -> int:
        return self.size

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = np.concatenate([part.astype(np.int64, copy=False) for part in self.parts])
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            position = int(index)
            if position < 0:
                position += self.size
            if not 0 <= position < self.size:
                raise IndexError(f"index {index} is out of range for a pool of {self.size} ids")
            part = int(np.searchsorted(self._starts, position, side="right"))
            return self.parts[part][position - int(self.offsets[part])]
        positions = np.asarray(index)
        if positions.dtype.kind not in "iu":
            raise TypeError(f"a ConcatPool is indexed by integer positions, not {index!r}")
        positions = np.where(positions < 0, positions + self.size, positions)
        if positions.size and not (positions.min() >= 0 and positions.max() < self.size):
            raise IndexError(f"positions out of range for a pool of {self.size} ids")
        return self.take(positions)

    def take(
        self, positions: np.ndarray, out: np.ndarray | None = None, mode: str = "raise"
    ) -> Any:
        """The ids at `positions` (in [0, size); `mode` as for `np.take`, "clip" skipping the
        range check), into `out` (int64) if given."""
        positions = np.asarray(positions, dtype=np.int64)
        if out is None:
            out = np.empty(positions.shape, dtype=np.int64)
        if mode == "raise" and positions.size:
            low, high = int(positions.min()), int(positions.max())
            if low < 0 or high >= self.size:
                bad = low if low < 0 else high
                raise IndexError(f"position {bad} is out of range for a pool of {self.size} ids")
        if len(self.parts) == 1:
            self.parts[0].take(positions, out=out, mode="clip")
            return out
        # Each position's part: the count of inner boundaries at or below it (a few vectorised
        # comparisons; numpy's searchsorted costs ~20 ns per random needle). Then the positions
        # are grouped by part (a radix sort of uint8 keys), each part read with one take, and
        # the ids put back in order: ~35 ns per id against ~55 ns for a mask per part.
        key_type = np.uint8 if len(self.parts) < 256 else np.int64
        part_of: np.ndarray = np.zeros(positions.shape[0], dtype=key_type)
        for start in self._starts.tolist():
            np.add(part_of, positions >= start, out=part_of, casting="unsafe")
        order = np.argsort(part_of, kind="stable")
        counts = np.bincount(part_of, minlength=len(self.parts)).tolist()
        grouped = positions.take(order)
        ids = np.empty(positions.shape[0], dtype=np.int64)
        first = 0
        for array, start, count in zip(self.parts, self.offsets.tolist(), counts, strict=False):
            if count:
                local = grouped[first : first + count]
                if start:
                    local -= start
                array.take(local, out=ids[first : first + count], mode="clip")
            first += count
        out[order] = ids
        return out

    def __repr__(self) -> str:
        return f"ConcatPool({len(self.parts)} parts, {self.size} ids)"


class ConcatReader:
    """Reads the `ConcatPool`s of an epoch's batch all at once (`IdPools` uses it).

    A batch draws a few hundred ids from each of hundreds of slot pools; reading each pool by
    itself costs ~35 numpy calls per pool and batch, more than the reads. Here every part of
    every `ConcatPool` member gets a place in one global coordinate (member m's positions start
    at `base[m]`), a bucket table finds the part of a global position in O(1) (a binary search
    only in the few buckets that straddle two parts, as `seqpack_cli.epoch.tables` does for
    templates), and the batch's positions are grouped by part with one radix sort: one `take`
    per part, as many numpy calls as the parts, whatever the number of pools.
    """

    __slots__ = ("_base", "_is_concat", "_part_start", "_parts", "_shift", "_table")

    # Buckets per part (at most 2**20 in all): few buckets straddle two parts.
    _BUCKETS_PER_PART = 32
    _MAX_BUCKETS = 1 << 20

    def __init__(self, arrays: Sequence[Any], members: Sequence[int]) -> None:
        """`arrays`: the epoch's pools by member; `members`: the ConcatPool members to read."""
        self._is_concat = np.zeros(len(arrays), dtype=bool)
        self._base = np.zeros(len(arrays), dtype=np.int64)
        starts: list[int] = []
        parts: list[np.ndarray] = []
        total = 0
        for m in members:
            pool = arrays[m]
            self._is_concat[m] = True
            self._base[m] = total
            starts += (pool.offsets[:-1] + total).tolist()
            parts += pool.parts
            total += pool.size
        self._parts = parts
        self._part_start = np.array(starts, dtype=np.int64)
        target = min(self._MAX_BUCKETS, self._BUCKETS_PER_PART * max(1, len(parts)))
        self._shift = max(0, (total // target).bit_length() - 1) if total else 0
        first = np.arange(0, total, 1 << self._shift, dtype=np.int64)
        last = np.minimum(first + (1 << self._shift), total) - 1
        first_part = np.searchsorted(self._part_start, first, side="right") - 1
        last_part = np.searchsorted(self._part_start, last, side="right") - 1
        self._table = np.where(first_part == last_part, first_part, -1).astype(np.int32)

    def __bool__(self) -> bool:
        return bool(self._parts)

    def read(self, positions: np.ndarray, members: np.ndarray, out: np.ndarray) -> None:
        """`out[i] = arrays[members[i]][positions[i]]` for every i whose member is one of the
        reader's ConcatPools (the others are left as they are)."""
        flags = self._is_concat.take(members)
        first = int(flags.argmax()) if flags.size else 0
        if not flags.size or not flags[first]:
            return
        if flags[first:].all():
            # Members are sorted: the common case, every member from some point on a
            # ConcatPool (the others merged), is a slice, with no index array.
            where: np.ndarray | slice = slice(first, len(members))
            g = positions[first:] + self._base.take(members[first:])
        else:
            where = np.flatnonzero(flags)
            g = positions.take(where)
            g += self._base.take(members.take(where))
        part = self._table.take(g >> self._shift)
        straddling = np.flatnonzero(part < 0)
        if straddling.size:
            part[straddling] = (
                np.searchsorted(self._part_start, g.take(straddling), side="right") - 1
            )
        g -= self._part_start.take(part)  # the position within its part
        key = part.astype(np.uint16) if len(self._parts) <= 1 << 16 else part
        order = np.argsort(key, kind="stable")
        local = g.take(order)
        sorted_part = part.take(order)
        cuts = np.flatnonzero(sorted_part[1:] != sorted_part[:-1]) + 1
        bounds = [0, *cuts.tolist(), len(order)]
        ids = np.empty(len(order), dtype=np.int64)
        for k, p in enumerate(sorted_part.take(bounds[:-1]).tolist()):
            a, b = bounds[k], bounds[k + 1]
            array = self._parts[p]
            if array.dtype == ids.dtype:
                array.take(local[a:b], out=ids[a:b], mode="clip")
            else:
                ids[a:b] = array[local[a:b]]
        if isinstance(where, slice):
            out[where][order] = ids
        else:
            out[where.take(order)] = ids
