"""Hugging Face transformers integration: packed rows trained without a dense mask.

- `register_attention()` (`attention`): registers the `"seqpack_varlen"` attention with
  transformers and returns that name, so `attn_implementation="seqpack_varlen"` (in the config,
  `from_pretrained(..., attn_implementation=...)` or `model.set_attn_implementation(...)`) makes
  every attention layer attend within each packed sequence only, from the batch's
  `cu_seq_lens_q` (what `PackedCollator(format="hf")` and transformers'
  `DataCollatorWithFlattening` give). On CUDA it runs PyTorch's FlashAttention varlen kernel;
  elsewhere an exact per-sequence computation.
- `cost_per_token(config)` (`cost`): c of a bin's cost `c*l + l**2` for
  `EpochPlan(balance="cost")`, the linear layers' FLOPs per token over attention's per token pair,
  from a transformers config (12 * hidden_size for a standard transformer).
- `PackedRowsCollator` (`collator`): the `data_collator` that lets `Trainer` (or a
  `DataLoader` with `batch_size=B`) take items of format "hf";
- `names`: the names seqpack registers with transformers (readable without torch).

Importing this package needs neither torch nor transformers; `register_attention()` imports
them and, without them, raises `MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

from seqpack_cli.hf.cost import cost_per_token
from seqpack_cli.hf.names import ATTENTION_NAME

__all__ = ["ATTENTION_NAME", "cost_per_token", "register_attention"]


def register_attention() -> str:
    """Register the `"seqpack_varlen"` attention (and its no-mask builder) with transformers
    and return its name; calling it again changes nothing."""
    # Imported here: the attention module needs torch and transformers, this package does not.
    from seqpack_cli.hf.attention import register

    return register()
