"""JSON Lines inputs staged as parquet, so prepare's DuckDB passes read them as they read parquet.

Every query of `sql/` reads `read_parquet($paths, ...)` with DuckDB's `file_index` and
`file_row_number`, which give the ids (row index over the sorted files) and locate bad rows.
DuckDB's `read_json` has no row number, rounds 3.5 to 4 in an integer column without a word, and
numbers lines off by one in its errors. So the columns a pass reads (the length column, and the
id column) of each JSON Lines input are copied once, in file order, to a parquet file
(`staged_parquet`): pyarrow's streaming JSON reader parses only those columns, block by block, so
memory stays a few blocks however large the file, and the copy's row `r` is the file's row `r`
(blank lines are no rows). Every query then reads the copy, and its results (histogram, pools,
locations) are those of the same rows written as parquet.

The copies live in a private temporary folder of this process, made on first use and removed at
exit; a process reuses its copy while the file keeps its size and modification time. A Dask
worker makes its own copies of the files its tasks read (the folder is never shared), so no task
depends on another's disk. A value the column's type cannot hold (3.5 or "7" among integer
lengths) is an `InputError` naming the file, the line and the column.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import InputError, first_line, option
from seqpack_cli.prepare.footers import arrow_type
from seqpack_cli.prepare.input_batches import input_kind, jsonl_fault, open_jsonl, value_fits
from seqpack_cli.prepare.process_folders import process_folder

__all__ = ["original_names", "staged_parquet"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_staged: dict[tuple[str, int, int, tuple[tuple[str, str], ...]], Path] = {}
_originals: dict[str, str] = {}


def _new_path(key: object) -> Path:
    digest = hashlib.sha256(repr(key).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return process_folder("seqpack-jsonl-") / f"{digest}.parquet"


def _value_error(path: Path, column_types: Sequence[tuple[str, str]]) -> InputError | None:
    """The first malformed line, or the first whose value does not fit its column, worded for
    the column's role (the first column is the length column, the second the id column); None
    if none is found."""
    checks = {column: value_fits(arrow_type(kind)) for column, kind in column_types}
    fault = jsonl_fault(path, checks)
    if fault is None:
        return None
    column = fault.column
    if column is None:
        return fault.error(path)
    if column != column_types[0][0]:
        role, expected = "id", "unique integer ids"
    elif dict(column_types)[column].endswith("[]"):
        role, expected = "length", "lists of integer token ids"
    else:
        role, expected = "length", "integer token counts"
    return InputError(
        f"{role} column {column!r} ({option(f'{role}_column')}) in {path} line {fault.line} "
        f"{fault.what}; expected {expected}: fix or drop that line before prepare"
    )


def _write_copy(path: Path, column_types: Sequence[tuple[str, str]], target: Path) -> None:
    schema = pa.schema([(column, arrow_type(kind)) for column, kind in column_types])
    partial = target.with_suffix(".partial")
    try:
        with open_jsonl(path, schema) as reader, pq.ParquetWriter(partial, schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
    except pa.ArrowException as error:
        partial.unlink(missing_ok=True)
        found = _value_error(path, column_types)
        if found is not None:
            raise found from None
        raise InputError(
            f"input file {path} is not readable as JSON Lines ({first_line(error)}); "
            "fix the file or leave it out"
        ) from None
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise InputError(
            f"cannot copy the columns of {path} to a temporary parquet file ({error.strerror}); "
            "set TMPDIR to a folder with free space"
        ) from None
    os.replace(partial, target)


def staged_parquet(path: Path, column_types: Sequence[tuple[str, str]]) -> Path:
    """A parquet file DuckDB reads for input `path`: `path` itself for parquet; for JSON Lines,
    its `column_types` columns ({name, DuckDB type}: the length column first, then the id
    column, as `footers.check_footers` binds them) copied once, in row order.

    Args:
        path: one input file.
        column_types: the columns a pass reads, with the DuckDB types they are bound as.

    Returns:
        The parquet file to hand DuckDB (the copy for JSON Lines: see the module docstring).

    Raises:
        InputError: a JSON Lines line that is malformed or whose value does not fit its column
            (by line number), or a copy that cannot be written.
    """
    if input_kind(path) != "jsonl":
        return path
    info = os.stat(path)
    key = (os.path.abspath(path), info.st_size, info.st_mtime_ns, tuple(column_types))
    with _lock:
        found = _staged.get(key)
        if found is not None and found.exists():
            return found
        target = _new_path(key)
        _write_copy(path, column_types, target)
        _staged[key] = target
        _originals[str(target)] = os.path.abspath(path)
        logger.debug("staged %s as %s", path, target)
        return target


def original_names(text: str) -> str:
    """`text` (a DuckDB message) with the staged copies it names replaced by their inputs."""
    for staged, original in list(_originals.items()):
        text = text.replace(staged, original)
    return text
