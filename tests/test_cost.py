"""seqpack_cli.hf.cost_per_token: c of a bin's cost `c*l + l**2`, from a model's config.

c = linear / (2 * H * d): one layer's forward matmul FLOPs per token over half its attention
FLOPs per token pair (see seqpack_cli/hf/cost.py). Checked three ways:
- by hand: veRL's 12 * hidden (24,576 at 2,048) for multi-head attention with a 4x MLP, and the
  hand-counted values of grouped-query, gated, wide-head and expert configs;
- against the real models: torch's FlopCounterMode counts one tiny layer's forward at two lengths,
  F(l) = a*l + b*l**2 (eager attention computes every pair: b = 4*H*d), so c must be 2*a/b —
  for every family whose attributes the module reads;
- as plain dicts and SimpleNamespace objects (no torch, no transformers) giving the same c.
Nothing is downloaded: configs are built in memory.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.errors import ConfigError
from seqpack_cli.hf import cost_per_token

LLAMA_GQA = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "intermediate_size": 5632,
}


def test_mha_with_a_4x_mlp_is_verl_coefficient() -> None:
    # q,k,v,o: 4 h^2, MLP up and down: 8 h^2 -> linear 24 h^2 FLOPs; attention 4h per pair.
    config = {
        "model_type": "gpt_neox",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "intermediate_size": 8192,
    }
    assert cost_per_token(config) == 24576 == 12 * 2048


def test_llama_gated_mlp_of_8_thirds_is_12_hidden() -> None:
    # gate, up, down: 3 * h * 8h/3 = 8 h^2, as a 4x non-gated MLP.
    config = SimpleNamespace(
        model_type="llama", hidden_size=3072, num_attention_heads=24, intermediate_size=8192
    )
    assert cost_per_token(config) == 12 * 3072


def test_grouped_query_and_gated_mlp_by_hand() -> None:
    # head_dim 128; q and o: 2 * 2048 * 2048 = 8,388,608; k and v: 2 * 2048 * 512 = 2,097,152;
    # MLP: 3 * 2048 * 5632 = 34,603,008; linear = 2 * 45,088,768 = 90,177,536 FLOPs per token;
    # half the attention per pair: 2 * 16 * 128 = 4096 -> c = 22,016.
    assert cost_per_token(LLAMA_GQA) == 22016


def test_gemma_heads_wider_than_hidden_by_hand() -> None:
    # H*d = 8 * 256 = 2048 (hidden 1536): q, o 2 * 1536 * 2048 = 6,291,456; one kv head: k, v
    # 2 * 1536 * 256 = 786,432; MLP 3 * 1536 * 6144 = 28,311,552; sum 35,389,440;
    # c = 2 * 35,389,440 / (2 * 2048) = 17,280.
    config = {
        "model_type": "gemma",
        "hidden_size": 1536,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "intermediate_size": 6144,
    }
    assert cost_per_token(config) == 17280


def test_mixture_of_experts_counts_router_and_top_k_by_hand() -> None:
    # Mixtral-like: q, o 2 * 1024^2 = 2,097,152; k, v 2 * 1024 * 256 = 524,288; router
    # 1024 * 8 = 8192; 2 experts of 3 * 1024 * 3584 = 22,020,096; sum 24,649,728;
    # c = 2 * 24,649,728 / (2 * 1024) = 24,072.
    config = {
        "model_type": "mixtral",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 3584,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    assert cost_per_token(config) == 24072
    # DeepSeek-style shared experts: n_shared_experts of the experts' width on every token.
    shared = dict(config, n_shared_experts=1)
    assert cost_per_token(shared) == 24072 + 3 * 3584


def test_gpt2_attribute_names_and_default_mlp() -> None:
    # n_inner=None means 4 * n_embd: 12 * n_embd.
    assert cost_per_token({"n_embd": 768, "n_head": 12, "n_inner": None}) == 12 * 768
    assert cost_per_token(SimpleNamespace(model_type="gpt2", n_embd=1024, n_head=16)) == 12 * 1024


def test_transformers_configs_equal_their_dicts() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**{k: v for k, v in LLAMA_GQA.items() if k != "model_type"})
    assert cost_per_token(config) == cost_per_token(LLAMA_GQA) == 22016
    gpt2 = transformers.GPT2Config(n_embd=2048, n_head=16)
    assert cost_per_token(gpt2) == 24576
    assert cost_per_token(gpt2.to_dict()) == 24576


def test_multimodal_config_uses_its_text_config() -> None:
    text = dict(LLAMA_GQA)
    assert cost_per_token({"model_type": "llava", "text_config": text}) == 22016
    transformers = pytest.importorskip("transformers")
    gemma3 = transformers.Gemma3Config(text_config=transformers.Gemma3TextConfig())
    assert cost_per_token(gemma3) == cost_per_token(gemma3.text_config)


@pytest.mark.parametrize(
    ("config", "missing"),
    [
        ({"num_attention_heads": 16, "intermediate_size": 8192}, "hidden_size"),
        ({"hidden_size": 2048, "intermediate_size": 8192}, "num_attention_heads"),
        ({"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16}, "intermediate"),
        (
            {"hidden_size": 2048, "num_attention_heads": 16, "num_experts_per_tok": 2},
            "moe_intermediate_size",
        ),
    ],
)
def test_missing_attribute_is_one_line_naming_it_and_the_fix(
    config: dict[str, Any], missing: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        cost_per_token(config)
    message = str(caught.value)
    assert "\n" not in message
    assert f"no {missing}" in message
    assert "pass cost_per_token=" in message


@pytest.mark.parametrize(
    ("name", "value"), [("hidden_size", 0), ("hidden_size", 2048.0), ("num_attention_heads", True)]
)
def test_bad_size_is_named_with_its_value(name: str, value: Any) -> None:
    config = dict(LLAMA_GQA, **{name: value})
    with pytest.raises(ConfigError, match=rf"{name} is {value!r}; expected a positive integer"):
        cost_per_token(config)


def test_numpy_integer_sizes_are_accepted() -> None:
    config = {key: np.int64(v) if isinstance(v, int) else v for key, v in LLAMA_GQA.items()}
    assert cost_per_token(config) == 22016


def test_latent_attention_is_refused_with_the_fix() -> None:
    config = dict(LLAMA_GQA, model_type="deepseek_v3", kv_lora_rank=512)
    with pytest.raises(ConfigError, match=r"kv_lora_rank.*pass cost_per_token="):
        cost_per_token(config)


def test_sliding_window_is_ignored_and_said(caplog: pytest.LogCaptureFixture) -> None:
    windowed = dict(LLAMA_GQA, model_type="mistral", sliding_window=4096)
    with caplog.at_level(logging.INFO, logger="seqpack_cli.hf.cost"):
        assert cost_per_token(windowed) == cost_per_token(LLAMA_GQA)
    assert "ignores the sliding window" in caplog.text
    caplog.clear()
    # Qwen2 names a window it does not use (use_sliding_window=False): nothing to say.
    with caplog.at_level(logging.INFO, logger="seqpack_cli.hf.cost"):
        cost_per_token(dict(windowed, use_sliding_window=False))
    assert "sliding window" not in caplog.text


@settings(max_examples=60, deadline=None)
@given(
    heads=st.integers(1, 32),
    head_dim=st.sampled_from([16, 32, 64, 128]),
    mlp_ratio=st.integers(1, 8),
    scale=st.integers(2, 4),
    gated=st.booleans(),
)
def test_c_grows_with_the_width(
    heads: int, head_dim: int, mlp_ratio: int, scale: int, gated: bool
) -> None:
    # Linear FLOPs grow with width^2, attention's with width: widening hidden, head_dim and
    # the MLP by k multiplies c by k. And MHA with a (4x, or 8/3x gated) MLP is 12 * hidden.
    def config(k: int) -> dict[str, Any]:
        hidden = heads * head_dim * k
        return {
            "model_type": "llama" if gated else "gpt_neox",
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "intermediate_size": mlp_ratio * hidden,
        }

    assert cost_per_token(config(scale)) == pytest.approx(scale * cost_per_token(config(1)))
    hidden = heads * head_dim * 3
    standard = config(3) | {"intermediate_size": (8 * hidden) // 3 if gated else 4 * hidden}
    assert cost_per_token(standard) == 12 * hidden


def _measured_c(model_config: Any) -> float:
    """2*a/b of one layer's forward FLOPs F(l) = a*l + b*l**2, counted by torch at l = 16, 32."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    # eager attention computes every pair (b = 4*H*d); eager experts count only routed tokens.
    options: dict[str, str] = {"attn_implementation": "eager"}
    if model_config.model_type.endswith("moe") or model_config.model_type == "mixtral":
        options["experts_implementation"] = "eager"
    model = transformers.AutoModel.from_config(model_config, **options).eval()
    counts = []
    for length in (16, 32):
        ids = torch.arange(length).reshape(1, length) % model_config.vocab_size
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(input_ids=ids)
        counts.append(counter.get_total_flops())
    b = (counts[1] - 2 * counts[0]) / (32 * 32 - 2 * 16 * 16)
    a = (counts[0] - b * 16 * 16) / 16
    return 2 * a / b


