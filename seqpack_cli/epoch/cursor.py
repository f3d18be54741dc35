"""Where an epoch resumes (`EpochCursor`), and the stream of global positions an epoch deals from.

An epoch's bins are visited in a global order: position g of `[0, num_bins)` is canonical bin
`order[g]` (`seqpack_cli.epoch.plan`). A plan deals a *stream* of those positions to its ranks,
step after step. A fresh epoch's stream is `0, 1, ..., num_bins - 1`. A run that stopped after
some steps and resumes, perhaps on another world size, deals the positions it has not consumed
yet: an `EpochCursor`. A strided deal (balance=None) consumes a prefix of the stream, so its cursor
is one integer; a balanced deal consumes whole steps of a window of steps in shuffled order, so a
cursor taken in the middle of a window also lists the window's positions not yet consumed
(`pending`: at most one window plus what an earlier cursor still held).

The stream of a cursor is `pending` followed by `next_position, ..., num_bins - 1`. Every pending
position is below `next_position` and they ascend, so the stream never visits a position twice.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.errors import ConfigError

__all__ = ["EpochCursor", "Stream"]


@dataclasses.dataclass(frozen=True)
class EpochCursor:
    """The part of an epoch not consumed yet: the global positions `pending` (ascending), then
    every position from `next_position` on. `EpochCursor()` is the whole epoch.

    `EpochPlan.cursor_after(steps)` gives the cursor after a number of steps;
    `EpochPlan(..., cursor=cursor)` deals the rest of the epoch, with any world size, rows per
    rank and balance. `to_state()` / `from_state()` convert it to and from plain ints and lists
    (what a checkpoint holds).

    Args:
        pending: global positions not consumed yet below `next_position`, ascending (default:
            none).
        next_position: the first global position of the unconsumed tail (default 0).

    Raises:
        ConfigError: for a position that is not an int >= 0, or pending positions that do not
            ascend below `next_position`.
    """

    pending: tuple[int, ...] = ()
    next_position: int = 0

    def __post_init__(self) -> None:
        pending = tuple(
            check_int("cursor pending position", p, minimum=0, fix=_FIX) for p in self.pending
        )
        next_position = check_int("cursor next_position", self.next_position, minimum=0, fix=_FIX)
        if any(b <= a for a, b in itertools.pairwise(pending)) or (
            pending and pending[-1] >= next_position
        ):
            raise ConfigError(
                "cursor pending positions must ascend and lie below next_position "
                f"({next_position}); {_FIX}"
            )
        object.__setattr__(self, "pending", pending)
        object.__setattr__(self, "next_position", next_position)

    def to_state(self) -> dict[str, Any]:
        """The cursor as plain ints and a list of ints, what a checkpoint holds.

        Returns:
            `{"pending": [int, ...], "next_position": int}`.
        """
        return {"pending": list(self.pending), "next_position": self.next_position}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> EpochCursor:
        """The cursor `to_state()` gave.

        Args:
            state: a mapping with the keys `pending` (a sequence of ints) and `next_position`.

        Returns:
            The `EpochCursor`.

        Raises:
            ConfigError: for a missing key or a value that is not a valid cursor.
        """
        try:
            return cls(tuple(state["pending"]), state["next_position"])
        except (KeyError, TypeError) as error:
            raise ConfigError(
                f"cursor state {state!r} is not what EpochCursor.to_state() returns ({error}); "
                f"{_FIX}"
            ) from None


_FIX = "pass what EpochPlan.cursor_after(...) (or a dataset's state_dict()) returned"


class Stream:
    """The positions a plan deals, in order: `cursor.pending`, then `next_position` .. `num_bins`.

    `len(stream)` counts them; `positions(u)` maps stream indices to global positions, wrapping
    indices past the end around to the start (the padding of a `DistributedSampler`).
    """

    __slots__ = ("_next", "_pending", "num_bins")

    def __init__(self, cursor: EpochCursor, num_bins: int) -> None:
        if cursor.next_position > num_bins:
            raise ConfigError(
                f"cursor next_position is {cursor.next_position} but the epoch has {num_bins} "
                f"bins; {_FIX} for this prepared data"
            )
        self._pending = np.array(cursor.pending, dtype=np.int64)
        self._next = cursor.next_position
        self.num_bins = num_bins

    def __len__(self) -> int:
        return len(self._pending) + self.num_bins - self._next

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def positions(self, u: np.ndarray) -> np.ndarray:
        """The global positions of the stream indices `u` (int64, any value >= 0), in place."""
        size = len(self)
        if size and len(u) and int(u.max()) >= size:
            np.remainder(u, size, out=u)
        if not len(self._pending):
            if self._next:
                u += self._next
            return u
        in_pending = u < len(self._pending)
        tail = ~in_pending
        u[tail] += self._next - len(self._pending)
        u[in_pending] = self._pending[u[in_pending]]
        return u

    def cursor_after(self, consumed: int, unplayed: np.ndarray | None = None) -> EpochCursor:
        """The cursor once the stream indices below `consumed` were dealt, except `unplayed`
        (stream indices below `consumed` still to deal: the rest of a window)."""
        consumed = min(consumed, len(self))
        rest = self._pending[consumed:]
        if unplayed is not None and len(unplayed):
            kept = np.unique(unplayed[unplayed < min(consumed, len(self))])
            rest = np.concatenate([self.positions(kept), rest])
        next_position = self._next + max(0, consumed - len(self._pending))
        return EpochCursor(tuple(rest.tolist()), next_position)
