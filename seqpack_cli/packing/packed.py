"""A histogram packing as a value: its templates, and the lower bound the packer proved for them.

`pack_length_histogram_batched` returns a `PackedTemplates`: the `Counter` of templates it has
always returned, carrying the `HistogramBound` it computed (the cheap bounds, and the LP bound
where it solved the LP). `PackingStats.from_templates`, the prepared manifest and the reports read
the bound from there (`bound_of_packing`), so the bound of a packing depends on the packing only,
never on what else ran in the process. The bound names the histogram, `max_seq_len` and cap it
was proved for, and is used only for those: a packing edited since, or described under another
cap, gets the cheap bounds of what it holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack_cli.packing.bounds import LowerBound, length_histogram, lower_bounds_of_lengths
from seqpack_cli.packing.groups import BinTemplate

__all__ = ["HistogramBound", "PackedTemplates", "bound_of_packing"]


@dataclass(frozen=True)
class HistogramBound:
    """`bound`, proved for `counts[i]` sequences of `lengths[i]` tokens (lengths ascending,
    distinct, counts > 0) in bins of `max_seq_len` tokens and at most `cap` sequences."""

    lengths: tuple[int, ...]
    counts: tuple[int, ...]
    max_seq_len: int
    cap: int | None
    bound: LowerBound

    @classmethod
    def of_items(
        cls, items: list[tuple[int, int]], max_seq_len: int, cap: int | None, bound: LowerBound
    ) -> HistogramBound:
        """From the packer's validated `items` ((length, count), longest first, counts > 0)."""
        return cls(
            tuple(length for length, _ in reversed(items)),
            tuple(count for _, count in reversed(items)),
            max_seq_len,
            cap,
            bound,
        )

    def applies_to(
        self, lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int | None
    ) -> bool:
        """Whether this is the bound of `counts[i]` sequences of `lengths[i]` tokens (any
        order, lengths may repeat) under `max_seq_len` and `cap`."""
        if (max_seq_len, cap) != (self.max_seq_len, self.cap):
            return False
        distinct, totals = length_histogram(lengths, counts)
        return distinct.tolist() == list(self.lengths) and totals.tolist() == list(self.counts)


class PackedTemplates(Counter[BinTemplate]):
    """The templates of a histogram packing (a `Counter`, as ever) and `bound`, the
    `HistogramBound` its packer proved (None where none was given; a copy or an arithmetic
    result of Counters is a plain packing without one)."""

    def __init__(
        self,
        templates: Mapping[BinTemplate, int] | Iterable[BinTemplate] = (),
        bound: HistogramBound | None = None,
    ) -> None:
        super().__init__(templates)
        self.bound = bound

    def __reduce__(self) -> tuple[Any, ...]:
        # Counter's own drops the attribute: a packing sent to another process keeps its bound
        return (type(self), (dict(self), self.bound))


def bound_of_packing(
    templates: Any, lengths: np.ndarray, counts: np.ndarray, max_seq_len: int, cap: int | None
) -> LowerBound:
    """The lower bound on the bins of `counts[i]` sequences of `lengths[i]` tokens (those that
    `templates` holds): the one its packer proved where `templates` carries it for these
    sequences, `max_seq_len` and `cap`, else the cheap bounds (`lower_bounds_of_lengths`)."""
    carried = getattr(templates, "bound", None)
    if isinstance(carried, HistogramBound) and carried.applies_to(
        lengths, counts, max_seq_len, cap
    ):
        return carried.bound
    return lower_bounds_of_lengths(lengths, counts, max_seq_len, cap)
