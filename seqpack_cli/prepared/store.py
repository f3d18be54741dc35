"""The token store of a prepared directory, opened: `tokens/`, `labels/`, `loss_mask/`.

Each role is a token-source directory (`seqpack_cli.token_sources`: `tokens.npy`, `offsets.npy`,
`token_source.json`, and with an id column `ids.npy`, `rows.npy`), written by
`seqpack prepare --tokens-column` and memory-mapped here. `labels/` or `loss_mask/` also holds
`num_targets.npy`, each sequence's number of loss targets (`seqpack_cli.target_counts`; not in
a store of an older seqpack): the role's source's `num_targets`. A store of `--over-cap split` holds
each split sequence as its pieces (one row each, with new ids: an id index whatever the ids) and
the piece table `tokens/pieces.npy` (`piece_table`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError, PreparedFormatError
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepared.format import STORE_ROLES, TOKEN_STORE_KEY
from seqpack_cli.prepared.pool_files import pool_file_name
from seqpack_cli.prepared.schema import unusable
from seqpack_cli.prepared.snapshot import open_directory, reopen
from seqpack_cli.target_counts import NUM_TARGETS_NAME
from seqpack_cli.token_sources import (
    IDS_NAME,
    INDEX_DTYPE,
    INFO_NAME,
    OFFSETS_NAME,
    PIECES_NAME,
    ROWS_NAME,
    TOKENS_NAME,
    FlatTokenSource,
    map_npy,
)

__all__ = [
    "ReopenedStoreSource",
    "StoreTokenSource",
    "check_stored_lengths",
    "open_store",
    "piece_table",
]

_LENGTHS_CHUNK = 1 << 20  # ids per look-up: a few MiB of scratch


def _rebuild_fix(root: Path) -> str:
    return f"re-run `seqpack prepare ... --output {root} --overwrite` to rebuild it"


class StoreTokenSource(FlatTokenSource):
    """One role of a prepared directory's token store. Pickles as (directory, role, manifest
    digest): the other side opens it again only if the directory still holds that prepare."""

    prepared: tuple[Path, str, str] | None = None
    """(the prepared directory, the role, its manifest digest) once opened by `open_store`."""

    def __reduce__(self) -> tuple[Any, ...]:
        if self.prepared is None:
            return super().__reduce__()
        return (ReopenedStoreSource, self.prepared)


def _open_role(root: Path, role: str, dir_fd: int, digest: str) -> StoreTokenSource:
    role_fd = os.open(role, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0), dir_fd=dir_fd)
    try:
        source = StoreTokenSource.open(root / role, dir_fd=role_fd, fix=_rebuild_fix(root))
    except InputError as error:
        raise PreparedFormatError(str(error)) from None
    finally:
        os.close(role_fd)
    assert isinstance(source, StoreTokenSource)
    source.prepared = (root, role, digest)
    return source


def _reopen_store_source(root: Path, role: str, digest: str) -> StoreTokenSource:
    """The role `role` of the prepared directory `root`, if it still holds the prepare of the
    manifest digest `digest` (refused in one line otherwise)."""
    dir_fd = reopen(root, digest)
    try:
        return _open_role(root, role, dir_fd, digest)
    finally:
        os.close(dir_fd)


class ReopenedStoreSource:
    """A `StoreTokenSource` unpickled (in a DataLoader worker): opened on first use, so that a
    directory that now holds another prepare is refused where data is asked for, inside the
    worker's loop (which reports it to the main process), not while the worker starts."""

    def __init__(self, root: Path, role: str, digest: str) -> None:
        self.prepared = (root, role, digest)
        self._source: StoreTokenSource | None = None

    def opened(self) -> StoreTokenSource:
        if self._source is None:
            self._source = _reopen_store_source(*self.prepared)
        return self._source

    def take_sequences(self, seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.opened().take(seq_ids)

    take = take_sequences

    def sequence_lengths(self, seq_ids: np.ndarray, *, missing: str = "raise") -> np.ndarray:
        return self.opened().sequence_lengths(seq_ids, missing=missing)

    def __getitem__(self, seq_id: int) -> np.ndarray:
        return self.opened()[seq_id]

    def __len__(self) -> int:
        return len(self.opened())

    def __getattr__(self, name: str) -> Any:  # tokens, offsets, ids, info, ...
        if name.startswith("__") or name in ("prepared", "_source"):
            raise AttributeError(name)
        return getattr(self.opened(), name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReopenedStoreSource, self.prepared)


def open_store(
    root: Path, manifest: Mapping[str, Any], *, dir_fd: int | None = None, digest: str = ""
) -> dict[str, FlatTokenSource]:
    """The token store's sources by role (memory-mapped, opened through the directory
    descriptor `dir_fd`), each listed in the files table (so its sizes, and with verify its
    hashes, are checked), as long as the inputs, of the manifest's dtype exactly (byte order
    included), with offsets, ids and rows alike in every role."""
    store = manifest.get(TOKEN_STORE_KEY) or {}
    sources: dict[str, FlatTokenSource] = {}
    num_rows = manifest.get("inputs", {}).get("num_rows")
    split = OverCap.from_config(manifest["config"]).splits
    if split and num_rows is not None:  # each split sequence is stored as its pieces
        summary = manifest.get("summary", {})
        num_rows += summary.get("num_pieces", 0) - summary.get("num_split", 0)
    with_ids = manifest["config"].get("id_column") is not None or split
    own_fd = dir_fd is None
    if dir_fd is None:
        dir_fd = open_directory(root)
    try:
        for role, entry in sorted(store.items(), key=lambda item: STORE_ROLES.index(item[0])):
            names = [TOKENS_NAME, OFFSETS_NAME, INFO_NAME]
            names += [IDS_NAME, ROWS_NAME] if with_ids else []
            names += [PIECES_NAME] if split and role == "tokens" else []
            listed = manifest["files"]
            unlisted = [f"{role}/{name}" for name in names if f"{role}/{name}" not in listed]
            if unlisted:
                raise unusable(
                    root, f"the files table does not list {unlisted[0]} of the token store"
                )
            source = _open_role(root, role, dir_fd, digest)
            if source.num_targets is not None and f"{role}/{NUM_TARGETS_NAME}" not in listed:
                raise unusable(
                    root,
                    f"{role}/{INFO_NAME} describes {NUM_TARGETS_NAME}, but the files table "
                    f"does not list {role}/{NUM_TARGETS_NAME}",
                )
            _check_role(root, role, entry, source, sources.get("tokens", source), num_rows)
            sources[role] = source
    finally:
        if own_fd:
            os.close(dir_fd)
    return sources


def _check_role(
    root: Path,
    role: str,
    entry: Mapping[str, Any],
    source: FlatTokenSource,
    tokens: FlatTokenSource,
    num_rows: int | None,
) -> None:
    expected = np.dtype(entry["dtype"]).newbyteorder("<").str
    if source.tokens.dtype.str != expected:
        raise unusable(
            root,
            f"{role}/{TOKENS_NAME} holds {source.tokens.dtype.str} values, but the manifest's "
            f"token_store.{role}.dtype is {entry['dtype']} ({expected})",
        )
    if (num_rows is not None and len(source) != num_rows) or (
        source.tokens.shape != tokens.tokens.shape
    ):
        raise unusable(
            root,
            f"its token store {role}/ holds {len(source)} sequences, "
            f"{source.tokens.shape[0]} {source.tokens.dtype} values, which disagrees with "
            f"the manifest ({num_rows} input rows, {entry['dtype']}) or with tokens/",
        )
    if source is not tokens:
        for name, mine, theirs in (
            (OFFSETS_NAME, source.offsets, tokens.offsets),
            (IDS_NAME, source.ids, tokens.ids),
            (ROWS_NAME, source.rows, tokens.rows),
        ):
            if mine is not None and theirs is not None and not np.array_equal(mine, theirs):
                raise unusable(root, f"{role}/{name} and tokens/{name} differ")


def check_stored_lengths(
    root: Path, tokens: FlatTokenSource, pools: Mapping[int, Any], *, truncated_at: int | None
) -> None:
    """Every pooled id is in the store with its pool's length (at least that length in the pool
    `truncated_at` of a truncating prepare): vectorised, a chunk of ids at a time. Run after
    the offsets were checked non-decreasing, so their differences cannot overflow."""
    for length in sorted(pools):
        ids = pools[length]
        at_least = length == truncated_at
        for start in range(0, len(ids), _LENGTHS_CHUNK):
            part = np.asarray(ids[start : start + _LENGTHS_CHUNK])
            found = tokens.sequence_lengths(part, missing="mark")
            bad = (found < length) if at_least else (found != length)
            if not bad.any():
                continue
            k = int(np.flatnonzero(bad)[0])
            seq_id, actual = int(part[k]), int(found[k])
            stored = (
                f"has no sequence id {seq_id}"
                if actual < 0
                else (f"holds {actual} tokens for sequence id {seq_id}")
            )
            raise unusable(
                root,
                f"its token store tokens/ {stored}, which pool {length} "
                f"({pool_file_name(length)}) gives {length} tokens: tokens/{OFFSETS_NAME} and "
                "the pools disagree",
            )


def piece_table(root: Path) -> np.ndarray:
    """The piece table of the prepared directory `root` made with `--over-cap split`: an int64
    array of rows (piece id, source id, start), by piece id; piece `p` holds the tokens of source
    `s` from `start` on (the source's tokens are its pieces' in that order). Empty without a
    split store. Raises `PreparedFormatError` when the table cannot be read."""
    path = Path(root) / "tokens" / PIECES_NAME
    if not path.exists():
        return np.zeros((0, 3), dtype=np.int64)
    try:
        table = map_npy(path, fix=_rebuild_fix(Path(root)))
    except InputError as error:
        raise PreparedFormatError(str(error)) from None
    if table.ndim != 2 or table.shape[1] != 3 or table.dtype.str != INDEX_DTYPE:
        raise unusable(
            Path(root), f"its piece table holds {table.dtype.str} values of shape {table.shape}"
        )
    return table
