"""Where each length's pool sits: pools back to back, lengths ascending, sized by the histogram.

The flat work file of the scatter path holds every pool at these offsets; `scatter` fills it and
`split` cuts it into `pools/{length}.npy`. `id_map` needs no work file, only the counts and the
length -> pool lookup (`Layout.positions`) that both paths share. The sizes they work in are a
`PoolTuning` (`tuning`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.pools.tuning import PoolTuning

__all__ = ["Layout", "PoolAppend", "changed_error", "read_ids"]

PoolAppend = Callable[[int, np.ndarray], None]
"""`append(length, ids)`: the next ascending ids of one pool (`PreparedWriter.append_pool`);
one pool's appends come in order, different pools' from any thread."""


def num_workers(threads: int | None, tuning: PoolTuning) -> int:
    """Worker threads for placing and splitting: `threads`, or every core, capped."""
    return max(1, min(threads or os.cpu_count() or 1, tuning.max_workers))


def changed_error() -> InputError:
    """The error for a second pass that disagrees with the first (files rewritten meanwhile)."""
    return InputError(
        "the inputs changed while prepare was reading them (the second pass saw rows the first "
        "did not); re-run prepare once nothing is writing to the input files"
    )


class Layout:
    """Where each length's pool sits in the flat work file: pools back to back, ascending."""

    def __init__(self, counts: Mapping[int, int], tuning: PoolTuning | None = None) -> None:
        self.tuning = tuning = tuning or PoolTuning()
        self.lengths = np.array(sorted(counts), dtype=np.int64)
        self.sizes = np.array([counts[int(x)] for x in self.lengths], dtype=np.int64)
        self.starts = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.sizes, out=self.starts[1:])
        self.num_ids = int(self.starts[-1])
        num = len(self.lengths)
        self.position_dtype = np.dtype(np.uint16 if num < np.iinfo(np.uint16).max else np.uint32)
        # `table[length]`: the position of each length's pool, for lengths up to `table_end`;
        # `num` (one past the last) for lengths not in the counts. Longer lengths are searched.
        self.table_end = min(int(self.lengths[-1]) if num else 0, tuning.max_table_length)
        self._num_short = int(np.searchsorted(self.lengths, self.table_end, side="right"))
        self.table = np.full(self.table_end + 2, num, dtype=self.position_dtype)
        self.table[self.lengths[: self._num_short]] = np.arange(self._num_short)

    def positions(self, lengths: np.ndarray) -> np.ndarray:
        """The pool position of each of `lengths` (any integer dtype), `len(self.lengths)` for a
        length the layout does not hold; in `position_dtype`.

        Short lengths (the usual case, and most rows of long-context data) take one lookup in
        `table`; only lengths past `table_end` are searched among the long distinct lengths.
        """
        num = len(self.lengths)
        # mode='clip' sends any length past the table to its last slot, the sentinel (and a
        # length <= 0, which the histogram pass refused, to slot 0, the sentinel too).
        positions = np.take(self.table, lengths, mode="clip")
        if self._num_short == num:
            return positions
        beyond = np.flatnonzero(lengths > self.table_end)
        if beyond.size:
            long_lengths = self.lengths[self._num_short :]
            # int64 keys: searching uint64 keys among int64 lengths would compare them as
            # floats. A uint64 length past int64 wraps to a negative key, which matches none.
            keys = lengths[beyond].astype(np.int64)
            found = np.searchsorted(long_lengths, keys)
            hit = long_lengths[np.minimum(found, long_lengths.size - 1)] == keys
            positions[beyond] = np.where(hit, found + self._num_short, num)
        return positions

    def units(self) -> list[tuple[int, int]]:
        """The split's units of work: runs of consecutive pools of about `unit_ids` ids, and
        each pool over `max_sort_ids` alone (it is sorted in runs and merged, never whole)."""
        unit_ids, max_sort_ids = self.tuning.unit_ids, self.tuning.max_sort_ids
        units = []
        first = 0
        for position, size in enumerate(self.sizes.tolist()):
            if size > max_sort_ids:
                if first < position:
                    units.append((first, position))
                units.append((position, position + 1))
                first = position + 1
            elif self.starts[position + 1] - self.starts[first] >= unit_ids:
                units.append((first, position + 1))
                first = position + 1
        if first < len(self.sizes):
            units.append((first, len(self.sizes)))
        return units


def read_ids(handle: Any, start: int, count: int) -> np.ndarray:
    """`count` int64 ids of the open work file from id position `start`."""
    ids = np.empty(count, dtype=np.int64)
    handle.seek(8 * start)
    view = ids.data.cast("B")
    got = 0
    while got < len(view):
        read = handle.readinto(view[got:])
        if not read:
            raise changed_error()
        got += read
    return ids
