"""The cost coefficient of balancing ranks: linear-layer work per token over attention's per pair.

`EpochPlan(balance="cost", cost_per_token=c)` weighs a bin by the sum over its sequences of
`c*l + l**2`. For one decoder layer, forward matmul FLOPs only (the backward is about twice both
terms, so their ratio holds), a sequence of length `l` costs

    linear * l  +  attention * l * (l + 1) / 2

- `linear`, per token: 2 FLOPs per multiply-add of the q, k, v and o projections
  (`hidden * H*d + 2 * hidden * K*d + H*d * hidden`, H heads and K key/value heads of size d) and
  of the MLP (`3 * hidden * intermediate` gated, `2 * hidden * intermediate` not; a mixture of
  experts counts the router, its top-k experts and its shared experts);
- `attention`, per token pair: QK^T and PV, `2 * H*d` multiply-adds, `4 * H*d` FLOPs; a causal
  layer computes the `l * (l + 1) / 2` pairs (i, j <= i).

Dropping the diagonal's `l` (it adds 1 to c, next to thousands) the cost is
`(attention / 2) * (c*l + l**2)` with

    c = linear / (attention / 2) = linear / (2 * H * d)

For multi-head attention with a 4x non-gated MLP, linear = 24 * hidden**2 and c = 12 * hidden
(24,576 at hidden 2,048: veRL's coefficient); Llama's gated 8/3x MLP gives the same.
Left out: norms, softmax, rotary embeddings, the embedding and the LM head (once per model, not
per layer), and sliding windows: a layer attending within `w` tokens costs less than `l**2` for
`l > w`, so c over-estimates long sequences of such models (Mistral, Gemma 2/3's local layers).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from typing import Any

from seqpack_cli.errors import ConfigError

__all__ = ["cost_per_token"]

logger = logging.getLogger(__name__)

# Families whose MLP is up -> activation -> down (2 matrices); any other is counted gated
# (gate and up -> down, 3 matrices), as Llama, Mistral, Qwen2, Gemma and their mixtures are.
_NON_GATED = frozenset(
    {
        "bert",
        "bloom",
        "codegen",
        "falcon",
        "gpt2",
        "gpt_bigcode",
        "gpt_neo",
        "gpt_neox",
        "gpt_neox_japanese",
        "gptj",
        "mpt",
        "opt",
        "phi",
        "starcoder2",
    }
)
# Families whose MLP is 4 x hidden when the config names no width (GPT-2's n_inner=None).
_FOUR_X_MLP = frozenset({"bloom", "codegen", "falcon", "gpt2", "gpt_bigcode", "gpt_neo", "gptj"})

_HIDDEN = ("hidden_size", "n_embd", "d_model")
_HEADS = ("num_attention_heads", "n_head", "num_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")
_INTERMEDIATE = ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")

_FIX = "pass cost_per_token=... yourself (12 * hidden_size for a standard transformer)"


def cost_per_token(config: Any) -> float:
    """c of a bin's cost `c*l + l**2`, from a transformers `PretrainedConfig` (or a dict or any
    object with its attributes): `linear / (2 * H * d)`, the linear layers' forward FLOPs per
    token of one layer over half its attention FLOPs per token pair (see the module docstring).

    12 * hidden_size for multi-head attention with a 4x MLP (24,576 at hidden 2,048); grouped
    query attention and gated or expert MLPs are counted as the config declares them. Needs
    neither torch nor transformers. A config without the sizes it needs raises `ConfigError`
    naming the attribute.
    """
    config = _text_config(config)
    model_type = str(_get(config, "model_type") or "")
    if _get(config, "kv_lora_rank") is not None:
        raise ConfigError(
            f"config of model_type {model_type!r} uses multi-head latent attention "
            f"(kv_lora_rank), which cost_per_token does not model; {_FIX}"
        )
    hidden = _size(config, _HIDDEN)
    heads = _size(config, _HEADS)
    head_dim = _size(config, ("head_dim",), default=hidden // heads)
    kv_heads = _kv_heads(config, heads)

    attention_width = heads * head_dim
    projections = 2 * hidden * attention_width + 2 * hidden * kv_heads * head_dim
    # GPT-2's attribute names (n_embd) without a model_type: GPT-2's non-gated MLP.
    gpt2_names = _get(config, "n_embd") is not None
    matrices = 2 if model_type in _NON_GATED or gpt2_names else 3
    linear = 2 * (projections + _mlp_multiply_adds(config, model_type, hidden, matrices))
    c = linear / (2 * attention_width)
    if _get(config, "sliding_window") and _get(config, "use_sliding_window") is not False:
        logger.info(
            "cost_per_token ignores the sliding window of %s (%s tokens): sequences longer than "
            "the window are weighed as if they attended to every earlier token",
            model_type or "this config",
            _get(config, "sliding_window"),
        )
    logger.debug("cost_per_token(%s) = %g", model_type or "config", c)
    return c


def _mlp_multiply_adds(config: Any, model_type: str, hidden: int, matrices: int) -> int:
    """The MLP's multiply-adds per token: dense, or the router, top-k and shared experts."""
    top_k = _get(config, "num_experts_per_tok")
    if not top_k:
        return matrices * hidden * _intermediate(config, model_type, hidden)
    expert_width = _size(config, ("moe_intermediate_size", *_INTERMEDIATE))
    # Qwen2-MoE: one shared expert of this width, scaled by a gate (hidden -> 1).
    shared = _get(config, "shared_expert_intermediate_size") or 0
    shared_gate = 1 if shared else 0
    shared += (_get(config, "n_shared_experts") or 0) * expert_width  # DeepSeek: n of the experts'
    _, num_experts = _first(config, _EXPERTS)
    routed = _size(config, ("num_experts_per_tok",))
    router = hidden * ((num_experts or 0) + shared_gate)
    return router + matrices * hidden * (routed * expert_width + int(shared))