_SMALL = {"num_hidden_layers": 1, "vocab_size": 64}
_FAMILIES = {
    "llama_gqa": ("LlamaConfig", {"num_key_value_heads": 2, "intermediate_size": 96}),
    "gemma_wide_heads": (
        "GemmaConfig",
        {"num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 96},
    ),
    "gpt_neox": ("GPTNeoXConfig", {"intermediate_size": 160}),
    "phi": ("PhiConfig", {"intermediate_size": 96}),
    "starcoder2": ("Starcoder2Config", {"num_key_value_heads": 2, "intermediate_size": 96}),
    "opt": ("OPTConfig", {"ffn_dim": 96, "word_embed_proj_dim": 64}),
    "falcon_multi_query": ("FalconConfig", {}),
    "falcon_new_architecture": (
        "FalconConfig",
        {"num_kv_heads": 2, "new_decoder_architecture": True},
    ),
    "mixtral": (
        "MixtralConfig",
        {
            "num_key_value_heads": 2,
            "intermediate_size": 96,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
    ),
    "qwen2_moe_shared": (
        "Qwen2MoeConfig",
        {
            "num_key_value_heads": 2,
            "intermediate_size": 96,
            "moe_intermediate_size": 48,
            "shared_expert_intermediate_size": 80,
            "num_experts": 4,
            "num_experts_per_tok": 2,
        },
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        {
            "num_key_value_heads": 2,
            "head_dim": 16,
            "moe_intermediate_size": 48,
            "num_experts": 4,
            "num_experts_per_tok": 2,
        },
    ),
}


@pytest.mark.parametrize("family", sorted(_FAMILIES))
def test_c_equals_the_flops_torch_counts_in_the_real_layer(family: str) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    class_name, options = _FAMILIES[family]
    model_config = getattr(transformers, class_name)(
        hidden_size=64, num_attention_heads=4, **_SMALL, **options
    )
    assert cost_per_token(model_config) == pytest.approx(_measured_c(model_config), rel=1e-12)


@pytest.mark.parametrize("class_name", ["GPT2Config", "GPTBigCodeConfig"])
def test_c_equals_the_flops_of_gpt2_style_layers(class_name: str) -> None:
    # Conv1D layers, n_inner=None (4 * n_embd); GPT-BigCode with one key/value head.
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    model_config = getattr(transformers, class_name)(n_embd=64, n_head=4, n_layer=1, vocab_size=64)
    assert cost_per_token(model_config) == pytest.approx(_measured_c(model_config), rel=1e-12)
