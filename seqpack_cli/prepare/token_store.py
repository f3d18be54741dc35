"""The token store of `seqpack prepare --tokens-column` (opt-in): `write_token_store`.

The token lists (and per-token labels or a 0/1 loss mask) of every input row are written into
the prepared directory's temporary directory, before the commit, as token source directories
(`tokens/`, `labels/`, `loss_mask/`: the layout of `write_token_source`, streamed the same way,
one Arrow batch at a time), so the whole prepared directory stays atomic. Tokens take the
smallest unsigned dtype, labels a signed one (int32 unless the values need more: -100 allowed),
a loss mask uint8 holding 0 or 1. Before anything is committed the store is checked: each labels
or mask list is as long as its tokens, and every pooled id has its pool's length (at least
max_seq_len in the longest pool of a `--over-cap truncate` prepare).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError, option
from seqpack_cli.prepare.token_files import row_locator, source_info, store_entry, write_id_index
from seqpack_cli.prepare.token_reading import (
    inspect_token_inputs,
    role_rule,
    store_dtype,
    stream_token_lists,
)
from seqpack_cli.prepared.alignment import check_pool_lengths, pool_mismatch_error
from seqpack_cli.prepared.format import STORE_ROLES
from seqpack_cli.token_sources import (
    IDS_NAME,
    OFFSETS_NAME,
    ROWS_NAME,
    FlatTokenSource,
    write_info,
)

__all__ = [
    "STORE_OPTIONS",
    "STORE_RULES",
    "length_mismatch_error",
    "pool_length_error",
    "write_token_store",
]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20  # rows compared at a time

STORE_OPTIONS = {
    "tokens": "tokens_column",
    "labels": "labels_column",
    "loss_mask": "loss_mask_column",
}
"""The option that names each role's column."""
STORE_RULES = {
    role: role_rule(
        role,
        negative=f"check that {option('tokens_column')} names the token ids (labels with -100 "
        f"go to {option('labels_column')})",
        mask_fix=f"fix the column, or pass per-token labels with {option('labels_column')}",
        option_name=STORE_OPTIONS[role],
    )
    for role in STORE_ROLES
}
"""How each role's column is named in messages and which values it admits."""


def _check_same_lengths(
    root: Path, role: str, columns: Mapping[str, str], locate: Any, tokens_dir: Path
) -> None:
    """`InputError` naming the first row whose `role` list is not as long as its tokens."""
    ours = np.load(root / OFFSETS_NAME, mmap_mode="r")
    theirs = np.load(tokens_dir / OFFSETS_NAME, mmap_mode="r")
    for start in range(0, ours.shape[0] - 1, _CHUNK):
        mine = np.diff(ours[start : start + _CHUNK + 1])
        tokens = np.diff(theirs[start : start + _CHUNK + 1])
        bad = np.flatnonzero(mine != tokens)
        if bad.size:
            k = int(bad[0])
            raise length_mismatch_error(
                role, columns, locate(start + k), int(mine[k]), int(tokens[k])
            )


def length_mismatch_error(
    role: str, columns: Mapping[str, str], where: str, values: int, tokens: int
) -> InputError:
    """The error for the row at `where` whose `role` list holds `values` values and its token
    list `tokens` (the local store's, and the Dask store's)."""
    what = STORE_RULES[role].what
    return InputError(
        f"{what} column {columns[role]!r} ({option(STORE_OPTIONS[role])}) holds {values} "
        f"values in {where}, but token column {columns['tokens']!r} holds {tokens} tokens "
        f"there; each row needs one {what} value per token: fix the column (or tokenise them "
        "together)"
    )


def _check_pools(
    source: FlatTokenSource,
    pools: Mapping[int, Any],
    truncated_at: int | None,
    columns: Mapping[str, str],
    length_column: str,
    locate: Any,
) -> None:
    """`InputError` for the first pooled id whose stored list is not its pool's length (at
    least `truncated_at` tokens in the pool of `truncated_at`), its fix told as the length
    column's."""
    try:
        check_pool_lengths(
            source,
            pools,
            truncated_at=truncated_at,
            name=f"token column {columns['tokens']!r}",
            locate=lambda seq_id: locate(int(source.find_rows(np.array([seq_id]))[0])),
        )
    except InputError as error:
        raise _length_column_error(error, columns, length_column) from None


def _length_column_error(
    error: InputError, columns: Mapping[str, str], length_column: str
) -> InputError:
    """`check_pool_lengths`' error, its fix told as the length column's."""
    problem = str(error.args[0]).partition(": the token source and")[0]
    return InputError(
        f"{problem}: {option('length_column')} {length_column!r} must give each row's number "
        f"of tokens in {option('tokens_column')} {columns['tokens']!r} (or name that column "
        "itself)"
    )


def pool_length_error(
    fault: tuple[int, int, int],
    truncated_at: int | None,
    columns: Mapping[str, str],
    length_column: str,
    where: str,
) -> InputError:
    """The local store's pool error for `fault` (pool length, id, stored length) of the row at
    `where`: what the Dask store's tasks found, worded as the local store words it."""
    pool, seq_id, length = fault
    at_least = truncated_at is not None and pool == truncated_at
    name = f"token column {columns['tokens']!r}"
    error = pool_mismatch_error(name, seq_id, pool, length, at_least=at_least, where=where)
    return _length_column_error(error, columns, length_column)


def write_token_store(
    directory: Path,
    paths: Sequence[Path],
    columns: Mapping[str, str],
    *,
    id_column: str | None,
    length_column: str,
    pools: Mapping[int, Any],
    truncated_at: int | None,
) -> tuple[dict[str, Any], list[str]]:
    """Write the store of `columns` ({role: column}, "tokens" and optionally "labels" or
    "loss_mask") of the inputs `paths` into `directory` (the prepared temporary directory);
    check it against `pools`. Returns the manifest's `token_store` section and the names of the
    files written (relative to `directory`), for the files table.

    Raises `InputError` for bad data (one line naming the file, the row and the value).
    """
    started = time.perf_counter()
    section: dict[str, Any] = {}
    names: list[str] = []
    tokens_dir = directory / "tokens"
    locate: Any = None
    for role in ("tokens", "labels", "loss_mask"):
        column = columns.get(role)
        if column is None:
            continue
        rule = STORE_RULES[role]
        files = inspect_token_inputs(paths, column, id_column if role == "tokens" else None, rule)
        dtype = store_dtype(role, files, column)
        root = directory / role
        root.mkdir()
        scan_ids = id_column if role == "tokens" else None
        num_tokens = stream_token_lists(root, files, column, scan_ids, dtype, rule)
        info = source_info(column, id_column, dtype, files, num_tokens)
        if role == "tokens":
            locate = row_locator(info["inputs"]["files"])
            if id_column is not None:
                write_id_index(root, id_column, locate)
        else:
            _check_same_lengths(root, role, columns, locate, tokens_dir)
            if id_column is not None:
                for name in (IDS_NAME, ROWS_NAME):
                    shutil.copyfile(tokens_dir / name, root / name)
        write_info(root, info)
        section[role] = store_entry(info)
        names += sorted(f"{role}/{path.name}" for path in root.iterdir())
        logger.info(
            "token store %s/: %d %s values (%.2fs)",
            role,
            num_tokens,
            dtype.name,
            time.perf_counter() - started,
        )
    source = FlatTokenSource.open(tokens_dir)
    _check_pools(source, pools, truncated_at, columns, length_column, locate)
    return section, names
