"""`Engine`: what `prepare_dataset` asks of an engine, whichever it is (see `engines`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from seqpack_cli.prepare.footers import InputFile
    from seqpack_cli.prepare.input_batches import ColumnOptions
    from seqpack_cli.prepare.pools.scan import PoolScan
    from seqpack_cli.prepare.remote_inputs import RemoteCopy
    from seqpack_cli.prepared import PreparedWriter

__all__ = ["Engine", "StoreSection"]

StoreSection: TypeAlias = "dict[str, dict[str, object]]"
"""The manifest's `token_store` section: each stored role's column, dtype and counts (empty
without a token store)."""


class Engine(Protocol):
    """What `prepare_dataset` asks of an engine, in this order."""

    def __enter__(self) -> Engine: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def fetch(
        self, copies: Sequence[RemoteCopy], columns: ColumnOptions, options: Mapping[str, str]
    ) -> None:
        """Remote inputs: what the job reads of each object copied to its path in the work
        directory (`remote_inputs.fetch_object` per object), before `inspect` reads them."""
        ...

    def inspect(self, paths: Sequence[Path]) -> list[InputFile]:
        """The inputs' footers, checked, in the inputs' order."""
        ...

    def histogram(self, files: Sequence[InputFile], writer: PreparedWriter) -> dict[int, int]:
        """The length histogram over every row, checked (`scan.checked_histogram`'s messages);
        the engine may start the pools pass, or write the token store, meanwhile, in `writer`'s
        temporary directory."""
        ...

    def pools(
        self, files: Sequence[InputFile], kept: Mapping[int, int], writer: PreparedWriter
    ) -> PoolScan:
        """Every `pools/{length}.npy` of the `kept` histogram (the job's, under the over-cap
        policy) written and recorded in `writer`; the ids' range."""
        ...

    def store(self, writer: PreparedWriter) -> StoreSection:
        """With `tokens_column`: the token store written into `writer`'s temporary directory,
        recorded in its files table and checked against the pools; its manifest section
        (empty without one)."""
        ...

    def describe(self) -> dict[str, object]:
        """The manifest's `engine` entry."""
        ...
