"""The THD layout of a packed batch, and one context-parallel rank's share of it.

A THD batch lays the batch's bins back to back as one row (TransformerEngine's
`qkv_format="thd"`), every sequence padded to a multiple `M` of `2 * cp_size`. Context
parallelism splits every padded sequence into `2 * cp_size` equal chunks and gives rank r chunks
r and `2 * cp_size - 1 - r`: the "head-tail" order of TransformerEngine, Megatron and torch's
context parallel, which gives every rank the same share of causal attention work (an early
chunk, cheap, and a late one, dear), whatever the sequence lengths.

Offsets come twice: `cu_seqlens` counts the real tokens of each sequence, `cu_seqlens_padded`
its padded span in the row; the tokens from `cu_seqlens[i] - cu_seqlens[0]` past the span's start
to its end are padding, which attention skips (TransformerEngine's `cu_seqlens_q_padded`).

Everything here is index arithmetic on per-sequence lengths: `repeat`/`cumsum`, no per-token
Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.errors import ConfigError, InputError, option

__all__ = ["ThdLayout", "check_cp_options", "cp_indices_of", "lay_out_thd", "shift_labels"]


def check_cp_options(
    format: str, cp_size: Any, cp_rank: Any, length_multiple: Any
) -> tuple[int, int, int]:
    """`(cp_size, cp_rank, multiple)` checked; `multiple` is the one every sequence is padded
    to: `length_multiple`, a multiple of `2 * cp_size`, else `2 * cp_size` (1 for one rank)."""
    cp_size = check_int("cp_size", cp_size, minimum=1, fix="pass the context-parallel group size")
    cp_rank = check_int(
        "cp_rank",
        cp_rank,
        minimum=0,
        maximum=cp_size - 1,
        fix=f"pass this process's rank within its context-parallel group (0 to {cp_size - 1})",
    )
    if format != "thd" and (cp_size != 1 or cp_rank != 0 or length_multiple is not None):
        raise ConfigError(
            f"cp_size={cp_size}, cp_rank={cp_rank}, length_multiple={length_multiple!r} with "
            f"format={format!r}; context parallelism and length multiples need format='thd'"
        )
    if length_multiple is None:
        return cp_size, cp_rank, 1 if cp_size == 1 else 2 * cp_size
    multiple = check_int(
        option("length_multiple"),
        length_multiple,
        minimum=1,
        fix=f"pass a multiple of 2 * cp_size = {2 * cp_size}, or leave it unset",
    )
    if cp_size > 1 and multiple % (2 * cp_size):
        raise ConfigError(
            f"length_multiple={multiple} with cp_size={cp_size}: each sequence is split into "
            f"2 * cp_size = {2 * cp_size} equal chunks, so the multiple must divide by "
            f"{2 * cp_size}; pass length_multiple={_round_up(multiple, 2 * cp_size)} "
            f"(or lcm(2 * cp_size, cp_size * tp) with sequence parallelism)"
        )
    return cp_size, cp_rank, multiple


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`, vectorised."""
    offsets = np.cumsum(lengths) - lengths  # where each range begins in the output
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - offsets, lengths)


def cp_indices_of(cu_seqlens_padded: np.ndarray, cp_size: int, cp_rank: int) -> np.ndarray:
    """Where rank `cp_rank`'s tokens sit in the padded row (int64): for every sequence in row
    order, its chunk `cp_rank` then its chunk `2 * cp_size - 1 - cp_rank` (of `2 * cp_size`
    equal chunks of its padded span). With one rank, the whole row (spans of any length)."""
    if cp_size == 1:
        return np.arange(int(cu_seqlens_padded[-1]), dtype=np.int64)
    starts = cu_seqlens_padded[:-1].astype(np.int64)
    chunk = np.diff(cu_seqlens_padded).astype(np.int64) // (2 * cp_size)
    head = starts + cp_rank * chunk
    tail = starts + (2 * cp_size - 1 - cp_rank) * chunk
    return _concatenated_ranges(np.stack([head, tail], axis=1).ravel(), np.repeat(chunk, 2))


