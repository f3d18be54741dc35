"""The pieces of split sequences (`--over-cap split`): the ids they take and the piece table.

`over_cap.cut_lengths` says where a sequence is cut; this module says what the pieces are
called, for both engines (the local one pass, `streamed_store`, and the Dask split tasks,
`engines/dask/split_tasks`): pieces take new ids past the largest input id (the id column's
largest, or the last row index), numbered in ascending order of (source id, position), so the
ids do not depend on how the rows are spread over files or tasks. `pieces.npy` holds one row per
piece: (piece id, source id, the piece's first token within its source).
"""

from __future__ import annotations

import numpy as np

from seqpack_cli.errors import InputError, option

__all__ = ["first_piece_id", "piece_ids_error", "pieces_of", "split_figures"]

_INT64_MAX = int(np.iinfo(np.int64).max)


def first_piece_id(id_column: str | None, largest_id: int | None, num_rows: int) -> int:
    """The first id a piece takes: one past the largest input id (`largest_id` of the id column,
    None when it holds none; without an id column the ids are the `num_rows` row indexes)."""
    if id_column is None:
        return num_rows
    return (largest_id if largest_id is not None else -1) + 1


def piece_ids_error(id_column: str | None, first: int, num_pieces: int) -> InputError | None:
    """The error for `num_pieces` new ids from `first` on that do not fit below 2**63 (None when
    they fit)."""
    if not num_pieces or first <= _INT64_MAX - num_pieces + 1:
        return None
    return InputError(
        f"id column {id_column!r} ({option('id_column')}) holds ids up to {first - 1}, which "
        f"leaves no room below 2**63 for the {num_pieces} new ids of the pieces of split "
        f"sequences; renumber the ids, or drop {option('id_column')} to use row indexes as ids"
    )


def pieces_of(
    sources: np.ndarray, per_source: np.ndarray, first_id: int, cap: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pieces of the split sequences `sources` (ids ascending), cut into `per_source`
    pieces of `cap` tokens each, numbered from `first_id`.

    Returns:
        Each piece's index within its source (int64), and the piece table rows, an (n, 3) int64
        array of (piece id, source id, first token within the source).
    """
    num_pieces = int(per_source.sum())
    within = np.arange(num_pieces, dtype=np.int64) - np.repeat(
        np.cumsum(per_source) - per_source, per_source
    )
    piece_ids = np.arange(first_id, first_id + num_pieces, dtype=np.int64)
    table = np.stack([piece_ids, np.repeat(sources, per_source), within * cap], axis=1)
    return within, table.astype(np.int64, copy=False)


def split_figures(cap: int, num_split: int, num_pieces: int, first: int) -> dict[str, int]:
    """The split's figures, as `token_source.json` and the manifest record them."""
    return {
        "max_seq_len": cap,
        "num_split": num_split,
        "num_pieces": num_pieces,
        "first_piece_id": first,
    }
