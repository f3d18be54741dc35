"""Collation: bins of sequence ids plus a token source become model inputs.

A *token source* is anything indexable by a sequence id that returns that sequence's tokens as a
1-D integer sequence: a list of lists, a 2-D or object numpy array, a list of (or a 2-D) CPU torch
tensor, a Hugging Face `datasets.Dataset` column (`dataset["input_ids"]`), or `FlatTokenSource`
over one memory-mapped token array plus offsets (fetched with one vectorised gather).

`PackedCollator` lays out a whole batch with numpy: one fetch per sequence (one gather for
`FlatTokenSource` and 2-D arrays), one concatenate per batch, every per-token array (position,
sequence id, label) from `repeat`/`cumsum` offsets, and one boolean-mask assignment per output
array to place the tokens in their rows; never a per-token Python loop.

Label convention (Hugging Face style, where the model shifts labels internally so that the
logits at i are scored against `labels[i + 1]`): `labels[i] = input_ids[i]`, except that the
first token of every sequence and every padding position get `label_pad_id`. So no sequence's
first token is ever predicted from the end of the sequence before it, and padding is never a
target.
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.masking import check_max_num_seqs, require_torch, too_many_sequences_error

__all__ = ["FORMATS", "FlatTokenSource", "PackedCollator", "pack_one_bin"]

logger = logging.getLogger(__name__)

FORMATS = ("padded", "padding_free", "maxtext")
_MAX_IDS_SHOWN = 8


class FlatTokenSource:
    """Sequences stored back to back in one flat token array, with `offsets` marking each start.

    Sequence i is `tokens[offsets[i]:offsets[i + 1]]`. `tokens` may be a read-only `np.memmap`
    (e.g. `np.load("tokens.npy", mmap_mode="r")`): a batch is fetched with one fancy-index
    gather, so only the pages holding its tokens are read.
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


def _as_token_array(item: Any, seq_id: int) -> np.ndarray:
    """One sequence's tokens as a 1-D integer numpy array, or an `InputError` saying why not."""
    if isinstance(item, Mapping):
        raise InputError(
            f"token_source[{seq_id}] is a mapping with keys {sorted(map(str, item))[:5]}; "
            "expected a 1-D token sequence: pass the token column, e.g. dataset['input_ids']"
        )
    try:
        tokens = np.asarray(item)
    except (TypeError, RuntimeError) as error:
        raise InputError(
            f"token_source[{seq_id}] ({type(item).__name__}) cannot be read as an array "
            f"({error}); keep token sources on the CPU"
        ) from error
    if tokens.ndim != 1 or tokens.shape[0] == 0:
        raise InputError(
            f"token_source[{seq_id}] has shape {tokens.shape}; expected a non-empty 1-D token "
            "sequence: drop empty sequences before packing"
        )
    if tokens.dtype.kind not in "iu":
        raise InputError(
            f"token_source[{seq_id}] has dtype {tokens.dtype}; expected integer token ids"
        )
    return tokens


def _missing_sequence_error(seq_ids: np.ndarray, error: Exception) -> InputError:
    return InputError(
        f"token_source has no sequence for one of the ids {_shown(seq_ids)} ({error}); "
        "expected every id in a bin to index the token source: pack and collate the same dataset"
    )


