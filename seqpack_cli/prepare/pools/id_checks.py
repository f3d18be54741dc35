"""Duplicate-id checks for `--id-column` ids on the scatter path (wide id spans).

Ids are checked on the way out of the split, pool by pool, with one byte per possible id when the
span allows, else a bitmap that narrows the candidates down for DuckDB to confirm exactly. (Narrow
spans take the `id_map` path, whose map finds duplicates by itself.) Either way the error names
the count, an example id and the rows that hold it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.prepare.scan import (
    InputFile,
    duckdb_path,
    load_sql,
    location,
    one_row,
    read_error,
    read_params,
)

__all__ = ["BitmapIdCheck", "DenseIdCheck", "IdCheck", "check_duplicates", "id_check"]

logger = logging.getLogger(__name__)

MAX_BYTEMAP_IDS = 1 << 27
"""Id spans up to this are checked with one byte per id (128 MiB)."""


class DenseIdCheck:
    """Duplicate ids in a range of at most `MAX_BYTEMAP_IDS`: one byte per possible id.

    Marking is an idempotent byte store, so threads need no lock; duplicates exist exactly when
    fewer bytes are marked than ids were added.
    """

    def __init__(self, id_min: int, id_max: int) -> None:
        self.id_min = id_min
        self.seen = np.zeros(id_max - id_min + 1, dtype=np.uint8)

    def add(self, ids: np.ndarray) -> None:
        self.seen[ids - self.id_min if self.id_min else ids] = 1

    def maybe_duplicates(self, num_ids: int) -> bool:
        return int(np.count_nonzero(self.seen)) != num_ids


class BitmapIdCheck:
    """Duplicate-id candidates for wide id ranges: one bit per id, 2**30 bits (128 MiB) at most.

    A range up to 2**30 ids maps each id to its own bit, so every flagged id is a duplicate;
    wider (sparse) ranges are hashed into the bitmap, so a flagged id may also be a collision.
    Either way DuckDB confirms the candidates exactly afterwards; past `max_candidates` this
    gives up and DuckDB checks every id.
    """

    max_bits_log2 = 30
    max_candidates = 1 << 23
    _golden = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, id_min: int, id_max: int) -> None:
        span = id_max - id_min + 1
        self.exact = span <= 1 << self.max_bits_log2
        self.id_min = np.uint64(id_min & (2**64 - 1))
        num_bits = span if self.exact else 1 << self.max_bits_log2
        self.bitmap = np.zeros((num_bits + 7) // 8, dtype=np.uint8)
        self.candidates: list[np.ndarray] = []
        self.num_candidates = 0
        self.overflow = False
        self._lock = threading.Lock()

    def add(self, ids: np.ndarray) -> None:
        """Record a chunk of ids (ascending within each pool, not across pools)."""
        shifted = ids.view(np.uint64) - self.id_min
        if not self.exact:
            shifted = (shifted * self._golden) >> np.uint64(64 - self.max_bits_log2)
        order = np.argsort(shifted, kind="stable")
        values, keyed = shifted[order], ids[order]
        byte = values >> np.uint64(3)
        bit = np.left_shift(np.uint8(1), (values & np.uint64(7)).astype(np.uint8))
        # Equal bytes are adjacent after the sort: OR their bits together so one store per byte
        # loses nothing.
        first = np.concatenate(([0], np.flatnonzero(byte[1:] != byte[:-1]) + 1))
        combined = np.bitwise_or.reduceat(bit, first)
        with self._lock:
            flagged = (self.bitmap[byte] & bit) != 0
            flagged[1:] |= values[1:] == values[:-1]
            if flagged.any():
                found = keyed[flagged]
                self.num_candidates += found.size
                if self.num_candidates > self.max_candidates:
                    self.overflow = True
                    self.candidates = []
                elif not self.overflow:
                    self.candidates.append(found)
            self.bitmap[byte[first]] |= combined


def id_check(id_min: int, id_max: int) -> DenseIdCheck | BitmapIdCheck:
    if id_max - id_min < MAX_BYTEMAP_IDS:
        return DenseIdCheck(id_min, id_max)
    return BitmapIdCheck(id_min, id_max)


IdCheck = DenseIdCheck | BitmapIdCheck


def check_duplicates(
    con: duckdb.DuckDBPyConnection,
    check: IdCheck | None,
    num_ids: int,
    files: Sequence[InputFile],
    id_column: str,
    work_dir: Path,
) -> None:
    """Raise `InputError` naming the duplicated ids, if any; DuckDB confirms what `check` flagged.

    `check=None` means the caller already knows there are duplicates (or may be): DuckDB then
    counts them over all rows. Returns quietly when there are none.
    """
    params = read_params(files, id_column)
    try:
        if check is None:
            row = one_row(con, "duplicate_ids_all", params)
        elif isinstance(check, DenseIdCheck):
            if not check.maybe_duplicates(num_ids):
                return
            row = one_row(con, "duplicate_ids_all", params)
        elif not check.num_candidates:
            return
        elif check.overflow:
            logger.info("many id collisions in the bitmap: checking duplicates with DuckDB")
            row = one_row(con, "duplicate_ids_all", params)
        else:
            candidates_path = work_dir / "candidate_ids.parquet"
            try:
                pq.write_table(pa.table({"id": np.concatenate(check.candidates)}), candidates_path)
            except OSError as error:
                candidates_path.unlink(missing_ok=True)
                raise ConfigError(
                    f"cannot write the duplicate-id candidates in {work_dir}: "
                    f"{error.strerror or error}; free some space or choose another "
                    f"{option('output')}"
                ) from None
            try:
                row = one_row(
                    con,
                    "duplicate_ids",
                    {**params, "candidates_path": duckdb_path(candidates_path)},
                )
            finally:
                candidates_path.unlink()
        num_duplicated, num_extra, example = row
        if not num_duplicated:
            return
        where = con.sql(load_sql("id_locations"), params={**params, "id": example}).fetchall()
    except duckdb.Error as error:
        raise read_error(error) from None
    places = " and ".join(location(files, file_index, row) for file_index, row in where)
    raise InputError(
        f"id column {id_column!r} ({option('id_column')}) has {num_duplicated} duplicated ids "
        f"({num_extra} extra rows), e.g. id {example} in {places}; ids must be unique: fix the "
        f"data, or drop {option('id_column')} to use row indexes as ids"
    )
