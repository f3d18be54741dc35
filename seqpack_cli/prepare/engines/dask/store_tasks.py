"""One file group of the token store, streamed into place on a worker: `write_group_store`.

The group's token lists (and labels or mask, the length and id columns) are read once, one
Arrow batch at a time, by the reader and the batch kernel the local one pass runs
(`token_reading.file_batches`, `token_batches.check_batch`), then written with
`pwrite` at the positions the driver gave the group's files (tokens, offsets), so a task run
again after its worker died writes the same bytes at the same places. With an id column the
group's (id, row) pairs, sorted by id, go to a run file for the id index (`store_index`). A
fault is not raised here but returned (`GroupStore`): the first file of each kind of fault, the
first row of the others, for the driver to pick the one the local engine reports
(`store_faults`). Once a fault is seen the task writes no more values. The footers are read
before, by `store_footers`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from seqpack_cli.npy_files import pwrite_at
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint
from seqpack_cli.prepare.engines.dask.merge import pwrite_all
from seqpack_cli.prepare.engines.dask.tasks import TaskSettings, check_inputs, check_visible
from seqpack_cli.prepare.store_files import HEADER_BYTES
from seqpack_cli.prepare.token_batches import StoreColumns, check_batch
from seqpack_cli.prepare.token_reading import TokenInput, file_batches
from seqpack_cli.token_sources import OFFSETS_NAME, TOKENS_NAME

__all__ = ["GroupStore", "StoreJob", "id_run_paths", "write_group_store"]


@dataclass(frozen=True)
class StoreJob:
    """What every group's store task shares."""

    root: Path
    """The output's temporary directory: each role's folder is in it."""
    runs_dir: Path
    spec: StoreColumns
    """The columns, dtypes and ranges the batches are checked against (`check_batch`)."""
    over_cap: OverCap
    samples: int
    settings: TaskSettings


def id_run_paths(runs_dir: Path, group: int) -> tuple[Path, Path]:
    """The group's ids ascending and the global row of each."""
    return runs_dir / f"store-{group}.ids", runs_dir / f"store-{group}.rows"


@dataclass
class GroupStore:
    """What a group's store task returns: numbers and the first fault of each kind, never rows
    (but `samples`)."""

    counts: dict[str, list[int]]
    """Each role's values in each of the group's files, as read (the files after a fault that
    stopped the task excluded)."""
    stream_faults: dict[str, int] = field(default_factory=dict)
    """{role: index of the first file (in the inputs' list) holding a value, list or id the local
    store refuses while streaming that role}."""
    mismatch: tuple[int, int, int] | None = None
    """(global row, values, tokens) of the first row whose labels or mask is not as long."""
    pool_fault: tuple[int, int, int, int] | None = None
    """(pool length, id, global row, stored length) of the first pooled id of another length."""
    num_ids: int = 0
    samples: np.ndarray | None = None
    wrote: bool = True
    """Whether every value was written at the driver's positions (no fault, the planned counts)."""
    lengths_differ: bool = False
    """Whether a row's length column is not its list's length, where the checks as truncate
    allow it (over the cap): the local one pass, which splits, refuses it."""


