"""The token store's faults worded by the local store's own code, so the messages are its own.

The store tasks (`store_tasks`) only find where a fault is; the message comes from the function
of the local two-pass store (`token_store`, `token_files`, `token_reading`) that reports it,
run on just enough to report that one fault: `stream_error` streams the one file holding it (a
task, on a worker: it reads rows), the others are run on the driver over a row or two of numbers
the tasks returned.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint
from seqpack_cli.prepare.engines.dask.tasks import check_inputs, check_visible
from seqpack_cli.prepare.token_files import write_id_index
from seqpack_cli.prepare.token_reading import IDS_BY_ROW_NAME, TokenInput, stream_token_lists
from seqpack_cli.prepare.token_store import STORE_RULES, check_pools, check_same_lengths
from seqpack_cli.token_sources import OFFSETS_NAME

__all__ = ["duplicate_error", "mismatch_error", "pool_error", "stream_error"]


def stream_error(
    file: TokenInput,
    role: str,
    column: str,
    id_column: str | None,
    dtype: np.dtype[Any],
    scratch: Path,
    expected: Fingerprint,
) -> InputError | None:
    """The error the local store raises streaming `role`'s column of `file` (None if none), once
    the file is checked against the driver's fingerprint of it (`expected`)."""
    check_inputs([expected])
    check_visible((), [scratch])
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        try:
            stream_token_lists(Path(folder), [file], column, id_column, dtype, STORE_RULES[role])
        except InputError as error:
            return error
    return None


def duplicate_error(
    id_column: str, value: int, rows: tuple[int, int], locate: Callable[[int], str]
) -> InputError:
    """`token_files.write_id_index`'s error for `value` held by `rows` (the first two)."""
    with tempfile.TemporaryDirectory() as folder:
        np.array([value, value], dtype=np.int64).tofile(Path(folder) / IDS_BY_ROW_NAME)
        try:
            write_id_index(Path(folder), id_column, lambda k: locate(rows[k]))
        except InputError as error:
            return error
    raise AssertionError("write_id_index took a repeated id")


def mismatch_error(
    role: str,
    columns: Mapping[str, str],
    row: int,
    lengths: tuple[int, int],
    locate: Callable[[int], str],
) -> InputError:
    """`token_store.check_same_lengths`'s error for `row`, whose `role` list holds
    `lengths[0]` values and its tokens `lengths[1]`."""
    with tempfile.TemporaryDirectory() as folder:
        ours, theirs = Path(folder) / "ours", Path(folder) / "theirs"
        for path, length in ((ours, lengths[0]), (theirs, lengths[1])):
            path.mkdir()
            np.save(path / OFFSETS_NAME, np.array([0, length], dtype=np.int64))
        try:
            check_same_lengths(ours, role, columns, lambda k: locate(row + k), theirs)
        except InputError as error:
            return error
    raise AssertionError("the lengths agree")


class _OneRow:
    """A token source of one id, as `check_pool_lengths` asks it (`sequence_lengths`)."""

    def __init__(self, seq_id: int, length: int) -> None:
        self.seq_id, self.length = seq_id, length

    def sequence_lengths(self, seq_ids: np.ndarray, *, missing: str = "raise") -> np.ndarray:
        return np.where(np.asarray(seq_ids) == self.seq_id, self.length, -1)

    def find_rows(self, seq_ids: np.ndarray, *, missing: str = "raise") -> np.ndarray:
        return np.zeros(len(seq_ids), dtype=np.int64)


def pool_error(
    fault: tuple[int, int, int, int],
    truncated_at: int | None,
    columns: Mapping[str, str],
    length_column: str,
    locate: Callable[[int], str],
) -> InputError:
    """`token_store.check_pools`'s error for `fault` (pool length, id, row, stored length)."""
    pool, seq_id, row, length = fault
    source: Any = _OneRow(seq_id, length)  # all `check_pools` asks of a FlatTokenSource
    pools = {pool: np.array([seq_id], dtype=np.int64)}
    try:
        check_pools(source, pools, truncated_at, columns, length_column, lambda _: locate(row))
    except InputError as error:
        return error
    raise AssertionError("the pool's length is the stored one")
