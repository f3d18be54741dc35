"""The pools pass for bounded id spans: an id -> length map, turned into ascending pools.

When every id lies in a span of at most `PoolTuning.max_map_ids` values (row indexes always do
up to that many rows; `--id-column` ids do when they are dense, e.g. a shuffled 0..n-1), sorting
is not needed at all:

1. while DuckDB streams (length, id), each id's slot in a uint16 map over the span gets its
   length's code (0 marks an id that never occurs): one store per id. The code is the length
   itself when `max_seq_len` fits 16 bits (no lookup at all), else 1 + the length's index;
2. the map is read back in ascending id order, `PoolTuning.map_chunk_ids` at a time, by worker
   threads: a stable radix argsort of each chunk's codes groups the chunk's ids by length, still
   ascending; this thread appends each group to its pool file, chunk after chunk, so every pool
   is written ascending, once, straight into `pools/{length}.npy`: no work file, no sort, no
   second copy.

The map costs 2 bytes per possible id, 256 MiB at most whatever the number of rows (wider spans
take `scatter`). It also finds duplicate ids: a duplicate overwrites its own slot, so fewer
slots are filled than ids were streamed, and the pools come out short (checked by the caller).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from seqpack_cli.prepare.pools.offsets import Layout, PoolAppend, changed_error
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.progress import ProgressCallback

__all__ = ["AppendBatcher", "IdMap", "fits"]

_MAX_CODE = np.iinfo(np.uint16).max


def _lengths_are_codes(max_length: int) -> bool:
    # Code 0 means "no id", and lengths are >= 1: any length up to max_length is its own code.
    return max_length < _MAX_CODE


def fits(layout: Layout, id_min: int, id_max: int, max_length: int) -> bool:
    """Whether ids in [id_min, id_max], and lengths up to `max_length` (those streamed), fit a
    bounded uint16 map."""
    # Indexed codes: 0 = no id, 1..num = the lengths, num + 1 = a length the histogram lacks.
    codes_fit = _lengths_are_codes(max_length) or len(layout.lengths) + 1 < _MAX_CODE
    return id_max - id_min < layout.tuning.max_map_ids and codes_fit


class IdMap:
    """`codes[id - id_min]`: the code of the id's length, 0 where no id has been seen."""

    def __init__(self, layout: Layout, id_min: int, id_max: int, max_length: int) -> None:
        if not fits(layout, id_min, id_max, max_length):
            raise ValueError("ids or lengths do not fit an IdMap; check fits() first")
        self.layout = layout
        self.id_min = id_min
        self.id_max = id_max
        self._length_codes: np.ndarray | None = None
        self._direct = _lengths_are_codes(max_length)
        if self._direct:
            self._code_lengths = list(range(max_length + 1))
            self._expected = np.zeros(max_length + 1, dtype=np.int64)
            self._expected[layout.lengths] = layout.sizes
        else:
            num = len(layout.lengths)
            # Lengths not in the layout get position num (the sentinel), hence code num + 1.
            if int(layout.lengths[-1]) <= layout.table_end:  # one lookup per id, to codes
                self._length_codes = (layout.table.astype(np.uint32) + 1).astype(np.uint16)
            self._code_lengths = [0, *layout.lengths.tolist(), 0]
            self._expected = np.zeros(num + 2, dtype=np.int64)
            self._expected[1 : num + 1] = layout.sizes
        self.codes = np.zeros(id_max - id_min + 1, dtype=np.uint16)

    def add(self, lengths: np.ndarray, ids: np.ndarray) -> tuple[int, int]:
        """Record one batch; returns its (min id, max id). Thread-safe for distinct batches."""
        low, high = int(ids.min()), int(ids.max())
        if low < self.id_min or high > self.id_max:
            raise changed_error()  # the footers' statistics promised otherwise
        if self.id_min:
            ids = ids - self.id_min
        if self._direct:
            # Lengths are <= max_length < 2**16 (the query filters them): stored as they are.
            self.codes[ids] = lengths
        elif self._length_codes is not None:
            # mode='clip' maps any length past the last one to the sentinel code.
            self.codes[ids] = np.take(self._length_codes, lengths, mode="clip")
        else:
            self.codes[ids] = self.layout.positions(lengths) + 1
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

    def _group(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One chunk of the map: (code counts, codes present, the chunk's ids grouped by code
        with each group ascending)."""
        codes = self.codes[start:stop]
        counts = np.bincount(codes, minlength=self._expected.size)
        # Stable: within one code, positions (so ids) stay ascending. Empty slots sort first.
        ids = np.argsort(codes, kind="stable")[counts[0] :]
        ids += start + self.id_min
        present = np.flatnonzero(counts[1:]) + 1
        return counts, present, ids

    def write_pools(
        self, append: PoolAppend, *, workers: int, progress: ProgressCallback | None
    ) -> int:
        """Append every pool's ids, ascending, through `append`; returns how many were written
        (fewer than the ids streamed where ids repeat).

        Raises the changed-inputs `InputError` where the map holds more ids of a length than
        the histogram counted, or a length it did not count.
        """
        chunk = self.layout.tuning.map_chunk_ids
        size = self.codes.size
        totals = np.zeros(self._expected.size, dtype=np.int64)
        written = 0
        batcher = AppendBatcher(append, self.layout.tuning)

        def write(group: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
            nonlocal totals, written
            counts, present, ids = group
            if counts.size > totals.size:
                raise changed_error()
            totals += counts
            if np.any(totals[1:] > self._expected[1:]):
                raise changed_error()
            ends = np.cumsum(counts[present]).tolist()
            begin = 0
            for code, end in zip(present.tolist(), ends, strict=True):
                batcher.add(self._code_lengths[code], ids[begin:end])
                begin = end
            written += ids.size
            if progress is not None:
                progress("write pools", written, self.layout.num_ids)

        pending: deque[Future[tuple[np.ndarray, np.ndarray, np.ndarray]]] = deque()
        with ThreadPoolExecutor(workers, thread_name_prefix="seqpack-group") as executor:
            try:
                for start in range(0, size, chunk):
                    pending.append(executor.submit(self._group, start, min(start + chunk, size)))
                    if len(pending) > workers:
                        write(pending.popleft().result())
                while pending:
                    write(pending.popleft().result())
            finally:
                for future in pending:
                    future.cancel()
        batcher.flush_all()
        return written


class AppendBatcher:
    """Coalesces a pool's small appends into larger ones.

    A map chunk holds a few ids of each rare length: writing (and hashing) those pieces one by
    one would cost a system call each, which dominates the write. Pieces under
    `PoolTuning.min_append_bytes` wait, copied, until their pool has that much; at most
    `PoolTuning.max_batched_bytes` wait in all.
    """

    def __init__(self, append: PoolAppend, tuning: PoolTuning) -> None:
        self._append = append
        self._min_bytes = tuning.min_append_bytes
        self._max_waiting = tuning.max_batched_bytes
        self._pending: dict[int, list[np.ndarray]] = {}
        self._pending_bytes: dict[int, int] = {}
        self._total = 0

    def add(self, length: int, ids: np.ndarray) -> None:
        waiting = self._pending_bytes.get(length, 0)
        if waiting + ids.nbytes >= self._min_bytes:
            if waiting:
                pieces = self._pending.pop(length)
                pieces.append(ids)
                ids = np.concatenate(pieces)
                self._total -= self._pending_bytes.pop(length)
            self._append(length, ids)
            return
        self._pending.setdefault(length, []).append(ids.copy())
        self._pending_bytes[length] = waiting + ids.nbytes
        self._total += ids.nbytes
        if self._total > self._max_waiting:
            self.flush_all()

    def flush_all(self) -> None:
        for length in sorted(self._pending):
            pieces = self._pending[length]
            self._append(length, pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
        self._pending.clear()
        self._pending_bytes.clear()
        self._total = 0
