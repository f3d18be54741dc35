"""Attention inputs for packed rows: dense bias, cu_seqlens, position ids, segment ids, block mask.

Every builder takes `sequence_ids`, shaped `[B, L]` (or `[L]`, read as one row), that labels each
token with the packed sequence it belongs to (the local ids `pack_one_bin` emits: 0, 1, 2, ...).
A *segment* is a maximal run of equal ids among a row's real tokens: a new segment starts where
the id changes or a row starts, so ids only need to differ between neighbouring sequences. All
builders agree on these segments; two positions may attend to each other iff they share one.

`attention_mask` (`[B, L]`, 1 = real token, 0 = padding) is optional everywhere. Masked positions
belong to no segment: they are left out of `cu_seqlens` (which indexes the padding-stripped,
row-major token stream FlashAttention varlen reads), get position 0 and segment 0, and never
attend to or from real tokens. The reference pads a row with the *last* sequence's id, so for its
rows pass the mask, or that padding joins the last sequence; `PackedCollator` gives padding an id
of its own instead, so its bias and block mask are right with or without the mask.

Everything is vectorised (no Python loop over rows, sequences or tokens). torch is imported
inside the functions, so importing this module does not import it; without torch a call raises
a `MissingDependencyError` (a `ConfigError`) that says to `pip install 'seqpack-cli[torch]'`.
Integer options are checked by `seqpack_cli.checks.check_int`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from seqpack_cli.checks import check_int
from seqpack_cli.errors import ConfigError, InputError, MissingDependencyError

if TYPE_CHECKING:
    import torch

__all__ = [
    "build_flex_block_mask",
    "build_packing_attention_bias",
    "build_packing_cu_seqlens",
    "build_position_ids",
    "build_segment_ids",
]

logger = logging.getLogger(__name__)


def require_torch() -> Any:
    """Return the torch module, or raise a `MissingDependencyError` that says how to install it."""
    try:
        import torch
    except ImportError as error:
        raise MissingDependencyError(
            "torch is not installed: seqpack's attention builders and collator need it; "
            "install it with pip install 'seqpack-cli[torch]'"
        ) from error
    return torch


def check_max_num_seqs(max_num_seqs: Any) -> int:
    """Validate the `max_num_seqs` option (shared with the collator) and return it as an int.

    Kept here rather than in `seqpack_cli.checks`: what it expects is the fixed length of
    `cu_seqlens`, a masking notion.
    """
    return check_int(
        "max_num_seqs",
        max_num_seqs,
        minimum=1,
        expected="a positive integer (the most sequences one batch may hold, which fixes "
        "cu_seqlens at max_num_seqs + 1 entries) or None",
    )


def too_many_sequences_error(num_seqs: int, max_num_seqs: int) -> ConfigError:
    """The error for a batch that does not fit a fixed-length `cu_seqlens` (shared with collate)."""
    return ConfigError(
        f"the batch holds {num_seqs} sequences but max_num_seqs={max_num_seqs}; raise "
        f"max_num_seqs to at least {num_seqs} or pack fewer sequences per batch "
        "(max_seqs_per_bin, or a smaller batch)"
    )


def _as_rows(
    sequence_ids: Any, attention_mask: Any = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Validate the inputs and return them as `[B, L]` tensors (the mask as bool, or None)."""
    torch = require_torch()
    ids = torch.as_tensor(sequence_ids)
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise InputError(
            f"sequence_ids has dtype {ids.dtype}; expected an integer tensor of per-token "
            "sequence ids: convert it with .long()"
        )
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2:
        raise InputError(
            f"sequence_ids has shape {tuple(ids.shape)}; expected [B, L] or [L]: "
            "pass one row of ids per packed row"
        )
    if attention_mask is None:
        return ids, None
    mask = torch.as_tensor(attention_mask, device=ids.device)
    if mask.dim() == 1:
        mask = mask.unsqueeze(0)
    if mask.shape != ids.shape:
        raise InputError(
            f"attention_mask has shape {tuple(mask.shape)} but sequence_ids has shape "
            f"{tuple(ids.shape)}; expected the same shape (1 = real token, 0 = padding)"
        )
    return ids, mask != 0


