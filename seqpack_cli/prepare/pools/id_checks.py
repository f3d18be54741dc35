"""Duplicate-id checks for `--id-column` ids on the scatter path (wide id spans).

Ids are checked on the way out of the split, unit by unit, with a bitmap (one bit per id, or per
hash of the id for sparse spans) that narrows the candidates down for DuckDB to confirm exactly.
(Narrow spans take the `id_map` path, whose map finds duplicates by itself.) Either way the error
names the count, an example id and the rows that hold it.
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
from seqpack_cli.prepare.db import duckdb_path, load_sql, one_row, read_error, read_params
from seqpack_cli.prepare.footers import InputFile
from seqpack_cli.prepare.scan import location

__all__ = ["IdCheck", "check_duplicates", "duplicate_ids_error"]

logger = logging.getLogger(__name__)

_GOLDEN = 0x9E3779B97F4A7C15
"""Odd, so multiplying by it is a bijection on uint64 (Fibonacci hashing)."""
_GOLDEN_INVERSE = pow(_GOLDEN, -1, 2**64)


class IdCheck:
    """Duplicate-id candidates, one bit per id: a bitmap of at most 2**`max_bits_log2` bits.

    An id span that fits the bitmap maps each id to its own bit, so every flagged id is a
    duplicate; a wider (sparse) span is hashed into it (the top bits of id * golden), so a
    flagged id may also be a collision. Either way DuckDB confirms the candidates exactly
    afterwards (`check_duplicates`); past `max_candidates` it gives up and DuckDB checks every id.

    Each chunk is sorted by its key (numpy's SIMD sort, ~10x a stable argsort) so that ids
    sharing a bitmap byte are adjacent and their bits are OR-ed before one store per byte. The
    key is a bijection of the id (id - id_min, times the odd golden constant when hashed), so the
    sorted keys give the ids back without an argsort.
    """

    def __init__(self, id_min: int, id_max: int, *, max_bits_log2: int, max_candidates: int):
        span = id_max - id_min + 1
        self.max_bits_log2 = max_bits_log2
        self.max_candidates = max_candidates
        self.exact = span <= 1 << max_bits_log2
        self.id_min = np.uint64(id_min & (2**64 - 1))
        num_bits = span if self.exact else 1 << max_bits_log2
        self.bitmap = np.zeros((num_bits + 7) // 8, dtype=np.uint8)
        self.candidates: list[np.ndarray] = []
        self.num_candidates = 0
        self.overflow = False
        self._lock = threading.Lock()

    def _sorted_slots(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ascending keys, their bitmap bits as int64) of a chunk of ids."""
        keys = ids.view(np.uint64) - self.id_min
        if not self.exact:
            keys *= np.uint64(_GOLDEN)  # wraps: a bijection on uint64
        keys.sort()
        if not self.exact:
            # The top bits: monotone in the key, so the slots come out ascending too.
            return keys, (keys >> np.uint64(64 - self.max_bits_log2)).view(np.int64)
        return keys, keys.view(np.int64)  # below 2**max_bits_log2: int64 indexes (much faster)

    def _ids_of(self, keys: np.ndarray) -> np.ndarray:
        if not self.exact:
            keys = keys * np.uint64(_GOLDEN_INVERSE)
        return (keys + self.id_min).view(np.int64)

    def add(self, ids: np.ndarray) -> None:
        """Record a chunk of ids (in any order); thread-safe."""
        if not ids.size:
            return
        keys, slots = self._sorted_slots(ids)
        byte = slots >> 3
        bit = np.left_shift(np.uint8(1), (slots & 7).astype(np.uint8))
        # Equal bytes are adjacent after the sort: each distinct byte is read once, the bits
        # of its ids OR-ed together, and stored once, so concurrent bits never overwrite.
        starts_byte = np.empty(byte.size, dtype=bool)
        starts_byte[0] = True
        np.not_equal(byte[1:], byte[:-1], out=starts_byte[1:])
        first = np.flatnonzero(starts_byte)
        combined = np.bitwise_or.reduceat(bit, first)
        distinct = byte[first]
        run_sizes = np.empty_like(first)
        np.subtract(first[1:], first[:-1], out=run_sizes[:-1])
        run_sizes[-1] = byte.size - first[-1]
        with self._lock:
            before = self.bitmap[distinct]
            self.bitmap[distinct] = before | combined
        # Flagged: a bit already set by an earlier chunk, or a slot shared within this chunk.
        flagged = (np.repeat(before, run_sizes) & bit) != 0
        flagged[1:] |= slots[1:] == slots[:-1]
        if not flagged.any():
            return
        found = self._ids_of(keys[flagged])
        with self._lock:
            self.num_candidates += found.size
            if self.num_candidates > self.max_candidates:
                self.overflow = True
                self.candidates = []
            elif not self.overflow:
                self.candidates.append(found)


def check_duplicates(
    con: duckdb.DuckDBPyConnection,
    check: IdCheck | None,
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
    raise duplicate_ids_error(files, id_column, num_duplicated, num_extra, example, where)


def duplicate_ids_error(
    files: Sequence[InputFile],
    id_column: str,
    num_duplicated: int,
    num_extra: int,
    example: int,
    where: Sequence[tuple[int, int]],
) -> InputError:
    """`num_duplicated` ids occur more than once (`num_extra` rows beyond the first of each);
    the smallest is `example`, first found at `where` ((file index, row) pairs, in order)."""
    places = " and ".join(location(files, file_index, row) for file_index, row in where)
    return InputError(
        f"id column {id_column!r} ({option('id_column')}) has {num_duplicated} duplicated ids "
        f"({num_extra} extra rows), e.g. id {example} in {places}; ids must be unique: fix the "
        f"data, or drop {option('id_column')} to use row indexes as ids"
    )
