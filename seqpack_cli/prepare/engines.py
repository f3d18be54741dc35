"""Where prepare's passes run: an engine reads the footers, takes the histogram, writes the pools.

`prepare_dataset` (`job`) does everything else the same way for every engine: the inputs named,
the over-cap policy, the packing, the manifest and the atomic commit. An engine is a context
manager that the job enters inside its `PreparedWriter` block, so that an engine that fails stops
all its work before the writer removes the temporary directory:

- `LocalEngine` (`--engine local`, the default): one DuckDB connection in this process
  (`footers.inspect_inputs`, `scan.length_histogram`, `pools.scan.scan_pools`);
- `cluster.driver.ClusterEngine` (`--engine dask`): the same SQL as tasks on a Dask cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepared import PreparedWriter
from seqpack_cli.progress import ProgressCallback

__all__ = ["Engine", "LocalEngine", "open_engine"]


class Engine(Protocol):
    """What `prepare_dataset` asks of an engine."""

    def __enter__(self) -> Engine: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def inspect(self, paths: Sequence[Path]) -> list[Any]:
        """The inputs' footers, checked (`footers.InputFile` each, in the inputs' order)."""
        ...

    def histogram(self, files: Sequence[Any], writer: PreparedWriter) -> dict[int, int]:
        """The length histogram over every row, checked (`scan.length_histogram`); the engine
        may start the pools pass meanwhile, in `writer`'s work directory."""
        ...

    def pools(self, files: Sequence[Any], kept: Mapping[int, int], writer: PreparedWriter) -> Any:
        """Every `pools/{length}.npy` of `kept` written and recorded in `writer`; a
        `pools.scan.PoolScan`."""
        ...

    def describe(self) -> dict[str, Any]:
        """The manifest's `engine` entry."""
        ...


class LocalEngine:
    """The passes in this process, through one DuckDB connection opened for the histogram and
    closed once the pools are written."""

    def __init__(self, config: PrepareConfig, progress: ProgressCallback | None = None) -> None:
        self.config = config
        self.progress = progress
        self._con: Any = None

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

    def inspect(self, paths: Sequence[Path]) -> list[Any]:
        from seqpack_cli.prepare.footers import inspect_inputs

        return inspect_inputs(paths, self.config.length_column, self.config.id_column)

    def _connection(self) -> Any:
        from seqpack_cli.prepare.db import connect

        if self._con is None:
            config = self.config
            self._con = connect(
                threads=config.threads, memory_limit=config.memory_limit, temp_dir=config.temp_dir
            )
        return self._con

    def histogram(self, files: Sequence[Any], writer: PreparedWriter) -> dict[int, int]:
        from seqpack_cli.prepare.scan import length_histogram

        con = self._connection()
        return length_histogram(con, files, self.config.length_column, progress=self.progress)

    def pools(self, files: Sequence[Any], kept: Mapping[int, int], writer: PreparedWriter) -> Any:
        from seqpack_cli.prepare.pools.scan import scan_pools

        config = self.config
        writer.create_pool_files(kept)
        try:
            return scan_pools(
                self._connection(),
                files,
                config.length_column,
                kept,
                id_column=config.id_column,
                over_cap=config.over_cap_rule,
                work_dir=writer.work_dir,
                append_pool=writer.append_pool,
                workers=config.threads,
                progress=self.progress,
                tuning=config.tuning,
            )
        finally:
            self._close()

    def describe(self) -> dict[str, Any]:
        return {"name": "local"}


def open_engine(
    config: PrepareConfig, *, progress: ProgressCallback | None = None, write_pools: bool = True
) -> Engine:
    """The engine `config.engine` names, not yet entered. `write_pools=False`: an engine that
    can (Dask's) runs the pools pass's checks but leaves the pools to the caller (split)."""
    if config.engine == "dask":
        from seqpack_cli.prepare.cluster.driver import ClusterEngine

        return ClusterEngine(config, progress=progress, write_pools=write_pools)
    return LocalEngine(config, progress=progress)
