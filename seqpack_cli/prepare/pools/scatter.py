"""The pools pass for wide id spans: scatter each streamed id to its length's next free slot.

Used when ids span more than `PoolTuning.max_map_ids` values (sparse `--id-column` ids), where
the id -> length map of `id_map` would not stay bounded. Ids land in stream order within each
pool, so the pools are sorted afterwards (`split`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from seqpack_cli.prepare.pools.offsets import Layout, changed_error
from seqpack_cli.progress import ProgressCallback

__all__ = ["scatter"]


def _place(
    flat: np.memmap,
    index: np.ndarray,
    ids: np.ndarray,
    batch_counts: np.ndarray,
    base: np.ndarray,
    *,
    track_range: bool,
) -> tuple[int, int] | None:
    """Write one batch's ids to their reserved slots (`base[pool]` onwards for each pool)."""
    # A stable counting order (radix sort on the uint16 index) keeps each pool's ids in stream
    # order, so already-ascending ids need no sort later.
    order = np.argsort(index, kind="stable")
    batch_starts = np.cumsum(batch_counts) - batch_counts
    positions = np.repeat(base - batch_starts, batch_counts)
    positions += np.arange(len(index), dtype=np.int64)
    flat[positions] = ids[order]
    return (int(ids.min()), int(ids.max())) if track_range else None


def scatter(
    batches: Iterator[list[np.ndarray]],
    layout: Layout,
    flat_path: Path,
    to_ids: Callable[[list[np.ndarray]], np.ndarray],
    *,
    workers: int,
    track_range: bool,
    progress: ProgressCallback | None,
) -> tuple[int | None, int | None]:
    """Put every streamed id at its pool's next free slot of the flat work file.

    This thread reserves each batch's slots (a bincount per batch moves per-pool cursors);
    worker threads order and write the batches, which touch disjoint slots.
    """
    num = len(layout.lengths)
    cursor = layout.starts[:-1].copy()
    ends = layout.starts[1:]
    low: int | None = None
    high: int | None = None
    pending: deque[Future[tuple[int, int] | None]] = deque()

    def collect(future: Future[tuple[int, int] | None]) -> None:
        nonlocal low, high
        result = future.result()
        if result is not None:
            low = result[0] if low is None else min(low, result[0])
            high = result[1] if high is None else max(high, result[1])

    flat = np.memmap(flat_path, dtype=np.int64, mode="r+", shape=(layout.num_ids,))
    mapped_rows = 0
    done = 0
    with ThreadPoolExecutor(workers, thread_name_prefix="seqpack-scatter") as executor:
        for columns in batches:
            size = len(columns[0])
            if not size:
                continue
            ids = to_ids(columns)
            # Any length the histogram did not see gets the sentinel position (num).
            index = layout.positions(columns[0])
            batch_counts = np.bincount(index, minlength=num + 1)
            if batch_counts[num] or np.any(cursor + batch_counts[:num] > ends):
                raise changed_error()
            batch_counts = batch_counts[:num]
            if mapped_rows >= layout.tuning.remap_rows:
                # Dropping the mapping drops its written pages from this process's RSS (they
                # stay in the page cache), so resident memory does not grow with the rows.
                while pending:
                    collect(pending.popleft())
                flat = np.memmap(flat_path, dtype=np.int64, mode="r+", shape=(layout.num_ids,))
                mapped_rows = 0
            pending.append(
                executor.submit(
                    _place, flat, index, ids, batch_counts, cursor.copy(), track_range=track_range
                )
            )
            cursor += batch_counts
            mapped_rows += size
            done += size
            while len(pending) > workers:
                collect(pending.popleft())
            if progress is not None:
                progress("pools", done, layout.num_ids)
        while pending:
            collect(pending.popleft())
    del flat
    if not np.array_equal(cursor, ends):
        raise changed_error()
    return low, high
