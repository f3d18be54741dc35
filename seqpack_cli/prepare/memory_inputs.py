"""In-memory inputs: tables handed to `prepare_dataset` instead of paths.

`PrepareConfig(inputs=[table, ...])` takes a `pyarrow.Table` (or `RecordBatch`), a
`pyarrow.dataset.Dataset`, a Polars `DataFrame` or `LazyFrame`, or a Hugging Face
`datasets.Dataset` (its Arrow table, without a copy into Python). Each one is written once, only
the columns the job reads, as a parquet file in the job's work directory (`stage_tables`), and
the job then runs on those files as on any input: the same checks, the same one-line errors
(naming the table), the same passes on either engine, and the same bytes as the same rows
written to parquet by the user. Ids are row indexes in the order the tables were given (or the
id column). A Polars `LazyFrame` is streamed to the file (`sink_parquet`) and a dataset scanned
batch by batch, so a table larger than memory stays out of it; the copies are removed with the
work directory before the manifest is written, which lists each table as `<memory:N TYPE>`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack_cli.errors import ConfigError, InputError

if TYPE_CHECKING:  # pyarrow is imported once a table is staged: `load_prepared` stays light
    import pyarrow as pa

    from seqpack_cli.prepare.input_batches import ColumnOptions

__all__ = ["check_inputs", "is_table", "memory_name", "named", "stage_tables", "table_kind"]

logger = logging.getLogger(__name__)

_ROW_GROUP_ROWS = 1 << 17
"""Rows per row group of a staged file: units of work for the passes' threads."""


def table_kind(value: object) -> str | None:
    """The kind of in-memory table `value` is ("pyarrow.Table", "polars.LazyFrame", ...), or
    None for anything else (paths included). Polars and datasets are recognised by their types'
    modules, so neither is imported here."""
    module = type(value).__module__.split(".")[0]
    name = type(value).__name__
    if module == "pyarrow" and name in ("Table", "RecordBatch"):
        return f"pyarrow.{name}"
    if module == "pyarrow" and name in ("FileSystemDataset", "UnionDataset", "InMemoryDataset"):
        return "pyarrow.dataset.Dataset"
    if module == "polars" and name in ("DataFrame", "LazyFrame"):
        return f"polars.{name}"
    if module == "datasets" and name == "Dataset":
        return "datasets.Dataset"
    return None


def is_table(value: object) -> bool:
    """Whether `value` is an in-memory table `prepare` takes (see `table_kind`)."""
    return table_kind(value) is not None


def memory_name(index: int, value: object) -> str:
    """How the manifest and the messages name the `index`-th table: `<memory:0 pyarrow.Table>`."""
    return f"<memory:{index} {table_kind(value)}>"


def _columns_of(value: Any, kind: str) -> list[str]:
    if kind == "polars.LazyFrame":
        return list(value.collect_schema().names())
    if kind == "datasets.Dataset":
        return list(value.column_names)
    if kind == "pyarrow.dataset.Dataset":
        return list(value.schema.names)
    if kind == "polars.DataFrame":
        return list(value.columns)
    return list(value.schema.names)


def _arrow_table(value: Any, kind: str, columns: list[str]) -> pa.Table:
    """The table's `columns` as Arrow (tables that are already in memory)."""
    import pyarrow as pa

    if kind in ("pyarrow.Table", "pyarrow.RecordBatch"):
        table = value.select(columns)
        return pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    if kind == "polars.DataFrame":
        return value.select(columns).to_arrow()
    # datasets.Dataset: its Arrow table, with any selection (shuffle, select) applied first.
    dataset = value.flatten_indices() if getattr(value, "_indices", None) is not None else value
    return dataset.data.table.select(columns)


def _stage_one(value: Any, kind: str, columns: list[str], path: Path) -> None:
    import pyarrow.parquet as pq

    if kind == "polars.LazyFrame":
        value.select(columns).sink_parquet(path, row_group_size=_ROW_GROUP_ROWS)
        return
    if kind == "pyarrow.dataset.Dataset":
        scanner = value.scanner(columns=columns)
        with pq.ParquetWriter(path, scanner.projected_schema) as writer:
            for batch in scanner.to_batches():
                writer.write_batch(batch, row_group_size=_ROW_GROUP_ROWS)
        return
    pq.write_table(_arrow_table(value, kind, columns), path, row_group_size=_ROW_GROUP_ROWS)


def stage_tables(tables: Sequence[object], columns: ColumnOptions, folder: Path) -> dict[Path, str]:
    """Write `columns` of each table as `folder/{index}.parquet`, in order.

    Args:
        tables: the in-memory inputs (`is_table` true of each).
        columns: the columns the job reads, each with the option naming it (each must be in
            every table).
        folder: where the copies go (created; the job's work directory).

    Returns:
        Each copy's path and the table's name (`memory_name`), in the tables' order.

    Raises:
        InputError: a table without one of `columns`, naming the table and its columns.
    """
    from seqpack_cli.prepare.input_batches import check_columns

    folder.mkdir(parents=True, exist_ok=True)
    wanted = list(dict.fromkeys(columns))
    staged: dict[Path, str] = {}
    for index, value in enumerate(tables):
        kind = table_kind(value)
        assert kind is not None
        name = memory_name(index, value)
        present = _columns_of(value, kind)
        check_columns(name, present, columns)
        path = folder / f"{index:05d}.parquet"
        _stage_one(value, kind, wanted, path)
        staged[path] = name
        logger.info("%s: columns %s written to %s", name, wanted, path)
    return staged


def check_inputs(inputs: Sequence[object]) -> None:
    """Paths, or in-memory tables, not both (their ids would interleave by no stated order);
    anything else refused, naming its type."""
    tables = [is_table(value) for value in inputs]
    for index, value in enumerate(inputs):
        if not tables[index] and not isinstance(value, (str, os.PathLike)):
            raise ConfigError(
                f"inputs[{index}] is a {type(value).__module__}.{type(value).__name__}; expected "
                "paths (files, globs, directories) or in-memory tables: a pyarrow Table or "
                "dataset, a Polars DataFrame or LazyFrame, or a datasets.Dataset"
            )
    if any(tables) and not all(tables):
        raise ConfigError(
            "inputs mixes paths and in-memory tables; pass one kind (write the tables to parquet "
            "beside the files, or read the files into one table)"
        )


def named(error: InputError, staged: dict[Path, str]) -> InputError:
    """`error` with each staged copy's path replaced by its table's name."""
    text = error.args[0]  # its raw text: the options marked, for the CLI to spell
    for path, name in staged.items():
        text = text.replace(os.fspath(path), name)
    return InputError(text)
