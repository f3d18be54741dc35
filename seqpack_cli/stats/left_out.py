"""What `seqpack prepare` left out of a prepared directory: the sequences over `max_seq_len` it
dropped or truncated, and their tokens, as counts and as shares of the inputs.

A prepared directory's counts.json holds only what was packed, so these figures come from its
manifest's summary (`num_input_rows`, `num_input_tokens`, `num_dropped`,
`num_tokens_dropped`, `num_truncated`, `num_tokens_truncated`). Parquet inputs need none of
this: a sweep counts the sequences over each candidate from the scan itself
(`seqpack_cli.stats.distribution.CapCost`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LeftOut", "left_out_of_summary"]


@dataclass(frozen=True)
class LeftOut:
    """Sequences (input rows) and tokens prepare dropped or truncated, exact counts."""

    num_input_sequences: int
    num_input_tokens: int
    num_dropped: int
    num_tokens_dropped: int  # all the tokens of the sequences dropped
    num_truncated: int
    num_tokens_truncated: int  # the tokens past max_seq_len of the sequences truncated

    @staticmethod
    def _share(count: int, total: int) -> float:
        return count / total if total else 0.0

    @property
    def share_dropped(self) -> float:
        return self._share(self.num_dropped, self.num_input_sequences)

    @property
    def share_tokens_dropped(self) -> float:
        return self._share(self.num_tokens_dropped, self.num_input_tokens)

    @property
    def share_truncated(self) -> float:
        return self._share(self.num_truncated, self.num_input_sequences)

    @property
    def share_tokens_truncated(self) -> float:
        return self._share(self.num_tokens_truncated, self.num_input_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_input_sequences": self.num_input_sequences,
            "num_input_tokens": self.num_input_tokens,
            "num_dropped": self.num_dropped,
            "share_dropped": self.share_dropped,
            "num_tokens_dropped": self.num_tokens_dropped,
            "share_tokens_dropped": self.share_tokens_dropped,
            "num_truncated": self.num_truncated,
            "share_truncated": self.share_truncated,
            "num_tokens_truncated": self.num_tokens_truncated,
            "share_tokens_truncated": self.share_tokens_truncated,
        }


def left_out_of_summary(summary: Mapping[str, Any]) -> LeftOut:
    """The `LeftOut` of a manifest's summary. A manifest written before the token counts were
    recorded counts what it has (the tokens kept, the sequences dropped) and zero for the rest."""
    num_tokens = int(summary.get("num_tokens", 0))
    tokens_dropped = int(summary.get("num_tokens_dropped", 0))
    tokens_truncated = int(summary.get("num_tokens_truncated", 0))
    dropped = int(summary.get("num_dropped", 0))
    return LeftOut(
        num_input_sequences=int(
            summary.get("num_input_rows", int(summary.get("num_sequences", 0)) + dropped)
        ),
        num_input_tokens=int(
            summary.get("num_input_tokens", num_tokens + tokens_dropped + tokens_truncated)
        ),
        num_dropped=dropped,
        num_tokens_dropped=tokens_dropped,
        num_truncated=int(summary.get("num_truncated", 0)),
        num_tokens_truncated=tokens_truncated,
    )
