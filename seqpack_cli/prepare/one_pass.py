"""`seqpack prepare --tokens-column` in one pass over the token column: `read_in_one_pass`.

The two-pass job reads the token lists three times (DuckDB's `len` for the histogram, again for
the pools, then pyarrow for the store) and the written store once more to hash it. Here the
lists are read once (`token_stream`: pyarrow, row groups decoded in threads), and that one read
gives the store (written and hashed as it streams, `streamed_store`), the lengths (the histogram,
from the lists' sizes) and, with the offsets just written and the ids in ascending order (row
indexes, or the id index the store sorts anyway), the pools (`pools.ascending`): no length is
read twice and no token is decoded twice. The files are byte for byte those of the two passes.

Every check of the two passes stays, worded by them: whatever this pass finds wrong (a NULL or
empty list, a bad value, a NULL or repeated id, lists of different lengths, a length column
that is not the lists' lengths, a file it cannot read) makes `read_in_one_pass` remove what it
wrote and return a `Fallback`; the job then runs the two passes, which stop at the same fault
with their message, in their order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepare.pools.ascending import append_ascending
from seqpack_cli.prepare.pools.offsets import Layout, PoolAppend, num_workers
from seqpack_cli.prepare.pools.scan import PoolScan
from seqpack_cli.prepare.streamed_store import StreamedStore
from seqpack_cli.prepare.token_batches import StoreColumns
from seqpack_cli.prepare.token_files import row_locator, source_info, store_entry, write_id_index
from seqpack_cli.prepare.token_reading import TokenInput, inspect_token_inputs
from seqpack_cli.prepare.token_store import STORE_RULES
from seqpack_cli.prepare.token_stream import Fault, stream_token_batches
from seqpack_cli.prepared import PreparedWriter
from seqpack_cli.prepared.format import STORE_ROLES
from seqpack_cli.prepared.integrity import file_digest
from seqpack_cli.prepared.mounts import remove_tree
from seqpack_cli.progress import ProgressCallback
from seqpack_cli.token_sources import (
    IDS_NAME,
    OFFSETS_NAME,
    ROWS_NAME,
    TOKENS_NAME,
    write_info,
)

__all__ = [
    "Fallback",
    "OnePass",
    "aborted_on_error",
    "close_store",
    "read_in_one_pass",
    "write_error",
]

logger = logging.getLogger(__name__)


@dataclass
class OnePass:
    """What the one pass read: the `histogram` of the input lengths, and the store in the
    prepared temporary directory (complete but for its token_source.json files), ready for the
    pools (`write_pools`) and the files table (`finish`)."""

    root: Path
    config: PrepareConfig
    inputs: dict[str, list[TokenInput]]
    store: StreamedStore
    digests: dict[str, str | None]
    split: dict[str, int] | None
    histogram: dict[int, int]

    def _ascending_chunks(self, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(lengths, ids) of the stored sequences in ascending id order, `chunk` at a time, with
        the lengths `OverCap.keep` gives them: the longer ones left out (drop) or cut
        (truncate)."""
        tokens = self.root / "tokens"
        offsets = np.load(tokens / OFFSETS_NAME, mmap_mode="r")
        count = self.store.num_store_rows
        index = None
        if self.store.with_index:
            index = (np.load(tokens / IDS_NAME, mmap_mode="r"), np.load(tokens / ROWS_NAME, "r"))
        over_cap = self.config.over_cap_rule
        for start in range(0, count, chunk):
            stop = min(start + chunk, count)
            if index is None:
                ids = np.arange(start, stop, dtype=np.int64)
                lengths = np.diff(np.asarray(offsets[start : stop + 1]))
            else:
                ids = np.asarray(index[0][start:stop])
                rows = np.asarray(index[1][start:stop])
                lengths = offsets[rows + 1] - offsets[rows]
            yield over_cap.keep(lengths, ids)

    def write_pools(
        self, kept: Mapping[int, int], append: PoolAppend, *, progress: ProgressCallback | None
    ) -> PoolScan:
        """Append every kept sequence's id to its length's pool, ascending."""
        started = time.perf_counter()
        layout = Layout(kept, self.config.tuning)
        chunks = self._ascending_chunks(self.config.tuning.map_chunk_ids)
        low, high = append_ascending(chunks, layout, append, progress=progress)
        logger.info("pools from the store's offsets in %.2fs", time.perf_counter() - started)
        if self.config.id_column is None:
            low = high = None  # row indexes: the manifest records no id range
        return PoolScan(layout.num_ids, low, high)

    def finish(self, writer: PreparedWriter) -> dict[str, Any]:
        """Write each role's token_source.json, record every file of the store in `writer`'s
        files table; the manifest's `token_store` section."""
        try:
            return self._finish(writer)
        except OSError as error:
            raise write_error(self.config, error) from None

    def _finish(self, writer: PreparedWriter) -> dict[str, Any]:
        config, section = self.config, {}
        shared: dict[str, str] = {}
        for role, column in config.store_columns.items():
            root = self.root / role
            if role != "tokens":
                self.store.copy_shared(role)
            files = self.inputs[role]
            dtype = self.store.spec.dtypes[role]
            num_values = self.store.value_count(role)
            info = source_info(column, config.id_column, dtype, files, num_values, split=self.split)
            write_info(root, info)
            names = sorted(path.name for path in root.iterdir())
            for name in names:
                path = root / name
                digest = self.digests[role] if name == TOKENS_NAME else None
                if name == OFFSETS_NAME:
                    digest = self.digests["offsets"]
                if name in (OFFSETS_NAME, IDS_NAME, ROWS_NAME):  # the same bytes in every role
                    digest = shared.get(name) or digest or file_digest(path)[1]
                    shared[name] = digest
                if digest is None:
                    writer.record_file(f"{role}/{name}")
                else:
                    writer.record_written(f"{role}/{name}", path.stat().st_size, digest)
            section[role] = store_entry(info)
        return section


