"""Where prepare's passes run: an engine reads the footers, takes the histogram, writes the pools
and the token store.

`prepare_dataset` (`job`) asks every engine the same five things in the same order, with no
branch on which engine it holds: `inspect` the inputs, take their `histogram`, write the `pools`
of the lengths the job keeps, write the `store` (with `--tokens-column`), `describe` the run for
the manifest. The over-cap policy, the packing, the manifest and the atomic commit are the job's.
An engine is a context manager that the job enters inside its `PreparedWriter` block, so that an
engine that fails stops all its work before the writer removes the temporary directory.

- `protocol`: `Engine`, what the job asks, and `StoreSection`;
- `local`: `LocalEngine` (`--engine local`, the default), the passes in this process: one DuckDB
  connection, or with a token store one read of the token column (`one_pass`);
- `dask` (subpackage): `ClusterEngine` (`--engine dask`), the same SQL and the same store as
  tasks on a Dask cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqpack_cli.prepare.engines.protocol import Engine, StoreSection

if TYPE_CHECKING:
    from seqpack_cli.prepare.config import PrepareConfig
    from seqpack_cli.progress import ProgressCallback

__all__ = ["Engine", "StoreSection", "open_engine"]


def open_engine(config: PrepareConfig, *, progress: ProgressCallback | None = None) -> Engine:
    """The engine `config.engine` names, not yet entered."""
    if config.engine == "dask":
        from seqpack_cli.prepare.engines.dask.driver import ClusterEngine

        return ClusterEngine(config, progress=progress)
    from seqpack_cli.prepare.engines.local import LocalEngine

    return LocalEngine(config, progress=progress)
