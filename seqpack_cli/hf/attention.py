"""The `"seqpack_varlen"` attention for transformers: each packed sequence attends to itself only.

transformers calls an attention function with query `[B, H, T, D]`, key and value
`[B, Hkv, T, D]` and the batch's keyword arguments, and expects `[B, T, H, D]` back. This one
never reads a mask: the sequence boundaries are the batch's `cu_seq_lens_q` (what
`PackedCollator(format="hf")` and `DataCollatorWithFlattening` give, over the B×T tokens read as
one stream), else where `position_ids` restart, else one sequence per row. Its mask builder
(registered under the same name) builds nothing, so the dense `total × total` mask that sdpa and
eager need for a packed row is never made.

- CUDA: one call to PyTorch's FlashAttention varlen kernel (`torch.nn.attention.varlen`), causal,
  with the module's `scaling`, grouped-query heads and sliding windows; no host sync when the
  batch carries `cu_seq_lens_q` and an int `max_length_q`.
- Elsewhere (CPU, MPS): the same attention per sequence with `scaled_dot_product_attention`,
  exact and slower, so the same code and tests run anywhere.

What it cannot honour (attention dropout, a logit soft-cap, attention sinks, a non-causal
module, a 2-D mask with padding, a mask of any other kind, a KV cache while decoding) is refused
in one line naming the option and the fix: a silent fallback would attend across sequences.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import math
from collections.abc import Callable
from typing import Any

from seqpack_cli.errors import ConfigError, InputError, MissingDependencyError
from seqpack_cli.hf.names import ATTENTION_NAME

try:
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
except ModuleNotFoundError as error:
    if (error.name or "").partition(".")[0] not in ("torch", "transformers"):
        raise
    missing = MissingDependencyError(
        f"seqpack_cli.hf needs {error.name}, which is not installed: pip install 'seqpack-cli[hf]'"
    )
    missing.name = error.name  # what is missing, as ModuleNotFoundError says it
    raise missing from None

__all__ = ["register", "seqpack_varlen_attention", "seqpack_varlen_mask"]

logger = logging.getLogger(__name__)

# The fix every refusal of a mask points to: a batch that carries its boundaries.
_PACKED_BATCH = (
    'pack the batch with PackedCollator(format="hf") (cu_seq_lens_q and position_ids, no '
    "attention_mask) or transformers' DataCollatorWithFlattening"
)


# What FlashAttention (varlen_attn on CUDA) computes in.
_FLASH_DTYPES = (torch.float16, torch.bfloat16)


def register() -> str:
    """Register the attention and its mask builder under `ATTENTION_NAME`; return the name.

    Registering again replaces the entries with the same functions, so repeated calls are safe.
    """
    AttentionInterface.register(ATTENTION_NAME, seqpack_varlen_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, seqpack_varlen_mask)
    logger.debug("registered the %r attention with transformers", ATTENTION_NAME)
    return ATTENTION_NAME


def seqpack_varlen_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable[..., Any] | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> None:
    """The mask builder transformers calls for this implementation: it builds no mask.

    A 2-D `attention_mask` of ones says nothing the boundaries do not, so it is dropped; one with
    padding (zeros) is refused, since the attention would attend to the padded tokens.
    """
    if attention_mask is not None and attention_mask.ndim == 2 and not bool(attention_mask.all()):
        num_padded = int((~attention_mask.bool()).sum())
        raise ConfigError(
            f"attention_mask has padding ({num_padded} zeros in a "
            f"{list(attention_mask.shape)} mask), which attn_implementation="
            f'"{ATTENTION_NAME}" never reads, so padded tokens would be attended to: '
            f"{_PACKED_BATCH}"
        )
    return None


def seqpack_varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each packed sequence; `[B, T, H, D]` and no weights."""
    _refuse_what_cannot_be_honoured(
        module, query, key, attention_mask, dropout, softcap, is_causal, s_aux
    )
    if sliding_window is None:
        # Some models (Qwen2) keep the window on the layer; Mistral only passes the argument.
        sliding_window = getattr(module, "sliding_window", None)
    cu_seq_lens, max_length = _sequence_boundaries(query, kwargs)
    if query.is_cuda:
        if query.dtype not in _FLASH_DTYPES:
            raise ConfigError(
                f'attn_implementation="{ATTENTION_NAME}" runs FlashAttention on CUDA, which takes '
                f"bfloat16 or float16, and the attention inputs are {query.dtype}: load the model "
                "with dtype=torch.bfloat16, or run it under torch.autocast"
            )
        output = _varlen_on_cuda(
            query, key, value, cu_seq_lens, max_length, scaling, sliding_window
        )
    else:
        output = _per_sequence(query, key, value, cu_seq_lens, scaling, sliding_window)
    return output, None


