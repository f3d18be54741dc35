"""`--over-cap split` on the cluster, the tasks: the checked store's rows cut into pieces.

The store was written as `--over-cap truncate` writes it (`store_driver`): every input row one
row, ids and tokens checked. Split keeps every token where it is, so only the offsets, the id
index, the piece table and the pools change. Two orders, each cut into chunks of positions:

- row order (the input rows): `count_rows` counts each chunk's extra rows (a row cut into p
  pieces adds p - 1); `write_rows` writes the chunk's new offsets (the cuts) at its first store
  row, and each input row's first store row into a scratch file;
- id order (`ids.npy` of the checked store, or the row indexes): `count_ids` counts each chunk's
  split rows, pieces and pool entries by length; `write_ids` writes the chunk's ids and store
  rows into the new id index (the kept ids first, then the pieces' ids, all past the largest
  input id), its rows of `pieces.npy`, and its ids into the pools (each pool: the kept ids, then
  the pieces' ids, both ascending).

Every position comes from the driver (`split_driver`), so a task run again writes the same bytes
at the same places. The new files have hidden names until the driver renames them into place;
the old ones stay readable meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack_cli.npy_files import pwrite_at
from seqpack_cli.over_cap import cut_lengths
from seqpack_cli.prepare.engines.dask.merge import pwrite_all
from seqpack_cli.prepare.engines.dask.store_index import hash_store_file
from seqpack_cli.prepare.engines.dask.tasks import TaskSettings, check_visible
from seqpack_cli.prepare.pieces import pieces_of
from seqpack_cli.prepare.store_files import HEADER_BYTES
from seqpack_cli.prepared.pool_files import pool_file_name
from seqpack_cli.token_sources import IDS_NAME, OFFSETS_NAME, PIECES_NAME, ROWS_NAME

__all__ = [
    "IdChunk",
    "IdPlan",
    "SplitJob",
    "count_ids",
    "count_rows",
    "hash_files",
    "new_name",
    "write_ids",
    "write_rows",
]

_WORD = HEADER_BYTES // 8  # a 1-d .npy file's first value, in int64 positions


def new_name(name: str) -> str:
    """The hidden name a new file of the store has until the driver renames it into place."""
    return f".split-{name}"


@dataclass(frozen=True)
class SplitJob:
    """What every split task shares."""

    root: Path
    """The output's temporary directory."""
    folders: tuple[Path, ...]
    """Every role's folder (tokens/ first): each gets the same offsets and id index."""
    store_rows: Path
    """Scratch: each input row's first store row (raw int64)."""
    cap: int
    id_column: bool
    """Whether ids come from an id column (the checked store's ids.npy) or are row indexes."""
    block_rows: int
    """Rows a task holds at once, its chunk read block by block (`ClusterTuning.block_ids`:
    1M rows, ~100 MiB with their pieces)."""
    settings: TaskSettings
    """Its pause (tests kill a worker then)."""


def _blocks(job: SplitJob, start: int, stop: int) -> list[tuple[int, int]]:
    """[start, stop) in blocks of `job.block_rows`: what a task holds at once."""
    size = job.block_rows
    return [(a, min(a + size, stop)) for a in range(start, stop, size)]


def _old(job: SplitJob, name: str) -> np.ndarray:
    return np.load(job.folders[0] / name, mmap_mode="r")