def shift_labels(
    labels: np.ndarray, position: np.ndarray, lengths: np.ndarray, label_pad_id: int
) -> np.ndarray:
    """Labels in the model's frame (the label at i is what the logits at i are scored against):
    token i's label is token i + 1's, and a sequence's last token gets `label_pad_id`.

    `labels` (tokens back to back, `lengths` each) are in `PackedCollator`'s frame, where
    `labels[i]` says whether and what token i is as a target; `position` is each token's place in
    its sequence. A context-parallel rank holds non-contiguous chunks, so the model cannot shift.
    """
    shifted = np.full_like(labels, label_pad_id)
    shifted[:-1] = labels[1:]
    shifted[position == np.repeat(lengths, lengths) - 1] = label_pad_id  # never the next sequence
    return shifted


@dataclass(frozen=True)
class ThdLayout:
    """Where a batch's tokens go in the padded THD row, and this rank's share of that row."""

    cu_seqlens: np.ndarray  # int32 [S + 1]: real lengths
    cu_seqlens_padded: np.ndarray  # int32 [S + 1]: padded spans; the last entry is the row's T
    row_index: np.ndarray  # int64, per real token (batch order): its place in the row
    row_position: np.ndarray  # int64 [T]: each place's position within its sequence's span
    cp_indices: np.ndarray  # int64 [T / cp_size]: this rank's places, in its order

    @property
    def total(self) -> int:
        return int(self.cu_seqlens_padded[-1])


def lay_out_thd(
    lengths: np.ndarray,
    num_bins: int,
    *,
    max_seq_len: int,
    multiple: int,
    cp_size: int,
    cp_rank: int,
    pad_to: int | None,
) -> ThdLayout:
    """The THD layout of sequences of `lengths` (batch order) from `num_bins` bins.

    Every sequence is padded to a multiple of `multiple`; with `pad_to`, the last sequence's span
    grows to end the row at exactly `pad_to` (its extra places are padding, so attention and the
    loss ignore them, and `cu_seqlens_padded[-1] == pad_to`). Raises `InputError` when the padded
    row is longer than `num_bins * max_seq_len` (bins packed without the multiple).
    """
    lengths = lengths.astype(np.int64)
    padded = -(-lengths // multiple) * multiple
    total = int(padded.sum())
    if total > num_bins * max_seq_len:
        raise InputError(
            f"the batch's {num_bins} bins hold {int(lengths.sum())} tokens, {total} once every "
            f"sequence is padded to a multiple of {multiple} (format='thd', cp_size={cp_size}), "
            f"more than {num_bins} * max_seq_len = {num_bins * max_seq_len}; pack for that "
            f"multiple: prepared.repack(length_multiple={multiple}) or seqpack prepare "
            f"--length-multiple {multiple}"
        )
    if pad_to is not None:
        if total > pad_to:
            raise ConfigError(
                f"the batch holds {total} tokens once padded to multiples of {multiple}, more "
                f"than pad_to={pad_to}; set pad_to to at least rows per batch * max_seq_len"
            )
        padded[-1] += pad_to - total
        total = pad_to
    cu_seqlens = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu_seqlens[1:])
    cu_seqlens_padded = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
    np.cumsum(padded, out=cu_seqlens_padded[1:])
    span_start = cu_seqlens_padded[:-1].astype(np.int64)
    return ThdLayout(
        cu_seqlens=cu_seqlens,
        cu_seqlens_padded=cu_seqlens_padded,
        row_index=_concatenated_ranges(span_start, lengths),
        row_position=np.arange(total, dtype=np.int64) - np.repeat(span_start, padded),
        cp_indices=cp_indices_of(cu_seqlens_padded, cp_size, cp_rank),
    )
