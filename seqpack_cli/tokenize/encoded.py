"""What an encoder returns (`Encoded`), and how rows of ids and character spans become it.

Tokens are stored back to back in the narrowest unsigned dtype the vocabulary allows (uint16 up
to 65,536 ids, else uint32), the loss mask as uint8 beside them, the per-row lengths as int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

__all__ = ["Encoded", "concatenate", "join", "spans_mask", "token_dtype"]

Span = tuple[int, int]


def token_dtype(vocab_size: int) -> np.dtype[np.unsignedinteger]:
    """uint16 when every id is below 65,536, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


@dataclass(frozen=True)
class Encoded:
    """A batch of encoded rows.

    Attributes:
        lengths: int64, the number of tokens of each row.
        tokens: the rows' ids back to back (uint16 or uint32), `lengths.sum()` of them.
        loss_mask: uint8 beside `tokens` (1 = a target), or None for plain text.
    """

    lengths: np.ndarray
    tokens: np.ndarray
    loss_mask: np.ndarray | None = None

    def row(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """One row's tokens and mask.

        Args:
            index: the row, from 0.

        Returns:
            `(tokens, loss_mask)`, views into the batch's arrays (the mask None for text).
        """
        end = int(self.lengths[: index + 1].sum())
        start = end - int(self.lengths[index])
        mask = None if self.loss_mask is None else self.loss_mask[start:end]
        return self.tokens[start:end], mask

    def __len__(self) -> int:
        return len(self.lengths)


def concatenate(
    ids: Sequence[Sequence[int]], masks: Sequence[np.ndarray] | None, vocab_size: int
) -> Encoded:
    """Rows of ids (and their masks) as one `Encoded`."""
    lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
    dtype = token_dtype(vocab_size)
    tokens = np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    if masks is None:
        return Encoded(lengths, tokens)
    mask = np.concatenate(masks).astype(np.uint8) if masks else np.zeros(0, np.uint8)
    return Encoded(lengths, tokens, mask)


def join(parts: Sequence[Encoded], vocab_size: int) -> Encoded:
    """Several batches' results, in order, as one."""
    if not parts:
        return concatenate([], None, vocab_size)
    lengths = np.concatenate([part.lengths for part in parts])
    tokens = np.concatenate([part.tokens for part in parts]).astype(token_dtype(vocab_size))
    masks = [part.loss_mask for part in parts]
    if any(mask is None for mask in masks):
        return Encoded(lengths, tokens)
    return Encoded(lengths, tokens, np.concatenate([m for m in masks if m is not None]))


def spans_mask(offsets: Sequence[tuple[int, int]], spans: Sequence[Span]) -> np.ndarray:
    """1 for each token whose `[start, end)` characters overlap a span, else 0.

    This is transformers' `return_assistant_tokens_mask` walk: tokens and spans in order, a
    token is skipped past every span ending at or before its start, and kept if it ends after
    the current span's start (so a token straddling a span's edge is kept).
    """
    mask = np.zeros(len(offsets), dtype=np.uint8)
    if not spans or not len(offsets):
        return mask
    # fromiter over the flattened pairs: several times faster than asarray on a list of tuples.
    bounds = np.fromiter(chain.from_iterable(offsets), np.int64, 2 * len(offsets)).reshape(-1, 2)
    span_bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = bounds[:, 0], bounds[:, 1]
    if np.all(np.diff(starts) >= 0) and np.all(np.diff(span_bounds[:, 1]) >= 0):
        # In order (every tokenizer's offsets, every template's spans): the walk's current span
        # for a token is the first span ending after the token's start.
        current = np.searchsorted(span_bounds[:, 1], starts, side="right")
        inside = current < len(span_bounds)
        mask[inside] = ends[inside] > span_bounds[current[inside], 0]
        return mask
    span = 0
    for token, (start, end) in enumerate(offsets):
        while span < len(spans) and start >= spans[span][1]:
            span += 1
        if span == len(spans):
            break
        mask[token] = end > spans[span][0]
    return mask
