"""The pools task of one file group: its ids, ascending per length, in a run file of its own.

What the local engine does for all rows (`prepare.pools.scan.scan_pools`), done for one group
with the same SQL: DuckDB streams (length, id); a group of at most `ClusterTuning.memory_ids` ids
is ordered in memory (`group_sort`), a larger one (a single large file) as the local engine
orders all rows, in bounded memory: by the id map (a counting sort, for ids whose span is at most
a few times their count, row indexes always) or scattered by length into a work file and sorted
(`scatter`, `split`). The result, in the run's scratch folder:

- `runs/{group}.len`: the group's pools back to back, lengths ascending, each pool's ids
  ascending (row indexes made global with the group's first row); the merge tasks read it;
- `runs/{group}.ids` (an id column only): every id of the group ascending, every copy kept; the
  duplicate checks read it.

Both are written under temporary names and renamed into place, so a task that Dask runs again
(its worker died) writes the same bytes, and no reader ever sees half a run. Memory is bounded as
in the local job: 8 to 26 bytes per id up to `memory_ids`; past it the map is at most
`PoolTuning.max_map_ids` slots, and the work file is mapped a piece at a time. NULL ids are not
an error here but a result (`GroupPools.nulls`): the driver counts them over every group, as the
local engine does over every file.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare.db import close_connection, load_sql, read_error, read_params
from seqpack_cli.prepare.engines.dask.group_sort import ids_by_length
from seqpack_cli.prepare.engines.dask.groups import FileGroup, GroupCounts
from seqpack_cli.prepare.engines.dask.merge import RunEncoding, pwrite_encoded
from seqpack_cli.prepare.engines.dask.tasks import TaskSettings, check_inputs, check_visible
from seqpack_cli.prepare.pools import id_map
from seqpack_cli.prepare.pools.offsets import Layout, changed_error
from seqpack_cli.prepare.pools.scan import (
    first_null_id,
    footer_id_bounds,
    id_cast_error,
    reserve_work_file,
)
from seqpack_cli.prepare.pools.scatter import scatter
from seqpack_cli.prepare.pools.split import merged_runs, split_pools
from seqpack_cli.prepare.pools.stream import NullIds, stream_batches
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepare.scan import length_query

__all__ = ["GroupPools", "PoolsJob", "group_pools", "run_paths"]


@dataclass(frozen=True)
class PoolsJob:
    """What every group's pools task shares."""

    length_column: str
    id_column: str | None
    over_cap: OverCap
    runs_dir: Path
    tuning: PoolTuning
    settings: TaskSettings
    samples: int
    map_span_ratio: int
    memory_ids: int


@dataclass(frozen=True)
class GroupPools:
    """What a group's pools task returns: a few numbers, never ids (but `samples`)."""

    num_ids: int
    id_min: int | None = None
    id_max: int | None = None
    samples: np.ndarray | None = None
    """Evenly spaced ids of the group, ascending (id column only): the checks' ranges."""
    nulls: tuple[int, int, int] | None = None
    """(file index in the inputs' list, row, count) of the group's NULL ids, if any."""
    repeats: bool = True
    """Whether an id occurs twice in the group (False: checked, none does)."""
    encoding: RunEncoding = field(default_factory=RunEncoding)
    """How the group's runs store its ids."""


def run_paths(runs_dir: Path, group: int) -> tuple[Path, Path]:
    """The group's run by length and run by id."""
    return runs_dir / f"{group}.len", runs_dir / f"{group}.ids"


