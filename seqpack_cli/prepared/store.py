"""The token store of a prepared directory, opened: `tokens/`, `labels/`, `loss_mask/`.

Each role is a token-source directory (`seqpack_cli.token_sources`: `tokens.npy`, `offsets.npy`,
`token_source.json`, and with an id column `ids.npy`, `rows.npy`), written by
`seqpack prepare --tokens-column` and memory-mapped here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack_cli.errors import InputError
from seqpack_cli.prepared.layout import STORE_ROLES, TOKEN_STORE_KEY
from seqpack_cli.prepared.schema import unusable
from seqpack_cli.token_sources import (
    IDS_NAME,
    INFO_NAME,
    OFFSETS_NAME,
    ROWS_NAME,
    TOKENS_NAME,
    FlatTokenSource,
)

__all__ = ["open_store"]


def open_store(root: Path, manifest: Mapping[str, Any]) -> dict[str, FlatTokenSource]:
    """The token store's sources by role (memory-mapped), each listed in the files table (so
    its sizes, and with verify its hashes, are checked) and as long as the inputs."""
    store = manifest.get(TOKEN_STORE_KEY) or {}
    sources: dict[str, FlatTokenSource] = {}
    num_rows = manifest.get("inputs", {}).get("num_rows")
    with_ids = manifest["config"].get("id_column") is not None
    for role, entry in sorted(store.items(), key=lambda item: STORE_ROLES.index(item[0])):
        names = [TOKENS_NAME, OFFSETS_NAME, INFO_NAME] + ([IDS_NAME, ROWS_NAME] if with_ids else [])
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
