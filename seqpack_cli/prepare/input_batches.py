"""One input file of either kind, read in row order and bounded memory: parquet or JSON Lines.

A file's kind comes from its name (`input_kind`: `*.jsonl`, `*.jsonl.gz`, `*.json`, any case, are
JSON Lines; anything else is read as parquet). A JSON Lines file holds one JSON object per line
(blank lines are skipped; `*.gz` is gunzipped as it streams); its columns are the objects' keys.
pyarrow's streaming JSON reader parses it block by block (`_BLOCK_BYTES`), so memory is a few
blocks whatever the file's size, and rows come in file order. Only the columns asked for are
parsed (the other keys are ignored, whatever they hold).

- `read_batches`: a file's columns as Arrow record batches (the tokenizer's feed: strings,
  lists of `{role, content}` structs, integers);
- `describe_input`: its kind, byte size, row count (for JSON Lines, from a streaming pass that
  parses no column) and schema (for JSON Lines, `jsonl_schema`: each key typed on its own from
  the first lines, so a key of mixed types troubles no other column);
- `jsonl_fault`: where a JSON Lines file first goes wrong (a malformed line, a line that is not
  an object, a value of the wrong type), a `JsonlFault` (1-based line, what, the column); run
  only to word an error, since pyarrow's own messages count rows inside a block, not lines;
- `line_of_row`: the line that holds a row (0-based, blank lines skipped), to word an error.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from seqpack_cli.errors import InputError, first_line, option
from seqpack_cli.input_names import JSONL_SUFFIXES

__all__ = [
    "ColumnOptions",
    "InputDescription",
    "InputKind",
    "JsonlFault",
    "check_columns",
    "describe_input",
    "input_kind",
    "jsonl_fault",
    "jsonl_schema",
    "line_of_row",
    "missing_column_error",
    "not_parquet_error",
    "open_jsonl",
    "read_batches",
    "value_fits",
]

InputKind = Literal["parquet", "jsonl"]

_BLOCK_BYTES = 1 << 22
"""Bytes of JSON pyarrow parses at a time: a block's rows are in memory at once, no more."""
_SAMPLE_LINES = 10_000
"""Lines (at most) whose keys and values type a JSON Lines file's columns (`jsonl_schema`)."""


def input_kind(path: str | os.PathLike[str]) -> InputKind:
    """`"jsonl"` for a name ending in one of `JSONL_SUFFIXES` (any case), else `"parquet"`."""
    name = os.fspath(path).lower()
    return "jsonl" if name.endswith(JSONL_SUFFIXES) else "parquet"


@contextmanager
def open_jsonl(path: Path, schema: pa.Schema | None = None) -> Iterator[pj.JSONStreamingReader]:
    """pyarrow's streaming reader over a JSON Lines file (gunzipped for `*.gz`), closed on exit:
    with `schema`, only its columns are parsed (as its types; other keys ignored); without, every
    key, typed from the first block.

    Raises `pa.ArrowInvalid` as pyarrow does (the callers locate the fault: `jsonl_fault`).
    """
    parse = (
        pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pj.ParseOptions()
    )
    with open(path, "rb") as handle:  # opened by Python: pyarrow takes only UTF-8 path names
        stream: pa.NativeFile = pa.PythonFile(handle, mode="r")
        if path.name.lower().endswith(".gz"):
            stream = pa.CompressedInputStream(stream, "gzip")
        read = pj.ReadOptions(block_size=_BLOCK_BYTES)
        yield pj.open_json(stream, read_options=read, parse_options=parse)


def _not_jsonl(path: Path, error: BaseException) -> InputError:
    """A JSON Lines file pyarrow refused, located to its first bad line (or pyarrow's words)."""
    fault = jsonl_fault(path)
    if fault is not None:
        return fault.error(path)
    return InputError(
        f"input file {path} is not readable as JSON Lines ({first_line(error)}); JSON Lines "
        "inputs hold one JSON object per line: fix the file or leave it out"
    )


