"""Parquet inputs -> length histogram: the footer checks and the first of prepare's two passes.

The first pass (DESIGN.md decision 6): `length_histogram` is one cheap GROUP BY over the length
column, and bad lengths (NULL, <= 0) are refused here, before any heavy work. The second pass,
over (length, id), lives in `prepare.pools.engine` (`scan_pools`), which builds on this module.

The length column holds integer token counts, or token lists (LIST / LARGE_LIST of integers,
e.g. TRL-style `input_ids`): then a sequence's length is its number of elements, counted by
DuckDB (`len`) in every query that reads lengths, through the `_of_lists` variant of its SQL
(`length_query` names it). A NULL list is a NULL length and an empty list a length of 0.

Inputs are resolved by `prepare.inputs` (`resolve_inputs`: files, globs, directories; nothing
left out or counted twice without a word) and their footers checked here (`inspect_inputs`: row
counts, schema, column types, names DuckDB could confuse) before DuckDB reads a row. The DuckDB
side (connection, settings, SQL, error wording, how paths and columns are bound) is in
`prepare.db`. The names other modules import from here keep working: they are re-exported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import InputError, option
from seqpack_cli.prepare.db import (
    check_memory_limit,
    check_temp_dir,
    close_connection,
    connect,
    duckdb_path,
    fetch_with_progress,
    first_line,
    load_sql,
    one_row,
    read_error,
    read_params,
)
from seqpack_cli.prepare.inputs import PARQUET_SUFFIXES, not_regular, resolve_inputs
from seqpack_cli.progress import ProgressCallback

__all__ = [
    "PARQUET_SUFFIXES",
    "Footer",
    "HistogramPart",
    "InputFile",
    "check_footers",
    "check_memory_limit",
    "check_temp_dir",
    "checked_histogram",
    "close_connection",
    "connect",
    "duckdb_path",
    "first_line",
    "histogram_part",
    "inspect_inputs",
    "is_token_lists",
    "length_histogram",
    "length_query",
    "load_sql",
    "location",
    "one_row",
    "read_error",
    "read_footer",
    "read_params",
    "resolve_inputs",
    "scan_length_histogram",
]


# ---- inputs: the footers ----------------------------------------------------------------------


@dataclass(frozen=True)
class InputFile:
    """One parquet input, as its footer describes it.

    `column_types` are the DuckDB types of the columns `inspect_inputs` checked (the length
    column, and the id column if any), as `read_params` binds them: a length column of token
    lists has a list type such as `INTEGER[]`.
    """

    path: Path
    num_bytes: int
    num_rows: int
    column_types: tuple[tuple[str, str], ...] = ()


_DUCKDB_INTEGERS = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
}


def _ascii_lower(name: str) -> str:
    # DuckDB matches column names ignoring ASCII case only ("Ä" and "ä" stay apart).
    return "".join(char.lower() if char.isascii() else char for char in name)


def _list_element(column_type: pa.DataType) -> pa.DataType | None:
    """The element type of a (large, fixed-size) list type; None for any other type."""
    if (
        pa.types.is_list(column_type)
        or pa.types.is_large_list(column_type)
        or pa.types.is_fixed_size_list(column_type)
    ):
        return column_type.value_type
    return None


def _duckdb_type(column_type: pa.DataType, role: str) -> str | None:
    """How `bound_schema` binds a column read in `role`; None for a type prepare cannot read.

    Integers, and for the length column lists of integers (read as DuckDB lists, whose `len`
    is the length).
    """
    if column_type in _DUCKDB_INTEGERS:
        return _DUCKDB_INTEGERS[column_type]
    element = _list_element(column_type) if role == "length" else None
    if element is not None and element in _DUCKDB_INTEGERS:
        return f"{_DUCKDB_INTEGERS[element]}[]"
    return None


def _check_column(
    path: Path, names: Sequence[str], types: Mapping[str, pa.DataType], column: str, role: str
) -> str:
    """The column's DuckDB type (see `_duckdb_type`), or `InputError` saying why it cannot be
    read."""
    flag = option(f"{role}_column")
    if column not in types:
        variants = [name for name in names if _ascii_lower(name) == _ascii_lower(column)]
        hint = f" (names are matched exactly: did you mean {variants[0]!r}?)" if variants else ""
        raise InputError(
            f"{role} column {column!r} ({flag}) is not in {path}; its columns are: "
            f"{', '.join(names)}; pass one of them as {flag}{hint}"
        )
    same = [name for name in names if _ascii_lower(name) == _ascii_lower(column)]
    if len(same) > 1:
        shown = " and ".join(repr(name) for name in same)
        reason = "the same name" if len(set(same)) == 1 else "names that differ only in case"
        raise InputError(
            f"input file {path} has {len(same)} columns with {reason} ({shown}), and {flag} "
            f"names {column!r}; DuckDB cannot tell them apart: rename all but one of them when "
            "writing the parquet"
        )
    column_type = types[column]
    duckdb_type = _duckdb_type(column_type, role)
    if duckdb_type is not None:
        return duckdb_type
    if role == "length" and _list_element(column_type) is not None:
        raise InputError(
            f"length column {column!r} ({flag}) in {path} holds {column_type} values; expected "
            "integer token counts, or lists of integer token ids (each list's length is the "
            f"sequence's): name the token-id or length column with {flag}"
        )
    expected = "integer token counts" if role == "length" else "unique integer ids"
    raise InputError(
        f"{role} column {column!r} ({flag}) in {path} holds {column_type} values; expected "
        f"{expected}; cast the column to an integer type when writing the parquet, or name "
        f"the right column with {flag}"
    )


def _schema_difference(
    types: Mapping[str, pa.DataType], reference: Mapping[str, pa.DataType], reference_path: Path
) -> str:
    for name, column_type in reference.items():
        if name not in types:
            return f"it has no column {name!r}, which {reference_path} has"
        if types[name] != column_type:
            return f"column {name!r} is {types[name]} there but {column_type} in {reference_path}"
    extra = next(name for name in types if name not in reference)
    return f"it has a column {extra!r} that {reference_path} lacks"


@dataclass(frozen=True)
class Footer:
    """One parquet input's footer as `read_footer` read it: what `check_footers` compares."""

    path: Path
    num_bytes: int
    num_rows: int
    names: tuple[str, ...]
    types: dict[str, pa.DataType]


