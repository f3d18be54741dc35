"""The pools pass of `seqpack prepare`: one streaming pass over (length, id) -> one ascending
`pools/{length}.npy` per length, in memory that does not grow with the rows (DESIGN.md decision 6).

One engine, one interface (`scan_pools`). Everything is shared but the step that orders the ids:
DuckDB streams (length, id) in Arrow batches, decoded one step ahead by a thread; `Layout` knows
each length's pool and size from the histogram; the writer created the pool files ahead; a second
pass that disagrees with the first is the same `changed_error`; duplicates are named by DuckDB.

How the ids of each pool are put in ascending order is the one choice, made here, by the span of
the ids (max - min, from the parquet footers, or the row count for row indexes):

- span at most `PoolTuning.max_map_ids` (2**27; row indexes, dense id columns): `id_map`, a
  counting sort. Each id's slot of a 2-byte map over the span gets its length; reading the map
  back in id order yields every pool ascending, appended straight to its file: no work file, no
  sort. A duplicate overwrites its own slot, so the pools come out short and DuckDB names it.
- wider spans (sparse or hashed ids, or a span the footers do not give): `scatter` puts each id at
  its pool's next slot of a flat work file (8 bytes per id, deleted at the end), then `split`
  sorts each pool (numpy's SIMD sort) and appends it; a bitmap (`id_checks.IdCheck`) flags
  duplicate candidates on the way, which DuckDB confirms.

A map over a wider span would grow with the span, not the rows; a sort of a dense span would do
work the map avoids. In RAM: a few batches, the map (256 MiB at most) and a few map chunks, or the
bitmap (128 MiB at most) and one split unit per worker (16-32 MiB). The sizes are a `PoolTuning`.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow.parquet as pq

from seqpack_cli.errors import ConfigError, InputError, first_line, option
from seqpack_cli.npy_files import pwrite_at
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare.db import load_sql, one_row, read_error, read_params
from seqpack_cli.prepare.footers import InputFile
from seqpack_cli.prepare.jsonl_staging import staged_parquet
from seqpack_cli.prepare.pools import id_map
from seqpack_cli.prepare.pools.id_checks import IdCheck, check_duplicates
from seqpack_cli.prepare.pools.offsets import Layout, PoolAppend, changed_error, num_workers
from seqpack_cli.prepare.pools.scatter import scatter
from seqpack_cli.prepare.pools.split import split_pools
from seqpack_cli.prepare.pools.stream import NullIds, stream_batches
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepare.scan import length_query, location
from seqpack_cli.progress import ProgressCallback

__all__ = [
    "PoolScan",
    "first_null_id",
    "footer_id_bounds",
    "id_cast_error",
    "null_ids_error",
    "reserve_work_file",
    "scan_pools",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolScan:
    """What the pools pass saw besides the pools."""

    num_ids: int
    id_min: int | None
    id_max: int | None


def footer_id_bounds(files: Sequence[InputFile], id_column: str) -> tuple[int, int] | None:
    """The id column's [min, max] from the parquet footers' statistics; None where any row group
    lacks them (the pass then takes the path that needs no bounds)."""
    low: int | None = None
    high: int | None = None
    for file in files:
        # A JSON Lines input's parquet copy carries the statistics (`jsonl_staging`).
        with open(staged_parquet(file.path, file.column_types), "rb") as handle:
            metadata = pq.read_metadata(handle)
        names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        if id_column not in names:
            return None
        column = names.index(id_column)
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            if not row_group.num_rows:
                continue
            stats = row_group.column(column).statistics
            if stats is None or not stats.has_min_max or not isinstance(stats.min, int):
                return None
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
    return None if low is None or high is None else (int(low), int(high))


def first_null_id(
    con: duckdb.DuckDBPyConnection, files: Sequence[InputFile], id_column: str
) -> tuple[int, int, int]:
    """(file index, row, number of NULL ids) of `files`' first NULL id (DuckDB finds it)."""
    file_index, row, num_null = one_row(con, "first_null_id", read_params(files, id_column))
    return int(file_index), int(row), int(num_null)


