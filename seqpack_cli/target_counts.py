"""Each sequence's number of loss targets, stored beside a loss mask or labels: `num_targets.npy`.

`num_items_in_batch` (the targets of a whole optimizer step, every rank's) is computed from the
epoch plan; with a loss mask or labels that needs each sequence's count of targets, which this
module counts once, when the store is written, so that training never reads other ranks' masks.

A sequence's count is what `PackedCollator._labels` makes targets of: the positions p in
1 .. l'-1 (its first token is never predicted) where the loss mask is not 0, or where the label
is not `LABEL_PAD_ID` (-100, the collator's default `label_pad_id`); l' is the sequence's length
l, or min(l, `truncated_to`) when the collator keeps only the first `truncated_to` tokens
(`prepare --over-cap truncate`: `truncated_to` is its max_seq_len).

The file is one integer per row of the token source directory (int32 unless a sequence is
longer than 2**31 tokens, then int64), aligned with the rows as the values are, so the same
id -> row look-up serves both. The directory's `token_source.json` describes it under
`NUM_TARGETS_KEY`: `{"role": "loss_mask" | "labels", "dtype", "label_pad_id" (labels only, else
null), "truncated_to" (or null)}`. A directory without that entry (written before this file
existed) has no counts: `num_targets` is None.

Counting is vectorised and bounded in memory: rows a chunk at a time, each chunk's values read
a slice at a time (`_VALUES_CHUNK`) from the memory-mapped store, the counts written into the
memory-mapped output as they come. Part of the training-time runtime (the reading side): numpy
only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError

__all__ = [
    "COUNTED_ROLES",
    "LABEL_PAD_ID",
    "NUM_TARGETS_KEY",
    "NUM_TARGETS_NAME",
    "NumTargets",
    "ReopenedNumTargets",
    "check_entry",
    "count_chunks",
    "count_targets",
    "num_targets_entry",
]

logger = logging.getLogger(__name__)

NUM_TARGETS_NAME = "num_targets.npy"
NUM_TARGETS_KEY = "num_targets"
"""`token_source.json`'s entry describing `NUM_TARGETS_NAME`."""
LABEL_PAD_ID = -100
"""The label that marks no target (`PackedCollator`'s default `label_pad_id`): labels are
counted against it."""
COUNTED_ROLES = ("labels", "loss_mask")
"""The roles whose values decide targets (a token column has none of its own)."""
_DTYPES = ("<i4", "<i8")
_ROWS_CHUNK = 1 << 20  # rows counted at a time: 48 MiB of bounds and counts
_VALUES_CHUNK = 1 << 22  # values read at a time: 4 MiB of flags


def _is_target(role: str, values: np.ndarray, label_pad_id: int) -> np.ndarray:
    return values != (label_pad_id if role == "labels" else 0)


def _range_counts(
    values: np.ndarray, lo: np.ndarray, hi: np.ndarray, role: str, label_pad_id: int
) -> np.ndarray:
    """The number of targets among `values[lo[r]:hi[r]]` for every r (ranges in order, none
    overlapping), reading the values `_VALUES_CHUNK` at a time: one `np.add.reduceat` per slice
    over the ranges that meet it (10x a running count's speed)."""
    counts = np.zeros(lo.shape[0], dtype=np.int64)
    if lo.shape[0] == 0:
        return counts
    for start in range(int(lo[0]), int(hi[-1]), _VALUES_CHUNK):
        stop = min(start + _VALUES_CHUNK, int(hi[-1]))
        first = int(np.searchsorted(hi, start, side="right"))  # ranges ending after start
        last = int(np.searchsorted(lo, stop, side="left"))  # ... and beginning before stop
        if first >= last:
            continue
        # One more (False) value, so that a bound at the slice's end is a valid index.
        targets = np.zeros(stop - start + 1, dtype=bool)
        targets[:-1] = _is_target(role, np.asarray(values[start:stop]), label_pad_id)
        bounds = np.empty(2 * (last - first), dtype=np.int64)
        bounds[0::2] = np.clip(lo[first:last] - start, 0, stop - start)
        bounds[1::2] = np.clip(hi[first:last] - start, 0, stop - start)
        # reduceat sums each range [bounds[2r], bounds[2r + 1]), but gives the value at the
        # bound itself for an empty one: those count 0.
        sums = np.add.reduceat(targets, bounds, dtype=np.int32)
        counts[first:last] += np.where(bounds[0::2] < bounds[1::2], sums[0::2], 0)
    return counts


