"""The token column of the parquet inputs (with labels or a loss mask, the length and the id
column) decoded in threads, checked and cast, in row order: `stream_token_batches`.

The one-pass store (`prepare.one_pass`) reads every row once, here: each parquet row group is a
unit of work that a worker thread decodes with pyarrow (which releases the GIL), batch by batch;
`ordered.ordered_parallel` hands the batches over in file and row order, in bounded memory.
Each batch is checked on the way (no NULL or empty list, no NULL value, every value inside its
dtype or allowed range, labels or mask lists as long as the tokens, the length column equal to
the lists' lengths, no NULL id, ids inside int64, the footers' row counts); a batch that fails
any check raises `Fault`, which says only that the inputs hold something the reference path
(the two passes of `prepare.job`) words as an error, and that path then runs to word it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqpack_cli.prepare.ordered import ordered_parallel
from seqpack_cli.prepare.token_reading import TARGET_VALUES_PER_BATCH, TokenInput

__all__ = ["Fault", "StreamSpec", "TokenBatch", "stream_token_batches"]

_MAX_BATCH_ROWS = 1 << 16
_READ_BUFFER = 1 << 22  # bytes read at a time: pages stream instead of whole column chunks
_BUDGET_BYTES = 1 << 28
"""Decoded batches waiting for the writer, at most (besides those of the row group it is on)."""


class Fault(Exception):
    """The inputs hold something the reference path reports as an error (or the stream could
    not read them): that path runs instead, to word it."""


@dataclass(frozen=True)
class StreamSpec:
    """What to read: `files` (the token column's footers, in order), `columns` ({role: column}
    for "tokens" and optionally "labels" or "loss_mask"), each role's `dtypes` and allowed value
    `ranges` ([low, high]), a `length_column` to compare with the lists' lengths (None when it is
    the token column itself) and the `id_column` (None for row-index ids)."""

    files: Sequence[TokenInput]
    columns: Mapping[str, str]
    dtypes: Mapping[str, np.dtype[Any]]
    ranges: Mapping[str, tuple[int, int]]
    length_column: str | None
    id_column: str | None

    def read_columns(self) -> list[str]:
        names = [*self.columns.values(), self.length_column, self.id_column]
        return list(dict.fromkeys(name for name in names if name is not None))


@dataclass(frozen=True)
class TokenBatch:
    """One batch of rows: each row's number of tokens, each role's values (back to back, cast),
    and the rows' ids (int64) with an id column."""

    lengths: np.ndarray
    values: dict[str, np.ndarray]
    ids: np.ndarray | None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.ids is None else self.ids.nbytes
        return self.lengths.nbytes + sum(v.nbytes for v in self.values.values()) + extra


def _list_lengths(array: pa.Array, what: str) -> np.ndarray:
    """Each list's length (int64); `Fault` for a NULL list."""
    if array.null_count:
        raise Fault(f"{what}: a NULL list")
    return np.asarray(pc.list_value_length(array).to_numpy(zero_copy_only=False), dtype=np.int64)


def within(values: np.ndarray, low: int, high: int) -> bool:
    """Whether every value lies in [low, high], in one pass over them where the types allow."""
    if not values.size:
        return True
    if values.dtype == np.bool_:
        return low <= 0 and high >= 1
    info = np.iinfo(values.dtype)
    if low <= info.min and info.max <= high:
        return True  # the type holds nothing else
    if values.dtype.kind == "i" and low == 0:
        if high >= info.max:
            return int(values.min()) >= 0
        # Negative values read as unsigned are over the signed maximum, so over `high`.
        return int(values.view(f"u{values.dtype.itemsize}").max()) <= high
    if values.dtype.kind == "u" and low <= 0:
        return int(values.max()) <= high
    return int(values.min()) >= low and int(values.max()) <= high


