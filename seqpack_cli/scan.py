"""Parquet inputs -> length histogram, through DuckDB; the SQL and the connection prepare uses.

The first of prepare's two passes (DESIGN.md decision 6): `length_histogram` is one cheap GROUP BY
over the length column, and bad lengths (NULL, <= 0) are refused here, before any heavy work. The
second pass, over (length, id), lives in `seqpack_cli.pools` (`scan_pools`, re-exported here).

Inputs are resolved (`resolve_inputs`) and their footers checked (`inspect_inputs`: row counts,
schema, column types) before DuckDB reads a row. SQL lives in `sql/*.sql` (values passed as named
parameters); `load_sql` finds it both in an installed wheel and in a source checkout.
"""

from __future__ import annotations

import glob
import importlib.resources
import itertools
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.progress import ProgressCallback

if TYPE_CHECKING:
    from seqpack_cli.pools import PoolScan, scan_pools

__all__ = [
    "InputFile",
    "PoolScan",
    "close_connection",
    "connect",
    "inspect_inputs",
    "length_histogram",
    "load_sql",
    "resolve_inputs",
    "scan_length_histogram",
    "scan_pools",
]

logger = logging.getLogger(__name__)


# ---- SQL --------------------------------------------------------------------------------------


@cache
def load_sql(name: str) -> str:
    """The text of `sql/{name}.sql`: packaged inside the wheel, or the checkout's `sql/`."""
    packaged = importlib.resources.files("seqpack_cli").joinpath("sql", f"{name}.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    # An editable install maps only the package directory; the SQL then sits next to it.
    checkout = Path(__file__).resolve().parent.parent / "sql" / f"{name}.sql"
    return checkout.read_text(encoding="utf-8")


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def read_error(error: duckdb.Error) -> InputError:
    return InputError(
        f"DuckDB could not read the inputs: {first_line(error)}; check that the file it names "
        "is an intact parquet file, or leave it out"
    )


# ---- inputs -----------------------------------------------------------------------------------


def _is_data(path: Path, base: Path) -> bool:
    # Hive-partitioned trees nest files in key=value/ folders; hidden and `_`-prefixed entries
    # below the folder named (_SUCCESS, .crc, _temporary/ of a running writer) are not data.
    return path.is_file() and not any(
        part.startswith((".", "_")) for part in path.relative_to(base).parts
    )


def _parquet_under(directory: Path) -> list[Path]:
    return [path for path in directory.rglob("*.parquet") if _is_data(path, directory)]


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob pattern before its first wildcard."""
    parts = Path(pattern).parts
    fixed = list(itertools.takewhile(lambda part: not any(c in part for c in "*?["), parts))
    return Path(*fixed) if fixed else Path(".")


def resolve_inputs(inputs: Sequence[str | os.PathLike[str]] | str) -> list[Path]:
    """Expand files, globs (`**` too) and directories into parquet files, sorted by path.

    Directories are searched recursively for `*.parquet`. Duplicates are dropped; the sorted
    order defines the row-index ids, so it does not depend on the order inputs were named in.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    found: dict[str, Path] = {}
    for item in inputs:
        text = os.fspath(item)
        if os.path.isdir(text):
            files = _parquet_under(Path(text))
            if not files:
                raise InputError(
                    f"input directory {text} holds no *.parquet files; pass the directory that "
                    "holds the dataset's parquet files"
                )
        elif os.path.exists(text):
            files = [Path(text)]
        elif any(char in text for char in "*?["):
            files = []
            base = _glob_base(text)
            for match in sorted(glob.glob(text, recursive=True)):
                path = Path(match)
                if path.is_dir():
                    files.extend(_parquet_under(path))
                elif _is_data(path, base):
                    files.append(path)
            if not files:
                raise InputError(
                    f"input pattern {text!r} matches no files; check it (quote it so the shell "
                    "does not expand it; ** matches subdirectories)"
                )
        else:
            raise InputError(f"input {text} does not exist; check the path")
        for path in files:
            absolute = Path(os.path.abspath(path))
            found[absolute.as_posix()] = absolute
    return [found[key] for key in sorted(found)]


@dataclass(frozen=True)
class InputFile:
    """One parquet input, as its footer describes it."""

    path: Path
    num_bytes: int
    num_rows: int


def _check_column(path: Path, types: Mapping[str, pa.DataType], column: str, role: str) -> None:
    option = "--length-column" if role == "length" else "--id-column"
    if column not in types:
        raise InputError(
            f"{role} column {column!r} ({option}) is not in {path}; its columns are: "
            f"{', '.join(types)}; pass one of them as {option}"
        )
    column_type = types[column]
    if not pa.types.is_integer(column_type):
        expected = "integer token counts" if role == "length" else "unique integer ids"
        raise InputError(
            f"{role} column {column!r} ({option}) in {path} holds {column_type} values; expected "
            f"{expected}; cast the column to an integer type when writing the parquet, or name "
            f"the right column with {option}"
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


def inspect_inputs(
    paths: Sequence[Path], length_column: str, id_column: str | None = None
) -> list[InputFile]:
    """Read every footer: row counts and sizes, and the checks that need no data.

    Raises `InputError` for a file that is not parquet (or is truncated), a missing or
    non-integer length/id column, and files whose schemas (names and types) disagree.
    """
    files: list[InputFile] = []
    reference: tuple[Path, dict[str, pa.DataType]] | None = None
    for path in paths:
        try:
            metadata = pq.read_metadata(path)
            types = {field.name: field.type for field in metadata.schema.to_arrow_schema()}
        except (pa.ArrowException, OSError) as error:
            raise InputError(
                f"input file {path} is not a readable parquet file ({first_line(error)}); "
                "leave it out of the inputs or rewrite it as parquet"
            ) from None
        if reference is None:
            _check_column(path, types, length_column, "length")
            if id_column is not None:
                _check_column(path, types, id_column, "id")
            reference = (path, types)
        elif types != reference[1]:
            difference = _schema_difference(types, reference[1], reference[0])
            raise InputError(
                f"input file {path} has a different schema from the other inputs: {difference}; "
                "all inputs need the same columns and types (in any order): rewrite it or leave "
                "it out"
            )
        files.append(InputFile(path, path.stat().st_size, metadata.num_rows))
    return files


# ---- DuckDB -----------------------------------------------------------------------------------


def connect(
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with prepare's settings (threads, memory, spill folder)."""
    config: dict[str, Any] = {}
    if threads is not None:
        config["threads"] = threads
    if memory_limit is not None:
        config["memory_limit"] = memory_limit
    if temp_dir is not None:
        config["temp_directory"] = os.fspath(temp_dir)
    try:
        con = duckdb.connect(config=config)
        # query_progress() needs the progress bar on; DuckDB must not draw its own.
        con.execute("SET enable_progress_bar = true")
        con.execute("SET enable_progress_bar_print = false")
    except duckdb.Error as error:
        raise ConfigError(
            f"DuckDB rejected the settings threads={threads}, memory_limit={memory_limit!r}, "
            f"temp_dir={temp_dir!r}: {first_line(error)}; fix the option it names"
        ) from None
    return con


def close_connection(con: duckdb.DuckDBPyConnection) -> None:
    """Close a connection, first interrupting whatever it still runs; never raises (it is called
    while another error, or an interrupt, is on its way out)."""
    try:
        con.interrupt()
        con.close()
    except duckdb.Error as error:
        logger.debug("closing DuckDB: %s", error)


def _fetch_with_progress(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Mapping[str, Any],
    *,
    phase: str,
    total_rows: int,
    progress: ProgressCallback | None,
) -> list[tuple[Any, ...]]:
    """Run a query to completion, reporting DuckDB's own progress estimate as rows done."""
    if progress is None:
        return con.sql(sql, params=dict(params)).fetchall()
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append(con.sql(sql, params=dict(params)).fetchall())
        except BaseException as error:  # handed to the calling thread
            outcome.append(error)

    progress(phase, 0, total_rows)
    worker = threading.Thread(target=work, name="seqpack-query", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
            percent = con.query_progress()
            if percent > 0:
                progress(phase, int(total_rows * min(percent, 100.0) / 100.0), total_rows)
    except BaseException:
        con.interrupt()
        worker.join()
        raise
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    progress(phase, total_rows, total_rows)
    return outcome[0]


def one_row(con: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, Any]) -> Any:
    """The single row `sql/{name}.sql` returns."""
    rows = con.sql(load_sql(name), params=dict(params)).fetchall()
    return rows[0]


def location(files: Sequence[InputFile], file_index: int, row: int) -> str:
    return f"{files[file_index].path} at row {row} (0-based)"


def length_histogram(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    *,
    progress: ProgressCallback | None = None,
) -> dict[int, int]:
    """`{length: count}` over all rows, ascending; `InputError` for NULL or non-positive lengths."""
    params = {"paths": [file.path.as_posix() for file in files], "length_column": length_column}
    total_rows = sum(file.num_rows for file in files)
    try:
        rows = _fetch_with_progress(
            con,
            load_sql("length_histogram"),
            params,
            phase="histogram",
            total_rows=total_rows,
            progress=progress,
        )
        bad = sum(count for length, count in rows if length is None or length <= 0)
        if bad:
            file_index, row, value = one_row(con, "first_bad_length", params)
    except duckdb.Error as error:
        raise read_error(error) from None
    if bad:
        shown = "NULL" if value is None else str(value)
        raise InputError(
            f"length column {length_column!r} has {bad} NULL, zero or negative lengths, the first "
            f"({shown}) in {location(files, file_index, row)}; every sequence needs a length "
            "> 0: fix or drop those rows before prepare"
        )
    return {int(length): int(count) for length, count in sorted(rows)}


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

    Validates the column (exists in every file, integer type, no NULL / <= 0 values): an
    `InputError` names the file, the column, the count and the first bad row.
    """
    files = inspect_inputs(paths, length_column)
    con = connect(threads=threads, memory_limit=memory_limit, temp_dir=temp_dir)
    try:
        return length_histogram(con, files, length_column, progress=progress)
    finally:
        close_connection(con)


def __getattr__(name: str) -> Any:
    # The pools pass lives in seqpack_cli.pools, which imports this module: re-export lazily.
    if name in ("PoolScan", "scan_pools"):
        from seqpack_cli import pools

        return getattr(pools, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
