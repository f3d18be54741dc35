"""Tiny random-init causal LMs for the transformers tests (test_hf_attention, test_gpu): one
builder for the model kinds both compare packed rows on (nothing is downloaded)."""

from __future__ import annotations

from typing import Any

KINDS = ("llama", "llama-gqa", "mistral-sliding", "qwen2-mixed")


def kind_options(kind: str, window: int | None) -> tuple[str, dict[str, Any]]:
    """The transformers config class name and the options of a model kind."""
    options: dict[str, tuple[str, dict[str, Any]]] = {
        "llama": ("LlamaConfig", {}),
        "llama-gqa": ("LlamaConfig", {"num_key_value_heads": 2}),
        "mistral-sliding": ("MistralConfig", {"num_key_value_heads": 2, "sliding_window": window}),
        # Layer 0 full attention, layer 1 a sliding window (max_window_layers=1).
        "qwen2-mixed": (
            "Qwen2Config",
            {"use_sliding_window": True, "sliding_window": window, "max_window_layers": 1},
        ),
    }
    return options[kind]


def tiny_causal_lm(
    kind: str,
    attn_implementation: str,
    *,
    window: int | None = None,
    vocab_size: int,
    hidden_size: int,
    num_attention_heads: int,
    max_position_embeddings: int,
    **overrides: Any,
) -> Any:
    """A 2-layer model of `kind`, seeded, with large weights (attending across a boundary
    changes the logits visibly) and no cache; `overrides` replace any config option."""
    import torch
    import transformers

    config_name, options = kind_options(kind, window)
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(
        **{
            "vocab_size": vocab_size,
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": 2,
            "num_attention_heads": num_attention_heads,
            "num_key_value_heads": num_attention_heads,
            "max_position_embeddings": max_position_embeddings,
            "initializer_range": 0.2,
            "use_cache": False,
            "attn_implementation": attn_implementation,
            **options,
            **overrides,
        }
    )
    return transformers.AutoModelForCausalLM.from_config(config)