def _segment_starts(
    ids: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Locate the segments among the real tokens, in row-major order.

    Returns `(flat_index, starts)`: `flat_index[t]` is the position in `ids.flatten()` of the t-th
    real token, and `starts[t]` says whether a segment starts there (the row's first real token,
    or an id different from the row's previous real token).
    """
    torch = require_torch()
    num_cols = ids.shape[1]
    flat_ids = ids.reshape(-1)
    if mask is None:
        flat_index = torch.arange(flat_ids.numel(), device=ids.device)
    else:
        flat_index = torch.nonzero(mask.reshape(-1)).squeeze(1)
    real_ids = flat_ids[flat_index]
    rows = torch.div(flat_index, num_cols, rounding_mode="floor")
    starts = torch.ones_like(real_ids, dtype=torch.bool)
    starts[1:] = (rows[1:] != rows[:-1]) | (real_ids[1:] != real_ids[:-1])
    return flat_index, starts


def _segment_grid(ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`[B, L]` int64 segment numbers: 1, 2, 3, ... per row, 0 on padding.

    Two positions may attend to each other iff their numbers match, so every builder agrees with
    `cu_seqlens` on where sequences start, and padding (0) never meets a real token, even when it
    reuses a real sequence's id.
    """
    torch = require_torch()
    if mask is None:
        # Fast path: a segment starts at column 0 and wherever the id changes.
        starts = torch.ones(ids.shape, dtype=torch.long, device=ids.device)
        starts[:, 1:] = (ids[:, 1:] != ids[:, :-1]).long()
        return torch.cumsum(starts, dim=1)
    flat_index, real_starts = _segment_starts(ids, mask)
    starts = torch.zeros(ids.numel(), dtype=torch.long, device=ids.device)
    starts[flat_index] = real_starts.long()
    # Every row's first real token is a start, so a running count along the row is 1-based;
    # padding carries its neighbours' count and is then zeroed.
    return torch.cumsum(starts.reshape(ids.shape), dim=1).masked_fill_(~mask, 0)


def build_packing_attention_bias(
    sequence_ids: Any,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    *,
    causal: bool = False,
    attention_mask: Any = None,
) -> torch.Tensor:
    """Dense additive attention bias `[B, 1, L, L]`: 0 where allowed, -inf across sequences.

    Query i may attend to key j iff both lie in the same segment (padding, with `attention_mask`,
    only meets padding), and, with `causal=True`, j <= i. The diagonal is always allowed, so no
    row is all -inf (softmax never yields NaN). Add it to the raw scores before the softmax (or
    pass it as `attn_mask` to `scaled_dot_product_attention`); it broadcasts over heads.

    Memory is B * L * L elements of `dtype` (plus a bool temporary of the same count): for long
    rows prefer `build_packing_cu_seqlens` or `build_flex_block_mask`.

    Args:
        sequence_ids: per-token sequence ids, `[B, L]` or `[L]` (one row), any integer
            tensor or array-like; a segment is a run of equal ids within a row.
        dtype: the bias's dtype, floating (None, the default: torch.float32).
        device: where the bias is built (None, the default: the device of `sequence_ids`).
        causal: also block keys after the query (j > i); default False.
        attention_mask: 1 on real tokens, 0 on padding, shaped like `sequence_ids`; None (the
            default): every position is real.

    Returns:
        The bias, `[B, 1, L, L]` of `dtype` (`B = 1` for a 1-D input).

    Raises:
        InputError: for `sequence_ids` that are not integers or not 1-D/2-D, or an
            `attention_mask` of another shape.
        ConfigError: for a `dtype` that is not floating.
    """
    torch = require_torch()
    dtype = torch.float32 if dtype is None else dtype
    if not dtype.is_floating_point:
        raise ConfigError(
            f"dtype={dtype} cannot hold -inf; expected a floating dtype such as torch.float32 "
            "or torch.bfloat16"
        )
    ids, mask = _as_rows(sequence_ids, attention_mask)
    if device is not None:
        ids = ids.to(device)
        mask = None if mask is None else mask.to(device)
    key = _segment_grid(ids, mask)
    num_rows, num_cols = key.shape
    # One broadcast comparison: blocked[b, 0, i, j] = key[b, i] != key[b, j].
    blocked = key[:, None, :, None] != key[:, None, None, :]
    if causal:
        above = torch.ones(num_cols, num_cols, dtype=torch.bool, device=key.device).triu_(1)
        blocked |= above
    bias = torch.zeros(num_rows, 1, num_cols, num_cols, dtype=dtype, device=key.device)
    return bias.masked_fill_(blocked, float("-inf"))


def build_packing_cu_seqlens(
    sequence_ids: Any,
    attention_mask: Any = None,
    *,
    max_num_seqs: int | None = None,
) -> tuple[torch.Tensor, int]:
    """Cumulative segment boundaries for FlashAttention varlen: `(cu_seqlens int32, max_seqlen)`.

    Segment k covers positions `[cu_seqlens[k], cu_seqlens[k+1])` of the padding-stripped,
    row-major token stream (`x.reshape(-1)[attention_mask.reshape(-1).bool()]`); padding positions
    are left out. `cu_seqlens` starts at 0 and ends at the number of real tokens; `max_seqlen` is
    the longest segment (0 for an empty batch).

    With `max_num_seqs=K` the tensor always has K + 1 entries, the unused tail repeating the total
    (empty segments, which varlen kernels skip), so its shape stays fixed for
    `torch.compile(dynamic=False)`.

    Args:
        sequence_ids: per-token sequence ids, `[B, L]` or `[L]` (one row), any integer
            tensor or array-like; a segment is a run of equal ids within a row.
        attention_mask: 1 on real tokens, 0 on padding, shaped like `sequence_ids`; None (the
            default): every position is real.
        max_num_seqs: K, the fixed number of segments `cu_seqlens` makes room for; None (the
            default): exactly the batch's segments.

    Returns:
        `(cu_seqlens, max_seqlen)`: int32 `[num_segments + 1]` (`[K + 1]` with
        `max_num_seqs`) on the device of `sequence_ids`, and a Python int.

    Raises:
        InputError: for `sequence_ids` that are not integers or not 1-D/2-D, or an
            `attention_mask` of another shape.
        ConfigError: for a bad `max_num_seqs`, or a batch holding more than K segments.
    """
    torch = require_torch()
    ids, mask = _as_rows(sequence_ids, attention_mask)
    _, starts = _segment_starts(ids, mask)
    num_tokens = starts.numel()
    boundaries = torch.nonzero(starts).squeeze(1)
    num_seqs = boundaries.numel()
    total = torch.tensor([num_tokens], device=ids.device)
    if max_num_seqs is not None:
        max_num_seqs = check_max_num_seqs(max_num_seqs)
        if num_seqs > max_num_seqs:
            raise too_many_sequences_error(num_seqs, max_num_seqs)
        total = total.expand(max_num_seqs - num_seqs + 1)
    cu_seqlens = torch.cat([boundaries, total]).to(torch.int32)
    max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if num_tokens else 0
    return cu_seqlens, max_seqlen


def build_position_ids(sequence_ids: Any, attention_mask: Any = None) -> torch.Tensor:
    """Positions that restart at 0 at the start of every segment (int64, same shape as the input).

    This is what Hugging Face's padding-free path (position_ids-based) and MaxText's
    `*_position` features expect. Padding positions (mask 0) get 0; real tokens count only the
    real tokens of their segment.

    Args:
        sequence_ids: per-token sequence ids, `[B, L]` or `[L]` (one row), any integer
            tensor or array-like; a segment is a run of equal ids within a row.
        attention_mask: 1 on real tokens, 0 on padding, shaped like `sequence_ids`; None (the
            default): every position is real.

    Returns:
        The positions, int64, shaped like `sequence_ids`.

    Raises:
        InputError: for `sequence_ids` that are not integers or not 1-D/2-D, or an
            `attention_mask` of another shape.
    """
    torch = require_torch()
    sequence_ids = torch.as_tensor(sequence_ids)  # keep the caller's shape for the result
    ids, mask = _as_rows(sequence_ids, attention_mask)
    flat_index, starts = _segment_starts(ids, mask)
    steps = torch.arange(starts.numel(), device=ids.device)
    # Each token's segment start is the running maximum of the start offsets seen so far.
    segment_start = torch.where(starts, steps, torch.zeros_like(steps))
    if steps.numel():
        segment_start = torch.cummax(segment_start, dim=0).values
    positions = torch.zeros(ids.numel(), dtype=torch.long, device=ids.device)
    positions[flat_index] = steps - segment_start
    return positions.reshape(sequence_ids.shape)


def build_segment_ids(sequence_ids: Any, attention_mask: Any = None) -> torch.Tensor:
    """MaxText / Grain segment ids: 1, 2, 3, ... per segment within each row, 0 on padding.

    Without `attention_mask` every position is real, so padding that carries an id of its own
    is numbered like a sequence.

    Args:
        sequence_ids, attention_mask: as for `build_position_ids` (and with its errors).

    Returns:
        The segment ids, int64, shaped like `sequence_ids`.
    """
    torch = require_torch()
    sequence_ids = torch.as_tensor(sequence_ids)  # keep the caller's shape for the result
    ids, mask = _as_rows(sequence_ids, attention_mask)
    return _segment_grid(ids, mask).reshape(sequence_ids.shape)


def build_flex_block_mask(
    sequence_ids: Any,
    *,
    causal: bool = True,
    attention_mask: Any = None,
    block_size: int = 128,
) -> Any:
    """A FlexAttention `BlockMask` for packed rows (document masking, causal by default).

    Its mask_mod allows query i to see key j iff both lie in the same segment (padding, with
    `attention_mask`, only meets padding) and, with `causal=True`, j <= i: the same rule as
    `build_packing_attention_bias`. The block structure is exactly what
    `create_block_mask(mask_mod, B, None, L, L, BLOCK_SIZE=block_size)` gives, but computed from
    each block's range of segment numbers in O(B * (L / block_size)^2) instead of evaluating the
    mask_mod on all B * L * L pairs.

    Args:
        sequence_ids: per-token sequence ids, `[B, L]` or `[L]` (one row), any integer
            tensor or array-like; a segment is a run of equal ids within a row.
        attention_mask: 1 on real tokens, 0 on padding, shaped like `sequence_ids`; None (the
            default): every position is real.
        causal: also block keys after the query (j > i); default True.
        block_size: FlexAttention's block size (default 128), a positive int.

    Returns:
        A `torch.nn.attention.flex_attention.BlockMask` on the device of `sequence_ids`; pass it
        as `flex_attention(q, k, v, block_mask=...)`.

    Raises:
        InputError: for `sequence_ids` that are not integers or not 1-D/2-D, or an
            `attention_mask` of another shape.
        ConfigError: for a bad `block_size`, or when the installed torch has no
            `torch.nn.attention.flex_attention`.
    """
    torch = require_torch()
    try:
        from torch.nn.attention.flex_attention import BlockMask
    except ImportError as error:
        raise ConfigError(
            f"build_flex_block_mask needs torch.nn.attention.flex_attention, which torch "
            f"{torch.__version__} lacks; upgrade with pip install 'torch>=2.5', or use "
            "build_packing_attention_bias / build_packing_cu_seqlens instead"
        ) from error
    block_size = check_int(
        "block_size", block_size, minimum=1, expected="a positive integer such as 128"
    )
    ids, mask = _as_rows(sequence_ids, attention_mask)
    key = _segment_grid(ids, mask)
    real = torch.ones_like(key, dtype=torch.bool) if mask is None else mask
    num_cols = key.shape[1]

    def document_mask(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
        allowed = key[batch, q_idx] == key[batch, kv_idx]
        if causal:
            allowed = allowed & (q_idx >= kv_idx)
        return allowed

    partial, full = _document_blocks(key, real, causal, block_size)
    num_partial, partial_indices = _ordered_blocks(partial)
    num_full, full_indices = _ordered_blocks(full)
    return BlockMask.from_kv_blocks(
        num_partial,
        partial_indices,
        num_full,
        full_indices,
        BLOCK_SIZE=block_size,
        mask_mod=document_mask,
        seq_lengths=(num_cols, num_cols),
    )


def _document_blocks(
    key: torch.Tensor, real: torch.Tensor, causal: bool, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which (query block, key block) pairs are partly / fully allowed: `[B, 1, nq, nk]` each.

    Along a row, real tokens' segment numbers never decrease and step by at most 1, so a block's
    real numbers fill the integer range [min, max], and two blocks share a segment iff their
    ranges overlap. Padding (number 0) meets padding only. So a pair has an allowed entry iff the
    ranges overlap or both blocks hold padding, and every entry is allowed iff both blocks are
    one and the same segment throughout (or both all padding); causality drops the pairs above
    the diagonal and keeps diagonal blocks partial (unless a block is a single entry). Positions
    past L in the last, ragged block count as masked, as `create_block_mask` pads them, so that
    block is never full.
    """
    torch = require_torch()
    num_rows, num_cols = key.shape
    num_blocks = -(-num_cols // block_size)
    tail = num_blocks * block_size - num_cols

    def blocked(values: Any, fill: int | bool) -> Any:
        # torch.cat, not F.pad: F.pad's fill goes through a float and would wrap int64 max.
        filler = values.new_full((num_rows, tail), fill)
        return torch.cat([values, filler], dim=1).view(num_rows, num_blocks, block_size)

    is_real = blocked(real, False)
    is_padding = blocked(~real, False)
    largest = torch.iinfo(key.dtype).max
    low = blocked(key.masked_fill(~real, largest), largest).amin(-1)  # largest: no real token
    high = blocked(key.masked_fill(~real, -1), -1).amax(-1)  # -1: no real token
    one_segment = is_real.all(-1) & (low == high)
    all_padding = is_padding.all(-1)
    has_padding = is_padding.any(-1)

    def pairs(q_side: Any, k_side: Any) -> Any:
        return q_side[:, :, None] & k_side[:, None, :]

    overlap = (low[:, :, None] <= high[:, None, :]) & (low[:, None, :] <= high[:, :, None])
    any_allowed = overlap | pairs(has_padding, has_padding)
    all_allowed = (pairs(one_segment, one_segment) & (low[:, :, None] == low[:, None, :])) | pairs(
        all_padding, all_padding
    )
    if causal:
        block = torch.arange(num_blocks, device=key.device)
        any_allowed &= block[:, None] >= block[None, :]
        # A diagonal block is only full when it is a single entry (block_size 1).
        all_allowed &= block[:, None] >= block[None, :] + (block_size > 1)
    return (any_allowed & ~all_allowed).unsqueeze(1), all_allowed.unsqueeze(1)


def _ordered_blocks(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(count, indices)` per query block, selected key blocks first: BlockMask's kv layout."""
    torch = require_torch()
    dense = blocks.to(torch.int32)
    indices = torch.argsort(dense, dim=-1, descending=True, stable=True)
    return dense.sum(-1, dtype=torch.int32), indices.to(torch.int32)
