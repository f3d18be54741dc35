"""Reading a parquet column of token lists in bounded memory, for `token_files`.

`inspect_token_inputs` reads the footers (row counts, the column's type, the token values'
min/max statistics); `choose_dtype` picks the smallest unsigned dtype that holds the largest
token id (from those statistics, or a first pass over the column where a row group has none);
`stream_token_lists` streams the column, one Arrow batch at a time (never the whole column, never
Python objects per token), into `tokens.npy` and `offsets.npy`, and the id column, in row order,
into a scratch file. Every value is checked against the dtype; a bad one is an `InputError`
naming the file, the row and the value.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqpack_cli.errors import InputError, option
from seqpack_cli.token_sources import OFFSETS_NAME, TOKENS_NAME

__all__ = [
    "IDS_BY_ROW_NAME",
    "TARGET_VALUES_PER_BATCH",
    "TokenInput",
    "choose_dtype",
    "inspect_token_inputs",
    "stream_token_lists",
]

TARGET_VALUES_PER_BATCH = 1 << 19
"""Token values per Arrow batch, about (rows per batch from the footer's values per row)."""
_MAX_BATCH_ROWS = 1 << 16
_READ_BUFFER = 1 << 22  # bytes read at a time: pages stream instead of whole column chunks
_HEADER_BYTES = 128  # the .npy headers' size, so tokens.npy's is rewritten in place at the end
IDS_BY_ROW_NAME = ".ids-by-row"
"""Scratch file of the ids in row order (raw int64), turned into the id index."""

_UNSIGNED: list[np.dtype[Any]] = [np.dtype(name) for name in ("u1", "<u2", "<u4", "<u8")]


@dataclass(frozen=True)
class TokenInput:
    """One parquet input, as its footer describes it."""

    path: Path
    num_bytes: int
    num_rows: int
    num_values: int  # the token column's leaf values (an estimate of its tokens)
    value_range: tuple[int, int] | None  # min/max token id by the statistics; None if unknown


def _is_list(column_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(column_type)
        or pa.types.is_large_list(column_type)
        or pa.types.is_fixed_size_list(column_type)
    )


def _statistics(metadata: pq.FileMetaData, column: str) -> tuple[int, tuple[int, int] | None]:
    """(leaf values, (min, max) over every row group or None) of `column`'s one leaf."""
    leaves = [
        i
        for i in range(metadata.num_columns)
        if metadata.schema.column(i).path.split(".")[0] == column
    ]
    if len(leaves) != 1:
        return 0, None
    num_values, low, high, known = 0, None, None, True
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(leaves[0])
        num_values += chunk.num_values
        stats = chunk.statistics
        if stats is None or not stats.has_min_max:
            known = known and metadata.row_group(group).num_rows == 0
            continue
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if not known or low is None or high is None:
        return num_values, None
    return num_values, (int(low), int(high))


def _inspect(path: Path, column: str, id_column: str | None) -> TokenInput:
    try:
        with pq.ParquetFile(path) as parquet:
            schema, metadata = parquet.schema_arrow, parquet.metadata
    except (OSError, pa.ArrowException) as error:
        raise InputError(
            f"cannot read {path} as parquet ({str(error).splitlines()[0]}); pass parquet files"
        ) from None
    for role, name in (("token", column), ("id", id_column)):
        if name is None:
            continue
        flag = f" ({option('id_column')})" if role == "id" else ""
        if name not in schema.names:
            raise InputError(
                f"{role} column {name!r}{flag} is not in {path}; its columns are: "
                f"{', '.join(schema.names[:20])}; pass one of them"
            )
        kind = schema.field(name).type
        if role == "token":
            usable = _is_list(kind) and pa.types.is_integer(kind.value_type)
        else:
            usable = pa.types.is_integer(kind)
        if not usable:
            expected = (
                "lists of integer token ids (e.g. TRL's input_ids)"
                if role == "token"
                else "unique integer ids"
            )
            raise InputError(
                f"{role} column {name!r}{flag} in {path} holds {kind} values; expected "
                f"{expected}: pass the right column"
            )
    num_values, value_range = _statistics(metadata, column)
    return TokenInput(path, os.path.getsize(path), metadata.num_rows, num_values, value_range)


def inspect_token_inputs(
    paths: Sequence[Path], column: str, id_column: str | None
) -> list[TokenInput]:
    """Every input's footer; `InputError` for a file that is not parquet, a missing column, a
    token column that is not lists of integers, an id column that is not integers, or no rows."""
    files = [_inspect(path, column, id_column) for path in paths]
    if not sum(file.num_rows for file in files):
        raise InputError(
            f"the {len(files)} input file(s) hold no rows (e.g. {files[0].path}); point it at "
            "the dataset's data files"
        )
    return files


def _batches(file: TokenInput, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The file's `columns` in batches of about `TARGET_VALUES_PER_BATCH` token values."""
    per_row = max(1, file.num_values // max(1, file.num_rows))
    rows = min(_MAX_BATCH_ROWS, max(1, TARGET_VALUES_PER_BATCH // per_row))
    try:
        with pq.ParquetFile(file.path, buffer_size=_READ_BUFFER, pre_buffer=False) as parquet:
            yield from parquet.iter_batches(batch_size=rows, columns=columns, use_threads=True)
    except (OSError, pa.ArrowException) as error:
        raise InputError(
            f"cannot read {file.path} ({str(error).splitlines()[0]}); is it a complete parquet "
            "file?"
        ) from None


def choose_dtype(files: Sequence[TokenInput], column: str) -> np.dtype[Any]:
    """The smallest unsigned dtype that holds the largest token id (uint8 when there is none)."""
    high = 0
    for file in files:
        if file.value_range is not None:
            high = max(high, file.value_range[1])
            continue
        for batch in _batches(file, [column]):  # no statistics: a pass over the column
            found = pc.max(pc.list_flatten(batch.column(column))).as_py()
            high = max(high, found if found is not None else 0)
    return next((kind for kind in _UNSIGNED if high <= np.iinfo(kind).max), _UNSIGNED[-1])


def _row_of(lengths: np.ndarray, index: int) -> int:
    """The row (within the batch) holding value `index` of the flattened lists."""
    return int(np.searchsorted(np.cumsum(lengths), index, side="right"))


def _token_lists(
    array: pa.Array, file: TokenInput, column: str, first_row: int
) -> tuple[np.ndarray, np.ndarray]:
    """(lengths int64, values) of one batch's token lists; NULL lists and ids refused."""
    if array.null_count:
        row = first_row + int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(
            f"token column {column!r} is NULL in {file.path} at row {row} (0-based); every row "
            "needs a token list: drop or fill NULL rows before tokenising and preparing"
        )
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(array)
    if values.null_count:
        index = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(
            f"token column {column!r} holds a NULL token id in {file.path} at row "
            f"{first_row + _row_of(lengths, index)} (0-based); token ids are integers: fix the "
            "tokenised data"
        )
    return lengths, values.to_numpy(zero_copy_only=False)


def _checked(
    values: np.ndarray,
    lengths: np.ndarray,
    dtype: np.dtype[Any],
    where: tuple[TokenInput, str, int],
) -> np.ndarray:
    """`values` as `dtype`, or `InputError` naming the first value it cannot hold."""
    if values.size and not np.can_cast(values.dtype, dtype, "safe"):
        limits = np.iinfo(dtype)
        if values.min() < limits.min or values.max() > limits.max:
            index = int(np.flatnonzero((values < limits.min) | (values > limits.max))[0])
            file, column, first_row = where
            value = int(values[index])
            if value < 0 and limits.min == 0:
                why = (
                    "negative; token ids are >= 0: check that the column holds token ids (for "
                    f"labels with -100 pass {option('dtype')} 'int32')"
                )
            else:
                why = (
                    f"outside {dtype.name} [{limits.min}, {limits.max}]; pass a wider "
                    f"{option('dtype')} (e.g. 'uint32'), or leave it unset to pick one"
                )
            raise InputError(
                f"token column {column!r} in {file.path} at row "
                f"{first_row + _row_of(lengths, index)} (0-based) holds {value}, which is {why}"
            )
    return values.astype(dtype, copy=False)


def _ids(array: pa.Array, file: TokenInput, id_column: str, first_row: int) -> np.ndarray:
    """One batch's ids as int64; NULL ids and ids over int64 refused."""
    if array.null_count:
        row = first_row + int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(
            f"id column {id_column!r} is NULL in {file.path} at row {row} (0-based); every "
            "sequence needs an id: fill them, or leave id_column unset for row-index ids"
        )
    ids = array.to_numpy(zero_copy_only=False)
    if ids.dtype == np.uint64 and ids.size and ids.max() > np.iinfo(np.int64).max:
        index = int(np.flatnonzero(ids > np.iinfo(np.int64).max)[0])
        raise InputError(
            f"id column {id_column!r} holds {int(ids[index])} in {file.path} at row "
            f"{first_row + index} (0-based), over int64; prepare refuses such ids too"
        )
    return ids.astype(np.int64, copy=False)


def _npy_header(dtype: np.dtype[Any], count: int) -> bytes:
    """A version 1.0 .npy header of a 1-d array, padded to `_HEADER_BYTES` bytes."""
    text = f"{{'descr': {np.lib.format.dtype_to_descr(dtype)!r}, 'fortran_order': False, "
    text += f"'shape': ({count},), }}"
    body = text.ljust(_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")


def _write(out: BinaryIO, array: np.ndarray) -> None:
    out.write(np.ascontiguousarray(array).data.cast("B"))


def stream_token_lists(
    directory: Path,
    files: Sequence[TokenInput],
    column: str,
    id_column: str | None,
    dtype: np.dtype[Any],
) -> int:
    """Write `tokens.npy` (as `dtype`) and `offsets.npy` (int64) of every row of `files`, in
    order, into `directory`, and with `id_column` the ids in row order (`IDS_BY_ROW_NAME`);
    return the number of tokens."""
    num_rows = sum(file.num_rows for file in files)
    columns = [column] if id_column is None else [column, id_column]
    num_tokens = 0
    with (
        open(directory / TOKENS_NAME, "wb") as tokens,
        open(directory / OFFSETS_NAME, "wb") as offsets,
        open(os.devnull if id_column is None else directory / IDS_BY_ROW_NAME, "wb") as ids,
    ):
        tokens.write(bytes(_HEADER_BYTES))  # rewritten once the count is known
        offsets.write(_npy_header(np.dtype("<i8"), num_rows + 1))
        _write(offsets, np.zeros(1, dtype=np.int64))
        for file in files:
            row = 0
            for batch in _batches(file, columns):
                lengths, values = _token_lists(batch.column(column), file, column, row)
                _write(tokens, _checked(values, lengths, dtype, (file, column, row)))
                ends = np.cumsum(lengths)
                ends += num_tokens
                _write(offsets, ends)
                num_tokens = int(ends[-1]) if ends.size else num_tokens
                if id_column is not None:
                    _write(ids, _ids(batch.column(id_column), file, id_column, row))
                row += batch.num_rows
            if row != file.num_rows:
                raise InputError(
                    f"{file.path} has {row} rows, but its footer said {file.num_rows} when it was "
                    "first read; run again once the inputs stay put"
                )
        tokens.seek(0)
        tokens.write(_npy_header(dtype, num_tokens))
    return num_tokens