def _fetch(token_source: Any, seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of `seq_ids` concatenated in order (int64), and each sequence's length."""
    if isinstance(token_source, FlatTokenSource):
        return token_source.take(seq_ids)
    if getattr(token_source, "ndim", None) == 2:
        # A 2-D array or tensor: every row is one sequence; gather all rows at once.
        try:
            rows = np.asarray(token_source[seq_ids])
        except IndexError as error:
            raise _missing_sequence_error(seq_ids, error) from error
        if rows.dtype.kind not in "iu" or rows.shape[1] == 0:
            raise InputError(
                f"token_source has dtype {rows.dtype} and rows of {rows.shape[1]} tokens; "
                "expected integer token ids and non-empty rows"
            )
        lengths = np.full(seq_ids.shape[0], rows.shape[1], dtype=np.int64)
        return rows.reshape(-1).astype(np.int64, copy=False), lengths
    # Anything else: one look-up per sequence (never per token), then one concatenate.
    try:
        chunks = [_as_token_array(token_source[i], i) for i in seq_ids.tolist()]
    except (IndexError, KeyError) as error:
        raise _missing_sequence_error(seq_ids, error) from error
    lengths = np.fromiter((c.shape[0] for c in chunks), dtype=np.int64, count=len(chunks))
    return np.concatenate(chunks).astype(np.int64, copy=False), lengths


def _shown(values: Sequence[int] | np.ndarray) -> str:
    """A short rendering of an id or length list for error messages."""
    shown = [int(v) for v in values[: _MAX_IDS_SHOWN + 1]]
    if len(shown) <= _MAX_IDS_SHOWN:
        return str(shown)
    return f"{shown[:_MAX_IDS_SHOWN]} + {len(values) - _MAX_IDS_SHOWN} more"


@dataclass(frozen=True)
class _Layout:
    """Where every token of a batch goes; all per-token arrays have the batch's token count."""

    tokens: np.ndarray  # int64, bins back to back, sequences in bin order
    lengths: np.ndarray  # tokens per sequence, in batch order
    num_seqs: np.ndarray  # sequences per bin
    real: np.ndarray  # [B, max_seq_len] bool: where tokens go (rows are left-aligned)
    position: np.ndarray  # the position of each token within its sequence (0-based)
    local_id: np.ndarray  # the index of each token's sequence within its bin (0-based)
    seq_index: np.ndarray  # the index of each token's sequence within the batch (0-based)


def _lay_out(bins: Sequence[Sequence[int]], token_source: Any, max_seq_len: int) -> _Layout:
    """Fetch a batch's tokens and place them, rows left-aligned, with vectorised numpy."""
    if len(bins) == 0:
        raise InputError("the batch holds no bins; expected at least one bin of sequence ids")
    num_seqs = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    if not num_seqs.all():
        empty = int(np.flatnonzero(num_seqs == 0)[0])
        raise InputError(f"bin {empty} of the batch holds no sequence ids; expected at least one")
    seq_ids = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64)
    tokens, lengths = _fetch(token_source, seq_ids)

    first_seq = np.cumsum(num_seqs) - num_seqs  # index of each bin's first sequence
    row_len = np.add.reduceat(lengths, first_seq)
    over = np.flatnonzero(row_len > max_seq_len)
    if over.size:
        k = int(over[0])
        ids = seq_ids[first_seq[k] : first_seq[k] + num_seqs[k]]
        lens = lengths[first_seq[k] : first_seq[k] + num_seqs[k]]
        raise InputError(
            f"bin {k} of the batch (sequence ids {_shown(ids)}, lengths {_shown(lens)}) holds "
            f"{int(row_len[k])} tokens, more than max_seq_len={max_seq_len}; pack with the "
            "same max_seq_len the collator uses, or raise max_seq_len"
        )

    num_seqs_total = seq_ids.shape[0]
    seq_start = np.cumsum(lengths) - lengths  # flat offset of each sequence
    seq_index = np.repeat(np.arange(num_seqs_total, dtype=np.int64), lengths)
    local_of_seq = np.arange(num_seqs_total, dtype=np.int64) - np.repeat(first_seq, num_seqs)
    return _Layout(
        tokens=tokens,
        lengths=lengths,
        num_seqs=num_seqs,
        # Row-major order of the True cells is the tokens' order, so a boolean-mask assignment
        # places every per-token array in one pass.
        real=np.arange(max_seq_len) < row_len[:, None],
        position=np.arange(seq_index.shape[0], dtype=np.int64) - seq_start[seq_index],
        local_id=local_of_seq[seq_index],
        seq_index=seq_index,
    )