class _Writer:
    """The group's pwrites: each role's tokens.npy and every role's offsets.npy."""

    def __init__(self, job: StoreJob) -> None:
        self.job = job
        self.fds: dict[str, int] = {}
        for role in job.spec.columns:
            self.fds[role] = os.open(job.root / role / TOKENS_NAME, os.O_WRONLY)
            self.fds[f"{role}/offsets"] = os.open(job.root / role / OFFSETS_NAME, os.O_WRONLY)

    def values(self, role: str, values: np.ndarray, at: int) -> None:
        array = np.ascontiguousarray(values)
        pwrite_at(self.fds[role], array, HEADER_BYTES + array.itemsize * at)

    def offsets(self, ends: np.ndarray, first_row: int) -> None:
        """`ends` (the offsets of rows first_row + 1, ...) into every role's offsets.npy."""
        for role in self.job.spec.columns:
            fd = self.fds[f"{role}/offsets"]
            pwrite_all(fd, ends, HEADER_BYTES // 8 + first_row + 1)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class _Group:
    """One group's pass: `file` for each of its files, then `result`."""

    def __init__(self, job: StoreJob, first_row: int, starts: Mapping[str, Sequence[int]]) -> None:
        self.job, self.starts = job, starts
        self.row = first_row  # the global row of the next row read
        self.result = GroupStore({role: [] for role in job.spec.columns})
        self.id_parts: list[np.ndarray] = []
        self.writer: _Writer | None = _Writer(job)
        self.stopped = False  # a tokens fault: nothing later in this group matters

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _stop_writing(self) -> None:
        self.result.wrote = False
        self.close()

    def file(self, index: int, position: int, file: TokenInput) -> None:
        """Stream the group's file `position` (input `index`)."""
        roles = self.job.spec.columns
        columns = self.job.spec.read_columns()
        at = {role: self.starts[role][position] for role in roles}
        read = dict.fromkeys(roles, 0)
        faulted: set[str] = set()
        rows = 0
        try:
            for batch in file_batches(file, columns):
                self._batch(batch, at, read, faulted)
                rows += batch.num_rows
                if self.stopped:
                    break
        except (OSError, pa.ArrowException):
            faulted.add("tokens")  # the local store words what it cannot read
        if rows != file.num_rows and not self.stopped:
            faulted.add("tokens")
        for role in faulted:
            self.result.stream_faults.setdefault(role, index)
        if "tokens" in faulted:
            self.stopped = True
        for role in roles:
            self.result.counts[role].append(read[role])
        if any(read[role] != self._planned(role, position) for role in roles):
            self._stop_writing()

    def _planned(self, role: str, position: int) -> int:
        starts = self.starts[role]
        return starts[position + 1] - starts[position]

    def _batch(
        self,
        batch: pa.RecordBatch,
        at: dict[str, int],
        read: dict[str, int],
        faulted: set[str],
    ) -> None:
        """Check the batch (`check_batch`), record its faults, write what may be written."""
        first_row, self.row = self.row, self.row + batch.num_rows
        check = check_batch(self.job.spec, batch)
        rows = check.rows
        if rows is None or check.lengths_null:  # a NULL length: the inputs changed
            faulted.add("tokens")
            self.stopped = True
            return
        if check.refused:
            faulted.update(check.refused)
            self._stop_writing()
        if check.mismatch is not None and self.result.mismatch is None:
            k, values, tokens = check.mismatch
            self.result.mismatch = (first_row + k, values, tokens)
            self._stop_writing()
        if check.claimed is not None:
            self.result.lengths_differ = self.result.lengths_differ or check.lengths_differ
            self.check_pools(check.claimed, rows.lengths, rows.ids, first_row)
        if rows.ids is not None:
            row_numbers = np.arange(first_row, first_row + rows.lengths.size, dtype=np.int64)
            self.id_parts.append(np.stack([rows.ids, row_numbers]))
        if self.writer is not None:
            ends = np.cumsum(rows.lengths)
            ends += at["tokens"] + read["tokens"]
            self.writer.offsets(ends, first_row)
            for role, array in rows.values.items():
                self.writer.values(role, array, at[role] + read[role])
        for role, array in rows.values.items():
            read[role] += int(array.size)

    def check_pools(
        self, claimed: np.ndarray, lengths: np.ndarray, ids: np.ndarray | None, first_row: int
    ) -> None:
        """The first pooled row whose pool is not its stored length (the local store's last
        check, in `token_store`): `claimed` the length column's lengths, `lengths` the lists'."""
        over_cap = self.job.over_cap
        cap = over_cap.max_seq_len
        pooled, pool = over_cap.pooled(claimed)
        at_least = over_cap.truncates & (pool == cap)  # truncate: stored whole, pooled cut
        bad = pooled & np.where(at_least, lengths < cap, lengths != pool)
        if not bad.any():
            return
        if ids is None:
            ids = np.arange(first_row, first_row + lengths.size, dtype=np.int64)
        where = np.flatnonzero(bad)
        k = int(where[np.lexsort((ids[where], pool[where]))[0]])
        found = (int(pool[k]), int(ids[k]), first_row + k, int(lengths[k]))
        if self.result.pool_fault is None or found < self.result.pool_fault:
            self.result.pool_fault = found
        self._stop_writing()

    def finish(self, group: int) -> GroupStore:
        """Close the files; with an id column write the group's run of (id, row) by id."""
        self.close()
        if self.job.spec.id_column is None or self.stopped:
            return self.result
        pairs = np.concatenate(self.id_parts, axis=1) if self.id_parts else np.zeros((2, 0))
        pairs = pairs.astype(np.int64, copy=False)
        order = np.argsort(pairs[0], kind="stable")  # equal ids keep their rows ascending
        for path, values in zip(id_run_paths(self.job.runs_dir, group), pairs[:, order],
                                strict=True):  # fmt: skip
            _write_run(path, values)
        num_ids = pairs.shape[1]
        if num_ids:
            sorted_ids = pairs[0, order]
            positions = np.linspace(0, num_ids - 1, min(self.job.samples, num_ids))
            self.result.samples = sorted_ids[positions.astype(np.int64)]
        self.result.num_ids = num_ids
        return self.result


def _write_run(path: Path, values: np.ndarray) -> None:
    """Raw int64 under a temporary name, renamed into place: a retried task writes the same."""
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    np.ascontiguousarray(values, dtype=np.int64).tofile(tmp)
    os.replace(tmp, path)


def write_group_store(
    job: StoreJob,
    group: int,
    files: Sequence[tuple[int, TokenInput]],
    first_row: int,
    starts: Mapping[str, Sequence[int]],
    expected: Sequence[Fingerprint],
) -> GroupStore:
    """Stream the group's `files` ((input index, footer) pairs, in order; the group's first row
    `first_row`) into the store: `starts[role][k]` is where file k's values go, and
    `starts[role][-1]` where the group's end; `expected`: the driver's fingerprints of the
    files, checked first."""
    check_inputs(expected)
    check_visible((), [job.root, job.runs_dir])
    work = _Group(job, first_row, starts)
    try:
        for position, (index, file) in enumerate(files):
            work.file(index, position, file)
            if position == len(files) // 2:
                job.settings.pause()
            if work.stopped:
                break
    except BaseException:
        work.close()
        raise
    return work.finish(group)
