"""Collation: bins of sequence ids plus a token source become model inputs.

A *token source* is anything indexable by a sequence id that returns that sequence's tokens as a
1-D integer sequence: a list of lists, a 2-D or object numpy array, a list of (or a 2-D) CPU torch
tensor, a Hugging Face `datasets.Dataset` column (`dataset["input_ids"]`), `FlatTokenSource` over
one memory-mapped token array plus offsets (fetched with one vectorised gather), or any store
with `take_sequences` (see `seqpack_cli.token_sources`). Per-token labels (`labels_source`) or a
loss mask (`loss_mask_source`) come from sources of the same kind, indexed by the same ids.

`PackedCollator` lays out a whole batch with numpy: one fetch per sequence (one gather for
`FlatTokenSource` and 2-D arrays), one concatenate per batch, every per-token array (position,
sequence id, label) from `repeat`/`cumsum` offsets, and one boolean-mask assignment per output
array to place the tokens in their rows; never a per-token Python loop.

Label convention (Hugging Face style, where the model shifts labels internally so that the
logits at i are scored against `labels[i + 1]`): `labels[i]` is the i-th token's label (the token
itself, or `labels_source`'s value), except that the first token of every sequence, every token
whose loss mask is 0, and every padding position get `label_pad_id`. So no sequence's first token
is ever predicted from the end of the sequence before it, and padding is never a target. This is
what `transformers.DataCollatorWithFlattening` does (`[-100] + labels[1:]` per sequence).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.context_parallel import check_cp_options, lay_out_thd, shift_labels
from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.masking import check_max_num_seqs, require_torch, too_many_sequences_error
from seqpack_cli.over_cap import OverCap
from seqpack_cli.token_sources import FlatTokenSource, fetch, shown

__all__ = [
    "FORMATS",
    "CollateOptions",
    "FlatTokenSource",
    "PackedCollator",
    "check_pad_to",
    "cu_seqlens_of",
    "flat_boundaries",
    "pack_flat_tail",
    "pack_one_bin",
]

logger = logging.getLogger(__name__)

FORMATS = ("padded", "padding_free", "maxtext", "hf", "thd")
FLAT_FORMATS = ("padding_free", "hf", "thd")  # one flattened [1, total] row: what pad_to fixes


def check_pad_to(pad_to: Any, format: str, max_seq_len: int) -> int | None:
    """`pad_to` checked against the format (flattened rows only) and one full bin."""
    if pad_to is None:
        return None
    if format not in FLAT_FORMATS:
        raise ConfigError(
            f"pad_to={pad_to!r} with format={format!r}, whose rows are already max_seq_len "
            "long; use pad_to with format='hf', 'padding_free' or 'thd', or leave it unset"
        )
    return check_int(
        "pad_to",
        pad_to,
        minimum=max_seq_len,
        fix="pass at least max_seq_len (batch_size * max_seq_len holds any batch of that size)",
    )


def cu_seqlens_of(lengths: np.ndarray, max_num_seqs: int | None = None) -> np.ndarray:
    """Sequence boundaries (int32, `[num_sequences + 1]`); with `max_num_seqs=K`, K + 1 entries,
    the unused tail repeating the total."""
    cu_seqlens = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu_seqlens[1:])
    if max_num_seqs is None:
        return cu_seqlens
    if lengths.shape[0] > max_num_seqs:
        raise too_many_sequences_error(lengths.shape[0], max_num_seqs)
    tail = np.full(max_num_seqs - lengths.shape[0], cu_seqlens[-1], dtype=np.int32)
    return np.concatenate([cu_seqlens, tail])


def pack_flat_tail(
    features: dict[str, np.ndarray],
    lengths: np.ndarray,
    pad_to: int,
    *,
    pad_token_id: int,
    label_pad_id: int,
) -> np.ndarray:
    """Append to a flattened batch (`[1, total]` arrays) one padding span up to `pad_to` tokens,
    in place; returns the sequence lengths with that span as the last sequence.

    The span is a sequence of its own (positions from 0, the next sequence index, its own
    `cu_seq_lens` entry), so attention that keeps sequences apart never mixes it with a real
    token, and every label in it is `label_pad_id` (loss weight 0): the loss, its denominator
    (the number of targets) and every gradient are those of the batch without it.
    """
    total = int(lengths.sum())
    if total > pad_to:
        raise ConfigError(
            f"the batch holds {total} tokens ({lengths.shape[0]} sequences), more than "
            f"pad_to={pad_to}; set pad_to to at least rows per batch * max_seq_len"
        )
    slack = pad_to - total
    if slack == 0:
        return lengths
    tail: dict[str, np.ndarray] = {
        "input_ids": np.full(slack, pad_token_id, dtype=np.int64),
        "labels": np.full(slack, label_pad_id, dtype=np.int64),
        "position_ids": np.arange(slack, dtype=np.int64),
        "seq_idx": np.full(slack, lengths.shape[0], dtype=np.int32),
        "sequence_ids": np.full(slack, lengths.shape[0], dtype=np.int64),
        "loss_weights": np.zeros(slack, dtype=np.float32),
    }
    for key, values in features.items():
        features[key] = np.concatenate([values, tail[key][None].astype(values.dtype)], axis=1)
    return np.append(lengths, slack)


def flat_boundaries(
    features: dict[str, np.ndarray],
    lengths: np.ndarray,
    *,
    pad_to: int | None,
    max_num_seqs: int | None,
    pad_token_id: int,
    label_pad_id: int,
) -> tuple[np.ndarray, int]:
    """A flattened batch's `cu_seqlens` (see `cu_seqlens_of`) and longest sequence, after
    `pack_flat_tail` has padded `features` to `pad_to` tokens in place (when set)."""
    if pad_to is not None:
        lengths = pack_flat_tail(
            features, lengths, pad_to, pad_token_id=pad_token_id, label_pad_id=label_pad_id
        )
    return cu_seqlens_of(lengths, max_num_seqs), int(lengths.max())


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
    seq_ids: np.ndarray  # the sequence ids, in batch order
    fetched_lengths: np.ndarray  # tokens per sequence as the source holds them (before a cut)


def _first_tokens(
    values: np.ndarray, lengths: np.ndarray, cap: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first `cap` values of every sequence (values back to back, `lengths` each)."""
    kept = OverCap("truncate", cap).cut(lengths)
    if np.array_equal(kept, lengths):
        return values, lengths
    starts = np.cumsum(lengths) - lengths
    position = np.arange(values.shape[0], dtype=np.int64) - np.repeat(starts, lengths)
    return values[position < np.repeat(kept, lengths)], kept