def _refuse_what_cannot_be_honoured(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    softcap: float | None,
    is_causal: bool | None,
    s_aux: torch.Tensor | None,
) -> None:
    name = f'attn_implementation="{ATTENTION_NAME}"'
    if attention_mask is not None:
        # Only a mask built outside transformers' mask functions (e.g. a 4-D one) gets here.
        raise ConfigError(
            f"{name} got a {attention_mask.ndim}-D attention_mask of shape "
            f"{list(attention_mask.shape)}, which it never reads: {_PACKED_BATCH}"
        )
    if dropout > 0:
        raise ConfigError(
            f"{name} cannot apply attention dropout (attention_dropout={dropout} in training "
            "mode): load the model with attention_dropout=0.0"
        )
    if softcap is not None:
        raise ConfigError(
            f"{name} cannot apply an attention logit soft-cap (softcap={softcap}, the config's "
            'attn_logit_softcapping): use attn_implementation="flash_attention_2" or "eager"'
        )
    if s_aux is not None:
        raise ConfigError(
            f"{name} cannot apply attention sinks (s_aux, the model's learned sinks): use "
            'attn_implementation="flash_attention_3" or "eager"'
        )
    if not (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
        raise ConfigError(
            f"{name} is causal only, and {type(module).__name__} attends both ways "
            '(is_causal=False): use attn_implementation="sdpa" for this model'
        )
    if query.shape[2] != key.shape[2]:
        raise ConfigError(
            f"{name} is for training and packed forward passes: {query.shape[2]} query tokens "
            f"against {key.shape[2]} keys means a KV cache (generation); switch with "
            'model.set_attn_implementation("sdpa") before generating'
        )


def _sequence_boundaries(query: torch.Tensor, kwargs: dict[str, Any]) -> tuple[torch.Tensor, int]:
    """`cu_seq_lens` over the B×T tokens read as one stream, and the longest sequence."""
    batch_size, _, length, _ = query.shape
    total = batch_size * length
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens is not None:
        if cu_seq_lens.ndim != 1 or cu_seq_lens.shape[0] < 2:
            raise InputError(
                f"cu_seq_lens_q has shape {list(cu_seq_lens.shape)}, expected [num_sequences + 1] "
                f"cumulative lengths ending at {total}: {_PACKED_BATCH}"
            )
        max_length = kwargs.get("max_length_q")
        if max_length is None:
            max_length = cu_seq_lens.diff().max()
        # An int from the collator costs nothing; a tensor costs one host sync per layer.
        return cu_seq_lens.to(device=query.device, dtype=torch.int32), int(max_length)
    position_ids = kwargs.get("position_ids")
    if position_ids is None:
        # An unpacked batch: each row is one sequence.
        cu_seq_lens = torch.arange(0, total + 1, length, device=query.device, dtype=torch.int32)
        return cu_seq_lens, length
    # A sequence starts wherever the position does not follow the previous one (the rule of
    # transformers' packed-sequence detection; a restart at 0 is what flash_attention_2 reads),
    # and at every row's first token: no sequence spans two rows.
    positions = position_ids.to(query.device).expand(batch_size, length)
    starts = torch.ones_like(positions, dtype=torch.bool)
    starts[:, 1:] = positions[:, 1:] != positions[:, :-1] + 1
    first_tokens = starts.reshape(-1).nonzero().reshape(-1).to(torch.int32)
    cu_seq_lens = torch.cat([first_tokens, first_tokens.new_tensor([total])])
    return cu_seq_lens, int(cu_seq_lens.diff().max())


def _varlen_on_cuda(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    max_length: int,
    scaling: float | None,
    sliding_window: int | None,
) -> torch.Tensor:
    varlen_attn, parameters = _varlen_kernel()
    batch_size, num_heads, length, head_dim = query.shape
    num_kv_heads = key.shape[1]
    # [B, H, T, D] -> [B·T, H, D]: varlen_attn takes the tokens of every row as one stream.
    q, k, v = (
        x.transpose(1, 2).reshape(batch_size * length, -1, head_dim) for x in (query, key, value)
    )
    options: dict[str, Any] = {}
    if "window_size" in parameters:
        # transformers' window of W: a query sees itself and the W - 1 tokens before it
        # (sliding_window_overlay: kv_idx > q_idx - W); varlen_attn's (left, right) counts
        # the tokens on each side besides the query, and (-1, 0) is plain causal.
        options["window_size"] = (-1 if sliding_window is None else sliding_window - 1, 0)
    else:  # torch 2.10: varlen_attn(..., is_causal=) and no windows
        if sliding_window is not None:
            raise ConfigError(
                f"sliding_window={sliding_window} needs varlen_attn's window_size, which "
                f"torch {torch.__version__} lacks: pip install -U 'torch>=2.11'"
            )
        options["is_causal"] = True
    if "scale" in parameters:
        options["scale"] = scaling
    elif scaling is not None:
        # Without a scale argument the kernel uses 1/sqrt(D): fold the module's scaling into q.
        q = q * (scaling * math.sqrt(head_dim))
    if num_kv_heads != num_heads:
        if "enable_gqa" in parameters:
            options["enable_gqa"] = True
        else:  # query head h reads key/value head h // (H / Hkv), as transformers' repeat_kv
            k, v = (x.repeat_interleave(num_heads // num_kv_heads, dim=1) for x in (k, v))
    output = varlen_attn(q, k, v, cu_seq_lens, cu_seq_lens, max_length, max_length, **options)
    return output.view(batch_size, length, num_heads, head_dim)


@functools.cache
def _varlen_kernel() -> tuple[Callable[..., Any], frozenset[str]]:
    """`varlen_attn` and the names of its parameters (they changed between torch versions)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        raise ConfigError(
            f'attn_implementation="{ATTENTION_NAME}" needs torch.nn.attention.varlen, which '
            f"torch {torch.__version__} lacks: pip install -U 'torch>=2.11'"
        ) from None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


def _per_sequence(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    scaling: float | None,
    sliding_window: int | None,
) -> torch.Tensor:
    """The same attention one sequence at a time (any device): exact, and slow for many."""
    batch_size, num_heads, length, _ = query.shape
    total = batch_size * length
    bounds = cu_seq_lens.tolist()
    if bounds[0] != 0 or bounds[-1] != total or any(e < s for s, e in itertools.pairwise(bounds)):
        raise InputError(
            f"cu_seq_lens_q {[*bounds[:4], '...'] if len(bounds) > 4 else bounds} is not "
            f"non-decreasing from 0 to the batch's {total} tokens: {_PACKED_BATCH}"
        )
    # [B, H, T, D] -> [1, H, B·T, D]: the rows as one stream of tokens, heads kept apart.
    q, k, v = (
        x.transpose(0, 1).reshape(1, x.shape[1], total, x.shape[3]) for x in (query, key, value)
    )
    spans = []
    for start, end in itertools.pairwise(bounds):
        if end == start:
            continue  # an empty entry (cu_seq_lens padded to a fixed size)
        band = _sliding_window_mask(end - start, sliding_window, query.device)
        spans.append(
            torch.nn.functional.scaled_dot_product_attention(
                q[:, :, start:end],
                k[:, :, start:end],
                v[:, :, start:end],
                attn_mask=band,
                is_causal=band is None,
                scale=scaling,
                enable_gqa=key.shape[1] != num_heads,
            )
        )
    output = torch.cat(spans, dim=2)  # [1, H, B·T, Dv]
    return output.reshape(num_heads, batch_size, length, -1).permute(1, 2, 0, 3).contiguous()


def _sliding_window_mask(
    length: int, sliding_window: int | None, device: torch.device
) -> torch.Tensor | None:
    """Causal band of a window of W (query i sees i - W + 1 .. i), or None where the window
    covers the whole sequence (plain causal)."""
    if sliding_window is None or sliding_window >= length:
        return None
    index = torch.arange(length, device=device)
    distance = index[:, None] - index[None, :]
    return (distance >= 0) & (distance < sliding_window)
