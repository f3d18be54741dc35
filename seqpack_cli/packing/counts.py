"""How many bins BFD, FFD and MFFD would use, without building their templates.

The engine needs a classic strategy's templates only when it beats the best packing so far, and
on many histograms none does: these count-only twins of `seqpack_cli.packing.fit` (uncapped only)
track rooms alone, no templates, which makes them about three times faster, and they stop, with
None, as soon as they have opened `limit` bins (bins are never closed, so from there they cannot
do better) or a lower bound shows they will. Each returns exactly the number of bins of its
grouped version when it finishes (tests/test_histogram.py checks this).
"""

from __future__ import annotations

import bisect
import heapq
from operator import itemgetter

from seqpack_cli.packing.bounds import residual_lower_bound
from seqpack_cli.packing.fit import bfd_groups
from seqpack_cli.packing.groups import count_bins
from seqpack_cli.packing.mffd import drop_used_up, greedy_fill, take_small_pair

__all__ = ["count_bfd_bins", "count_ffd_bins", "count_mffd_bins"]

_UNLIMITED = float("inf")
_MAX_FLAGS = 1 << 24  # count_bfd_bins keeps a byte per possible room up to this max_seq_len
_block_start = itemgetter(0)


def count_bfd_bins(items: list[tuple[int, int]], max_seq_len: int, limit: float) -> int | None:
    """The bins of `bfd_groups` (uncapped), or None once it cannot use fewer than `limit`.

    The state is the number of open bins per room (a dict, and a bytearray of flags whose first
    set byte at or after a length is the tightest room that fits it): a class of bins with room
    r takes r // length copies each and moves to room r mod length, as in `bfd_groups`.
    """
    m = max_seq_len
    if m > _MAX_FLAGS:  # a byte per possible room is too much: count the grouped version
        groups = bfd_groups(items, m, None, limit)
        return None if groups is None else count_bins(groups)
    min_length = items[-1][0]
    rooms: dict[int, int] = {}  # room -> open bins with that room (only rooms >= min_length)
    flags = bytearray(m + 1)  # flags[r] == 1 when rooms has r
    find = flags.find
    num_opened = 0

    def add(room: int, num_bins: int) -> None:
        if room >= min_length:
            if room in rooms:
                rooms[room] += num_bins
            else:
                rooms[room] = num_bins
                flags[room] = 1

    num_large = 0  # longer than M/2: one new bin each, room M - length
    while num_large < len(items) and 2 * items[num_large][0] > m:
        length, count = items[num_large]
        add(m - length, count)
        num_opened += count
        num_large += 1
    if num_opened >= limit:
        return None
    for length, count in items[num_large:]:
        while count:
            room = find(1, length)
            if room < 0:
                break
            num_bins = rooms[room]
            copies = room // length
            if num_bins * copies <= count:  # the whole class
                count -= num_bins * copies
                del rooms[room]
                flags[room] = 0
                add(room - copies * length, num_bins)
                continue
            full, rest = divmod(count, copies)
            count = 0
            left = num_bins - full - (1 if rest else 0)
            if left:
                rooms[room] = left
            else:
                del rooms[room]
                flags[room] = 0
            if full:
                add(room - copies * length, full)
            if rest:
                add(room - rest * length, 1)
        if count:  # new bins, each with as many copies as fit
            copies = m // length
            full, rest = divmod(count, copies)
            num_opened += full + (1 if rest else 0)
            if num_opened >= limit:
                return None
            if full:
                add(m - copies * length, full)
            if rest:
                add(m - rest * length, 1)
    return num_opened