def _column_type(values: list[Any]) -> pa.DataType:
    """The Arrow type of one key's sampled values: what pyarrow infers for them all, or where
    they disagree (a number, then a string) the first value's, so reading the file stops at the
    first line that differs, by number."""
    try:
        return pa.array(values).type
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        first = next(value for value in values if value is not None)
        return pa.array([first]).type


def jsonl_schema(path: Path) -> pa.Schema:
    """The columns of a JSON Lines file: the keys of its first objects (up to `_SAMPLE_LINES`
    lines or `_BLOCK_BYTES` bytes), in the order they first appear, each typed on its own
    (`_column_type`; a key null in every sampled line is null-typed), so a key of mixed types
    troubles no other column.

    Raises:
        InputError: an empty file (no JSON object), or a malformed sampled line, by number.
    """
    values: dict[str, list[Any]] = {}
    num_objects = num_bytes = 0
    for number, raw in _lines(path):
        num_bytes += len(raw)
        value = _parsed(path, number, raw)
        if value is None:
            continue
        for key in value:
            if key not in values:
                values[key] = [None] * num_objects
        for key, column in values.items():
            column.append(value.get(key))
        num_objects += 1
        if num_objects >= _SAMPLE_LINES or num_bytes >= _BLOCK_BYTES:
            break
    if not num_objects:
        raise InputError(
            f"input file {path} holds no JSON object (it is empty); leave it out of the inputs, "
            "or write its rows"
        )
    return pa.schema([(key, _column_type(column)) for key, column in values.items()])


def _count_jsonl_rows(path: Path) -> int:
    """Rows of a JSON Lines file, in one streaming pass that parses no column (every line's JSON
    is still checked)."""
    try:
        with open_jsonl(path, pa.schema([])) as reader:
            return sum(batch.num_rows for batch in reader)
    except (pa.ArrowException, OSError) as error:
        raise _not_jsonl(path, error) from None


@dataclass(frozen=True)
class InputDescription:
    """One input file: its kind, size in bytes, rows, and columns (for JSON Lines, as its first
    lines type them: `jsonl_schema`)."""

    path: Path
    kind: InputKind
    num_bytes: int
    num_rows: int
    schema: pa.Schema


def describe_input(path: Path) -> InputDescription:
    """What `path` is (see `InputDescription`), in bounded memory.

    Args:
        path: one input file (parquet, or JSON Lines by its name: `input_kind`).

    Returns:
        Its kind, byte size, row count and schema.

    Raises:
        InputError: a file that is not readable as its kind (for JSON Lines: the first malformed
            line, by number), or an empty JSON Lines file.
    """
    num_bytes = path.stat().st_size
    if input_kind(path) == "jsonl":
        schema = jsonl_schema(path)
        return InputDescription(path, "jsonl", num_bytes, _count_jsonl_rows(path), schema)
    try:
        with open(path, "rb") as handle:  # pyarrow takes only UTF-8 path names
            metadata = pq.read_metadata(handle)
        schema = metadata.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as error:
        raise not_parquet_error(f"input file {path}", error) from None
    return InputDescription(path, "parquet", num_bytes, metadata.num_rows, schema)


def not_parquet_error(what: str, error: BaseException) -> InputError:
    """The one wording of an input (`what`: "input file PATH", or an object's URL) whose
    parquet footer cannot be read, quoting pyarrow's `error`."""
    return InputError(
        f"{what} is not a readable parquet file ({first_line(error)}); leave it out of the "
        "inputs or rewrite it as parquet"
    )


ColumnOptions = Mapping[str, "str | None"]
"""The input columns a job reads, each with the option that names it (`"length_column"`, ...;
None where the caller's own argument names it): what a missing column's message points to."""

_NAMES_SHOWN = 20


