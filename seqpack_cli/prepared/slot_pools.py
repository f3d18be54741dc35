"""`SlotPools`: the pools of a prepared directory keyed by slot length, for templates packed with a
length multiple or re-packed at load time (`Prepared.repack`).

A slot of length R (a multiple of m) takes every sequence whose length lies in (R - m, R]; with
`truncate`, the slot `max_seq_len` also takes every sequence longer than `max_seq_len` (the
collator keeps its first tokens), and without it those are left out. The pool of R is the
directory's pools of those exact lengths read as one (`ConcatPool`: nothing is copied,
memory-mapped pools stay mapped); a slot of a single exact length is that pool itself.

Pickles as the exact pools (a `PoolMap` pickles as its location) and the options, so a
DataLoader worker re-derives the slots from the same files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from seqpack_cli.epoch.concat_pools import ConcatPool
from seqpack_cli.prepared.multiples import slot_length

__all__ = ["SlotPools", "exact_pools"]


class SlotPools(Mapping[int, Any]):
    """`{slot length: ids}` over `exact` pools (`{length: ids}`, holding `exact_counts`);
    see the module docstring."""

    def __init__(
        self,
        exact: Mapping[int, Any],
        exact_counts: Mapping[int, int],
        max_seq_len: int,
        length_multiple: int,
        truncate: bool,
    ) -> None:
        self.exact = exact
        """The pools by exact length (the directory's), which the slots read."""
        self.exact_counts = {int(length): int(count) for length, count in exact_counts.items()}
        self.max_seq_len = int(max_seq_len)
        self.length_multiple = int(length_multiple)
        self.truncate = bool(truncate)
        parts: dict[int, list[int]] = {}
        for length in sorted(self.exact_counts):
            if length <= self.max_seq_len:
                slot = slot_length(length, self.length_multiple)
            elif self.truncate:
                slot = self.max_seq_len  # a multiple of length_multiple
            else:
                continue
            parts.setdefault(slot, []).append(length)
        self._parts = dict(sorted(parts.items()))
        self._pools: dict[int, Any] = {}

    def exact_lengths(self, slot: int) -> tuple[int, ...]:
        """The exact lengths whose pools make the pool of `slot`, ascending."""
        return tuple(self._parts[slot])

    def __getitem__(self, slot: int) -> Any:
        pool = self._pools.get(slot)
        if pool is None:
            lengths = self._parts[slot]
            if len(lengths) == 1:
                pool = self.exact[lengths[0]]  # the array itself: the epoch's plain fast path
            else:
                pool = ConcatPool([self.exact[length] for length in lengths], lengths)
            self._pools[slot] = pool
        return pool

    def __contains__(self, slot: object) -> bool:
        return slot in self._parts

    def __iter__(self) -> Iterator[int]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            SlotPools,
            (
                self.exact,
                self.exact_counts,
                self.max_seq_len,
                self.length_multiple,
                self.truncate,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"SlotPools({len(self)} slots over {len(self.exact_counts)} lengths, "
            f"max_seq_len={self.max_seq_len}, length_multiple={self.length_multiple}, "
            f"truncate={self.truncate})"
        )


def exact_pools(pools: Mapping[int, Any], counts: Mapping[int, int]) -> tuple[Any, dict[int, int]]:
    """(the pools by exact length, their counts) under `pools`: a `SlotPools`' own, or `pools`
    and `counts` themselves."""
    if isinstance(pools, SlotPools):
        return pools.exact, dict(pools.exact_counts)
    return pools, {int(length): int(count) for length, count in counts.items()}