def _lay_out(
    bins: Sequence[Sequence[int]], token_source: Any, max_seq_len: int, *, truncate: bool = False
) -> _Layout:
    """Fetch a batch's tokens and place them, rows left-aligned, with vectorised numpy; with
    `truncate`, a sequence longer than `max_seq_len` keeps its first `max_seq_len` tokens."""
    if len(bins) == 0:
        raise InputError("the batch holds no bins; expected at least one bin of sequence ids")
    num_seqs = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    if not num_seqs.all():
        empty = int(np.flatnonzero(num_seqs == 0)[0])
        raise InputError(f"bin {empty} of the batch holds no sequence ids; expected at least one")
    seq_ids = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64)
    tokens, fetched_lengths = fetch(token_source, seq_ids)
    lengths = fetched_lengths
    if truncate:
        tokens, lengths = _first_tokens(tokens, fetched_lengths, max_seq_len)

    first_seq = np.cumsum(num_seqs) - num_seqs  # index of each bin's first sequence
    row_len = np.add.reduceat(lengths, first_seq)
    over = np.flatnonzero(row_len > max_seq_len)
    if over.size:
        k = int(over[0])
        ids = seq_ids[first_seq[k] : first_seq[k] + num_seqs[k]]
        lens = lengths[first_seq[k] : first_seq[k] + num_seqs[k]]
        raise InputError(
            f"bin {k} of the batch (sequence ids {shown(ids)}, lengths {shown(lens)}) holds "
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
        seq_ids=seq_ids,
        fetched_lengths=fetched_lengths,
    )