def _values(spec: StreamSpec, role: str, array: pa.Array) -> np.ndarray:
    flat = pc.list_flatten(array)
    if flat.null_count:
        raise Fault(f"{role}: a NULL value")
    values = flat.to_numpy(zero_copy_only=False)
    if not within(values, *spec.ranges[role]):
        raise Fault(f"{role}: a value outside its range")
    return values.astype(spec.dtypes[role], copy=False)


def _ids(array: pa.Array) -> np.ndarray:
    if array.null_count:
        raise Fault("a NULL id")
    ids = array.to_numpy(zero_copy_only=False)
    if ids.dtype == np.uint64 and ids.size and int(ids.max()) > np.iinfo(np.int64).max:
        raise Fault("an id over int64")
    return ids.astype(np.int64, copy=False)


def _decode(spec: StreamSpec, batch: pa.RecordBatch) -> TokenBatch:
    tokens = batch.column(spec.columns["tokens"])
    lengths = _list_lengths(tokens, "tokens")
    if lengths.size and int(lengths.min()) <= 0:
        raise Fault("an empty token list")
    values = {}
    for role, column in spec.columns.items():
        array = batch.column(column)
        if role != "tokens" and not np.array_equal(_list_lengths(array, role), lengths):
            raise Fault(f"{role}: a list not as long as its tokens")
        values[role] = _values(spec, role, array)
    if spec.length_column is not None:
        given = batch.column(spec.length_column)
        if pa.types.is_integer(given.type):
            if given.null_count or not np.array_equal(
                given.to_numpy(zero_copy_only=False), lengths
            ):
                raise Fault("the length column disagrees with the token lists")
        elif not np.array_equal(_list_lengths(given, "lengths"), lengths):
            raise Fault("the length column disagrees with the token lists")
    ids = None if spec.id_column is None else _ids(batch.column(spec.id_column))
    return TokenBatch(lengths, values, ids)


def _units(files: Sequence[TokenInput]) -> list[tuple[TokenInput, int, int]]:
    """(file, row group, its rows) of every row group, in order."""
    units = []
    for file in files:
        with pq.ParquetFile(file.path) as parquet:
            metadata = parquet.metadata
        units += [(file, g, metadata.row_group(g).num_rows) for g in range(metadata.num_row_groups)]
    return units


def _read_unit(spec: StreamSpec, unit: tuple[TokenInput, int, int]) -> Iterator[TokenBatch]:
    file, group, expected = unit
    per_row = max(1, file.num_values // max(1, file.num_rows))
    rows = min(_MAX_BATCH_ROWS, max(1, TARGET_VALUES_PER_BATCH // per_row))
    read = 0
    try:
        with pq.ParquetFile(file.path, buffer_size=_READ_BUFFER, pre_buffer=False) as parquet:
            batches = parquet.iter_batches(
                batch_size=rows, row_groups=[group], columns=spec.read_columns(), use_threads=False
            )
            for batch in batches:
                read += batch.num_rows
                yield _decode(spec, batch)
    except (OSError, pa.ArrowException) as error:
        raise Fault(f"cannot read {file.path}: {error}") from None
    if read != expected:
        raise Fault(f"{file.path} row group {group}: {read} rows, the footer says {expected}")


def stream_token_batches(spec: StreamSpec, *, workers: int) -> Generator[TokenBatch, None, None]:
    """Every row of `spec.files`, in order, in checked batches, decoded by `workers` threads;
    `Fault` as soon as a batch fails a check (or a file cannot be read, or its row counts are not
    its footer's)."""
    try:
        units = _units(spec.files)
    except (OSError, pa.ArrowException) as error:
        raise Fault(f"cannot read the footers: {error}") from None
    if sum(unit[2] for unit in units) != sum(file.num_rows for file in spec.files):
        raise Fault("the row groups do not add up to the files' rows")
    return ordered_parallel(
        units, lambda unit: _read_unit(spec, unit), workers=workers, budget_bytes=_BUDGET_BYTES
    )