def read_footer(path: Path) -> Footer:
    """The footer of one input; `InputError` for a path that is not a regular file, or a file that
    is not parquet (or is truncated)."""
    why = not_regular(path)
    if why == "missing":
        raise InputError(f"input file {path} does not exist; check the path")
    if why is not None:
        raise InputError(f"input {path} is {why}; inputs are parquet files: leave it out")
    try:
        with open(path, "rb") as handle:  # pyarrow takes only UTF-8 path names
            metadata = pq.read_metadata(handle)
        schema = metadata.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as error:
        raise InputError(
            f"input file {path} is not a readable parquet file ({first_line(error)}); "
            "leave it out of the inputs or rewrite it as parquet"
        ) from None
    types = {field.name: field.type for field in schema}
    return Footer(path, path.stat().st_size, metadata.num_rows, tuple(schema.names), types)


def _check_columns(length_column: str, id_column: str | None) -> list[str]:
    """The columns read (length, then id), as names `inspect_inputs` can look for."""
    for role, column in (("length", length_column), ("id", id_column)):
        if column is not None and (not isinstance(column, str) or not column):
            raise InputError(
                f"{role} column is {column!r} ({option(f'{role}_column')}); expected a column name"
            )
    if id_column is not None and id_column == length_column:
        raise InputError(
            f"id column {id_column!r} ({option('id_column')}) is also the length column; ids "
            f"must be unique per sequence: name another column, or leave {option('id_column')} "
            "unset to use row indexes as ids"
        )
    return [length_column] if id_column is None else [length_column, id_column]


def check_footers(
    footers: Iterable[Footer | InputError], length_column: str, id_column: str | None = None
) -> list[InputFile]:
    """The checks of `inspect_inputs` over footers read already (in the inputs' order): an
    `InputError` in place of a footer is raised when its turn comes, so the first problem in
    the inputs' order is the one reported, whoever read the footers."""
    read = _check_columns(length_column, id_column)
    files: list[InputFile] = []
    reference: Footer | None = None
    column_types: tuple[tuple[str, str], ...] = ()
    for footer in footers:
        if isinstance(footer, InputError):
            raise footer
        path, names, types = footer.path, list(footer.names), footer.types
        if reference is None:
            column_types = tuple(
                (column, _check_column(path, names, types, column, role))
                for column, role in zip(read, ("length", "id"), strict=False)
            )
            reference = footer
        elif types != reference.types:
            difference = _schema_difference(types, reference.types, reference.path)
            raise InputError(
                f"input file {path} has a different schema from the other inputs: {difference}; "
                "all inputs need the same columns and types (in any order): rewrite it or leave "
                "it out"
            )
        elif len(names) != len(types):  # the same names, one of them maybe twice
            for column, role in zip(read, ("length", "id"), strict=False):
                _check_column(path, names, types, column, role)
        files.append(InputFile(path, footer.num_bytes, footer.num_rows, column_types))
    return files


def inspect_inputs(
    paths: Sequence[Path], length_column: str, id_column: str | None = None
) -> list[InputFile]:
    """Read every footer: row counts and sizes, and the checks that need no data.

    Raises `InputError` for a path that is not a regular file, a file that is not parquet (or is
    truncated), a missing length/id column (names match exactly), an id column that is not of
    integers, a length column that is neither integers nor lists of integers, a column read
    that another column's name equals ignoring case (DuckDB could read either), and files whose
    schemas (names and types) disagree.
    """
    return check_footers((read_footer(path) for path in paths), length_column, id_column)


