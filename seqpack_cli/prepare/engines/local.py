"""`LocalEngine` (`--engine local`, the default): prepare's passes in this process.

With `--tokenizer`, the text is read once and tokenized into the store (`tokenized_pass`), which
gives the histogram and the pools as the one pass does. Without a token store, two passes through
one DuckDB connection: the length histogram (`scan.length_histogram`), then the pools
(`pools.scan.scan_pools`). With one (`--tokens-column`), the token column is read once
(`one_pass`): that read gives the store, the histogram and then the pools. What the one pass
finds wrong, the two passes word: they run instead, stop at the same fault with their message,
and without a fault write the store as the reference does (`token_store`). They check
`--over-cap split` as truncate and cannot split, so there the fault the one pass found is raised
once they have run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepared import PoolMap, PreparedWriter
from seqpack_cli.progress import ProgressCallback

if TYPE_CHECKING:
    import duckdb

    from seqpack_cli.prepare.engines.protocol import StoreSection
    from seqpack_cli.prepare.footers import InputFile
    from seqpack_cli.prepare.input_batches import ColumnOptions
    from seqpack_cli.prepare.one_pass import Fallback, OnePass
    from seqpack_cli.prepare.pools.scan import PoolScan
    from seqpack_cli.prepare.remote_inputs import RemoteCopy
    from seqpack_cli.prepare.token_reading import TokenInput

__all__ = ["LocalEngine"]


class LocalEngine:
    """The passes in this process (see the module docstring): the DuckDB connection is opened
    for the histogram and closed once the pools are written."""

    def __init__(self, config: PrepareConfig, progress: ProgressCallback | None = None) -> None:
        self.config = config
        self.progress = progress
        self.checked = dataclasses.replace(config, over_cap=config.over_cap_rule.checked_policy)
        """The options the two passes run under: split checked as truncate."""
        self._con: duckdb.DuckDBPyConnection | None = None
        self._paths: Sequence[Path] = ()
        self._one_pass: OnePass | None = None
        self._fallback: Fallback | None = None
        self._histogram: dict[int, int] = {}
        self._store: StoreSection = {}
        self._text_files: list[TokenInput] = []

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._close()

    def _close(self) -> None:
        from seqpack_cli.prepare.db import close_connection

        con, self._con = self._con, None
        if con is not None:
            close_connection(con)

    def _connection(self) -> duckdb.DuckDBPyConnection:
        from seqpack_cli.prepare.db import connect

        if self._con is None:
            config = self.config
            self._con = connect(
                threads=config.threads, memory_limit=config.memory_limit, temp_dir=config.temp_dir
            )
        return self._con

    def fetch(
        self, copies: Sequence[RemoteCopy], columns: ColumnOptions, options: Mapping[str, str]
    ) -> None:
        from seqpack_cli.prepare.remote_inputs import fetch_all

        fetch_all(copies, columns, options)

    def inspect(self, paths: Sequence[Path]) -> list[InputFile]:
        from seqpack_cli.prepare.footers import InputFile, inspect_inputs

        self._paths = paths
        config = self.config
        if config.tokenize is not None:  # text: the columns the tokenizer reads
            from seqpack_cli.prepare.text_inputs import inspect_text_inputs

            self._text_files = inspect_text_inputs(paths, config.tokenize, config.id_column)
            return [InputFile(f.path, f.num_bytes, f.num_rows) for f in self._text_files]
        return inspect_inputs(paths, config.length_column, config.id_column)

    def histogram(self, files: Sequence[InputFile], writer: PreparedWriter) -> dict[int, int]:
        from seqpack_cli.prepare.one_pass import OnePass, read_in_one_pass
        from seqpack_cli.prepare.scan import length_histogram

        config = self.config
        if config.tokenize is not None:  # the text read once, tokenized into the store
            from seqpack_cli.prepare.tokenized_pass import read_tokenized

            self._one_pass = read_tokenized(
                writer, self._text_files, config, progress=self.progress
            )
            return self._one_pass.histogram
        if config.tokens_column is not None:  # the store, the lengths and the ids read once
            read = read_in_one_pass(writer, self._paths, config, progress=self.progress)
            if isinstance(read, OnePass):
                self._one_pass = read
                return read.histogram
            self._fallback = read
        self._histogram = length_histogram(
            self._connection(), files, config.length_column, progress=self.progress
        )
        return self._histogram

    def pools(
        self, files: Sequence[InputFile], kept: Mapping[int, int], writer: PreparedWriter
    ) -> PoolScan:
        if self._one_pass is not None:
            writer.create_pool_files(kept)
            self._store = self._one_pass.finish(writer)  # while the pool files are created
            return self._one_pass.write_pools(kept, writer.append_pool, progress=self.progress)
        scanned = self._scan_pools(files, writer)
        if self.config.over_cap_rule.splits:  # the store words the fault, or the one pass's stands
            from seqpack_cli.prepare.pools.offsets import changed_error

            self._write_store(writer)
            error = None if self._fallback is None else self._fallback.error
            raise error if isinstance(error, InputError) else changed_error()
        return scanned

    def _scan_pools(self, files: Sequence[InputFile], writer: PreparedWriter) -> PoolScan:
        """The second pass, under the checked options (which keep what the job keeps, but
        under split)."""
        from seqpack_cli.prepare.pools.scan import scan_pools

        checked = self.checked
        kept = checked.over_cap_rule.kept_histogram(self._histogram)
        writer.create_pool_files(kept)
        try:
            return scan_pools(
                self._connection(),
                files,
                checked.length_column,
                kept,
                id_column=checked.id_column,
                over_cap=checked.over_cap_rule,
                work_dir=writer.work_dir,
                append_pool=writer.append_pool,
                workers=checked.threads,
                progress=self.progress,
                tuning=checked.tuning,
            )
        finally:
            self._close()

    def store(self, writer: PreparedWriter) -> StoreSection:
        if self._one_pass is not None or self.config.tokens_column is None:
            return self._store
        return self._write_store(writer)

    def _write_store(self, writer: PreparedWriter) -> StoreSection:
        """The two passes' store (the reference: it words every fault of the token column)."""
        from seqpack_cli.prepare.token_store import write_token_store

        config = self.checked

        writer.finish_pools()
        kept = config.over_cap_rule.kept_histogram(self._histogram)
        section, names = write_token_store(
            writer.tmp_path,
            self._paths,
            config.store_columns,
            id_column=config.id_column,
            length_column=config.length_column,
            pools=PoolMap(writer.tmp_path, kept),
            truncated_at=config.over_cap_rule.cut_to,
        )
        for name in names:
            writer.record_file(name)
        return section

    def describe(self) -> dict[str, object]:
        return {"name": "local"}