def missing_column_error(
    column: str,
    where: object,
    names: Sequence[str],
    *,
    option_name: str | None = None,
    role: str | None = None,
    option_in_fix_only: bool = False,
) -> InputError:
    """The one wording of a column that is not in an input: the column (its `role`, "length",
    "token", ..., and the option naming it, beside it or, with `option_in_fix_only`, in the fix
    alone), where it was looked for, the columns there (the first 20), and the fix."""
    label = "column" if role is None else f"{role} column"
    beside = option_name is not None and not option_in_fix_only
    flag = f" ({option(option_name)})" if beside and option_name else ""
    shown = ", ".join(names[:_NAMES_SHOWN]) + (", ..." if len(names) > _NAMES_SHOWN else "")
    fix = (
        "name one of them" if option_name is None else f"pass one of them as {option(option_name)}"
    )
    variants = [name for name in names if name.lower() == column.lower()]
    hint = f" (names are matched exactly: did you mean {variants[0]!r}?)" if variants else ""
    return InputError(
        f"{label} {column!r}{flag} is not in {where}; its columns are: {shown}; {fix}{hint}"
    )


def check_columns(where: object, names: Sequence[str], columns: ColumnOptions) -> None:
    """`missing_column_error` for the first of `columns` not among `names` (`where`: a file, a
    table's or an object's name), its option named in the fix."""
    for column, option_name in columns.items():
        if column not in names:
            raise missing_column_error(
                column, where, names, option_name=option_name, option_in_fix_only=True
            )


