"""Per-sequence sources: sequence id -> a 1-D integer array (tokens, labels or a loss mask).

A *source* is anything indexable by a sequence id that returns that sequence's values as a 1-D
integer sequence: a list of lists, a 2-D or object numpy array, a list of (or a 2-D) CPU torch
tensor, a Hugging Face `datasets.Dataset` column (`dataset["input_ids"]`), or `FlatTokenSource`
over one memory-mapped array plus offsets. The collator reads tokens, labels and loss masks
through the same protocol, so any of these can hold any of the three.

A store that can fetch many sequences at once implements `take_sequences(seq_ids) -> (values,
lengths)` (the values of `seq_ids` back to back, int64, and each one's length, int64), as
`FlatTokenSource` does: the collator then fetches a whole batch with that one call instead of one
look-up per sequence. An on-disk token store only needs `__getitem__`, and `take_sequences` for
speed.

`fetch` never loops over tokens in Python: one call per sequence at most, then one concatenate.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError

__all__ = ["FlatTokenSource", "fetch", "shown"]

_MAX_IDS_SHOWN = 8


class FlatTokenSource:
    """Sequences stored back to back in one flat token array, with `offsets` marking each start.

    Sequence i is `tokens[offsets[i]:offsets[i + 1]]`. `tokens` may be a read-only `np.memmap`
    (e.g. `np.load("tokens.npy", mmap_mode="r")`): a batch is fetched with one fancy-index
    gather, so only the pages holding its tokens are read. The same layout holds labels, or a
    loss mask as 0/1 integers (e.g. uint8), for `PackedCollator(labels_source=...)` or
    `loss_mask_source=...`.
    """

    def __init__(self, tokens: Any, offsets: Any) -> None:
        self.tokens = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        if self.tokens.ndim != 1 or self.tokens.dtype.kind not in "iu":
            raise InputError(
                f"FlatTokenSource tokens has shape {self.tokens.shape} and dtype "
                f"{self.tokens.dtype}; expected a 1-D integer array of all tokens back to back"
            )
        if (
            self.offsets.ndim != 1
            or self.offsets.size == 0
            or self.offsets[0] < 0
            or self.offsets[-1] > self.tokens.shape[0]
            or bool(np.any(np.diff(self.offsets) < 0))
        ):
            raise InputError(
                f"FlatTokenSource offsets (shape {self.offsets.shape}) must be a non-decreasing "
                f"1-D array within [0, {self.tokens.shape[0]}] with one more entry than there "
                "are sequences: build it as np.concatenate([[0], np.cumsum(lengths)])"
            )

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def __getitem__(self, seq_id: int) -> np.ndarray:
        seq_id = operator.index(seq_id)
        return self.tokens[self.offsets[seq_id] : self.offsets[seq_id + 1]]

    def take(self, seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens of `seq_ids` concatenated in order, and their lengths; one gather."""
        seq_ids = np.asarray(seq_ids, dtype=np.int64)
        if seq_ids.size and (seq_ids.min() < 0 or seq_ids.max() >= len(self)):
            bad = int(seq_ids[(seq_ids < 0) | (seq_ids >= len(self))][0])
            raise InputError(
                f"sequence id {bad} is outside FlatTokenSource's {len(self)} sequences; "
                "expected ids in [0, len(source))"
            )
        starts = self.offsets[seq_ids]
        lengths = self.offsets[seq_ids + 1] - starts
        # index[t] = start of t's sequence + t's offset within it, via one repeat.
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        index = shift + np.arange(shift.shape[0], dtype=np.int64)
        return np.asarray(self.tokens[index], dtype=np.int64), lengths

    take_sequences = take  # the batch-fetch protocol `fetch` looks for


def shown(values: Sequence[int] | np.ndarray) -> str:
    """A short rendering of an id or length list for error messages."""
    head = [int(v) for v in values[: _MAX_IDS_SHOWN + 1]]
    if len(head) <= _MAX_IDS_SHOWN:
        return str(head)
    return f"{head[:_MAX_IDS_SHOWN]} + {len(values) - _MAX_IDS_SHOWN} more"


def _kinds(allow_bool: bool) -> str:
    return "iub" if allow_bool else "iu"


def _as_array(item: Any, seq_id: int, name: str, allow_bool: bool) -> np.ndarray:
    """One sequence's values as a 1-D integer numpy array, or an `InputError` saying why not."""
    if isinstance(item, Mapping):
        raise InputError(
            f"{name}[{seq_id}] is a mapping with keys {sorted(map(str, item))[:5]}; "
            "expected a 1-D sequence: pass one column, e.g. dataset['input_ids']"
        )
    try:
        values = np.asarray(item)
    except (TypeError, RuntimeError) as error:
        raise InputError(
            f"{name}[{seq_id}] ({type(item).__name__}) cannot be read as an array "
            f"({error}); keep sources on the CPU"
        ) from error
    if values.ndim != 1 or values.shape[0] == 0:
        raise InputError(
            f"{name}[{seq_id}] has shape {values.shape}; expected a non-empty 1-D "
            "sequence: drop empty sequences before packing"
        )
    if values.dtype.kind not in _kinds(allow_bool):
        raise InputError(
            f"{name}[{seq_id}] has dtype {values.dtype}; expected integer "
            + ("values (0/1 or bool)" if allow_bool else "token ids")
        )
    return values


def _missing_sequence_error(name: str, seq_ids: np.ndarray, error: Exception) -> InputError:
    return InputError(
        f"{name} has no sequence for one of the ids {shown(seq_ids)} ({error}); "
        f"expected every id in a bin to index {name}: pack and collate the same dataset"
    )


def fetch(
    source: Any, seq_ids: np.ndarray, *, name: str = "token_source", allow_bool: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The values of `seq_ids` concatenated in order (int64), and each sequence's length.

    `name` is how error messages call the source; `allow_bool` admits bool values (a loss mask).
    """
    take_sequences = getattr(type(source), "take_sequences", None)
    if take_sequences is not None:
        try:
            values, lengths = take_sequences(source, seq_ids)
        except InputError as error:
            raise InputError(f"{name}: {error}") from error
        return np.asarray(values, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    if getattr(source, "ndim", None) == 2:
        # A 2-D array or tensor: every row is one sequence; gather all rows at once.
        try:
            rows = np.asarray(source[seq_ids])
        except IndexError as error:
            raise _missing_sequence_error(name, seq_ids, error) from error
        if rows.dtype.kind not in _kinds(allow_bool) or rows.shape[1] == 0:
            raise InputError(
                f"{name} has dtype {rows.dtype} and rows of {rows.shape[1]} values; "
                "expected integer values and non-empty rows"
            )
        lengths = np.full(seq_ids.shape[0], rows.shape[1], dtype=np.int64)
        return rows.reshape(-1).astype(np.int64, copy=False), lengths
    # Anything else: one look-up per sequence (never per token), then one concatenate.
    try:
        chunks = [_as_array(source[i], i, name, allow_bool) for i in seq_ids.tolist()]
    except (IndexError, KeyError) as error:
        raise _missing_sequence_error(name, seq_ids, error) from error
    lengths = np.fromiter((c.shape[0] for c in chunks), dtype=np.int64, count=len(chunks))
    return np.concatenate(chunks).astype(np.int64, copy=False), lengths
