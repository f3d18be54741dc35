"""The split: the flat work file cut into one ascending `pools/{length}.npy` per length.

Pools are read unit by unit (`Layout.units`), sorted where they are not ascending already (32-bit
offsets when the ids allow, a pool larger than `PoolTuning.max_sort_ids` in runs that are then
merged), fed to an optional duplicate-id check and appended to the pool files, several units at a
time in threads (numpy's sort, hashing and file writes release the GIL).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from seqpack_cli.prepare.pools.id_checks import IdCheck
from seqpack_cli.prepare.pools.offsets import Layout, PoolAppend, read_ids
from seqpack_cli.progress import ProgressCallback

__all__ = ["merged_runs", "sort_pools", "split_pools"]


def sort_pools(data: np.ndarray, bounds: np.ndarray) -> None:
    """Sort, in place, each pool `data[bounds[i]:bounds[i+1]]` that is not ascending already."""
    if data.size < 2:
        return
    # drops[j] counts the descents among data[0..j]; a pool is ascending when it holds none
    # (every pool is non-empty, so bounds[i+1] - 1 is its last element).
    drops = np.zeros(data.size, dtype=np.int64)
    np.cumsum(data[1:] < data[:-1], out=drops[1:])
    unsorted = np.flatnonzero(drops[bounds[1:] - 1] != drops[bounds[:-1]]).tolist()
    if not unsorted:
        return
    low, high = int(data.min()), int(data.max())
    if high - low >= 2**32:
        for pool in unsorted:
            data[bounds[pool] : bounds[pool + 1]].sort()
        return
    # Ids spanning less than 2**32 sort as 32-bit offsets: twice the keys per SIMD register,
    # so about twice as fast, conversions included.
    keys = (data - low).astype(np.uint32)
    for pool in unsorted:
        keys[bounds[pool] : bounds[pool + 1]].sort()
    np.add(keys, np.int64(low), out=data)


def merged_runs(flat_path: Path, start: int, count: int, max_sort_ids: int) -> Iterator[np.ndarray]:
    """One big pool in ascending chunks: runs sorted in place in the work file, then merged.

    The merge holds one block per run; everything up to the smallest block end among runs with
    more data left is final, so it is cut off, sorted and emitted.
    """
    stop = start + count
    runs = [(s, min(s + max_sort_ids, stop)) for s in range(start, stop, max_sort_ids)]
    with open(flat_path, "r+b") as handle:
        for run_start, run_stop in runs:
            run = read_ids(handle, run_start, run_stop - run_start)
            if not _is_ascending(run):
                run.sort()
                handle.seek(8 * run_start)
                handle.write(run.data.cast("B"))
            del run
        block = max(max_sort_ids // len(runs), 1 << 12)
        heads: list[np.ndarray] = []
        next_read: list[int] = []
        for run_start, run_stop in runs:
            take = min(block, run_stop - run_start)
            heads.append(read_ids(handle, run_start, take))
            next_read.append(run_start + take)
        while any(head.size for head in heads):
            more = [next_read[i] < runs[i][1] for i in range(len(runs))]
            limits = [int(heads[i][-1]) for i in range(len(runs)) if more[i] and heads[i].size]
            cutoff = min(limits) if limits else None
            parts = []
            for i, head in enumerate(heads):
                cut = head.size if cutoff is None else int(np.searchsorted(head, cutoff, "right"))
                parts.append(head[:cut])
                heads[i] = head[cut:]
                if not heads[i].size and more[i]:
                    take = min(block, runs[i][1] - next_read[i])
                    heads[i] = read_ids(handle, next_read[i], take)
                    next_read[i] += take
            merged = np.concatenate(parts)
            merged.sort()
            yield merged


def _is_ascending(ids: np.ndarray) -> bool:
    return ids.size < 2 or not bool(np.any(ids[1:] < ids[:-1]))


def split_pools(
    layout: Layout,
    flat_path: Path,
    check: IdCheck | None,
    append: PoolAppend,
    *,
    workers: int,
    progress: ProgressCallback | None,
) -> None:
    """Cut the flat work file into one ascending pool per length, `workers` units at a time."""
    lengths = layout.lengths.tolist()
    max_sort_ids = layout.tuning.max_sort_ids
    starts = layout.starts
    done = 0
    lock = threading.Lock()

    def split(first: int, stop: int) -> None:
        nonlocal done
        count = int(starts[stop] - starts[first])
        if stop - first == 1 and count > max_sort_ids:
            chunks: Iterable[np.ndarray] = merged_runs(
                flat_path, int(starts[first]), count, max_sort_ids
            )
            if check is not None:
                chunks = _checked(chunks, check)
            for chunk in chunks:
                append(lengths[first], chunk)
        else:
            with open(flat_path, "rb") as handle:
                data = read_ids(handle, int(starts[first]), count)
            bounds = starts[first : stop + 1] - starts[first]
            sort_pools(data, bounds)
            if check is not None:
                check.add(data)
            cuts = bounds.tolist()
            for pool in range(first, stop):
                pool_ids = data[cuts[pool - first] : cuts[pool - first + 1]]
                append(lengths[pool], pool_ids)
        with lock:
            done += count

    units = layout.units()
    with ThreadPoolExecutor(workers, thread_name_prefix="seqpack-split") as executor:
        pending: deque[Future[None]] = deque()
        for first, stop in units:
            pending.append(executor.submit(split, first, stop))
            while len(pending) > workers:
                pending.popleft().result()
                if progress is not None:
                    progress("write pools", done, layout.num_ids)
        while pending:
            pending.popleft().result()
    if progress is not None:
        progress("write pools", layout.num_ids, layout.num_ids)


def _checked(chunks: Iterable[np.ndarray], check: IdCheck) -> Iterator[np.ndarray]:
    for chunk in chunks:
        check.add(chunk)
        yield chunk
