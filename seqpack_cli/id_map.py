"""The pools pass for bounded id spans: an id -> length map, turned into ascending pools.

When every id lies in a span of at most `pool_layout.MAX_MAP_IDS` values (row indexes always do
up to that many rows; `--id-column` ids do when they are dense, e.g. a shuffled 0..n-1), sorting
is not needed at all:

1. while DuckDB streams (length, id), each id's slot in a uint16 map over the span gets its
   length's code (1 + the length's index; 0 marks an id that never occurs): one store per id;
2. the map is read back in ascending id order, `MAP_CHUNK_IDS` at a time; a stable radix argsort
   of each chunk's codes (small enough to stay in cache) groups the chunk's ids by length, still
   ascending, and they go to the next free slots of their pools in the flat work file. Every pool
   ends up ascending, so the split only copies.

The map costs 2 bytes per possible id, 256 MiB at most whatever the number of rows (wider spans
take `pool_scatter`). It also finds duplicate ids: a duplicate overwrites its own slot, so fewer
slots are filled than ids were streamed. Workers fill disjoint id ranges of the map in parallel,
each starting from the per-pool offsets that the counts of the ranges before it give.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from seqpack_cli import pool_layout
from seqpack_cli.pool_layout import Layout, changed_error
from seqpack_cli.progress import ProgressCallback

__all__ = ["IdMap", "fits"]

_MAX_CODE = np.iinfo(np.uint16).max


def fits(layout: Layout, id_min: int, id_max: int) -> bool:
    """Whether ids in [id_min, id_max] and the layout's lengths fit a bounded uint16 map."""
    # Codes: 0 = no id, 1..num = the lengths, num + 1 = a length the histogram did not see.
    return id_max - id_min < pool_layout.MAX_MAP_IDS and len(layout.lengths) + 1 < _MAX_CODE