def null_ids_error(
    files: Sequence[InputFile], id_column: str, file_index: int, row: int, num_null: int
) -> InputError:
    """`num_null` NULL ids over `files`, the first in `files[file_index]` at `row`."""
    return InputError(
        f"id column {id_column!r} ({option('id_column')}) has {num_null} NULL ids, the first "
        f"in {location(files, file_index, row)}; ids must be non-null: fill them, or drop "
        f"{option('id_column')} to use row indexes as ids"
    )


def id_cast_error(error: duckdb.ConversionException) -> InputError:
    """An id that does not fit int64. DuckDB's message names the column and the value. Only ids
    can fail their cast: lengths are cast after least(length, max_seq_len), so they are at most
    max_seq_len."""
    return InputError(
        f"{first_line(error)}; ids must fit in a signed 64-bit integer: renumber the ids, or "
        f"drop {option('id_column')} to use row indexes as ids"
    )


def _place_by_map(
    con: duckdb.DuckDBPyConnection,
    batches: Generator[list[np.ndarray], None, None],
    to_ids: Callable[[list[np.ndarray]], np.ndarray],
    ids: id_map.IdMap,
    append: PoolAppend,
    files: Sequence[InputFile],
    id_column: str | None,
    work_dir: Path,
    *,
    workers: int,
    progress: ProgressCallback | None,
) -> tuple[int | None, int | None]:
    """Fill the map while DuckDB streams, then write the pools from it, ascending; returns the
    (min, max) id placed."""
    low, high = ids.fill(
        ((columns[0], to_ids(columns)) for columns in batches), workers=workers, progress=progress
    )
    batches.close()
    filled = time.perf_counter()
    written = ids.write_pools(append, workers=workers, progress=progress)
    if written != ids.layout.num_ids:
        # Fewer filled slots than rows: some id occurred twice (DuckDB counts and locates them).
        if id_column is not None:
            check_duplicates(con, None, files, id_column, work_dir)
        raise changed_error()
    logger.info("id map: pools written ascending in %.2fs", time.perf_counter() - filled)
    return low, high


_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}
"""posix_fallocate's errors for a filesystem that cannot reserve space (zeros are written)."""
_ZEROS_BYTES = 1 << 23


def _write_zeros(fd: int, num_bytes: int) -> None:
    zeros = bytes(min(num_bytes, _ZEROS_BYTES))
    for done in range(0, num_bytes, len(zeros)):
        pwrite_at(fd, memoryview(zeros)[: min(len(zeros), num_bytes - done)], done)


def check_bits_log2(num_ids: int, tuning: PoolTuning) -> int:
    """The duplicate bitmap's size: about 32 bits per id (hashed ids then collide for ~1.5% of
    them, which DuckDB clears), at most 2**`tuning.check_bits_log2`. A small job does not pay
    for (or fault in) a 128 MiB bitmap it cannot fill."""
    return min(tuning.check_bits_log2, max(16, (32 * num_ids).bit_length()))