def _id_order(job: SplitJob, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, input rows) of id-order positions [start, stop)."""
    if not job.id_column:
        rows = np.arange(start, stop, dtype=np.int64)
        return rows, rows
    ids = np.asarray(_old(job, IDS_NAME)[start:stop], dtype=np.int64)
    return ids, np.asarray(_old(job, ROWS_NAME)[start:stop], dtype=np.int64)


def _lengths_of(job: SplitJob, rows: np.ndarray) -> np.ndarray:
    offsets = _old(job, OFFSETS_NAME)
    return np.asarray(offsets[rows + 1] - offsets[rows], dtype=np.int64)


def _pwrite(path: Path, values: np.ndarray, word: int) -> None:
    """int64 `values` at int64 position `word` of `path` (header included)."""
    if not values.size:
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        pwrite_all(fd, values, word)
    finally:
        os.close(fd)


def _add_counts(totals: dict[int, int], values: np.ndarray) -> None:
    found, counts = np.unique(values, return_counts=True)
    for value, count in zip(found.tolist(), counts.tolist(), strict=True):
        totals[value] = totals.get(value, 0) + count


def _as_arrays(totals: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted(totals)
    return np.array(keys, dtype=np.int64), np.array([totals[k] for k in keys], dtype=np.int64)


# ---- row order --------------------------------------------------------------------------------


def count_rows(job: SplitJob, start: int, stop: int) -> int:
    """The rows the input rows [start, stop) add when cut: sum(pieces - 1)."""
    check_visible((), job.folders)
    extra = 0
    for a, b in _blocks(job, start, stop):
        offsets = np.asarray(_old(job, OFFSETS_NAME)[a : b + 1], dtype=np.int64)
        _, per_row = cut_lengths(np.diff(offsets), job.cap)
        extra += int(per_row.sum()) - (b - a)
    return extra


def write_rows(job: SplitJob, start: int, stop: int, first_store_row: int) -> None:
    """The new offsets of input rows [start, stop) (whose first store row is `first_store_row`)
    into every role's new offsets.npy, and each row's first store row into the scratch file."""
    check_visible((), job.folders)
    for a, b in _blocks(job, start, stop):
        offsets = np.asarray(_old(job, OFFSETS_NAME)[a : b + 1], dtype=np.int64)
        pieces, per_row = cut_lengths(np.diff(offsets), job.cap)
        ends = np.cumsum(pieces) + offsets[0]
        for folder in job.folders:
            _pwrite(folder / new_name(OFFSETS_NAME), ends, _WORD + first_store_row + 1)
        firsts = np.cumsum(per_row) - per_row + first_store_row
        _pwrite(job.store_rows, firsts, a)
        first_store_row += int(per_row.sum())


# ---- id order ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdChunk:
    """A chunk of the id order, counted: numbers only."""

    num_split: int
    num_pieces: int
    kept: tuple[np.ndarray, np.ndarray]
    """(lengths, counts) of the rows kept whole."""
    pieces: tuple[np.ndarray, np.ndarray]
    """(lengths, counts) of the pieces."""
    kept_ids: tuple[int, int] | None
    """(smallest, largest) id kept whole."""
    largest_id: int | None


def count_ids(job: SplitJob, start: int, stop: int) -> IdChunk:
    """Count id-order positions [start, stop): split rows, pieces, pool entries by length."""
    check_visible((), job.folders)
    num_split = num_pieces = 0
    kept: dict[int, int] = {}
    pieces_by_length: dict[int, int] = {}
    low = high = largest = None
    for a, b in _blocks(job, start, stop):
        ids, rows = _id_order(job, a, b)
        lengths = _lengths_of(job, rows)
        split = lengths > job.cap
        pieces, _ = cut_lengths(lengths[split], job.cap)
        num_split += int(split.sum())
        num_pieces += int(pieces.size)
        _add_counts(kept, lengths[~split])
        _add_counts(pieces_by_length, pieces)
        kept_ids = ids[~split]
        if kept_ids.size:
            low = int(kept_ids.min()) if low is None else min(low, int(kept_ids.min()))
            high = int(kept_ids.max()) if high is None else max(high, int(kept_ids.max()))
        if ids.size:
            largest = int(ids.max()) if largest is None else max(largest, int(ids.max()))
    return IdChunk(
        num_split,
        num_pieces,
        _as_arrays(kept),
        _as_arrays(pieces_by_length),
        None if low is None or high is None else (low, high),
        largest,
    )


@dataclass(frozen=True)
class IdPlan:
    """Where one id-order chunk writes (every position from the driver's counts)."""

    kept_at: int
    """The chunk's first kept id's position in the new id index."""
    pieces_at: int
    """The chunk's first piece's rank among all pieces."""
    num_kept: int
    """Ids kept whole over every chunk: the pieces' ids follow them in the id index."""
    first_piece_id: int
    kept_pools: tuple[np.ndarray, np.ndarray]
    """(lengths, byte offsets in each length's pool file) of the chunk's kept ids."""
    piece_pools: tuple[np.ndarray, np.ndarray]
    """(lengths, byte offsets) of the chunk's pieces."""


def _into_pools(root: Path, lengths: np.ndarray, ids: np.ndarray, where: dict[int, int]) -> None:
    """`ids` (ascending) grouped by `lengths` (stably), each group at its pool's next byte
    offset in `where` (moved past it)."""
    if not ids.size:
        return
    order = np.argsort(lengths, kind="stable")
    grouped, sorted_lengths = ids[order], lengths[order]
    found, starts = np.unique(sorted_lengths, return_index=True)
    ends = [*starts[1:].tolist(), ids.size]
    for length, begin, end in zip(found.tolist(), starts.tolist(), ends, strict=True):
        fd = os.open(root / pool_file_name(length), os.O_WRONLY)
        try:
            chunk = np.ascontiguousarray(grouped[begin:end], dtype=np.int64)
            offset = where[length]
            pwrite_at(fd, chunk, offset)
        finally:
            os.close(fd)
        where[length] = offset + chunk.nbytes


def write_ids(job: SplitJob, start: int, stop: int, plan: IdPlan) -> None:
    """Write id-order positions [start, stop): the new id index, pieces.npy, the pools."""
    check_visible((), job.folders)
    kept_at, pieces_at = plan.kept_at, plan.pieces_at
    kept_pools = dict(zip(*(array.tolist() for array in plan.kept_pools), strict=True))
    piece_pools = dict(zip(*(array.tolist() for array in plan.piece_pools), strict=True))
    for a, b in _blocks(job, start, stop):
        ids, rows = _id_order(job, a, b)
        lengths = _lengths_of(job, rows)
        split = lengths > job.cap
        firsts = np.asarray(np.memmap(job.store_rows, dtype=np.int64, mode="r")[rows])
        # The ids kept whole, at their place among the kept ones.
        kept = ~split
        _index(job, ids[kept], firsts[kept], kept_at)
        # The pieces: ids past every input id, in (source id, start) order.
        pieces, per_row = cut_lengths(lengths[split], job.cap)
        within, table = pieces_of(ids[split], per_row, plan.first_piece_id + pieces_at, job.cap)
        piece_ids = table[:, 0]
        piece_rows = np.repeat(firsts[split], per_row) + within
        _index(job, piece_ids, piece_rows, plan.num_kept + pieces_at)
        _pwrite(job.folders[0] / new_name(PIECES_NAME), table.ravel(), _WORD + 3 * pieces_at)
        _into_pools(job.root, lengths[kept], ids[kept], kept_pools)
        _into_pools(job.root, pieces, piece_ids, piece_pools)
        kept_at += int(kept.sum())
        pieces_at += int(pieces.size)
        if a == start:
            job.settings.pause()


def _index(job: SplitJob, ids: np.ndarray, rows: np.ndarray, at: int) -> None:
    for folder in job.folders:
        _pwrite(folder / new_name(IDS_NAME), ids, _WORD + at)
        _pwrite(folder / new_name(ROWS_NAME), rows, _WORD + at)


def hash_files(paths: Sequence[Path]) -> list[tuple[int, str]]:
    """(size, sha256) of each file (pool files, several to a task)."""
    return [hash_store_file(path) for path in paths]