def count_ffd_bins(
    items: list[tuple[int, int]], max_seq_len: int, limit: float, num_opened: int = 0
) -> int | None:
    """The bins of `ffd_groups` (uncapped) plus `num_opened`, or None once that reaches `limit`.

    Blocks `[first bin index, num_bins, room]` as in `ffd_groups`, without templates.
    """
    m = max_seq_len
    min_length = items[-1][0]
    eligible: list[list[int]] = []  # blocks that fit the current length, by index
    pending: dict[int, list[list[int]]] = {}  # room -> blocks waiting for a length <= room
    waiting_rooms: list[int] = []  # max-heap (negated) of the rooms in `pending`

    def park(block: list[int]) -> None:
        room = block[2]
        if room >= min_length:
            waiting = pending.get(room)
            if waiting is None:
                pending[room] = [block]
                heapq.heappush(waiting_rooms, -room)
            else:
                waiting.append(block)

    num_large = 0  # longer than M/2: one new bin each
    while num_large < len(items) and 2 * items[num_large][0] > m:
        length, count = items[num_large]
        if m - length >= min_length:
            pending[m - length] = [[num_opened, count, m - length]]
        num_opened += count
        num_large += 1
    if num_opened >= limit:
        return None
    waiting_rooms.extend(-room for room in pending)
    heapq.heapify(waiting_rooms)
    for length, count in items[num_large:]:
        while waiting_rooms and -waiting_rooms[0] >= length:
            for block in pending.pop(-heapq.heappop(waiting_rooms)):
                bisect.insort(eligible, block, key=_block_start)
        j = 0
        while count and j < len(eligible):
            block = eligible[j]
            copies = block[2] // length
            if block[1] * copies <= count:
                count -= block[1] * copies
                block[2] -= copies * length
                park(block)
                j += 1
                continue
            full, rest = divmod(count, copies)
            count = 0
            room = block[2]
            if full:
                park([block[0], full, room - copies * length])
                block[0] += full
                block[1] -= full
            if rest:
                split = [block[0], 1, room - rest * length]
                block[0] += 1
                block[1] -= 1
                if block[1]:
                    eligible.insert(j, split)
                else:
                    eligible[j] = split
        del eligible[:j]
        if count:
            copies = m // length
            full, rest = divmod(count, copies)
            if num_opened + full + (1 if rest else 0) >= limit:
                return None
            if full:
                park([num_opened, full, m - copies * length])
                num_opened += full
            if rest:
                eligible.append([num_opened, 1, m - rest * length])
                num_opened += 1
    return num_opened


def count_mffd_bins(items: list[tuple[int, int]], max_seq_len: int, limit: float) -> int | None:
    """The bins of `mffd_groups` (uncapped), or None once it cannot use fewer than `limit`.

    The steps of `mffd_groups` on runs of identical A-bins `(num_bins, room[, has_medium])`;
    after step 3 a lower bound on the A-bins (each taken whole) plus what is left often shows
    it cannot win, before the costly step 4 (on the uniform distribution, for one).
    """
    m = max_seq_len
    counts = {length: count for length, count in items if 2 * length <= m}
    pieces = [[count, m - length] for length, count in items if 2 * length > m]
    num_a_bins = sum(piece[0] for piece in pieces)
    if num_a_bins >= limit:
        return None

    # (2) forward: the longest medium that fits. The A-bins come by room, smallest first, and
    # the shortest medium only grows: the bins before the first one it fits take none.
    medium = sorted(length for length in counts if 3 * length > m)
    first = bisect.bisect_left([room for _, room in pieces], medium[0]) if medium else len(pieces)
    stepped = [(num_bins, room, False) for num_bins, room in pieces[:first]]
    for num_bins, room in pieces[first:]:
        while num_bins and medium:
            i = bisect.bisect_right(medium, room) - 1
            if i < 0:
                break
            length = medium[i]
            taken = min(num_bins, counts[length])
            stepped.append((taken, room - length, True))
            counts[length] -= taken
            drop_used_up(medium, counts, length)
            num_bins -= taken
        if num_bins:
            stepped.append((num_bins, room, False))
    # (3) backward through the bins without a medium: the shortest small, then the longest fit.
    # Backward, their rooms only shrink and the shortest small only grows: from the first bin
    # with room for no two smalls on, every bin skips.
    small = sorted(length for length in counts if 6 * length > m >= 3 * length)
    backward: list[tuple[int, int]] = []
    for index in range(len(stepped) - 1, -1, -1):
        num_bins, room, has_medium = stepped[index]
        if not has_medium and (not small or room < 2 * small[0]):
            backward.extend((num_bins, room) for num_bins, room, _ in stepped[index::-1])
            break
        while num_bins and not has_medium and small:
            pair = take_small_pair(small, counts, room, num_bins)
            if pair is None:
                break
            shortest, partner, taken = pair
            backward.append((taken, room - shortest - partner))
            num_bins -= taken
        if num_bins:
            backward.append((num_bins, room))
    if limit != _UNLIMITED:
        sizes = [m - room for _, room in backward]  # the A-bins, each as one item
        sizes.extend(counts)
        nums = [num_bins for num_bins, _ in backward]
        nums.extend(counts.values())
        if residual_lower_bound(sizes, nums, m) >= limit:
            return None
    # (4) forward through all bins: fill each with the longest remaining sequence that fits
    backward.reverse()
    remaining = sorted(length for length, count in counts.items() if count)
    for num_bins, room in backward:
        while num_bins and remaining:
            pattern = greedy_fill(remaining, counts, room, m)
            if not pattern:
                break
            taken = min(num_bins, *(counts[length] // copies for length, copies in pattern))
            for length, copies in pattern:
                counts[length] -= taken * copies
                drop_used_up(remaining, counts, length)
            num_bins -= taken
    # (5) the rest: FFD into new bins
    rest = [(length, counts[length]) for length in reversed(remaining)]
    if not rest:
        return num_a_bins
    return count_ffd_bins(rest, m, limit, num_opened=num_a_bins)