def reserve_work_file(path: Path, num_bytes: int) -> None:
    """Create the scatter path's flat work file with all its `num_bytes` allocated on disk.

    The file is written through a memory map, and a full disk cannot fail a store into a map:
    it kills the process with SIGBUS, with nothing said and the temporary directory left behind.
    So every block is reserved here (`posix_fallocate`, or zeros written where the filesystem
    cannot reserve), and a full disk is a one-line `ConfigError` before any id is placed.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fallocate = getattr(os, "posix_fallocate", None)
            try:
                if fallocate is None:
                    raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
                if num_bytes:
                    fallocate(fd, 0, num_bytes)
            except OSError as error:
                if error.errno not in _NO_FALLOCATE:
                    raise
                _write_zeros(fd, num_bytes)
        finally:
            os.close(fd)
    except OSError as error:
        path.unlink(missing_ok=True)
        size = f"{num_bytes / 2**30:.1f} GiB" if num_bytes >= 2**30 else f"{num_bytes:,} bytes"
        raise ConfigError(
            f"cannot reserve {size} for the ids' work file in {path.parent}: "
            f"{error.strerror or error}; free some space or choose another {option('output')}"
        ) from None


def scan_pools(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    counts: Mapping[int, int],
    *,
    id_column: str | None,
    over_cap: OverCap,
    work_dir: Path,
    append_pool: PoolAppend,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    tuning: PoolTuning | None = None,
) -> PoolScan:
    """Stream (length, id) once and write every length's ascending pool through `append_pool`.

    `counts` is the histogram of the lengths kept (all <= max_seq_len), as `over_cap` keeps
    them: the query's parameters are its own (`OverCap.sql_params`). A length column of token
    lists streams each list's length, counted by DuckDB. Ids are the id column (checked:
    non-null, unique) or, without one, global row indexes over `files` in their order.
    Work files (the scatter path's flat file, 8 bytes per id) live in `work_dir` and are deleted
    at the end.
    """
    started = time.perf_counter()
    tuning = tuning or PoolTuning()
    layout = Layout(counts, tuning)
    num_threads = num_workers(workers, tuning)
    columns = [length_column] if id_column is None else [length_column, id_column]
    params: dict[str, Any] = {
        **read_params(files, *columns),
        **over_cap.sql_params(),
    }
    max_seq_len = over_cap.max_seq_len
    to_ids: Callable[[list[np.ndarray]], np.ndarray]
    bounds: tuple[int, int] | None
    if id_column is None:
        sql = load_sql(length_query(files, length_column, "pool_rows_by_position"))
        row_offsets = np.zeros(len(files), dtype=np.int64)
        np.cumsum([file.num_rows for file in files[:-1]], out=row_offsets[1:])
        bounds = (0, max(sum(file.num_rows for file in files) - 1, 0))

        def to_ids(columns: list[np.ndarray]) -> np.ndarray:
            return row_offsets[columns[1]] + columns[2]
    else:
        sql = load_sql(length_query(files, length_column, "pool_rows_by_id"))
        bounds = footer_id_bounds(files, id_column)

        def to_ids(columns: list[np.ndarray]) -> np.ndarray:
            return columns[1]

    by_map = bounds is not None and id_map.fits(layout, *bounds, max_seq_len)
    flat_path = work_dir / "ids.bin"
    if not by_map:
        reserve_work_file(flat_path, 8 * layout.num_ids)
    batches = stream_batches(con, sql, params, tuning.batch_rows)
    check = None
    try:
        if by_map:
            assert bounds is not None
            id_min, id_max = _place_by_map(
                con,
                batches,
                to_ids,
                id_map.IdMap(layout, *bounds, max_seq_len),
                append_pool,
                files,
                id_column,
                work_dir,
                workers=num_threads,
                progress=progress,
            )
        else:
            id_min, id_max = scatter(
                batches,
                layout,
                flat_path,
                to_ids,
                workers=num_threads,
                track_range=id_column is not None,
                progress=progress,
            )
    except NullIds:
        assert id_column is not None
        raise null_ids_error(files, id_column, *first_null_id(con, files, id_column)) from None
    except duckdb.ConversionException as error:
        raise id_cast_error(error) from None
    except duckdb.Error as error:
        raise read_error(error) from None
    finally:
        batches.close()  # stops the producer thread now, not when the generator is collected
    if id_column is None:
        id_min = id_max = None  # row indexes: the manifest records no id range
    placed = time.perf_counter()
    logger.info(
        "pools pass (%s): %d ids placed in %.2fs",
        "id map" if by_map else "scatter",
        layout.num_ids,
        placed - started,
    )
    if by_map:
        return PoolScan(layout.num_ids, id_min, id_max)
    if id_column is not None and id_min is not None and id_max is not None:
        check = IdCheck(
            id_min,
            id_max,
            max_bits_log2=check_bits_log2(layout.num_ids, tuning),
            max_candidates=tuning.max_candidates,
        )
    split_pools(layout, flat_path, check, append_pool, workers=num_threads, progress=progress)
    os.unlink(flat_path)
    logger.info("split into %d pools in %.2fs", len(layout.lengths), time.perf_counter() - placed)
    if check is not None:
        assert id_column is not None
        check_duplicates(con, check, files, id_column, work_dir)
    return PoolScan(layout.num_ids, id_min, id_max)
