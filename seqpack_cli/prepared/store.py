"""The token store of a prepared directory, opened: `tokens/`, `labels/`, `loss_mask/`.

Each role is a token-source directory (`seqpack_cli.token_sources`: `tokens.npy`, `offsets.npy`,
`token_source.json`, and with an id column `ids.npy`, `rows.npy`), written by
`seqpack prepare --tokens-column` and memory-mapped here. A store of `--over-cap split` holds
each split sequence as its pieces (one row each, with new ids: an id index whatever the ids) and
the piece table `tokens/pieces.npy` (`piece_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError
from seqpack_cli.prepared.layout import STORE_ROLES, TOKEN_STORE_KEY
from seqpack_cli.prepared.schema import unusable
from seqpack_cli.token_sources import (
    IDS_NAME,
    INFO_NAME,
    OFFSETS_NAME,
    PIECES_NAME,
    ROWS_NAME,
    TOKENS_NAME,
    FlatTokenSource,
)

__all__ = ["open_store", "piece_table"]


def open_store(root: Path, manifest: Mapping[str, Any]) -> dict[str, FlatTokenSource]:
    """The token store's sources by role (memory-mapped), each listed in the files table (so
    its sizes, and with verify its hashes, are checked) and as long as the inputs."""
    store = manifest.get(TOKEN_STORE_KEY) or {}
    sources: dict[str, FlatTokenSource] = {}
    num_rows = manifest.get("inputs", {}).get("num_rows")
    split = manifest["config"].get("over_cap") == "split"
    if split and num_rows is not None:  # each split sequence is stored as its pieces
        summary = manifest.get("summary", {})
        num_rows += summary.get("num_pieces", 0) - summary.get("num_split", 0)
    with_ids = manifest["config"].get("id_column") is not None or split
    for role, entry in sorted(store.items(), key=lambda item: STORE_ROLES.index(item[0])):
        names = [TOKENS_NAME, OFFSETS_NAME, INFO_NAME] + ([IDS_NAME, ROWS_NAME] if with_ids else [])
        names += [PIECES_NAME] if split and role == "tokens" else []
        unlisted = [f"{role}/{name}" for name in names if f"{role}/{name}" not in manifest["files"]]
        if unlisted:
            raise unusable(root, f"the files table does not list {unlisted[0]} of the token store")
        try:
            source = FlatTokenSource.open(root / role)
        except InputError as error:
            raise unusable(root, f"its token store {role}/ cannot be opened ({error})") from None
        tokens = sources.get("tokens", source)
        if (
            (num_rows is not None and len(source) != num_rows)
            or source.tokens.dtype.name != entry["dtype"]
            or (role != "tokens" and source.tokens.shape != tokens.tokens.shape)
        ):
            raise unusable(
                root,
                f"its token store {role}/ holds {len(source)} sequences, "
                f"{source.tokens.shape[0]} {source.tokens.dtype} values, which disagrees with "
                f"the manifest ({num_rows} input rows, {entry['dtype']}) or with tokens/",
            )
        sources[role] = source
    return sources


def piece_table(root: Path) -> np.ndarray:
    """The piece table of the prepared directory `root` made with `--over-cap split`: an int64
    array of rows (piece id, source id, start), by piece id; piece `p` holds the tokens of source
    `s` from `start` on (the source's tokens are its pieces' in that order). Empty without a
    split store. Raises `PreparedFormatError` when the table cannot be read."""
    path = Path(root) / "tokens" / PIECES_NAME
    if not path.exists():
        return np.zeros((0, 3), dtype=np.int64)
    try:
        table = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise unusable(
            Path(root), f"its piece table {path.name} cannot be read ({error})"
        ) from None
    if table.ndim != 2 or table.shape[1] != 3 or table.dtype != np.int64:
        raise unusable(
            Path(root), f"its piece table holds {table.dtype} values of shape {table.shape}"
        )
    return table