# ---- the histogram pass -----------------------------------------------------------------------


def location(files: Sequence[InputFile], file_index: int, row: int) -> str:
    return f"{files[file_index].path} at row {row} (0-based)"


def is_token_lists(files: Sequence[InputFile], length_column: str) -> bool:
    """Whether the length column holds token lists (its length is `len`), as checked by
    `inspect_inputs`."""
    return bool(files) and dict(files[0].column_types).get(length_column, "").endswith("[]")


def length_query(files: Sequence[InputFile], length_column: str, name: str) -> str:
    """The name of the SQL (`sql/{name}.sql`) that reads this length column: its `_of_lists`
    variant for a column of token lists."""
    return f"{name}_of_lists" if is_token_lists(files, length_column) else name


@dataclass(frozen=True)
class HistogramPart:
    """The histogram query's result over some of the inputs, unchecked: `(length, count)` rows
    (NULL and non-positive lengths included), and how many of them are bad with the first
    (file index in the whole inputs' list, row in that file, value)."""

    rows: list[tuple[int | None, int]]
    num_bad: int = 0
    first_bad: tuple[int, int, int | None] | None = None


def histogram_part(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    *,
    first_file: int = 0,
    progress: ProgressCallback | None = None,
) -> HistogramPart:
    """Run the histogram query over `files` (numbered from `first_file` in the whole inputs'
    list), and locate the first bad length if any; `checked_histogram` words the problems."""
    params = read_params(files, length_column)
    total_rows = sum(file.num_rows for file in files)
    try:
        rows = fetch_with_progress(
            con,
            load_sql(length_query(files, length_column, "length_histogram")),
            params,
            phase="histogram",
            total_rows=total_rows,
            progress=progress,
        )
        bad = sum(count for length, count in rows if length is None or length <= 0)
        if not bad:
            return HistogramPart(rows)
        first_bad = length_query(files, length_column, "first_bad_length")
        file_index, row, value = one_row(con, first_bad, params)
    except duckdb.Error as error:
        raise read_error(error) from None
    return HistogramPart(rows, bad, (first_file + file_index, row, value))


def checked_histogram(
    files: Sequence[InputFile], length_column: str, parts: Sequence[HistogramPart]
) -> dict[int, int]:
    """`{length: count}` over the parts (which together read all of `files`), ascending;
    `InputError` for NULL or non-positive lengths (NULL or empty token lists), and for a row
    count that is not the footers' (inputs changed, or misread)."""
    counts: dict[int | None, int] = {}
    for part in parts:
        for length, count in part.rows:
            counts[length] = counts.get(length, 0) + int(count)
    total_rows = sum(file.num_rows for file in files)
    num_read = sum(counts.values())
    if num_read != total_rows:
        raise InputError(
            f"DuckDB read {num_read} rows from the {len(files)} input files, whose footers count "
            f"{total_rows}; the inputs changed while they were read: run again once they are "
            "complete"
        )
    bad = sum(part.num_bad for part in parts)
    if bad:
        file_index, row, value = min(part.first_bad for part in parts if part.first_bad)
        where = location(files, file_index, row)
        if is_token_lists(files, length_column):
            shown = "NULL" if value is None else "an empty list"
            raise InputError(
                f"length column {length_column!r} has {bad} NULL or empty token lists, the first "
                f"({shown}) in {where}; every sequence needs at least one token: fix or drop "
                "those rows before prepare"
            )
        shown = "NULL" if value is None else str(value)
        raise InputError(
            f"length column {length_column!r} has {bad} NULL, zero or negative lengths, the first "
            f"({shown}) in {where}; every sequence needs a length > 0: fix or drop those rows "
            "before prepare"
        )
    return {int(key): counts[key] for key in sorted(key for key in counts if key is not None)}


def length_histogram(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    *,
    progress: ProgressCallback | None = None,
) -> dict[int, int]:
    """`{length: count}` over all rows, ascending; `InputError` for NULL or non-positive lengths
    (NULL or empty token lists), and for a row count that is not the footers' (inputs changed,
    or misread)."""
    part = histogram_part(con, files, length_column, progress=progress)
    return checked_histogram(files, length_column, [part])


def scan_length_histogram(
    paths: Sequence[Path],
    length_column: str,
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
    progress: ProgressCallback | None = None,
) -> dict[int, int]:
    """The length histogram `{length: count}` of parquet files (see `resolve_inputs`).

    Validates the column (exists in every file, integers or lists of integers, no NULL / <= 0
    values, no NULL or empty lists): an `InputError` names the file, the column, the count and
    the first bad row. A column of token lists counts each list's elements.
    """
    files = inspect_inputs(paths, length_column)
    con = connect(threads=threads, memory_limit=memory_limit, temp_dir=temp_dir)
    try:
        return length_histogram(con, files, length_column, progress=progress)
    finally:
        close_connection(con)