def pack_one_bin(
    bin_seq_ids: Sequence[int], raw_dataset: Any, max_seq_len: int, pad_token_id: int
) -> tuple[Any, Any]:
    """One bin as `(tokens [L], sequence_ids [L])` int64 torch tensors, L = `max_seq_len`.

    As in the reference: sequence ids are local to the bin (0, 1, 2, ... in bin order) and the
    padding (`pad_token_id`) reuses the last sequence's id. Causal attention never lets a real
    token see that padding, since it comes last; for anything else pass the builders an
    `attention_mask` (1 on the bin's first sum-of-lengths positions), or use `PackedCollator`,
    whose padding has an id of its own.

    Args:
        bin_seq_ids: the bin, a non-empty sequence of sequence ids.
        raw_dataset: the token source, indexed by those ids (see the module docstring).
        max_seq_len: L, the row length.
        pad_token_id: the token that fills the row after the bin's tokens.

    Returns:
        `(tokens, sequence_ids)`, two int64 torch tensors of shape `[max_seq_len]`.

    Raises:
        InputError: for an empty bin, an id the source lacks, or a bin whose tokens exceed
            `max_seq_len`.
        ConfigError: for a bad `max_seq_len` or `pad_token_id`; its `MissingDependencyError`
            without torch.
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


@dataclass(frozen=True)
class CollateOptions:
    """How a batch is laid out: `PackedCollator`'s options, given once, e.g.
    `PackedDataset(path, seed=0, collate=CollateOptions(pad_token_id=0, format="hf"))`.

    Every field is the `PackedCollator` keyword of that name (see its docstring); the datasets
    take one `CollateOptions` as `collate=` and bind it to their token source and `max_seq_len`
    (`PackedCollator.from_options`). The values are checked when a collator is built from them.

    Args:
        pad_token_id: the token that fills padding.
        label_pad_id: the label of positions that are no target (default -100).
        format: the batch layout: "padded" (the default), "padding_free", "hf", "maxtext" or
            "thd".
        return_loss_weights: add per-sequence normalised `loss_weights` (default False).
        max_num_seqs: fix `cu_seqlens` at this many sequences plus one (default None: not
            fixed).
        truncate: None (the default) keeps the prepared directory's policy (the collator
            truncates what `prepare --over-cap truncate` cut); a bool overrides it.
        pad_to: pad every flattened batch to exactly this many tokens (default None).
        cp_size, cp_rank: context parallelism for format="thd" (defaults 1 and 0).
        length_multiple: with format="thd", pad every sequence to a multiple of this (default
            None: `2 * cp_size`).
    """

    pad_token_id: int
    label_pad_id: int = -100
    format: str = "padded"
    return_loss_weights: bool = False
    max_num_seqs: int | None = None
    truncate: bool | None = None
    pad_to: int | None = None
    cp_size: int = 1
    cp_rank: int = 0
    length_multiple: int | None = None


class PackedCollator:
    """Turns a batch of bins (lists of sequence ids) into model inputs.

    `format="padded"` (torch tensors, `[B, max_seq_len]`, bins left-aligned):
      - `input_ids`: tokens, `pad_token_id` after each row's last sequence;
      - `labels`: see the module docstring (first token of every sequence, tokens with loss mask
        0, and padding -> `label_pad_id`);
      - `position_ids`: 0, 1, 2, ... restarting at every sequence, 0 on padding;
      - `sequence_ids`: 0, 1, 2, ... per sequence within its row; padding gets the next id (the
        row's number of sequences), an id of its own, so the builders in `seqpack_cli.masking`
        never let padding meet a real token even without the mask;
      - `attention_mask`: 1 on real tokens, 0 on padding (a padding mask only: it does not
        separate the sequences of a row; build the bias from `sequence_ids` for that);
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
    `format="hf"` (torch, `[1, total_tokens]`, padding-free): exactly the keys a `transformers`
      model takes, for `model(**batch, use_cache=False)` (eager and sdpa separate the sequences
      by `position_ids`, flash_attention_2 by `cu_seq_lens_*`); the keys and dtypes of
      `DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)`:
      `input_ids`, `labels`, `position_ids` (int64, `[1, T]`), `seq_idx` (int32, `[1, T]`, the
      sequence's index in the batch), `cu_seq_lens_q`, `cu_seq_lens_k` (int32,
      `[num_sequences + 1]`), `max_length_q`, `max_length_k` (ints). No `attention_mask`:
      transformers reads packed sequences from `position_ids` only when the mask is None.
    `format="maxtext"` (numpy int32, `[B, max_seq_len]`, no torch needed): `inputs`, `targets`
      (both the tokens, `pad_token_id` on padding: MaxText shifts and masks targets itself),
      `inputs_position`, `targets_position` (0-based per sequence, 0 on padding),
      `inputs_segmentation`, `targets_segmentation` (1, 2, 3, ... per row, 0 on padding).
    `format="thd"` (torch) for TransformerEngine's `qkv_format="thd"` and context parallelism
      (`seqpack_cli.context_parallel`): the batch's bins back to back as one row, every sequence
      padded to a multiple M of `2 * cp_size` (`length_multiple`, else `2 * cp_size`; 1, i.e.
      no padding, with `cp_size=1`), each padded sequence split into `2 * cp_size` equal chunks
      of which rank `cp_rank` holds chunks `cp_rank` and `2 * cp_size - 1 - cp_rank` (the
      load-balanced head-tail layout). T is the padded row's length; for this rank:
      - `input_ids`, `labels`, `position_ids` (int64, `[1, T / cp_size]`): this rank's places,
        sequence by sequence, head chunk then tail chunk;
      - `labels` are already SHIFTED (a rank's chunks are not contiguous, so the model cannot
        shift): the label at i is the target of the logits at i, i.e. the next token of the
        same sequence, with `label_pad_id` at a sequence's last token, on all padding, and
        where the next token is no target (loss mask 0, `labels_source` says `label_pad_id`).
        The loss is `cross_entropy(logits, labels, ignore_index=label_pad_id)`, NO shift;
        summed over the context-parallel ranks, it is the unsplit batch's;
      - `position_ids`: the place within the whole padded sequence (0, 1, ...; padding goes
        on counting), for RoPE;
      - `cp_indices` (int64, `[T / cp_size]`): where this rank's places sit in the padded row
        (`row[cp_indices]` is this rank's share), to gather keys and values by global place;
      - `cu_seqlens` (real lengths) and `cu_seqlens_padded` (padded spans) of the whole row,
        int32, `[num_sequences + 1]` (TransformerEngine's `cu_seqlens_q`/`_kv` and
        `cu_seqlens_q_padded`/`_kv_padded`); `max_seqlen` (int) the longest padded span.
      `pad_to=N` (divisible by M) ends the row at exactly N places: the last sequence's span
      grows, all of it padding. A batch whose padded row exceeds `B * max_seq_len` (bins packed
      without the multiple) raises `InputError`: repack with `length_multiple=M`.

    Labels: by default each token is its own label. `labels_source` gives per-token labels
    instead (`labels_source[id]` a 1-D integer array as long as the tokens; `label_pad_id`
    values stay untargeted, e.g. a prompt's); `loss_mask_source` gives a per-token 0/1 mask
    (1 = this token is a target, 0 = it gets `label_pad_id`). Pass at most one of the two; both
    are read like the token source (see `seqpack_cli.token_sources`), and a length that differs
    from the tokens' raises `InputError` naming the sequence id. Either way the first token of
    every sequence is never a target.

    `truncate=True` keeps the first `max_seq_len` tokens (and labels) of a longer sequence: the
    training side of `seqpack prepare --over-cap truncate`, whose pools record such a sequence
    with the length `max_seq_len`. Without it, a bin over `max_seq_len` raises `InputError`.

    `max_num_seqs=K` fixes `cu_seqlens` (with "hf": `cu_seq_lens_q`/`_k`) at K + 1 entries (the
    unused tail repeats the total) for `torch.compile(dynamic=False)`; a batch with more than K
    sequences raises `ConfigError`.

    `pad_to=N` (format "hf" or "padding_free") makes every batch exactly N tokens long (e.g.
    `batch_size * max_seq_len`), so `torch.compile` sees one shape: the slack is one trailing
    padding span, a sequence of its own (positions from 0, its own `cu_seq_lens` entry, the next
    `seq_idx`), labelled `label_pad_id` throughout, so losses and gradients are those without
    it (see `pack_flat_tail`). With `max_num_seqs=K` too, `cu_seq_lens_*` are fixed as well
    (the span counts as one of the K sequences). A batch over N tokens raises `ConfigError`.

    `return_loss_weights=True` adds `loss_weights` (float32, shaped like `labels`): a target (a
    token whose label is not `label_pad_id`) gets `1 / m`, where m is the number of targets in its
    sequence (n - 1 for a sequence of n tokens without a loss mask); every other position gets
    0. Weights align with `labels`, so shift them the same way; they sum to 1 over each sequence
    with a target (a one-token sequence predicts nothing and sums to 0). The per-sequence
    normalised loss is `(loss_weights * token_loss).sum() / num_sequences_with_targets` instead
    of the per-token mean. (With "hf", pop it before `model(**batch)`; with "thd" the weights
    are shifted with the labels.)

    Args:
        token_source: sequence id -> tokens (see the module docstring and
            `seqpack_cli.token_sources`).
        max_seq_len: the length of one packed row (a bin's most tokens).
        pad_token_id: the token that fills padding.
        label_pad_id: the label of positions that are no target (default -100).
        format: "padded" (the default), "padding_free", "hf", "maxtext" or "thd" (see above).
        return_loss_weights: add `loss_weights` (see above); default False.
        max_num_seqs: K, to fix `cu_seqlens` at K + 1 entries (see above); default None.
        labels_source: per-token labels, read like the token source (see Labels above);
            default None.
        loss_mask_source: a per-token 0/1 loss mask instead (see Labels above); default None.
        truncate: keep the first `max_seq_len` tokens of a longer sequence (see above);
            default False.
        pad_to: N, the fixed token count of a flattened batch (see above); default None.
        cp_size, cp_rank: the context-parallel size and this rank, for format="thd" (defaults
            1 and 0).
        length_multiple: M, the multiple every sequence is padded to with format="thd"
            (default None: `2 * cp_size`).

    Raises:
        ConfigError: for an unknown format, an option the format does not take, both
            `labels_source` and `loss_mask_source`, or a bad value of any option.
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
        labels_source: Any = None,
        loss_mask_source: Any = None,
        truncate: bool = False,
        pad_to: int | None = None,
        cp_size: int = 1,
        cp_rank: int = 0,
        length_multiple: int | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigError(f"format={format!r}; expected one of {', '.join(FORMATS)}")
        if format == "maxtext" and (return_loss_weights or max_num_seqs is not None):
            raise ConfigError(
                "format='maxtext' has no loss_weights or cu_seqlens (MaxText derives both from "
                "the segmentation); leave return_loss_weights and max_num_seqs unset"
            )
        if labels_source is not None and loss_mask_source is not None:
            raise ConfigError(
                f"both {option('labels_source')} and {option('loss_mask_source')} are set; pass "
                "one: labels (label_pad_id where nothing is predicted) or a 0/1 loss mask"
            )
        if format == "maxtext" and (labels_source is not None or loss_mask_source is not None):
            raise ConfigError(
                f"format='maxtext' takes no {option('labels_source')} or "
                f"{option('loss_mask_source')} (its targets are the tokens, shifted by MaxText); "
                "use format='padded', 'padding_free' or 'hf'"
            )
        # As given (the checks below resolve some), so that `options` builds this collator again.
        self._options = CollateOptions(
            pad_token_id=pad_token_id,
            label_pad_id=label_pad_id,
            format=format,
            return_loss_weights=return_loss_weights,
            max_num_seqs=max_num_seqs,
            truncate=truncate,
            pad_to=pad_to,
            cp_size=cp_size,
            cp_rank=cp_rank,
            length_multiple=length_multiple,
        )
        self.token_source = token_source
        self.labels_source = labels_source
        self.loss_mask_source = loss_mask_source
        self.max_seq_len = check_int("max_seq_len", max_seq_len, minimum=1)
        self.pad_token_id = check_int("pad_token_id", pad_token_id)
        self.label_pad_id = check_int("label_pad_id", label_pad_id)
        self.format = format
        self.return_loss_weights = bool(return_loss_weights)
        self.max_num_seqs = None if max_num_seqs is None else check_max_num_seqs(max_num_seqs)
        self.truncate = bool(truncate)
        self.pad_to = check_pad_to(pad_to, format, self.max_seq_len)
        self.cp_size, self.cp_rank, self.length_multiple = check_cp_options(
            format, cp_size, cp_rank, length_multiple
        )
        if format == "thd" and self.pad_to is not None and self.pad_to % self.length_multiple:
            raise ConfigError(
                f"pad_to={self.pad_to} with format='thd' and sequences padded to multiples of "
                f"{self.length_multiple}: the row must split into whole chunks; pass a pad_to "
                f"divisible by {self.length_multiple}"
            )

    @classmethod
    def from_options(
        cls,
        token_source: Any,
        max_seq_len: int,
        options: CollateOptions,
        *,
        labels_source: Any = None,
        loss_mask_source: Any = None,
        truncate: bool = False,
    ) -> PackedCollator:
        """The collator of `options` over these sources.

        Args:
            token_source: sequence id -> tokens, as for `PackedCollator`.
            max_seq_len: the length of one packed row.
            options: the layout, a `CollateOptions`.
            labels_source, loss_mask_source: as for `PackedCollator` (default None).
            truncate: the policy the sources were prepared with; it stands where
                `options.truncate` is None (default False).

        Returns:
            The `PackedCollator`.

        Raises:
            ConfigError: for `options` that is not a `CollateOptions`, or as `PackedCollator`.
        """
        if not isinstance(options, CollateOptions):
            raise ConfigError(
                f"collate is a {type(options).__name__}; expected a CollateOptions, e.g. "
                "collate=CollateOptions(pad_token_id=0)"
            )
        fields = dataclasses.asdict(options)
        if fields["truncate"] is None:
            fields["truncate"] = truncate
        return cls(
            token_source,
            max_seq_len,
            labels_source=labels_source,
            loss_mask_source=loss_mask_source,
            **fields,
        )

    @property
    def options(self) -> CollateOptions:
        """This collator's options as given, as `CollateOptions` (`truncate` resolved)."""
        return self._options

    def __repr__(self) -> str:
        labels = (
            "labels_source"
            if self.labels_source is not None
            else "loss_mask_source"
            if self.loss_mask_source is not None
            else "tokens"
        )
        return (
            f"PackedCollator(max_seq_len={self.max_seq_len}, pad_token_id={self.pad_token_id}, "
            f"label_pad_id={self.label_pad_id}, format={self.format!r}, labels={labels}, "
            f"return_loss_weights={self.return_loss_weights}, max_num_seqs={self.max_num_seqs}, "
            f"truncate={self.truncate}, pad_to={self.pad_to}{self._cp_repr()})"
        )

    def _cp_repr(self) -> str:
        if self.format != "thd":
            return ""
        return (
            f", cp_size={self.cp_size}, cp_rank={self.cp_rank}, "
            f"length_multiple={self.length_multiple}"
        )

    def __call__(self, bins: Sequence[Sequence[int]]) -> dict[str, Any]:
        """One batch of model inputs.

        Args:
            bins: the batch's bins, each a non-empty sequence of sequence ids (B rows).

        Returns:
            The batch, keyed as the class docstring lists for `format` (torch tensors and ints;
            numpy int32 arrays for "maxtext").

        Raises:
            InputError: for an empty batch or bin, an id a source lacks, labels or a loss mask
                whose length differs from the tokens', or a bin over `max_seq_len` (without
                `truncate`).
            ConfigError: for a batch over `max_num_seqs` sequences or `pad_to` tokens.
        """
        layout = _lay_out(bins, self.token_source, self.max_seq_len, truncate=self.truncate)
        if self.format == "maxtext":
            return self._maxtext(layout)
        torch = require_torch()
        labels, targets = self._labels(layout)
        if self.format == "thd":
            return self._thd(layout, labels, targets)
        features: dict[str, np.ndarray]
        if self.format == "padded":
            features = self._padded(layout, labels)
        else:
            features = {
                "input_ids": layout.tokens[None],
                "labels": labels[None],
                "position_ids": layout.position[None],
            }
            if self.format == "hf":
                features["seq_idx"] = layout.seq_index[None].astype(np.int32)
            else:
                features["sequence_ids"] = layout.seq_index[None]
        if self.return_loss_weights:
            features["loss_weights"] = self._loss_weights(layout, targets)
        cu_seqlens_np, max_seqlen = flat_boundaries(
            features,
            layout.lengths,
            pad_to=self.pad_to,
            max_num_seqs=self.max_num_seqs,
            pad_token_id=self.pad_token_id,
            label_pad_id=self.label_pad_id,
        )
        batch: dict[str, Any] = {k: torch.from_numpy(v) for k, v in features.items()}
        cu_seqlens = torch.from_numpy(cu_seqlens_np)
        if self.format == "hf":
            batch["cu_seq_lens_q"], batch["cu_seq_lens_k"] = cu_seqlens, cu_seqlens.clone()
            batch["max_length_q"] = batch["max_length_k"] = max_seqlen
        else:
            batch["cu_seqlens"], batch["max_seqlen"] = cu_seqlens, max_seqlen
        return batch

    def _thd(self, layout: _Layout, labels: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
        """This context-parallel rank's share of the batch as one THD row (see the class
        docstring and `seqpack_cli.context_parallel`)."""
        torch = require_torch()
        thd = lay_out_thd(
            layout.lengths,
            layout.num_seqs.shape[0],
            max_seq_len=self.max_seq_len,
            multiple=self.length_multiple,
            cp_size=self.cp_size,
            cp_rank=self.cp_rank,
            pad_to=self.pad_to,
        )
        # Pre-shifted: a rank's chunks are not contiguous, so the model cannot shift them.
        per_token: dict[str, tuple[np.ndarray, int, type[np.generic]]] = {
            "input_ids": (layout.tokens, self.pad_token_id, np.int64),
            "labels": (
                shift_labels(labels, layout.position, layout.lengths, self.label_pad_id),
                self.label_pad_id,
                np.int64,
            ),
        }
        if self.return_loss_weights:
            weights = self._loss_weights(layout, targets)[0]
            shifted = shift_labels(weights, layout.position, layout.lengths, 0)
            per_token["loss_weights"] = (shifted, 0, np.float32)
        batch: dict[str, Any] = {}
        for key, (values, fill, dtype) in per_token.items():
            row = np.full(thd.total, fill, dtype=dtype)
            row[thd.row_index] = values
            batch[key] = torch.from_numpy(row[thd.cp_indices][None])
        batch["position_ids"] = torch.from_numpy(thd.row_position[thd.cp_indices][None])
        batch["cp_indices"] = torch.from_numpy(thd.cp_indices)
        batch["cu_seqlens"] = torch.from_numpy(self._fixed(thd.cu_seqlens))
        batch["cu_seqlens_padded"] = torch.from_numpy(self._fixed(thd.cu_seqlens_padded))
        batch["max_seqlen"] = int(np.diff(thd.cu_seqlens_padded).max())
        return batch

    def _fixed(self, cu_seqlens: np.ndarray) -> np.ndarray:
        """`cu_seqlens` with `max_num_seqs + 1` entries when that is set (see `cu_seqlens_of`)."""
        if self.max_num_seqs is None:
            return cu_seqlens
        return cu_seqlens_of(np.diff(cu_seqlens), self.max_num_seqs)

    def _aligned(
        self, source: Any, name: str, layout: _Layout, *, allow_bool: bool = False
    ) -> np.ndarray:
        """`source`'s values for the batch's sequences, checked to match the tokens one to one."""
        values, lengths = fetch(source, layout.seq_ids, name=name, allow_bool=allow_bool)
        differ = np.flatnonzero(lengths != layout.fetched_lengths)
        if differ.size:
            k = int(differ[0])
            seq_id = int(layout.seq_ids[k])
            raise InputError(
                f"{name}[{seq_id}] has {int(lengths[k])} values but token_source[{seq_id}] has "
                f"{int(layout.fetched_lengths[k])} tokens; expected one value per token: build "
                "both from the same tokenisation"
            )
        if self.truncate:
            values, _ = _first_tokens(values, lengths, self.max_seq_len)
        return values

    def _labels(self, layout: _Layout) -> tuple[np.ndarray, np.ndarray]:
        """Per-token labels (`label_pad_id` where nothing is predicted) and which are targets."""
        targets = layout.position > 0  # a sequence's first token is never predicted
        if self.labels_source is not None:
            values = self._aligned(self.labels_source, "labels_source", layout)
            targets &= values != self.label_pad_id
        else:
            values = layout.tokens
            if self.loss_mask_source is not None:
                mask = self._aligned(
                    self.loss_mask_source, "loss_mask_source", layout, allow_bool=True
                )
                bad = np.flatnonzero((mask != 0) & (mask != 1))
                if bad.size:
                    t = int(bad[0])
                    seq_id = int(layout.seq_ids[layout.seq_index[t]])
                    raise InputError(
                        f"loss_mask_source[{seq_id}] holds {int(mask[t])} at position "
                        f"{int(layout.position[t])}; expected 0 (not a target) or 1 (a target)"
                    )
                targets &= mask != 0
        return np.where(targets, values, self.label_pad_id), targets

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

    def _loss_weights(self, layout: _Layout, targets: np.ndarray) -> np.ndarray:
        num_seqs = layout.lengths.shape[0]
        counts = np.bincount(layout.seq_index, weights=targets, minlength=num_seqs)
        counts = counts.astype(np.float32)  # targets per sequence
        per_seq = np.divide(1.0, counts, out=np.zeros_like(counts), where=counts > 0)
        weights = np.where(targets, per_seq[layout.seq_index], np.float32(0))
        weights = weights.astype(np.float32, copy=False)
        if self.format == "padded":
            return self._grid(layout, weights, 0, np.float32)
        return weights[None]
