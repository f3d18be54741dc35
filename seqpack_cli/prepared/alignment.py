"""Whether a token source matches a prepared directory: `check_pool_lengths`.

A token source built from other files, or from the same files in another order, would pack the
wrong tokens into every row without a word (bin 0 came out 33/8192 tokens full in one report);
this check compares every pooled id's length with the source's before training starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError
from seqpack_cli.token_sources import fetch

__all__ = ["check_pool_lengths", "pool_mismatch_error"]

_LENGTHS_CHUNK = 1 << 20  # ids per look-up (a few MiB of scratch)
_FETCH_CHUNK = 1 << 10  # ids per fetch for a source without sequence_lengths


def _lengths_of(source: Any, seq_ids: np.ndarray, name: str) -> np.ndarray:
    """Each id's length in `source`, -1 where it has none: without reading tokens when the
    source has `sequence_lengths` (as `FlatTokenSource`), else fetched (a missing id raises)."""
    if hasattr(type(source), "sequence_lengths"):
        return np.asarray(source.sequence_lengths(seq_ids, missing="mark"), dtype=np.int64)
    chunks = range(0, seq_ids.shape[0], _FETCH_CHUNK)
    parts = [fetch(source, seq_ids[k : k + _FETCH_CHUNK], name=name)[1] for k in chunks]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def pool_mismatch_error(
    name: str, seq_id: int, length: int, actual: int, *, at_least: bool, where: str | None
) -> InputError:
    """The error for sequence `seq_id` of pool `length` that the source `name` holds with
    `actual` tokens (-1: not at all); `at_least` for the pool a truncating prepare cut to;
    `where` says where its row comes from. `check_pool_lengths` raises it, and the Dask store
    words the fault its tasks found with it."""
    expected = (
        f"at least {length} (pool {length} of a truncating prepare)" if at_least else str(length)
    )
    what = (
        f"has no sequence id {seq_id}, which the prepared pool of length {length} holds"
        if actual < 0
        else f"holds {actual} tokens for sequence id {seq_id}"
        f"{f' ({where})' if where is not None else ''}, but the prepared pools give it {expected}"
    )
    return InputError(
        f"{name} {what}: the token source and the prepared directory describe different rows; "
        "tokenise and prepare the same files in the same order (and the same id column)"
    )


def check_pool_lengths(
    source: Any,
    pools: Mapping[int, Any],
    *,
    truncated_at: int | None = None,
    name: str = "token source",
    locate: Callable[[int], str] | None = None,
) -> int:
    """Check that `source` holds every id of `pools` ({length: ids}, as a prepared directory's)
    with exactly that length; return the number of ids checked.

    With `truncated_at=L` (prepare's `--over-cap truncate` with max_seq_len L), the ids of pool L
    may be longer (the collator keeps their first L tokens). Raises `InputError` naming the
    first id missing or of another length, both lengths, and the fix; `locate(id)` may say where
    the id's row comes from. Memory: a chunk of ids at a time.
    """
    checked = 0
    for length in sorted(pools):
        ids = pools[length]
        for start in range(0, len(ids), _LENGTHS_CHUNK):
            part = np.asarray(ids[start : start + _LENGTHS_CHUNK], dtype=np.int64)
            found = _lengths_of(source, part, name)
            at_least = truncated_at is not None and length == truncated_at
            bad = (found < length) if at_least else (found != length)
            checked += part.shape[0]
            if not bad.any():
                continue
            k = int(np.flatnonzero(bad)[0])
            seq_id, actual = int(part[k]), int(found[k])
            where = locate(seq_id) if locate is not None and actual >= 0 else None
            raise pool_mismatch_error(name, seq_id, length, actual, at_least=at_least, where=where)
    return checked
