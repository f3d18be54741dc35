"""The pools from (length, id) chunks whose ids already come in ascending order: `append_ascending`.

The one-pass token store (`prepare.one_pass`) knows every sequence's length from its offsets and
its ids in ascending order (row indexes, or the id index it sorted anyway), so the pools need
neither the id map nor the scatter and sort of `scan`: a stable counting sort of each chunk's
lengths groups its ids by length, still ascending, and each group is appended to its pool file,
chunk after chunk, so every pool is written ascending, once (`IdMap.write_pools` does the same
with the ids its map puts in order). Memory: one chunk and the batched small appends.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from seqpack_cli.prepare.pools.id_map import AppendBatcher
from seqpack_cli.prepare.pools.offsets import Layout, PoolAppend, changed_error
from seqpack_cli.progress import ProgressCallback

__all__ = ["append_ascending"]


def append_ascending(
    chunks: Iterable[tuple[np.ndarray, np.ndarray]],
    layout: Layout,
    append: PoolAppend,
    *,
    progress: ProgressCallback | None = None,
) -> tuple[int | None, int | None]:
    """Append the ids of every (lengths, ids) chunk to their lengths' pools; the chunks' ids must
    be ascending across chunks. Returns the (min, max) id placed.

    Raises the changed-inputs `InputError` for a length the layout lacks or more ids of a length
    than it counts (the chunks and the histogram disagree).
    """
    num = len(layout.lengths)
    totals = np.zeros(num, dtype=np.int64)
    batcher = AppendBatcher(append, layout.tuning)
    low: int | None = None
    high: int | None = None
    done = 0
    for lengths, ids in chunks:
        if not ids.size:
            continue
        positions = layout.positions(lengths)
        counts = np.bincount(positions, minlength=num + 1)
        if counts[num] or np.any(totals + counts[:num] > layout.sizes):
            raise changed_error()
        totals += counts[:num]
        # Stable: within one length the ids keep their (ascending) order.
        grouped = ids[np.argsort(positions, kind="stable")]
        present = np.flatnonzero(counts[:num])
        ends = np.cumsum(counts[present]).tolist()
        begin = 0
        for position, end in zip(present.tolist(), ends, strict=True):
            batcher.add(int(layout.lengths[position]), grouped[begin:end])
            begin = end
        low = int(ids[0]) if low is None else low
        high = int(ids[-1])
        done += ids.size
        if progress is not None:
            progress("write pools", done, layout.num_ids)
    batcher.flush_all()
    if not np.array_equal(totals, layout.sizes):
        raise changed_error()
    return low, high
