"""The token store's last tasks: the id index over ranges of ids, and each file's sha256.

- `write_index_range`: the (id, row) pairs in [low, high) of every group's run
  (`store_tasks.id_run_paths`, each sorted by id), merged, written into `ids.npy` and `rows.npy`
  of every role at the position of the first of them (the number of ids below `low`, counted in
  the runs): what `token_files.write_id_index` writes for all rows at once (a stable sort of the
  ids in row order), a range at a time, at fixed offsets, so a task run again writes the same
  bytes. A repeated id is returned (the smallest, with its first two rows), not raised: the
  driver words the smallest over every range as the local store does.
- `hash_store_file`: one file's size and sha256, read on a worker (the driver reads no row).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack_cli.prepare.engines.dask.merge import pwrite_all
from seqpack_cli.prepare.engines.dask.store_tasks import id_run_paths
from seqpack_cli.prepare.engines.dask.tasks import check_visible
from seqpack_cli.prepare.store_files import HEADER_BYTES
from seqpack_cli.prepared.integrity import file_digest
from seqpack_cli.token_sources import IDS_NAME, ROWS_NAME

__all__ = ["IndexPart", "IndexRange", "hash_store_file", "write_index_range"]


@dataclass(frozen=True)
class IndexRange:
    """What a range's task needs: the runs, the groups holding ids ((group, ids) pairs), and
    the role folders whose id index it writes."""

    runs_dir: Path
    groups: tuple[tuple[int, int], ...]
    folders: tuple[Path, ...]


@dataclass(frozen=True)
class IndexPart:
    """A range's ids written, and its smallest repeated id with its first two rows (if any)."""

    num_ids: int
    repeated: tuple[int, int, int] | None


def _runs(job: IndexRange, low: int | None, high: int | None) -> tuple[int, list[np.ndarray]]:
    """(ids below `low` over every run, each run's (ids, rows) in [low, high))."""
    below, parts = 0, []
    for group, num_ids in job.groups:
        ids_path, rows_path = id_run_paths(job.runs_dir, group)
        ids = np.memmap(ids_path, dtype=np.int64, mode="r", shape=(num_ids,))
        start = 0 if low is None else int(np.searchsorted(ids, low, "left"))
        stop = num_ids if high is None else int(np.searchsorted(ids, high, "left"))
        below += start
        if stop > start:
            rows = np.memmap(rows_path, dtype=np.int64, mode="r", shape=(num_ids,))
            parts.append(np.stack([np.asarray(ids[start:stop]), np.asarray(rows[start:stop])]))
    return below, parts


def write_index_range(job: IndexRange, low: int | None, high: int | None) -> IndexPart:
    """Write the range [low, high) (None: unbounded) of the id index."""
    check_visible((), [job.runs_dir, *job.folders])
    below, parts = _runs(job, low, high)
    if not parts:
        return IndexPart(0, None)
    pairs = np.concatenate(parts, axis=1)
    order = np.lexsort((pairs[1], pairs[0]))  # by id, then row: the local stable sort's order
    ids, rows = pairs[0, order], pairs[1, order]
    repeated = None
    same = np.flatnonzero(ids[1:] == ids[:-1])
    if same.size:
        k = int(same[0])
        repeated = (int(ids[k]), int(rows[k]), int(rows[k + 1]))
    for folder in job.folders:
        for name, values in ((IDS_NAME, ids), (ROWS_NAME, rows)):
            fd = os.open(folder / name, os.O_WRONLY)
            try:
                pwrite_all(fd, values, HEADER_BYTES // 8 + below)
            finally:
                os.close(fd)
    return IndexPart(int(ids.size), repeated)


def hash_store_file(path: Path) -> tuple[int, str]:
    """(size, sha256) of one file of the store."""
    check_visible((), [path.parent])
    return file_digest(path)
