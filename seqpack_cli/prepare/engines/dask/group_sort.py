"""A file group's ids ordered in memory: grouped by length, ascending within each length.

For groups that fit `ClusterTuning.memory_ids` (larger ones go through the local engine's
bounded paths, the id map or the scatter into a work file). Sorting is cheap here: numpy's SIMD
sort orders 17M int64 in about 0.2 s, faster than a counting sort by length followed by a gather.
So where the length's pool position and the id's offset from the smallest id fit one int64
(`position << 48 | offset`: fewer than 2**15 distinct lengths, ids spanning less than 2**48,
which row indexes, dense and sparse ids do), one sort of those keys orders everything; other ids
(hashed over all of int64) are grouped by a stable counting sort on the position, then each pool
is sorted. Memory: 8 bytes per id (the keys), or 18 plus a copy of 8 on the other way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import numpy as np

from seqpack_cli.prepare.pools.offsets import Layout, changed_error
from seqpack_cli.prepare.pools.split import sort_pools

__all__ = ["ids_by_length"]

_OFFSET_BITS = 48
_MAX_POSITIONS = 1 << (63 - _OFFSET_BITS)


_buffers = threading.local()


def _scratch(size: int) -> np.ndarray:
    """`size` int64 of this thread's buffer, kept from one task to the next: fresh memory costs
    a page fault per 4 KiB the first time it is written (on some VMs about 2 s per GiB), and a
    worker runs task after task of about the same size. Holds at most the largest group seen
    (`ClusterTuning.memory_ids`: 64 MiB)."""
    buffer = getattr(_buffers, "keys", None)
    if buffer is None or buffer.size < size:
        buffer = _buffers.keys = np.empty(size, dtype=np.int64)
    return buffer[:size]


def _packs(layout: Layout, bounds: tuple[int, int] | None) -> bool:
    return (
        bounds is not None
        and bounds[1] - bounds[0] < 1 << _OFFSET_BITS
        and len(layout.lengths) < _MAX_POSITIONS
    )


def ids_by_length(
    batches: Iterable[list[np.ndarray]],
    layout: Layout,
    to_ids: Callable[[list[np.ndarray]], np.ndarray],
    bounds: tuple[int, int] | None,
) -> np.ndarray:
    """Every streamed id (batches of [length, ...] columns, `to_ids` giving the ids) in the
    layout's order: pools back to back, each ascending. `bounds`: the ids' [min, max] if known.
    The result lives in this thread's buffer until the thread's next call.

    Raises the changed-inputs `InputError` where the stream disagrees with the layout (a count,
    a length it does not hold, an id outside `bounds`).
    """
    num = len(layout.lengths)
    packed = _packs(layout, bounds)
    low = bounds[0] if bounds is not None else 0
    keys = _scratch(layout.num_ids)
    positions = None if packed else np.empty(layout.num_ids, dtype=layout.position_dtype)
    seen = np.zeros(num + 1, dtype=np.int64)
    at = 0
    for columns in batches:
        size = len(columns[0])
        if not size:
            continue
        if at + size > layout.num_ids:
            raise changed_error()
        position = layout.positions(columns[0])
        seen += np.bincount(position, minlength=num + 1)
        ids = to_ids(columns)
        if packed:
            assert bounds is not None
            if int(ids.min()) < bounds[0] or int(ids.max()) > bounds[1]:
                raise changed_error()  # the footers' statistics promised otherwise
            part = keys[at : at + size]
            np.subtract(ids, low, out=part, casting="unsafe")
            part |= position.astype(np.int64) << _OFFSET_BITS
        else:
            assert positions is not None
            keys[at : at + size] = ids
            positions[at : at + size] = position
        at += size
    if at != layout.num_ids or seen[num] or not np.array_equal(seen[:num], layout.sizes):
        raise changed_error()
    if packed:
        keys.sort()
        keys &= (1 << _OFFSET_BITS) - 1
        keys += low
        return keys
    assert positions is not None
    order = np.argsort(positions, kind="stable")  # a radix sort: stream order within a pool
    del positions
    grouped = keys[order]
    del order, keys
    sort_pools(grouped, layout.starts)
    return grouped
