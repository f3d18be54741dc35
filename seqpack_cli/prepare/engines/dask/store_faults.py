"""The token store's faults worded as the local store words them, from one definition each.

The store tasks (`store_tasks`) only find where a fault is. A fault of a file's rows is worded
by the local store's reader itself, streaming the one file that holds it (`stream_error`, a
task: it reads rows); the others are built on the driver from the few numbers the tasks
returned, by the local store's own error functions (`token_files.repeated_id_error`,
`token_store.length_mismatch_error`, `token_store.pool_length_error`).
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
from seqpack_cli.prepare.token_files import repeated_id_error
from seqpack_cli.prepare.token_reading import TokenInput, stream_token_lists
from seqpack_cli.prepare.token_store import (
    STORE_RULES,
    length_mismatch_error,
    pool_length_error,
)

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
    """The local store's error for `value` held by `rows` (the first two)."""
    return repeated_id_error(id_column, value, locate(rows[0]), locate(rows[1]))


def mismatch_error(
    role: str,
    columns: Mapping[str, str],
    row: int,
    lengths: tuple[int, int],
    locate: Callable[[int], str],
) -> InputError:
    """The local store's error for `row`, whose `role` list holds `lengths[0]` values and its
    tokens `lengths[1]`."""
    return length_mismatch_error(role, columns, locate(row), lengths[0], lengths[1])


def pool_error(
    fault: tuple[int, int, int, int],
    truncated_at: int | None,
    columns: Mapping[str, str],
    length_column: str,
    locate: Callable[[int], str],
) -> InputError:
    """The local store's error for `fault` (pool length, id, row, stored length)."""
    pool, seq_id, row, length = fault
    return pool_length_error((pool, seq_id, length), truncated_at, columns, length_column,
                             locate(row))  # fmt: skip
