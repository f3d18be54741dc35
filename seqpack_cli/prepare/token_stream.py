"""The token column of the parquet inputs (with labels or a loss mask, the length and the id
column) decoded in threads, checked and cast, in row order: `stream_token_batches`.

The one-pass store (`prepare.one_pass`) reads every row once, here: each parquet row group is a
unit of work that a worker thread decodes with pyarrow (which releases the GIL), batch by batch;
`ordered.ordered_parallel` hands the batches over in file and row order, in bounded memory.
Each batch is checked on the way by the store's batch kernel (`token_batches.check_batch`: no
NULL or empty list, no NULL value, every value inside its dtype or allowed range, labels or mask
lists as long as the tokens, the length column equal to the lists' lengths, no NULL id, ids
inside int64), and the row groups against the footers' row counts; a batch that fails any check
raises `Fault`, which says only that the inputs hold something the reference path
(the two passes of `prepare.job`) words as an error, and that path then runs to word it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.prepare.ordered import ordered_parallel
from seqpack_cli.prepare.token_batches import StoreColumns, TokenBatch, check_batch
from seqpack_cli.prepare.token_reading import TokenInput, file_batches

__all__ = ["Fault", "stream_token_batches"]

_BUDGET_BYTES = 1 << 28
"""Decoded batches waiting for the writer, at most (besides those of the row group it is on)."""


class Fault(Exception):
    """The inputs hold something the reference path reports as an error (or the stream could
    not read them): that path runs instead, to word it."""


def _decode(spec: StoreColumns, batch: pa.RecordBatch) -> TokenBatch:
    """The batch's rows, or `Fault` for anything `check_batch` reports."""
    check = check_batch(spec, batch)
    if check.rows is None or check.refused:
        raise Fault(f"refused values in {', '.join(sorted(check.refused))}")
    if check.empty:
        raise Fault("an empty token list")
    if check.mismatch is not None:
        raise Fault("a labels or mask list not as long as its tokens")
    if check.lengths_differ:
        raise Fault("the length column disagrees with the token lists")
    return check.rows


def _units(files: Sequence[TokenInput]) -> list[tuple[TokenInput, int, int]]:
    """(file, row group, its rows) of every row group, in order."""
    units = []
    for file in files:
        with pq.ParquetFile(file.path) as parquet:
            metadata = parquet.metadata
        units += [(file, g, metadata.row_group(g).num_rows) for g in range(metadata.num_row_groups)]
    return units


def _read_unit(spec: StoreColumns, unit: tuple[TokenInput, int, int]) -> Iterator[TokenBatch]:
    file, group, expected = unit
    read = 0
    try:
        batches = file_batches(file, spec.read_columns(), row_groups=[group], use_threads=False)
        for batch in batches:
            read += batch.num_rows
            yield _decode(spec, batch)
    except (OSError, pa.ArrowException) as error:
        raise Fault(f"cannot read {file.path}: {error}") from None
    if read != expected:
        raise Fault(f"{file.path} row group {group}: {read} rows, the footer says {expected}")


def stream_token_batches(
    spec: StoreColumns, files: Sequence[TokenInput], *, workers: int
) -> Generator[TokenBatch, None, None]:
    """Every row of `files`, in order, in checked batches, decoded by `workers` threads;
    `Fault` as soon as a batch fails a check (or a file cannot be read, or its row counts are not
    its footer's)."""
    try:
        units = _units(files)
    except (OSError, pa.ArrowException) as error:
        raise Fault(f"cannot read the footers: {error}") from None
    if sum(unit[2] for unit in units) != sum(file.num_rows for file in files):
        raise Fault("the row groups do not add up to the files' rows")
    return ordered_parallel(
        units, lambda unit: _read_unit(spec, unit), workers=workers, budget_bytes=_BUDGET_BYTES
    )