def _stream(
    store: StreamedStore,
    files: Sequence[TokenInput],
    config: PrepareConfig,
    progress: ProgressCallback | None,
) -> None:
    """Every batch into the store, then the piece ids and the id index."""
    total = store.num_input_rows
    workers = num_workers(config.threads, config.tuning)
    batches = stream_token_batches(store.spec, files, workers=workers)
    try:
        for batch in batches:
            store.add(batch)
            if progress is not None:
                progress("token store", store.num_rows, total)  # rows, not tokens
    finally:
        batches.close()  # stops the reading threads now, whatever stopped the loop
    if store.num_rows != total:
        raise Fault(f"{store.num_rows} rows read, the footers say {total}")


def write_error(config: PrepareConfig, error: OSError) -> ConfigError:
    """A failed write of the store (a full disk), in one line."""
    return ConfigError(
        f"cannot write the token store of {config.output}: {error.strerror or error}; free some "
        f"space or choose another {option('output')}"
    )


def _discard(root: Path) -> None:
    """Remove what the pass wrote into the temporary directory (before the two passes run)."""
    for role in STORE_ROLES:
        remove_tree(root / role)


@contextmanager
def aborted_on_error(store: StreamedStore, config: PrepareConfig) -> Iterator[None]:
    """Any exit by an exception aborts `store` (its writes stopped, its files closed); a failed
    write (a full disk) is raised as `write_error`'s one line."""
    try:
        yield
    except OSError as error:
        store.abort()
        raise write_error(config, error) from None
    except BaseException:
        store.abort()
        raise


def close_store(
    store: StreamedStore, root: Path, files: Sequence[TokenInput], id_column: str | None
) -> tuple[dict[str, str | None], dict[str, int] | None]:
    """Once every row is in `store`: its files closed, the pieces numbered, the id index
    written (`InputError` for a repeated id, `Fault` for a split sequence's id held by another
    sequence too); each file's sha256 (None: hash it by reading it) and the split's figures."""
    digests = store.close_files()
    split = store.number_pieces()
    if store.with_index:
        locate = row_locator(
            [{"path": file.path.as_posix(), "num_rows": file.num_rows} for file in files]
        )
        write_id_index(root / "tokens", id_column, locate)
        if store.split_ids_repeat():
            raise Fault("a split sequence's id is another sequence's too")
    return digests, split


@dataclass(frozen=True)
class Fallback:
    """The one pass stopped at `error` (a `Fault`, or an `InputError` of the checks it shares
    with the two passes); nothing it wrote is left."""

    error: Exception


def read_in_one_pass(
    writer: PreparedWriter,
    paths: Sequence[Path],
    config: PrepareConfig,
    *,
    progress: ProgressCallback | None = None,
) -> OnePass | Fallback:
    """Read the token column (and labels or mask, the length and id columns) of `paths` once
    into the store in `writer.tmp_path`, or stop at the first fault the two passes are to word
    (`Fallback`)."""
    started = time.perf_counter()
    root = writer.tmp_path
    columns = config.store_columns
    try:
        inputs = {
            role: inspect_token_inputs(
                paths, column, config.id_column if role == "tokens" else None, STORE_RULES[role]
            )
            for role, column in columns.items()
        }
        spec = StoreColumns.of(
            columns, inputs, length_column=config.length_column, id_column=config.id_column
        )
    except InputError as error:
        logger.info("one pass: %s; the two passes word it", error)
        return Fallback(error)
    predicted = {role: sum(file.num_values for file in inputs[role]) for role in columns}
    split_at = config.max_seq_len if config.over_cap_rule.splits else None
    try:
        num_rows = sum(file.num_rows for file in inputs["tokens"])
        store = StreamedStore(root, spec, num_rows, predicted, split_at=split_at)
    except OSError as error:
        raise write_error(config, error) from None
    with aborted_on_error(store, config):
        try:
            _stream(store, inputs["tokens"], config, progress)
            digests, split = close_store(store, root, inputs["tokens"], config.id_column)
        except (Fault, InputError) as fault:
            store.abort()
            logger.info("one pass: %s; the two passes word it", fault)
            _discard(root)
            return Fallback(fault)
    logger.info(
        "one pass: %d rows, %d tokens, store written and hashed (%.2fs)",
        store.num_rows,
        store.num_tokens,
        time.perf_counter() - started,
    )
    return OnePass(root, config, inputs, store, digests, split, store.lengths.histogram())