def _rebatched(batches: Iterator[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """`batches` cut and joined into batches of `batch_rows` rows (the last one shorter)."""
    pending: list[pa.RecordBatch] = []
    num_pending = 0
    for batch in batches:
        while batch.num_rows:
            take = min(batch.num_rows, batch_rows - num_pending)
            pending.append(batch.slice(0, take))
            num_pending += take
            batch = batch.slice(take)
            if num_pending == batch_rows:
                yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
                pending, num_pending = [], 0
    if num_pending:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def _jsonl_batches(path: Path, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    schema = jsonl_schema(path)
    check_columns(path, schema.names, dict.fromkeys(columns))
    wanted = pa.schema([schema.field(column) for column in columns])
    try:
        with open_jsonl(path, wanted) as reader:
            yield from reader
    except pa.ArrowException as error:
        fault = jsonl_fault(
            path, {column: value_fits(wanted.field(column).type) for column in columns}
        )
        if fault is None:
            raise _not_jsonl(path, error) from None
        if fault.column is None:
            raise fault.error(path) from None
        raise InputError(
            f"input file {path} line {fault.line} {fault.what} in column {fault.column!r}, unlike "
            "the lines before it; give the column one type in every line"
        ) from None


def _parquet_batches(
    path: Path, columns: Sequence[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    try:
        with open(path, "rb") as handle, pq.ParquetFile(handle) as parquet:
            check_columns(path, parquet.schema_arrow.names, dict.fromkeys(columns))
            yield from parquet.iter_batches(batch_size=batch_rows, columns=list(columns))
    except (pa.ArrowException, OSError) as error:
        raise InputError(
            f"cannot read {path} as parquet ({first_line(error)}); is it a complete parquet file?"
        ) from None


def read_batches(
    path: Path, columns: Sequence[str], *, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """`columns` of one input file, in row order, `batch_rows` rows a batch (the last shorter).

    Memory stays a few batches (for JSON Lines, a few parse blocks) whatever the file's size.

    Args:
        path: one input file, parquet or JSON Lines (`input_kind` tells them apart).
        columns: the columns to read, in this order (for JSON Lines, keys of the objects, typed
            as the file's first lines type them, `jsonl_schema`; a key missing from a line
            reads as null).
        batch_rows: rows per batch, at least 1.

    Yields:
        Record batches holding exactly `columns`.

    Raises:
        InputError: a missing column, a file not readable as its kind, or (JSON Lines) a
            malformed line or a value whose type differs from the first lines', by line number.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows is {batch_rows}; expected at least 1")
    if input_kind(path) == "jsonl":
        yield from _rebatched(_jsonl_batches(path, columns), batch_rows)
    else:
        yield from _parquet_batches(path, columns, batch_rows)


# ---- locating a fault by line (error paths only) ----------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) of a JSON Lines file, gunzipped for `*.gz`; `InputError` for
    a `*.gz` file that is not (complete) gzip."""
    gzipped = path.name.lower().endswith(".gz")
    try:
        with gzip.open(path, "rb") if gzipped else open(path, "rb") as handle:
            yield from enumerate(handle, start=1)
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise InputError(
            f"input file {path} is not a complete gzip file ({error}), though its name ends in "
            ".gz; compress it again, or rename it without .gz if it is plain JSON Lines"
        ) from None


def value_fits(column_type: pa.DataType) -> Callable[[Any], bool]:
    """A test of whether a parsed JSON value fits `column_type` (null fits every type; nested
    types pass: pyarrow's own message words those)."""

    def is_integer(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if pa.types.is_integer(column_type) or pa.types.is_null(column_type):
        return lambda value: value is None or is_integer(value)
    if pa.types.is_list(column_type) and pa.types.is_integer(column_type.value_type):
        return lambda value: (
            value is None or (isinstance(value, list) and all(is_integer(item) for item in value))
        )
    if pa.types.is_string(column_type) or pa.types.is_large_string(column_type):
        return lambda value: value is None or isinstance(value, str)
    if pa.types.is_floating(column_type):
        return lambda value: (
            value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        )
    return lambda value: True  # nested types: pyarrow's own message stands


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _line_fault(number: int, raw: bytes) -> tuple[Any, str | None]:
    """One line parsed: (its JSON object, None), (None, None) for a blank line, or (None, what
    is wrong with it)."""
    text = raw.decode("utf-8", errors="replace").strip()
    if number == 1:
        text = text.lstrip("\ufeff")
    if not text:
        return None, None
    try:
        value = json.loads(text)
    except ValueError as error:
        return None, f"is not valid JSON ({str(error).split(':')[0]})"
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "a string, number or literal"
        return None, f"is not a JSON object (it is {kind})"
    return value, None


def _parsed(path: Path, number: int, raw: bytes) -> dict[str, Any] | None:
    """Line `number`'s JSON object, None for a blank line; `InputError` for a bad one."""
    value, fault = _line_fault(number, raw)
    if fault is not None:
        raise JsonlFault(number, fault).error(path)
    return value


@dataclass(frozen=True)
class JsonlFault:
    """Where a JSON Lines file first goes wrong (`jsonl_fault`).

    `line` is 1-based; `what` says what is wrong with it ("is not valid JSON (...)", "is not a
    JSON object (...)", or for a value that does not fit, "holds 3.5"); `column` is the column of
    that value, None when the line itself is malformed.
    """

    line: int
    what: str
    column: str | None = None

    def error(self, path: Path) -> InputError:
        """The one-line error for a malformed line (callers word a value's fault themselves)."""
        return InputError(
            f"input file {path} line {self.line} {self.what}; JSON Lines inputs hold one JSON "
            "object per line: fix or remove that line"
        )


def jsonl_fault(
    path: Path, checks: dict[str, Callable[[Any], bool]] | None = None
) -> JsonlFault | None:
    """The first line of a JSON Lines file that is malformed, not a JSON object, or (with
    `checks`, {column: whether a value fits}) holds a value that does not fit; None if every
    line is fine."""
    for number, raw in _lines(path):
        value, fault = _line_fault(number, raw)
        if fault is not None:
            return JsonlFault(number, fault)
        for column, fits in (checks or {}).items() if value is not None else ():
            if not fits(value.get(column)):
                return JsonlFault(number, f"holds {_shown(value.get(column))}", column)
    return None


def line_of_row(path: Path, row: int) -> int | None:
    """The 1-based line of a JSON Lines file that holds row `row` (0-based; blank lines are no
    rows); None past the end."""
    seen = 0
    for number, raw in _lines(path):
        if raw.strip() and raw.strip() != b"\xef\xbb\xbf":
            if seen == row:
                return number
            seen += 1
    return None