def _intermediate(config: Any, model_type: str, hidden: int) -> int:
    _, width = _first(config, _INTERMEDIATE)
    if width is None and (model_type in _FOUR_X_MLP or _get(config, "n_embd") is not None):
        return 4 * hidden  # GPT-2's convention: n_inner=None means 4 * n_embd
    return _size(config, _INTERMEDIATE)


def _kv_heads(config: Any, heads: int) -> int:
    # Falcon's and GPT-BigCode's multi_query: one key/value head (Falcon's new_decoder_architecture
    # uses num_kv_heads instead).
    if _get(config, "multi_query") is True and not _get(config, "new_decoder_architecture"):
        return 1
    return _size(config, _KV_HEADS, default=heads)


def _text_config(config: Any) -> Any:
    """The language model's config of a multimodal one (Gemma 3, LLaVA: `text_config`)."""
    get_text_config = getattr(config, "get_text_config", None)
    if callable(get_text_config):
        return get_text_config()
    text = _get(config, "text_config")
    if text is not None and _first(config, _HIDDEN)[1] is None:
        return text
    return config


def _get(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def _first(config: Any, names: tuple[str, ...]) -> tuple[str, Any]:
    """The first of `names` the config sets (not None) and its value; (names[0], None) if none."""
    for name in names:
        value = _get(config, name)
        if value is not None:
            return name, value
    return names[0], None


def _size(config: Any, names: tuple[str, ...], default: int | None = None) -> int:
    """A positive integer size under the first of `names` the config sets, else `default`."""
    name, value = _first(config, names)
    if value is None:
        if default is not None:
            return default
        also = f" (nor {', '.join(names[1:])})" if len(names) > 1 else ""
        raise ConfigError(
            f"config has no {name}{also}: cost_per_token needs it; set it in the config or {_FIX}"
        )
    try:
        size = operator.index(value)  # int or numpy integer, not a float or a bool
    except TypeError:
        size = 0
    if isinstance(value, bool) or size < 1:
        raise ConfigError(
            f"config's {name} is {value!r}; expected a positive integer: fix the config or {_FIX}"
        )
    return size