def pack_one_bin(
    bin_seq_ids: Sequence[int], raw_dataset: Any, max_seq_len: int, pad_token_id: int
) -> tuple[Any, Any]:
    """One bin as `(tokens [L], sequence_ids [L])` int64 torch tensors, L = `max_seq_len`.

    As in the reference: sequence ids are local to the bin (0, 1, 2, ... in bin order) and the
    padding (`pad_token_id`) reuses the last sequence's id. Causal attention never lets a real
    token see that padding, since it comes last; for anything else pass the builders an
    `attention_mask` (1 on the bin's first sum-of-lengths positions), or use `PackedCollator`,
    whose padding has an id of its own. Raises `InputError` when the bin's tokens exceed
    `max_seq_len`.
    """
    torch = require_torch()
    max_seq_len = check_int("max_seq_len", max_seq_len, minimum=1)
    pad_token_id = check_int("pad_token_id", pad_token_id)
    layout = _lay_out([bin_seq_ids], raw_dataset, max_seq_len)
    num_tokens = layout.tokens.shape[0]
    tokens = np.full(max_seq_len, pad_token_id, dtype=np.int64)
    tokens[:num_tokens] = layout.tokens
    sequence_ids = np.full(max_seq_len, layout.num_seqs[0] - 1, dtype=np.int64)
    sequence_ids[:num_tokens] = layout.local_id
    return torch.from_numpy(tokens), torch.from_numpy(sequence_ids)


