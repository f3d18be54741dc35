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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqpack_cli.errors import InputError, first_line, option
from seqpack_cli.prepare.input_batches import input_kind, missing_column_error
from seqpack_cli.prepare.store_files import append_values, store_header
from seqpack_cli.token_sources import OFFSETS_NAME, TOKENS_NAME

__all__ = [
    "IDS_BY_ROW_NAME",
    "MASK_DTYPE",
    "TARGET_VALUES_PER_BATCH",
    "TokenInput",
    "ValueRule",
    "choose_dtype",
    "choose_signed_dtype",
    "file_batches",
    "inspect_token_input",
    "inspect_token_inputs",
    "role_rule",
    "store_dtype",
    "stream_token_lists",
    "value_range",
]

TARGET_VALUES_PER_BATCH = 1 << 19
"""Token values per Arrow batch, about (rows per batch from the footer's values per row)."""
_MAX_BATCH_ROWS = 1 << 16
_READ_BUFFER = 1 << 22  # bytes read at a time: pages stream instead of whole column chunks
IDS_BY_ROW_NAME = ".ids-by-row"
"""Scratch file of the ids in row order (raw int64), turned into the id index."""

_UNSIGNED: list[np.dtype[Any]] = [np.dtype(name) for name in ("u1", "<u2", "<u4", "<u8")]
_TOKEN_ID_MAX = int(np.iinfo(np.int64).max)
"""The largest token id kept: tokens are served as int64, uint64 stores included."""


@dataclass(frozen=True)
class TokenInput:
    """One parquet input, as its footer describes it."""

    path: Path
    num_bytes: int
    num_rows: int
    num_values: int  # the token column's leaf values (an estimate of its tokens)
    value_range: tuple[int, int] | None  # min/max token id by the statistics; None if unknown


@dataclass(frozen=True)
class ValueRule:
    """How a column's values are named and checked: `what` names it in messages ("token column
    'x'"); `allowed` narrows the dtype's range (a loss mask's (0, 1)), `outside` saying why;
    `negative` is the fix for a negative value in an unsigned dtype; `allow_bool` admits lists
    of booleans; `option_name` is the option that names the column, where one does."""

    what: str = "token"
    allowed: tuple[int, int] | None = None
    outside: str = ""
    negative: str = (
        "check that the column holds token ids (for labels with -100 pass "
        f"{option('dtype')} 'int32')"
    )
    allow_bool: bool = False
    option_name: str | None = None


TOKENS = ValueRule()
MASK_DTYPE = np.dtype("u1")
"""A loss mask's store dtype, whatever its column holds (0/1 integers or booleans)."""


def role_rule(
    role: str,
    *,
    negative: str | None = None,
    mask_fix: str = "",
    option_name: str | None = None,
) -> ValueRule:
    """What a column of `role` ("tokens", "labels" or "loss_mask") admits and how messages
    name it: the one definition of each role's values. The caller words its own fixes:
    `negative` for a negative token id (the default otherwise), `mask_fix` for a loss mask
    value other than 0 and 1 (what to pass instead), and names the `option_name` of the
    column if an option names it."""
    if role == "tokens":
        rule = ValueRule() if negative is None else ValueRule(negative=negative)
    elif role == "labels":
        rule = ValueRule(what="labels")
    else:
        rule = ValueRule(
            what="loss mask",
            allowed=(0, 1),
            outside=f"a loss mask holds 1 where the loss is taken and 0 elsewhere: {mask_fix}",
            allow_bool=True,
        )
    return replace(rule, option_name=option_name)


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


def inspect_token_input(
    path: Path, column: str, id_column: str | None, rule: ValueRule
) -> TokenInput:
    """One parquet input's token column (and id column) checked against `rule`, from its footer:
    the local engine's `inspect_token_inputs` and the Dask engine's footers read inputs alike.

    A JSON Lines input is refused in one line: the store reads token lists from parquet (see
    `token_stream`), and converting is one call (`pyarrow.json.read_json`, then
    `pyarrow.parquet.write_table`)."""
    if input_kind(path) == "jsonl":
        raise InputError(
            f"input file {path} is JSON Lines, and the token store ({option('tokens_column')}) "
            "reads token lists from parquet only; convert it first (pyarrow.parquet.write_table("
            "pyarrow.json.read_json(PATH), 'PATH.parquet')), or tokenize text in prepare with "
            f"{option('tokenizer')}"
        )
    try:
        with pq.ParquetFile(path) as parquet:
            schema, metadata = parquet.schema_arrow, parquet.metadata
    except (OSError, pa.ArrowException) as error:
        raise InputError(
            f"cannot read {path} as parquet ({first_line(error)}); pass parquet files"
        ) from None
    for role, name in ((rule.what, column), ("id", id_column)):
        if name is None:
            continue
        flag = f" ({option('id_column')})" if role == "id" else ""
        if name not in schema.names:
            raise missing_column_error(
                name,
                path,
                schema.names,
                option_name="id_column" if role == "id" else rule.option_name,
                role=role,
            )
        kind = schema.field(name).type
        if role != "id":
            value_type = kind.value_type if _is_list(kind) else None
            usable = value_type is not None and (
                pa.types.is_integer(value_type)
                or (rule.allow_bool and pa.types.is_boolean(value_type))
            )
        else:
            usable = pa.types.is_integer(kind)
        if not usable:
            expected = {
                "id": "unique integer ids",
                "token": "lists of integer token ids (e.g. TRL's input_ids)",
            }.get(role, f"lists of integer {role} values, one per token")
            raise InputError(
                f"{role} column {name!r}{flag} in {path} holds {kind} values; expected "
                f"{expected}: pass the right column"
            )
    num_values, value_range = _statistics(metadata, column)
    return TokenInput(path, os.path.getsize(path), metadata.num_rows, num_values, value_range)


