"""The names seqpack registers with transformers (no torch or transformers needed to read them)."""

from __future__ import annotations

__all__ = ["ATTENTION_NAME"]

ATTENTION_NAME = "seqpack_varlen"
"""The attention implementation `register_attention()` registers and returns."""