class _RunFile:
    """A run written under a temporary name, then renamed into place by `commit`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        self.fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def commit(self) -> None:
        os.close(self.fd)
        self.fd = -1
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.tmp.unlink(missing_ok=True)


class _LengthRun(_RunFile):
    """The pools back to back (`Layout` order); `append` places the next ascending ids of one
    pool, from any thread (one pool's appends in order)."""

    def __init__(self, path: Path, layout: Layout, encoding: RunEncoding, first_id: int) -> None:
        super().__init__(path)
        self.position = {int(length): i for i, length in enumerate(layout.lengths.tolist())}
        self.next = layout.starts[:-1].copy()
        self.ends = layout.starts[1:]
        self.encoding = encoding
        self.first_id = first_id

    def append(self, length: int, ids: np.ndarray) -> None:
        i = self.position[int(length)]
        at = int(self.next[i])
        if at + ids.size > self.ends[i]:
            raise changed_error()
        pwrite_encoded(self.fd, ids + self.first_id if self.first_id else ids, at, self.encoding)
        self.next[i] = at + ids.size

    def write_whole(self, ids: np.ndarray) -> None:
        """Every pool at once (`ids` in the layout's order)."""
        pwrite_encoded(self.fd, ids + self.first_id if self.first_id else ids, 0, self.encoding)
        self.next = self.ends.copy()

    def commit(self) -> None:
        if not np.array_equal(self.next, self.ends):
            raise changed_error()
        super().commit()


def _write_sequential(run: _RunFile, chunks: Iterator[np.ndarray], encoding: RunEncoding) -> None:
    at = 0
    for chunk in chunks:
        pwrite_encoded(run.fd, chunk, at, encoding)
        at += chunk.size


class _Group:
    """One group's pass: the query, the ids, and the two ways to order them."""

    def __init__(self, job: PoolsJob, group: FileGroup, counts: dict[int, int], con: Any) -> None:
        self.job, self.group, self.con = job, group, con
        self.layout = Layout(counts, job.tuning)
        self.threads = job.settings.duckdb_threads()
        columns = [job.length_column] + ([job.id_column] if job.id_column else [])
        self.params = {
            **read_params(group.files, *columns),
            **job.over_cap.sql_params(),
        }
        name = "pool_rows_by_position" if job.id_column is None else "pool_rows_by_id"
        self.sql = load_sql(length_query(group.files, job.length_column, name))
        self.to_ids: Callable[[list[np.ndarray]], np.ndarray]
        if job.id_column is None:
            offsets = np.zeros(len(group.files), dtype=np.int64)
            np.cumsum([file.num_rows for file in group.files[:-1]], out=offsets[1:])
            self.to_ids = lambda columns: offsets[columns[1]] + columns[2]
            self.bounds: tuple[int, int] | None = (0, max(group.num_rows - 1, 0))
            first = group.first_row
            self.encoding = RunEncoding.for_bounds((first, first + max(group.num_rows - 1, 0)))
        else:
            self.to_ids = lambda columns: columns[1]
            self.bounds = footer_id_bounds(group.files, job.id_column)
            self.encoding = RunEncoding.for_bounds(self.bounds)
        self.by_length, self.by_id = run_paths(job.runs_dir, group.index)

    def in_memory(self) -> None:
        """A group of at most `memory_ids` ids: ordered in memory (`group_sort`)."""
        first_id = self.group.first_row if self.job.id_column is None else 0
        run = _LengthRun(self.by_length, self.layout, self.encoding, first_id)
        try:
            batches = stream_batches(self.con, self.sql, self.params, self.job.tuning.batch_rows)
            try:
                ids = ids_by_length(batches, self.layout, self.to_ids, self.bounds)
            finally:
                batches.close()
            run.write_whole(ids)
            by_id = None
            if self.job.id_column is not None:
                ids.sort()
                by_id = iter([ids])
            self._commit(run, by_id)
        except BaseException:
            run.discard()
            raise

    def uses_map(self) -> bool:
        if self.bounds is None or not id_map.fits(
            self.layout, *self.bounds, self.job.over_cap.max_seq_len
        ):
            return False
        span = self.bounds[1] - self.bounds[0] + 1
        return self.job.id_column is None or span <= self.job.map_span_ratio * self.layout.num_ids

    def by_map(self) -> bool:
        """The id map's way; False when ids repeat in the group (the map keeps one copy of
        each: the sorting way then keeps them all for the duplicate checks)."""
        assert self.bounds is not None
        ids = id_map.IdMap(self.layout, *self.bounds, self.job.over_cap.max_seq_len)
        batches = stream_batches(self.con, self.sql, self.params, self.job.tuning.batch_rows)
        try:
            ids.fill(((c[0], self.to_ids(c)) for c in batches), workers=self.threads, progress=None)
        finally:
            batches.close()
        first_id = self.group.first_row if self.job.id_column is None else 0
        run = _LengthRun(self.by_length, self.layout, self.encoding, first_id)
        try:
            written = ids.write_pools(run.append, workers=self.threads, progress=None)
            if written != self.layout.num_ids:
                if self.job.id_column is None:
                    raise changed_error()
                run.discard()
                return False
            self._commit(run, self._map_ids(ids) if self.job.id_column else None)
        except BaseException:
            run.discard()
            raise
        return True

    def _map_ids(self, ids: id_map.IdMap) -> Iterator[np.ndarray]:
        chunk = self.job.tuning.map_chunk_ids
        for start in range(0, ids.codes.size, chunk):
            yield np.flatnonzero(ids.codes[start : start + chunk]) + (start + ids.id_min)

    def by_sort(self) -> None:
        """The sorting way: scatter by length into a work file, sort each pool (`split`)."""
        layout = self.layout
        flat = self.job.runs_dir / f"{self.group.index}.{uuid.uuid4().hex[:12]}.work"
        first_id = self.group.first_row if self.job.id_column is None else 0
        run = _LengthRun(self.by_length, layout, self.encoding, first_id)
        try:
            reserve_work_file(flat, 8 * layout.num_ids)
            batches = stream_batches(self.con, self.sql, self.params, self.job.tuning.batch_rows)
            try:
                scatter(
                    batches, layout, flat, self.to_ids, workers=self.threads, track_range=False,
                    progress=None,
                )  # fmt: skip
            finally:
                batches.close()
            split_pools(layout, flat, None, run.append, workers=self.threads, progress=None)
            by_id = None
            if self.job.id_column is not None:
                by_id = merged_runs(flat, 0, layout.num_ids, self.job.tuning.max_sort_ids)
            self._commit(run, by_id)
        except BaseException:
            run.discard()
            raise
        finally:
            flat.unlink(missing_ok=True)

    def _commit(self, run: _LengthRun, by_id: Iterator[np.ndarray] | None) -> None:
        """Both runs into place (the by-id run written first, so that a pause for tests comes
        between the two renames)."""
        ids_run = None
        if by_id is not None:
            ids_run = _RunFile(self.by_id)
            try:
                _write_sequential(ids_run, by_id, self.encoding)
            except BaseException:
                ids_run.discard()
                raise
        run.commit()
        self.job.settings.pause()
        if ids_run is not None:
            ids_run.commit()

    def result(self) -> GroupPools:
        num_ids = self.layout.num_ids
        if self.job.id_column is None:
            return GroupPools(num_ids, encoding=self.encoding)
        encoding = self.encoding
        ids = np.memmap(self.by_id, dtype=encoding.dtype, mode="r", shape=(num_ids,))
        positions = np.linspace(0, num_ids - 1, min(self.job.samples, num_ids)).astype(np.int64)
        samples = encoding.decode(ids[positions])
        chunk = self.job.tuning.map_chunk_ids  # each pair (i, i + 1) compared once
        ends = [(start, min(start + chunk, num_ids - 1)) for start in range(0, num_ids - 1, chunk)]
        repeats = any(bool(np.any(ids[a + 1 : b + 1] == ids[a:b])) for a, b in ends)
        first, last = (int(x) for x in encoding.decode(ids[[0, -1]]))
        return GroupPools(num_ids, first, last, samples, repeats=repeats, encoding=encoding)


def group_pools(job: PoolsJob, group: FileGroup, counts: GroupCounts) -> GroupPools:
    """Write the group's runs (`counts`: its histogram as kept)."""
    check_inputs(group.fingerprints)
    check_visible((), [job.runs_dir])
    con = job.settings.connect()
    try:
        work = _Group(job, group, counts.as_dict(), con)
        if work.layout.num_ids <= job.memory_ids:
            work.in_memory()
        elif not (work.uses_map() and work.by_map()):
            work.by_sort()
        return work.result()
    except NullIds:
        assert job.id_column is not None
        try:
            file_index, row, count = first_null_id(con, group.files, job.id_column)
        except duckdb.Error as error:
            raise read_error(error) from None
        return GroupPools(0, nulls=(group.first_file + file_index, row, count))
    except duckdb.ConversionException as error:
        raise id_cast_error(error) from None
    except duckdb.Error as error:
        raise read_error(error) from None
    finally:
        close_connection(con)