def count_chunks(
    values: np.ndarray,
    offsets: np.ndarray,
    role: str,
    truncated_to: int | None,
    label_pad_id: int,
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, counts of the rows from it) for every chunk of `_ROWS_CHUNK` rows."""
    num_rows = offsets.shape[0] - 1
    for first in range(0, num_rows, _ROWS_CHUNK):
        bounds = np.asarray(offsets[first : min(first + _ROWS_CHUNK, num_rows) + 1], np.int64)
        starts, ends = bounds[:-1], bounds[1:]
        # Targets lie in [start + 1, end), cut at start + truncated_to: an empty range for an
        # empty or one-token sequence. Both bounds are non-decreasing: rows are back to back.
        lo = np.minimum(starts + 1, ends)
        hi = ends if truncated_to is None else np.minimum(ends, starts + truncated_to)
        hi = np.maximum(hi, lo)
        yield first, _range_counts(values, lo, hi, role, label_pad_id)


def count_targets(
    values: np.ndarray,
    offsets: np.ndarray,
    *,
    role: str,
    truncated_to: int | None = None,
    label_pad_id: int = LABEL_PAD_ID,
) -> np.ndarray:
    """Each row's number of targets (int64): row i's values are
    `values[offsets[i]:offsets[i + 1]]`, a loss mask (`role="loss_mask"`: targets where not 0)
    or labels (`role="labels"`: where not `label_pad_id`); see the module docstring. In memory;
    `seqpack_cli.prepare.num_targets` writes a store's without holding them all."""
    num_rows = max(int(offsets.shape[0]) - 1, 0)
    counts = np.zeros(num_rows, dtype=np.int64)
    for first, chunk in count_chunks(values, offsets, role, truncated_to, label_pad_id):
        counts[first : first + chunk.shape[0]] = chunk
    return counts


def num_targets_entry(role: str, dtype: np.dtype[Any], truncated_to: int | None) -> dict[str, Any]:
    """`token_source.json`'s `NUM_TARGETS_KEY` entry."""
    return {
        "role": role,
        "dtype": np.dtype(dtype).name,
        "label_pad_id": LABEL_PAD_ID if role == "labels" else None,
        "truncated_to": truncated_to,
    }


def check_entry(entry: Any) -> str | None:
    """What is wrong with a `NUM_TARGETS_KEY` entry, or None."""
    if not isinstance(entry, Mapping):
        return f"its {NUM_TARGETS_KEY} entry is {entry!r}, not an object"
    role, truncated_to = entry.get("role"), entry.get("truncated_to")
    if role not in COUNTED_ROLES:
        return f"its {NUM_TARGETS_KEY}.role is {role!r}; expected one of {list(COUNTED_ROLES)}"
    if np.dtype(str(entry.get("dtype"))).newbyteorder("<").str not in _DTYPES:
        return f"its {NUM_TARGETS_KEY}.dtype is {entry.get('dtype')!r}; expected int32 or int64"
    if truncated_to is not None and not (
        isinstance(truncated_to, int) and not isinstance(truncated_to, bool) and truncated_to > 0
    ):
        return f"its {NUM_TARGETS_KEY}.truncated_to is {truncated_to!r}; expected null or > 0"
    pad = entry.get("label_pad_id")
    if pad != (LABEL_PAD_ID if role == "labels" else None):
        return f"its {NUM_TARGETS_KEY}.label_pad_id is {pad!r}; expected {LABEL_PAD_ID} or null"
    return None


class NumTargets:
    """Each sequence's number of loss targets (see the module docstring), by sequence id.

    `take(seq_ids)` gives the counts of `seq_ids` (int64, in order), looked up as the token
    source `source` looks up its rows (an unknown id raises its `InputError`). `truncated_to`
    is the length the counts were cut at (None: whole sequences), `label_pad_id` the label
    counted as no target (None for a loss mask), `role` what was counted. Pickles as its
    source (which pickles as its location), so a DataLoader worker maps the file itself.
    """

    def __init__(
        self,
        counts: np.ndarray,
        source: Any,
        *,
        role: str,
        truncated_to: int | None,
        label_pad_id: int | None,
    ) -> None:
        self.counts = counts
        self.role = role
        self.truncated_to = truncated_to
        self.label_pad_id = label_pad_id
        self._source = source

    def take(self, seq_ids: np.ndarray) -> np.ndarray:
        rows = self._source.find_rows(np.asarray(seq_ids, dtype=np.int64))
        return np.asarray(self.counts[rows], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    def __repr__(self) -> str:
        where = getattr(self._source, "path", None)
        return (
            f"NumTargets({os.fspath(where)!r}, {len(self)} sequences, role={self.role!r}, "
            f"truncated_to={self.truncated_to})"
            if where is not None
            else f"NumTargets({len(self)} sequences, role={self.role!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ReopenedNumTargets,
            (self._source, self.role, self.truncated_to, self.label_pad_id),
        )


class ReopenedNumTargets:
    """A `NumTargets` unpickled: its source's counts, looked up on first use (the source opens
    its directory then, and refuses one that no longer holds what was pickled)."""

    def __init__(
        self, source: Any, role: str, truncated_to: int | None, label_pad_id: int | None
    ) -> None:
        self.role = role
        self.truncated_to = truncated_to
        self.label_pad_id = label_pad_id
        self._source = source
        self._opened: NumTargets | None = None

    def opened(self) -> NumTargets:
        if self._opened is None:
            counts = getattr(self._source, NUM_TARGETS_KEY, None)
            if not isinstance(counts, NumTargets):
                raise InputError(
                    f"{getattr(self._source, 'path', 'the token source')} no longer holds "
                    f"{NUM_TARGETS_NAME}: it was rewritten since it was opened; reopen it"
                )
            self._opened = counts
        return self._opened

    def take(self, seq_ids: np.ndarray) -> np.ndarray:
        return self.opened().take(seq_ids)

    def __len__(self) -> int:
        return len(self.opened())

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ReopenedNumTargets,
            (self._source, self.role, self.truncated_to, self.label_pad_id),
        )
