"""Peer packers written here: the yardsticks for the benchmark and the oracles for the tests.

The plain per-item packers (`ffd`, `bfd`, `mffd`) place one sequence at a time, longest first
(ties by index), and return bins as lists of indices into `lengths`. They are written to be
obviously correct, not fast: no grouping, no histogram tricks. `max_seqs_per_bin` caps the
number of sequences in a bin (None: no cap).

- `ffd`: first-fit decreasing: the lowest-index bin with room (a max segment tree finds it).
- `bfd`: best-fit decreasing: the bin with the least room that fits (then the fewest free
  slots); among bins in the same state, the one that entered that state last.
- `mffd`: Johnson and Garey's modified first-fit decreasing ("A 71/60 theorem for bin packing",
  J. Complexity 1985): large items (> M/2) one per bin; forward, the longest medium (M/3, M/2]
  that fits; backward over the bins without a medium, the shortest small (M/6, M/3] plus the
  longest small that fits beside it, when the two shortest fit together; forward, fill each bin
  with the longest remaining item that fits; FFD for the rest.

Graphcore's three histogram packers, rewritten from their description in Krell, Kosec, Perez and
Fitzgibbon, "Efficient Sequence Packing without Cross-contamination" (arXiv 2107.02027) and the
packedBERT code that accompanies it (graphcore/examples, tutorials/blogs_code/packedBERT). Each
takes a histogram `{length: count}`, `max_seq_len` and a depth (the most sequences in a pack;
None: no limit) and returns the packing as a Counter of templates (lengths sorted descending):

- `spfhp`: shortest-pack-first: lengths longest first; each goes into the open pack with the
  most room left that fits it (worst fit), a whole group of identical packs at a time; when
  none fits, every sequence of that length still to place opens a pack of its own;
- `lpfhp`: longest-pack-first: the open pack with the least room that fits it (best fit), and
  as many copies of the length as fit in that pack go in together ("distribute");
- `nnlshp`: every way to fill a pack exactly with at most `depth` lengths (a strategy); a
  non-negative least squares fit of strategy counts to the histogram (lengths 1..8 weighted
  0.09), rounded; each sequence still left over gets the two-length strategy it completes. The
  slots that the counts cover beyond the histogram hold padding, so they are left empty here
  (and a pack left with nothing is dropped).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "bfd",
    "ffd",
    "lpfhp",
    "mffd",
    "nnlshp",
    "nnlshp_num_strategies",
    "spfhp",
    "templates_of",
]


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


# Graphcore's histogram packers ------------------------------------------------------------------

Template = tuple[int, ...]


class _OpenPacks:
    """Groups of identical packs that can still take a sequence, keyed by the room they have left.

    Each room holds a stack of `(count, pack)` groups (the group pushed last is taken first, as in
    the published code); `rooms` lists the rooms that hold a group, ascending, so that worst fit
    (the largest room) and best fit (the smallest room that fits) are one look-up each. A group
    that is full (no room left, or `depth` sequences) goes straight to `closed`.
    """

    def __init__(self, max_seq_len: int, depth: int | None) -> None:
        self.max_seq_len = max_seq_len
        self.depth = depth
        self.rooms: list[int] = []
        self.stacks: dict[int, list[tuple[int, Template]]] = {}
        self.closed: Counter[Template] = Counter()

    def add(self, count: int, pack: Template) -> None:
        if count <= 0:
            return
        room = self.max_seq_len - sum(pack)
        if room == 0 or self.free_slots(pack) == 0:
            self.closed[pack] += count
            return
        if room not in self.stacks:
            self.stacks[room] = []
            bisect.insort(self.rooms, room)
        self.stacks[room].append((count, pack))

    def take(self, room: int) -> tuple[int, Template]:
        stack = self.stacks[room]
        group = stack.pop()
        if not stack:
            del self.stacks[room]
            self.rooms.remove(room)
        return group

    def free_slots(self, pack: Template) -> int:
        return self.max_seq_len if self.depth is None else self.depth - len(pack)

    def templates(self) -> Counter[Template]:
        packing = Counter(self.closed)
        for stack in self.stacks.values():
            for count, pack in stack:
                packing[pack] += count
        return packing


def _lengths_longest_first(histogram: Mapping[int, int], max_seq_len: int) -> list[int]:
    for length, count in histogram.items():
        if not 1 <= length <= max_seq_len or count < 0:
            raise ValueError(f"length {length} (count {count}) is outside 1..{max_seq_len}")
    return sorted((length for length, count in histogram.items() if count > 0), reverse=True)


def spfhp(
    histogram: Mapping[int, int], max_seq_len: int, max_seqs_per_pack: int | None = None
) -> Counter[Template]:
    """Shortest-pack-first histogram packing: worst fit decreasing on groups of packs."""
    packs = _OpenPacks(max_seq_len, max_seqs_per_pack)
    for length in _lengths_longest_first(histogram, max_seq_len):
        left = histogram[length]
        while left > 0:
            if not packs.rooms or packs.rooms[-1] < length:  # fits nowhere: one new pack each
                packs.add(left, (length,))
                break
            count, pack = packs.take(packs.rooms[-1])
            moved = min(count, left)
            packs.add(count - moved, pack)
            packs.add(moved, (*pack, length))
            left -= moved
    return packs.templates()


def lpfhp(
    histogram: Mapping[int, int], max_seq_len: int, max_seqs_per_pack: int | None = None
) -> Counter[Template]:
    """Longest-pack-first histogram packing: best fit decreasing, copies of a length together."""
    packs = _OpenPacks(max_seq_len, max_seqs_per_pack)
    for length in _lengths_longest_first(histogram, max_seq_len):
        left = histogram[length]
        while left > 0:
            k = bisect.bisect_left(packs.rooms, length)
            if k == len(packs.rooms):  # fits nowhere: new packs of as many copies as fit
                copies = min(max_seq_len // length, packs.free_slots(()), left)
                packs.add(left // copies, (length,) * copies)
                packs.add(1 if left % copies else 0, (length,) * (left % copies))
                break
            room = packs.rooms[k]
            count, pack = packs.take(room)
            copies = min(room // length, packs.free_slots(pack), left)
            moved = min(count, left // copies)
            packs.add(count - moved, pack)
            packs.add(moved, (*pack, *(length,) * copies))
            left -= moved * copies
    return packs.templates()


def nnlshp_num_strategies(max_seq_len: int, depth: int) -> int:
    """How many strategies `nnlshp` enumerates: partitions of max_seq_len into <= depth parts."""
    # partitions into at most `depth` parts = partitions into parts of size at most `depth`
    ways = [1] + [0] * max_seq_len
    for part in range(1, depth + 1):
        for n in range(part, max_seq_len + 1):
            ways[n] += ways[n - part]
    return ways[max_seq_len]


def _exact_fill_strategies(max_seq_len: int, depth: int) -> list[Template]:
    """Every non-increasing tuple of at most `depth` positive lengths that sums to max_seq_len."""
    strategies: list[Template] = []

    def extend(prefix: Template, room: int, largest: int, slots: int) -> None:
        if room <= largest:
            strategies.append((*prefix, room))
        if slots > 1:
            # the next length leaves a room the remaining slots, each no longer, can still fill
            for length in range(min(room - 1, largest), 0, -1):
                if length * (slots - 1) < room - length:
                    break
                extend((*prefix, length), room - length, length, slots - 1)

    extend((), max_seq_len, max_seq_len, depth)
    return strategies


def nnlshp(
    histogram: Mapping[int, int], max_seq_len: int, max_seqs_per_pack: int
) -> Counter[Template]:
    """Non-negative least squares histogram packing with strategies of <= max_seqs_per_pack."""
    from scipy.optimize import nnls  # scipy for this packer only

    if max_seqs_per_pack < 2:
        raise ValueError("nnlshp needs a depth of at least 2: its left-overs go into pairs")
    _lengths_longest_first(histogram, max_seq_len)  # validates
    strategies = _exact_fill_strategies(max_seq_len, max_seqs_per_pack)
    matrix = np.zeros((max_seq_len, len(strategies)), dtype=np.int64)
    for column, strategy in enumerate(strategies):
        for length in strategy:
            matrix[length - 1, column] += 1
    target = np.zeros(max_seq_len, dtype=np.int64)
    for length, count in histogram.items():
        target[length - 1] = count
    # a residual on the shortest lengths costs little padding, so the fit may neglect them
    weights = np.ones(max_seq_len)
    weights[:8] = 0.09
    solution, _ = nnls(weights[:, None] * matrix, weights * target)
    counts = np.rint(solution).astype(np.int64)
    residual = target - matrix @ counts
    column_of = {strategy: column for column, strategy in enumerate(strategies)}
    for length in (np.flatnonzero(residual > 0) + 1).tolist():
        pair = (length,) if length == max_seq_len else (length, max_seq_len - length)
        counts[column_of[tuple(sorted(pair, reverse=True))]] += residual[length - 1]
    surplus = matrix @ counts - target
    groups = [(int(c), strategies[j]) for j, c in enumerate(counts.tolist()) if c > 0]
    return _without_padding(groups, surplus)


def _without_padding(groups: list[tuple[int, Template]], surplus: np.ndarray) -> Counter[Template]:
    """The packs with `surplus[length - 1]` slots of each length emptied (they are padding)."""
    packing: Counter[Template] = Counter()
    for count, pack in groups:
        pieces = [(count, pack)]
        for length in sorted(set(pack)):
            pieces = [split for piece in pieces for split in _empty_slots(piece, length, surplus)]
        for piece_count, piece in pieces:
            if piece:
                packing[piece] += piece_count
    return packing


def _empty_slots(
    group: tuple[int, Template], length: int, surplus: np.ndarray
) -> list[tuple[int, Template]]:
    """Split `group` so that as many of its `length` slots as `surplus` asks for are empty."""
    count, pack = group
    per_pack = pack.count(length)
    emptied = min(int(surplus[length - 1]), count * per_pack)
    if emptied <= 0:
        return [group]
    surplus[length - 1] -= emptied
    whole, part = divmod(emptied, per_pack)  # `whole` packs lose every copy, one loses `part`
    pieces = [
        (whole, _without(pack, length, per_pack)),
        (1 if part else 0, _without(pack, length, part)),
        (count - whole - (1 if part else 0), pack),
    ]
    return [piece for piece in pieces if piece[0] > 0]


def _without(pack: Template, length: int, times: int) -> Template:
    """`pack` with `times` of its copies of `length` taken out."""
    out = list(pack)
    for _ in range(times):
        out.remove(length)
    return tuple(out)
