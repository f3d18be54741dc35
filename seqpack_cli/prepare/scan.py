"""Inputs (parquet, JSON Lines) -> length histogram: the first of prepare's two passes.

The first pass (DESIGN.md decision 6): `length_histogram` is one cheap GROUP BY over the length
column, and bad lengths (NULL, <= 0) are refused here, before any heavy work. The second pass,
over (length, id), lives in `prepare.pools.scan` (`scan_pools`), which builds on this module.

The length column holds integer token counts, or token lists (LIST / LARGE_LIST of integers,
e.g. TRL-style `input_ids`): then a sequence's length is its number of elements, counted by
DuckDB (`len`) in every query that reads lengths, through the `_of_lists` variant of its SQL
(`length_query` names it). A NULL list is a NULL length and an empty list a length of 0.

Inputs are resolved by `prepare.inputs` (`resolve_inputs`: files, globs, directories; nothing
left out or counted twice without a word) and their footers checked by `prepare.footers`
(`inspect_inputs`: row counts, schema, column types, names DuckDB could confuse) before DuckDB
reads a row. The DuckDB side (connection, settings, SQL, error wording, how paths and columns are
bound; a JSON Lines input read through its parquet copy, `prepare.jsonl_staging`) is in
`prepare.db`. Their names are imported from those modules, not from here. An error's location
names the file and the row, and for JSON Lines the line (`location`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.db import (
    close_connection,
    connect,
    fetch_with_progress,
    load_sql,
    one_row,
    read_error,
    read_params,
)
from seqpack_cli.prepare.footers import (
    InputFile,
    inspect_inputs,
)
from seqpack_cli.prepare.input_batches import input_kind, line_of_row
from seqpack_cli.progress import ProgressCallback

__all__ = [
    "HistogramPart",
    "checked_histogram",
    "histogram_part",
    "is_token_lists",
    "length_histogram",
    "length_query",
    "location",
    "scan_length_histogram",
]


def location(files: Sequence[InputFile], file_index: int, row: int) -> str:
    """Where a row is, for an error: the file and the row (0-based), and for JSON Lines its line."""
    path = files[file_index].path
    line = line_of_row(path, row) if input_kind(path) == "jsonl" else None
    return f"{path} at row {row} (0-based)" + (f", line {line}" if line is not None else "")


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
    """The length histogram `{length: count}` of parquet and JSON Lines files (see
    `resolve_inputs`).

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