class IdMap:
    """`codes[id - id_min]`: 1 + the index of the id's length, 0 where no id has been seen."""

    def __init__(self, layout: Layout, id_min: int, id_max: int) -> None:
        if not fits(layout, id_min, id_max):
            raise ValueError("ids or lengths do not fit an IdMap; check fits() first")
        self.layout = layout
        self.id_min = id_min
        self.id_max = id_max
        num = len(layout.lengths)
        # Lengths not in the layout map to num (Layout.index's sentinel), hence code num + 1.
        self._length_codes = (layout.index.astype(np.uint32) + 1).astype(np.uint16)
        self.codes = np.zeros(id_max - id_min + 1, dtype=np.uint16)
        self._unknown = num + 1

    def add(self, lengths: np.ndarray, ids: np.ndarray) -> tuple[int, int]:
        """Record one batch; returns its (min id, max id). Thread-safe for distinct batches."""
        low, high = int(ids.min()), int(ids.max())
        if low < self.id_min or high > self.id_max:
            raise changed_error()  # the footers' statistics promised otherwise
        # mode='clip' maps any length past the last one to the sentinel code.
        codes = np.take(self._length_codes, lengths, mode="clip")
        if self.id_min:
            ids = ids - self.id_min
        self.codes[ids] = codes
        return low, high

    def fill(
        self,
        batches: Iterator[tuple[np.ndarray, np.ndarray]],
        *,
        workers: int,
        progress: ProgressCallback | None,
    ) -> tuple[int | None, int | None]:
        """Record every streamed (lengths, ids) batch; returns the (min, max) id seen.

        Raises the changed-inputs `InputError` when more rows arrive than the histogram counted.
        """
        low: int | None = None
        high: int | None = None
        done = 0
        pending: deque[Future[tuple[int, int]]] = deque()

        def collect(future: Future[tuple[int, int]]) -> None:
            nonlocal low, high
            batch_low, batch_high = future.result()
            low = batch_low if low is None else min(low, batch_low)
            high = batch_high if high is None else max(high, batch_high)

        with ThreadPoolExecutor(workers, thread_name_prefix="seqpack-map") as executor:
            for lengths, ids in batches:
                if not len(ids):
                    continue
                done += len(ids)
                if done > self.layout.num_ids:
                    raise changed_error()
                pending.append(executor.submit(self.add, lengths, ids))
                while len(pending) > workers:
                    collect(pending.popleft())
                if progress is not None:
                    progress("pools", done, self.layout.num_ids)
            while pending:
                collect(pending.popleft())
        if done != self.layout.num_ids:
            raise changed_error()
        return low, high

    def _parts(self, workers: int) -> list[tuple[int, int]]:
        """Disjoint ranges of the map, one per worker, cut at chunk boundaries."""
        chunk = pool_layout.MAP_CHUNK_IDS
        num_chunks = -(-self.codes.size // chunk)
        cuts = np.linspace(0, num_chunks, min(workers, num_chunks) + 1).astype(np.int64) * chunk
        cuts[-1] = self.codes.size
        return [(int(a), int(b)) for a, b in itertools.pairwise(cuts) if a < b]

    def count(self, workers: int) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
        """The map's ranges for `write_flat` and each range's `bincount` of codes."""
        parts = self._parts(workers)
        minlength = self._unknown + 1
        step = pool_layout.MAP_COUNT_IDS

        def count_part(part: tuple[int, int]) -> np.ndarray:
            # bincount widens its input to int64: count in steps so that copy stays small.
            total = np.zeros(minlength, dtype=np.int64)
            for start in range(part[0], part[1], step):
                codes = self.codes[start : min(start + step, part[1])]
                total += np.bincount(codes, minlength=minlength)
            return total

        with ThreadPoolExecutor(len(parts), thread_name_prefix="seqpack-count") as executor:
            counts = list(executor.map(count_part, parts))
        return parts, counts

    def num_filled(self, counts: list[np.ndarray]) -> int:
        """Slots holding an id: fewer than the ids streamed means some id occurred twice."""
        return self.codes.size - int(sum(int(c[0]) for c in counts))

    def check_counts(self, counts: list[np.ndarray]) -> None:
        """Raise the changed-inputs error unless the map holds exactly the histogram's counts."""
        total = np.sum(counts, axis=0)
        if total[self._unknown] or not np.array_equal(total[1 : self._unknown], self.layout.sizes):
            raise changed_error()

    def write_flat(
        self,
        flat_path: Path,
        parts: list[tuple[int, int]],
        counts: list[np.ndarray],
        *,
        on_chunk: Callable[[int], None] | None = None,
    ) -> None:
        """Write every pool, ascending, to its place in the flat work file (one thread a part)."""
        cursor = self.layout.starts[:-1].copy()
        cursors = []
        for part_counts in counts:
            cursors.append(cursor.copy())
            cursor += part_counts[1 : self._unknown]
        with ThreadPoolExecutor(len(parts), thread_name_prefix="seqpack-fill") as executor:
            futures = [
                executor.submit(self._write_part, flat_path, start, stop, part_cursor, on_chunk)
                for (start, stop), part_cursor in zip(parts, cursors, strict=True)
            ]
            for future in futures:
                future.result()

    def _write_part(
        self,
        flat_path: Path,
        start: int,
        stop: int,
        cursor: np.ndarray,
        on_chunk: Callable[[int], None] | None,
    ) -> None:
        num = len(self.layout.lengths)
        chunk = pool_layout.MAP_CHUNK_IDS
        shape = (self.layout.num_ids,)
        flat = np.memmap(flat_path, dtype=np.int64, mode="r+", shape=shape)
        mapped = 0
        for chunk_start in range(start, stop, chunk):
            codes = self.codes[chunk_start : min(chunk_start + chunk, stop)]
            chunk_counts = np.bincount(codes, minlength=num + 1)
            # Stable: within one code, positions (so ids) stay ascending.
            order = np.argsort(codes, kind="stable")
            empty = int(chunk_counts[0])
            pool_counts = chunk_counts[1:]
            if empty == codes.size:
                continue
            ids = order[empty:]
            ids += chunk_start + self.id_min
            group_starts = np.cumsum(pool_counts)
            group_starts -= pool_counts
            positions = np.repeat(cursor - group_starts, pool_counts)
            positions += np.arange(ids.size, dtype=np.int64)
            flat[positions] = ids
            cursor += pool_counts
            mapped += ids.size
            if mapped >= pool_layout.REMAP_ROWS:
                # Dropping the mapping drops its written pages from this process's RSS.
                flat = np.memmap(flat_path, dtype=np.int64, mode="r+", shape=shape)
                mapped = 0
            if on_chunk is not None:
                on_chunk(ids.size)
        del flat
