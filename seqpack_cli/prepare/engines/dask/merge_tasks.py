"""The Dask engine's last tasks: the pools merged from the groups' runs, and the duplicate checks.

- `merge_pools`: the pools of a unit of consecutive lengths (`groups.MergeUnit`), each the union
  of that length's ids over every group: concatenated in group order for row indexes (each group
  holds a later stretch of rows), merged in id order for an id column. The driver created each
  pool file with its header while the pools tasks ran (creating thousands of files is slow on
  some filesystems: off the critical path there); the ids go after it, hashed on the way, at
  fixed offsets, so a task run again after its worker died (or twice at once) writes the same
  bytes at the same places. Returns each
  pool's size, sha256, and first and last id: the driver records them without reading a byte.
- `check_range`: the ids in [low, high) of every group's run by id, merged, counted like
  `sql/duplicate_ids_all.sql` does, and which groups hold the smallest repeated id.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack_cli.npy_files import npy_header, write_all
from seqpack_cli.prepare.engines.dask.groups import MergeUnit
from seqpack_cli.prepare.engines.dask.merge import (
    DuplicateCounter,
    RunEncoding,
    Segment,
    concatenated_segments,
    merged_segments,
)
from seqpack_cli.prepare.engines.dask.pool_tasks import run_paths
from seqpack_cli.prepare.engines.dask.tasks import check_visible
from seqpack_cli.prepare.pools.offsets import changed_error
from seqpack_cli.prepared.pool_files import POOL_DTYPE, POOLS_DIR, pool_file_name

__all__ = ["DuplicatePart", "MergeJob", "WrittenPool", "check_range", "merge_pools"]


@dataclass(frozen=True)
class MergeJob:
    """What every merge task shares."""

    output_dir: Path
    """The output's temporary directory (pools/ is in it)."""
    runs_dir: Path
    row_ids: bool
    """Ids are row indexes: each group's ids follow the previous group's."""
    merge_ids: int
    block_ids: int
    encodings: tuple[RunEncoding, ...]
    """How each group's runs store its ids (by group index)."""


@dataclass(frozen=True)
class WrittenPool:
    length: int
    num_bytes: int
    sha256: str
    first_id: int
    last_id: int


def _write_pool(
    job: MergeJob, length: int, count: int, chunks: Iterable[np.ndarray]
) -> WrittenPool:
    """Write the ids after the header the driver wrote (`pool_files`), hashing header and ids."""
    header = npy_header(POOL_DTYPE, count)
    try:
        fd = os.open(job.output_dir / pool_file_name(length), os.O_WRONLY)
    except FileNotFoundError:
        check_visible((), [job.output_dir / POOLS_DIR])
        raise
    digest = hashlib.sha256(header)
    written, first, last = 0, 0, 0
    try:
        for chunk in chunks:
            if not chunk.size:
                continue
            if written + chunk.size > count:
                raise changed_error()
            view = np.ascontiguousarray(chunk, dtype="<i8").data.cast("B")
            digest.update(view)
            os.lseek(fd, len(header) + 8 * written, os.SEEK_SET)
            write_all(fd, [view])
            first = int(chunk[0]) if not written else first
            written += chunk.size
            last = int(chunk[-1])
    finally:
        os.close(fd)
    if written != count:
        raise changed_error()
    return WrittenPool(length, len(header) + 8 * count, digest.hexdigest(), first, last)


def _from_buffers(job: MergeJob, unit: MergeUnit) -> list[WrittenPool]:
    """A unit that fits `merge_ids`: each group's stretch read once, each pool put together."""
    # Mapped, not read: the runs' pages are in the page cache already, and a mapping of them
    # costs less than fresh memory to read them into (a page fault per 4 KiB on first write).
    encodings = [job.encodings[group] for group in unit.groups.tolist()]
    buffers = [
        np.memmap(
            run_paths(job.runs_dir, group)[0], dtype=encoding.dtype, mode="r",
            offset=encoding.itemsize * int(start), shape=(int(counts.sum()),),
        )
        for group, start, counts, encoding in zip(
            unit.groups.tolist(), unit.starts, unit.counts, encodings, strict=True
        )
    ]  # fmt: skip
    offsets = np.zeros((len(buffers), len(unit.lengths) + 1), dtype=np.int64)
    np.cumsum(unit.counts, axis=1, out=offsets[:, 1:])
    written = []
    for j, length in enumerate(unit.lengths.tolist()):
        parts = [
            encodings[i].decode(buffer[offsets[i, j] : offsets[i, j + 1]])
            for i, buffer in enumerate(buffers)
            if offsets[i, j + 1] > offsets[i, j]
        ]
        ids = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if not job.row_ids and len(parts) > 1:
            ids.sort()
        written.append(_write_pool(job, length, ids.size, [ids]))
    return written


def merge_pools(job: MergeJob, unit: MergeUnit) -> list[WrittenPool]:
    """Write the unit's pool files; a pool larger than `merge_ids` is merged block by block."""
    check_visible((), [job.output_dir, job.runs_dir])
    if unit.num_ids <= job.merge_ids:
        return _from_buffers(job, unit)
    (length,) = unit.lengths.tolist()  # only one length is ever over merge_ids
    segments = [
        Segment(
            str(run_paths(job.runs_dir, group)[0]), int(start), int(counts[0]), job.encodings[group]
        )
        for group, start, counts in zip(unit.groups.tolist(), unit.starts, unit.counts, strict=True)
    ]
    join = concatenated_segments if job.row_ids else merged_segments
    return [_write_pool(job, length, unit.num_ids, join(segments, job.block_ids))]


@dataclass(frozen=True)
class DuplicatePart:
    """Ids repeated within one range of id values (see `merge.DuplicateCounter`), and the groups
    that hold `example` (to locate its rows)."""

    num_ids: int
    num_extra: int
    example: int | None
    holders: tuple[int, ...]


def check_range(
    runs_dir: Path,
    groups: Sequence[tuple[int, int, RunEncoding]],
    low: int | None,
    high: int | None,
    block_ids: int,
) -> DuplicatePart:
    """Count the ids in [low, high) (None: unbounded) repeated over the groups' runs by id;
    `groups` are (group, number of ids, how its runs store them) triples."""
    check_visible((), [runs_dir])
    segments, runs = [], []
    for group, num_ids, encoding in groups:
        path = run_paths(runs_dir, group)[1]
        ids = np.memmap(path, dtype=encoding.dtype, mode="r", shape=(num_ids,))
        start = 0 if low is None else encoding.position(ids, low)
        stop = num_ids if high is None else encoding.position(ids, high)
        segments.append(Segment(str(path), start, stop - start, encoding))
        runs.append((group, ids, encoding, start, stop))
    counter = DuplicateCounter()
    for chunk in merged_segments(segments, block_ids):
        counter.add(chunk)
    holders: list[int] = []
    if counter.example is not None:
        for group, ids, encoding, start, stop in runs:
            at = start + encoding.position(ids[start:stop], counter.example)
            if at < stop and int(encoding.decode(ids[at : at + 1])[0]) == counter.example:
                holders.append(group)
    return DuplicatePart(counter.num_ids, counter.num_extra, counter.example, tuple(holders))
