"""Plain per-item bin packers: the yardsticks for the benchmark and the oracles for the tests.

Each function places one sequence at a time, longest first (ties by index), and returns bins as
lists of indices into `lengths`. They are written to be obviously correct, not fast: no grouping,
no histogram tricks. `max_seqs_per_bin` caps the number of sequences in a bin (None: no cap).

- `ffd`: first-fit decreasing: the lowest-index bin with room (a max segment tree finds it).
- `bfd`: best-fit decreasing: the bin with the least room that fits (then the fewest free
  slots); among bins in the same state, the one that entered that state last.
- `mffd`: Johnson and Garey's modified first-fit decreasing ("A 71/60 theorem for bin packing",
  J. Complexity 1985): large items (> M/2) one per bin; forward, the longest medium (M/3, M/2]
  that fits; backward over the bins without a medium, the shortest small (M/6, M/3] plus the
  longest small that fits beside it, when the two shortest fit together; forward, fill each bin
  with the longest remaining item that fits; FFD for the rest.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence

__all__ = ["bfd", "ffd", "mffd", "templates_of"]


def _order(lengths: Sequence[int]) -> list[int]:
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])


def _put(
    bins: list[list[int]], rooms: list[int], b: int | None, i: int, length: int, max_seq_len: int
) -> int:
    """Put sequence `i` into bin `b`, or into a new bin when `b` is None; returns the bin."""
    if b is None:
        b = len(bins)
        bins.append([])
        rooms.append(max_seq_len)
    bins[b].append(i)
    rooms[b] -= length
    return b


def templates_of(bins: list[list[int]], lengths: Sequence[int]) -> Counter[tuple[int, ...]]:
    """The histogram of bin templates (lengths sorted descending) of a per-item packing."""
    return Counter(tuple(sorted((lengths[i] for i in b), reverse=True)) for b in bins)


def ffd(
    lengths: Sequence[int],
    max_seq_len: int,
    max_seqs_per_bin: int | None = None,
    order: list[int] | None = None,
) -> list[list[int]]:
    """First-fit decreasing (or first fit in the given `order`)."""
    order = _order(lengths) if order is None else order
    size = 1
    while size < max(len(order), 1):
        size *= 2
    tree = [-1] * (2 * size)  # max over leaves of "room, or -1 when the bin has no free slot"
    bins: list[list[int]] = []
    rooms: list[int] = []
    for i in order:
        length = lengths[i]
        b = None
        if tree[1] >= length:
            node = 1
            while node < size:
                node = 2 * node if tree[2 * node] >= length else 2 * node + 1
            b = node - size
        b = _put(bins, rooms, b, i, length, max_seq_len)
        full = max_seqs_per_bin is not None and len(bins[b]) >= max_seqs_per_bin
        node = b + size
        tree[node] = -1 if full else rooms[b]
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return bins


def bfd(
    lengths: Sequence[int], max_seq_len: int, max_seqs_per_bin: int | None = None
) -> list[list[int]]:
    """Best-fit decreasing; bins in the same (room, free slots) state form a stack."""
    capped = max_seqs_per_bin is not None
    states: list[tuple[int, int]] = []  # sorted (room, free slots) states that hold some bin
    stacks: dict[tuple[int, int], list[int]] = {}
    bins: list[list[int]] = []
    rooms: list[int] = []
    for i in _order(lengths):
        length = lengths[i]
        k = bisect.bisect_left(states, (length, 1 if capped else 0))
        b = None
        if k < len(states):
            state = states[k]
            b = stacks[state].pop()
            if not stacks[state]:
                del stacks[state]
                del states[k]
        b = _put(bins, rooms, b, i, length, max_seq_len)
        free = max_seqs_per_bin - len(bins[b]) if max_seqs_per_bin is not None else 0
        if rooms[b] == 0 or (capped and free == 0):
            continue  # this bin can take nothing more
        state = (rooms[b], free)
        if state not in stacks:
            stacks[state] = []
            bisect.insort(states, state)
        stacks[state].append(b)
    return bins


def mffd(
    lengths: Sequence[int], max_seq_len: int, max_seqs_per_bin: int | None = None
) -> list[list[int]]:
    """Modified first-fit decreasing (Johnson and Garey 1985), with an optional sequence cap."""
    m = max_seq_len
    max_slots = max_seqs_per_bin if max_seqs_per_bin is not None else m
    order = _order(lengths)
    pool: dict[int, list[int]] = {}  # length -> indices of the sequences not placed yet
    for i in order:
        if 2 * lengths[i] <= m:
            pool.setdefault(lengths[i], []).append(i)
    bins = [[i] for i in order if 2 * lengths[i] > m]
    rooms = [m - lengths[b[0]] for b in bins]
    has_medium = [False] * len(bins)

    def free(b: int) -> int:
        return max_slots - len(bins[b])

    def available(lo_factor: int, hi_factor: int) -> list[int]:
        # lengths with m / lo_factor < length <= m / hi_factor, ascending
        return sorted(x for x in pool if lo_factor * x > m >= hi_factor * x)

    def place(b: int, length: int, lengths_left: list[int]) -> None:
        bins[b].append(pool[length].pop())
        rooms[b] -= length
        if not pool[length]:
            del pool[length]
            lengths_left.remove(length)

    medium = available(3, 2)
    for b in range(len(bins)):  # forward: the longest medium that fits
        if free(b) < 1 or not medium or medium[0] > rooms[b]:
            continue
        place(b, medium[bisect.bisect_right(medium, rooms[b]) - 1], medium)
        has_medium[b] = True
    small = available(6, 3)
    for b in reversed(range(len(bins))):  # backward: shortest small + longest small that fits
        if has_medium[b] or free(b) < 2 or not small:
            continue
        shortest = small[0]
        second = shortest if len(pool[shortest]) >= 2 else (small[1] if len(small) > 1 else None)
        if second is None or shortest + second > rooms[b]:
            continue
        place(b, shortest, small)
        place(b, small[bisect.bisect_right(small, rooms[b]) - 1], small)
    everything = sorted(pool)
    for b in range(len(bins)):  # forward: the longest item that fits, until none does
        while free(b) > 0 and everything and everything[0] <= rooms[b]:
            place(b, everything[bisect.bisect_right(everything, rooms[b]) - 1], everything)
    placed = {i for b in bins for i in b}
    rest = [i for i in order if i not in placed]
    return bins + ffd(lengths, max_seq_len, max_seqs_per_bin, order=rest)