class PackedCollator:
    """Turns a batch of bins (lists of sequence ids) into model inputs.

    `format="padded"` (torch tensors, `[B, max_seq_len]`, bins left-aligned):
      - `input_ids`: tokens, `pad_token_id` after each row's last sequence;
      - `labels`: see the module docstring (first token of every sequence and padding ->
        `label_pad_id`);
      - `position_ids`: 0, 1, 2, ... restarting at every sequence, 0 on padding;
      - `sequence_ids`: 0, 1, 2, ... per sequence within its row; padding gets the next id (the
        row's number of sequences), an id of its own, so the builders in `seqpack_cli.masking`
        never let padding meet a real token even without the mask;
      - `attention_mask`: 1 on real tokens, 0 on padding;
      - `cu_seqlens` (int32), `max_seqlen` (int): sequence boundaries in the padding-stripped,
        row-major token stream, equal to `build_packing_cu_seqlens(sequence_ids,
        attention_mask)`. (For shapes that never change, call
        `build_packing_cu_seqlens(batch["sequence_ids"], max_num_seqs=K)` without the mask: it
        spans all B * L positions, each row's padding a segment of its own.)
    `format="padding_free"` (torch, `[1, total_tokens]`, rows concatenated without padding) for
      FlashAttention varlen and Hugging Face's position_ids-based padding-free path: the same
      keys except `attention_mask`, which is left out on purpose (Hugging Face's flash-attention
      path prefers a given mask to position_ids and would treat the batch as one sequence);
      `sequence_ids` number the sequences across the whole batch.
    `format="maxtext"` (numpy int32, `[B, max_seq_len]`, no torch needed): `inputs`, `targets`
      (both the tokens, `pad_token_id` on padding: MaxText shifts and masks targets itself),
      `inputs_position`, `targets_position` (0-based per sequence, 0 on padding),
      `inputs_segmentation`, `targets_segmentation` (1, 2, 3, ... per row, 0 on padding).

    `max_num_seqs=K` fixes `cu_seqlens` at K + 1 entries (the unused tail repeats the total) for
    `torch.compile(dynamic=False)`; a batch with more than K sequences raises `ConfigError`.

    `return_loss_weights=True` adds `loss_weights` (float32, shaped like `labels`): a token whose
    label is not `label_pad_id` gets `1 / (n - 1)`, where n is its sequence's token count (so
    n - 1 is the number of tokens that sequence predicts); every other position gets 0. Weights
    align with `labels`, so shift them the same way; they sum to 1 over each sequence of two or
    more tokens (a one-token sequence predicts nothing and sums to 0). The per-sequence
    normalised loss is `(loss_weights * token_loss).sum() / num_sequences_with_targets` instead
    of the per-token mean.
    """

    def __init__(
        self,
        token_source: Any,
        max_seq_len: int,
        pad_token_id: int,
        *,
        label_pad_id: int = -100,
        format: str = "padded",
        return_loss_weights: bool = False,
        max_num_seqs: int | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigError(f"format={format!r}; expected one of {', '.join(FORMATS)}")
        if format == "maxtext" and (return_loss_weights or max_num_seqs is not None):
            raise ConfigError(
                "format='maxtext' has no loss_weights or cu_seqlens (MaxText derives both from "
                "the segmentation); leave return_loss_weights and max_num_seqs unset"
            )
        self.token_source = token_source
        self.max_seq_len = check_int("max_seq_len", max_seq_len, minimum=1)
        self.pad_token_id = check_int("pad_token_id", pad_token_id)
        self.label_pad_id = check_int("label_pad_id", label_pad_id)
        self.format = format
        self.return_loss_weights = bool(return_loss_weights)
        self.max_num_seqs = None if max_num_seqs is None else check_max_num_seqs(max_num_seqs)

    def __repr__(self) -> str:
        return (
            f"PackedCollator(max_seq_len={self.max_seq_len}, pad_token_id={self.pad_token_id}, "
            f"label_pad_id={self.label_pad_id}, format={self.format!r}, "
            f"return_loss_weights={self.return_loss_weights}, max_num_seqs={self.max_num_seqs})"
        )

    def __call__(self, bins: Sequence[Sequence[int]]) -> dict[str, Any]:
        layout = _lay_out(bins, self.token_source, self.max_seq_len)
        if self.format == "maxtext":
            return self._maxtext(layout)
        torch = require_torch()
        labels = np.where(layout.position == 0, self.label_pad_id, layout.tokens)
        features: dict[str, np.ndarray]
        if self.format == "padded":
            features = self._padded(layout, labels)
        else:
            features = {
                "input_ids": layout.tokens[None],
                "labels": labels[None],
                "position_ids": layout.position[None],
                "sequence_ids": layout.seq_index[None],
            }
        if self.return_loss_weights:
            features["loss_weights"] = self._loss_weights(layout)
        batch: dict[str, Any] = {k: torch.from_numpy(v) for k, v in features.items()}
        batch["cu_seqlens"] = torch.from_numpy(self._cu_seqlens(layout.lengths))
        batch["max_seqlen"] = int(layout.lengths.max())
        return batch

    def _grid(
        self, layout: _Layout, values: np.ndarray | int, fill: int | np.ndarray, dtype: Any
    ) -> Any:
        """A `[B, max_seq_len]` array holding `values` at the tokens' places, `fill` elsewhere."""
        grid = np.empty(layout.real.shape, dtype=dtype)
        grid[...] = fill
        grid[layout.real] = values
        return grid

    def _padded(self, layout: _Layout, labels: np.ndarray) -> dict[str, np.ndarray]:
        # Padding's sequence id is the row's sequence count: the next unused local id.
        padding_id = layout.num_seqs[:, None]
        return {
            "input_ids": self._grid(layout, layout.tokens, self.pad_token_id, np.int64),
            "labels": self._grid(layout, labels, self.label_pad_id, np.int64),
            "position_ids": self._grid(layout, layout.position, 0, np.int64),
            "sequence_ids": self._grid(layout, layout.local_id, padding_id, np.int64),
            "attention_mask": self._grid(layout, 1, 0, np.int64),
        }

    def _maxtext(self, layout: _Layout) -> dict[str, np.ndarray]:
        tokens = self._grid(layout, layout.tokens, self.pad_token_id, np.int32)
        positions = self._grid(layout, layout.position, 0, np.int32)
        segments = self._grid(layout, layout.local_id + 1, 0, np.int32)
        return {
            "inputs": tokens,
            "targets": tokens.copy(),
            "inputs_position": positions,
            "targets_position": positions.copy(),
            "inputs_segmentation": segments,
            "targets_segmentation": segments.copy(),
        }

    def _loss_weights(self, layout: _Layout) -> np.ndarray:
        predicted = (layout.lengths - 1).astype(np.float32)  # targets per sequence
        per_seq = np.divide(1.0, predicted, out=np.zeros_like(predicted), where=predicted > 0)
        weights = np.where(layout.position == 0, np.float32(0), per_seq[layout.seq_index])
        weights = weights.astype(np.float32, copy=False)
        if self.format == "padded":
            return self._grid(layout, weights, 0, np.float32)
        return weights[None]

    def _cu_seqlens(self, lengths: np.ndarray) -> np.ndarray:
        cu_seqlens = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
        np.cumsum(lengths, out=cu_seqlens[1:])
        if self.max_num_seqs is None:
            return cu_seqlens
        if lengths.shape[0] > self.max_num_seqs:
            raise too_many_sequences_error(lengths.shape[0], self.max_num_seqs)
        tail = np.full(self.max_num_seqs - lengths.shape[0], cu_seqlens[-1], dtype=np.int32)
        return np.concatenate([cu_seqlens, tail])