def inspect_token_inputs(
    paths: Sequence[Path], column: str, id_column: str | None, rule: ValueRule = TOKENS
) -> list[TokenInput]:
    """Every input's footer; `InputError` for a file that is not parquet, a missing column, a
    token column that is not lists of integers, an id column that is not integers, or no rows."""
    files = [inspect_token_input(path, column, id_column, rule) for path in paths]
    if not sum(file.num_rows for file in files):
        raise InputError(
            f"the {len(files)} input file(s) hold no rows (e.g. {files[0].path}); point it at "
            "the dataset's data files"
        )
    return files


def file_batches(
    file: TokenInput,
    columns: list[str],
    *,
    row_groups: list[int] | None = None,
    use_threads: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The file's `columns` (of `row_groups`, all by default) in batches of about
    `TARGET_VALUES_PER_BATCH` token values, pages streamed: the store's one parquet reader.
    A file that cannot be read raises pyarrow's error (`OSError` or `ArrowException`)."""
    per_row = max(1, file.num_values // max(1, file.num_rows))
    rows = min(_MAX_BATCH_ROWS, max(1, TARGET_VALUES_PER_BATCH // per_row))
    with pq.ParquetFile(file.path, buffer_size=_READ_BUFFER, pre_buffer=False) as parquet:
        yield from parquet.iter_batches(
            batch_size=rows, row_groups=row_groups, columns=columns, use_threads=use_threads
        )


def _batches(file: TokenInput, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """`file_batches`, a file that cannot be read worded in one line."""
    try:
        yield from file_batches(file, columns)
    except (OSError, pa.ArrowException) as error:
        raise InputError(
            f"cannot read {file.path} ({first_line(error)}); is it a complete parquet file?"
        ) from None


def choose_dtype(files: Sequence[TokenInput], column: str) -> np.dtype[Any]:
    """The smallest unsigned dtype that holds the largest token id (uint8 when there is none).

    A token id over int64 (in a `list<uint64>` column) is refused here, before any heavy work:
    tokens are served as int64 (torch's index type), where it would turn negative."""
    high = 0
    for file in files:
        if file.value_range is not None:
            found = file.value_range[1]
        else:
            found = value_range(file, column)[1]  # no statistics: a pass over the column
        if found > _TOKEN_ID_MAX:
            raise InputError(_over_int64(column, file.path, found))
        high = max(high, found)
    return next(kind for kind in _UNSIGNED if high <= np.iinfo(kind).max)


def _over_int64(column: str, path: Path, value: int, row: int | None = None) -> str:
    where = f" at row {row} (0-based)" if row is not None else ""
    return (
        f"token column {column!r} in {path}{where} holds token id {value}, over int64's "
        f"{_TOKEN_ID_MAX}; token ids are served as int64 (torch's index type): fix the "
        "tokenised data"
    )


def choose_signed_dtype(files: Sequence[TokenInput], column: str) -> np.dtype[Any]:
    """int32, or int64 when the column's values (labels, -100 included) need more."""
    low, high = 0, 0
    for file in files:
        if file.value_range is not None:
            low, high = min(low, file.value_range[0]), max(high, file.value_range[1])
            continue
        found_low, found_high = value_range(file, column)  # no statistics: a pass over it
        low, high = min(low, found_low), max(high, found_high)
    limits = np.iinfo(np.int32)
    return np.dtype("<i4" if limits.min <= low and high <= limits.max else "<i8")


def value_range(file: TokenInput, column: str) -> tuple[int, int]:
    """(min, max) of the column's values, 0 included (0 for none), read in one pass: for a file
    whose footer has no statistics."""
    low, high = 0, 0
    for batch in _batches(file, [column]):
        found = pc.min_max(pc.list_flatten(batch.column(column))).as_py()
        low = min(low, found["min"] if found["min"] is not None else 0)
        high = max(high, found["max"] if found["max"] is not None else 0)
    return int(low), int(high)


def store_dtype(role: str, files: Sequence[TokenInput], column: str) -> np.dtype[Any]:
    """The store's dtype of `role`: tokens the smallest unsigned dtype (`choose_dtype`), labels
    int32 or int64 (`choose_signed_dtype`), a loss mask uint8."""
    if role == "tokens":
        return choose_dtype(files, column)
    if role == "labels":
        return choose_signed_dtype(files, column)
    return MASK_DTYPE


def _row_of(lengths: np.ndarray, index: int) -> int:
    """The row (within the batch) holding value `index` of the flattened lists."""
    return int(np.searchsorted(np.cumsum(lengths), index, side="right"))


def _token_lists(
    array: pa.Array, file: TokenInput, column: str, first_row: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """(lengths int64, values) of one batch's token lists; NULL lists and ids refused."""
    if array.null_count:
        row = first_row + int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(
            f"{what} column {column!r} is NULL in {file.path} at row {row} (0-based); every row "
            f"needs a {what} list: drop or fill NULL rows before tokenising and preparing"
        )
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(array)
    noun = "token id" if what == "token" else f"{what} value"
    if values.null_count:
        index = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(
            f"{what} column {column!r} holds a NULL {noun} in {file.path} at row "
            f"{first_row + _row_of(lengths, index)} (0-based); {noun}s are integers: fix the "
            "tokenised data"
        )
    return lengths, values.to_numpy(zero_copy_only=False)


def _checked(
    values: np.ndarray,
    lengths: np.ndarray,
    dtype: np.dtype[Any],
    where: tuple[TokenInput, str, int],
    rule: ValueRule,
) -> np.ndarray:
    """`values` as `dtype`, or `InputError` naming the first value it (or `rule`) refuses."""
    limits = np.iinfo(dtype)
    # A uint64 store (an explicit dtype) holds ids up to int64's maximum: they are served as int64.
    low, high = rule.allowed or (limits.min, min(limits.max, _TOKEN_ID_MAX))
    checked = rule.allowed is not None or not np.can_cast(values.dtype, dtype, "safe")
    checked = checked or high < limits.max
    if not (checked and values.size and (values.min() < low or values.max() > high)):
        return values.astype(dtype, copy=False)
    index = int(np.flatnonzero((values < low) | (values > high))[0])
    file, column, first_row = where
    value = int(values[index])
    row = first_row + _row_of(lengths, index)
    if rule.allowed is None and value > high and high < limits.max:  # a uint64 store
        raise InputError(_over_int64(column, file.path, value, row))
    if rule.allowed is not None:
        why = f"outside [{low}, {high}]; {rule.outside}"
    elif value < 0 and limits.min == 0:
        why = f"negative; token ids are >= 0: {rule.negative}"
    else:
        why = (
            f"outside {dtype.name} [{limits.min}, {limits.max}]; pass a wider "
            f"{option('dtype')} (e.g. 'uint32'), or leave it unset to pick one"
        )
    raise InputError(
        f"{rule.what} column {column!r} in {file.path} at row {row} (0-based) holds {value}, "
        f"which is {why}"
    )


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


def stream_token_lists(
    directory: Path,
    files: Sequence[TokenInput],
    column: str,
    id_column: str | None,
    dtype: np.dtype[Any],
    rule: ValueRule = TOKENS,
) -> int:
    """Write `tokens.npy` (as `dtype`) and `offsets.npy` (int64) of every row of `files`, in
    order, into `directory`, and with `id_column` the ids in row order (`IDS_BY_ROW_NAME`);
    return the number of tokens. `rule` names the column in messages and checks its values."""
    num_rows = sum(file.num_rows for file in files)
    columns = [column] if id_column is None else [column, id_column]
    num_tokens = 0
    with (
        open(directory / TOKENS_NAME, "wb") as tokens,
        open(directory / OFFSETS_NAME, "wb") as offsets,
        open(os.devnull if id_column is None else directory / IDS_BY_ROW_NAME, "wb") as ids,
    ):
        tokens.write(store_header(dtype, 0))  # rewritten once the count is known
        offsets.write(store_header(np.dtype("<i8"), num_rows + 1))
        append_values(offsets, np.zeros(1, dtype=np.int64))
        for file in files:
            row = 0
            for batch in _batches(file, columns):
                lengths, values = _token_lists(batch.column(column), file, column, row, rule.what)
                append_values(tokens, _checked(values, lengths, dtype, (file, column, row), rule))
                ends = np.cumsum(lengths)
                ends += num_tokens
                append_values(offsets, ends)
                num_tokens = int(ends[-1]) if ends.size else num_tokens
                if id_column is not None:
                    append_values(ids, _ids(batch.column(id_column), file, id_column, row))
                row += batch.num_rows
            if row != file.num_rows:
                raise InputError(
                    f"{file.path} has {row} rows, but its footer said {file.num_rows} when it was "
                    "first read; run again once the inputs stay put"
                )
        tokens.seek(0)
        tokens.write(store_header(dtype, num_tokens))
    return num_tokens
