"""Grouped BFD and FFD: the classic packers on a histogram, in O(groups) steps.

Each is *exactly* its per-item version on the lengths sorted longest first (the same templates),
which tests/test_histogram.py checks against the per-item packers of
benchmarks/reference_packers.py, but moves whole groups of identical bins (see
`seqpack_cli.packing.groups`) and a length's whole count at a time, so its cost does not grow
with the number of sequences.

Both take `limit`: the bins of the best packing found so far. Bins are only ever opened, never
closed, so a strategy stops and returns None as soon as it has opened `limit` bins: it can no
longer do better. (MFFD, the third classic, is in `seqpack_cli.packing.mffd`.)
"""

from __future__ import annotations

import bisect
import heapq
from operator import itemgetter
from typing import Any

from seqpack_cli.packing.groups import Group, Node

__all__ = ["bfd_groups", "ffd_groups"]

_UNLIMITED = float("inf")
_block_start = itemgetter(0)


def bfd_groups(
    items: list[tuple[int, int]],
    max_seq_len: int,
    cap: int | None,
    limit: float = _UNLIMITED,
) -> list[Group] | None:
    """Best-fit decreasing on groups: exactly per-item BFD, with one stack per bin state.

    Per-item BFD puts each sequence into the open bin with the least room that fits (least room,
    then fewest free slots when capped; among identical states, the bin that entered that state
    last). With identical sequences the chosen bin stays the tightest fit, so a bin with room r
    takes min(r // length, free slots) copies before the next bin is touched: a whole class of
    bins in the same state takes its share in one step, and only the class where the count runs
    out is split. Bins live in classes keyed by `room * F + free_slots` (F = cap + 1; just `room`
    when uncapped), each a stack of groups; cost O(distinct lengths x groups), independent of N.
    """
    capped = cap is not None
    factor = cap + 1 if cap is not None else 1
    min_length = items[-1][0]
    classes: dict[int, list[Any]] = {}  # key -> [num_bins, stack of (node, num_bins), top last]
    done: list[Group] = []  # bins that can take nothing more
    num_opened = 0
    keys: list[int] = []  # sorted keys of classes that may still take a sequence

    def push(key: int, node: Node, num_bins: int) -> None:
        entry = classes.get(key)
        if entry is not None:
            entry[0] += num_bins
            entry[1].append((node, num_bins))
            return
        room, slots = divmod(key, factor) if capped else (key, 1)
        if room < min_length or slots == 0:
            done.append((node, num_bins))
            return
        classes[key] = [num_bins, [(node, num_bins)]]
        bisect.insort(keys, key)

    empty_key = max_seq_len * factor + (cap if cap is not None else 0)
    # The sequences longer than M/2 come first and each opens a bin of its own: every open bin
    # then has room < M/2. One pass, in the order the loop below would push them.
    num_large = 0
    while num_large < len(items) and 2 * items[num_large][0] > max_seq_len:
        length, count = items[num_large]
        push(empty_key - length * factor - (1 if capped else 0), (None, length, 1), count)
        num_opened += count
        num_large += 1
    if num_opened >= limit:
        return None
    for length, count in items[num_large:]:
        lowest = length * factor + (1 if capped else 0)  # room >= length and a free slot
        while count:
            i = bisect.bisect_left(keys, lowest)
            if i == len(keys):
                break
            key = keys[i]
            entry = classes[key]
            if capped:
                room, slots = divmod(key, factor)
                copies = min(room // length, slots)
            else:
                copies = key // length
            shift = copies * length * factor + (copies if capped else 0)
            num_bins, stack = entry
            if num_bins * copies <= count:  # the whole class takes `copies` each
                count -= num_bins * copies
                del keys[i]
                del classes[key]
                # per-item order: the top bin is filled and pushed first
                for node, n in reversed(stack):
                    push(key - shift, (node, length, copies), n)
                continue
            full, rest = divmod(count, copies)
            count = 0
            while full:
                node, n = stack[-1]
                moved = min(n, full)
                if moved == n:
                    stack.pop()
                else:
                    stack[-1] = (node, n - moved)
                push(key - shift, (node, length, copies), moved)
                entry[0] -= moved
                full -= moved
            if rest:
                node, n = stack.pop()
                if n > 1:
                    stack.append((node, n - 1))
                entry[0] -= 1
                if not stack:
                    keys.remove(key)
                    del classes[key]
                push(
                    key - rest * length * factor - (rest if capped else 0), (node, length, rest), 1
                )
        if count:  # open new bins: each takes as many copies as fit
            copies = max_seq_len // length if cap is None else min(max_seq_len // length, cap)
            full, rest = divmod(count, copies)
            num_opened += full + (1 if rest else 0)
            if num_opened >= limit:
                return None
            if full:
                shift = copies * length * factor + (copies if capped else 0)
                push(empty_key - shift, (None, length, copies), full)
            if rest:
                push(
                    empty_key - rest * length * factor - (rest if capped else 0),
                    (None, length, rest),
                    1,
                )
    groups = done
    for _, stack in classes.values():
        groups.extend(stack)
    return groups


def ffd_groups(
    items: list[tuple[int, int]],
    max_seq_len: int,
    cap: int | None,
    limit: float = _UNLIMITED,
) -> list[Group] | None:
    """First-fit decreasing on groups: exactly per-item FFD into new bins.

    Per-item FFD puts each sequence into the lowest-index bin that fits; with identical sequences
    that bin takes min(room // length, free slots) copies before the next one is touched. Blocks
    `[first bin index, num_bins, room, free slots, node]` cover runs of identical consecutive bins;
    the blocks that fit the current length are kept sorted by index (`eligible`), the others wait
    in `pending` under their room until the lengths get that small. A length walks the eligible
    blocks in order, whole blocks at a time, and splits at most one.
    """
    max_slots = cap if cap is not None else max_seq_len  # a bin never holds more than M sequences
    min_length = items[-1][0]
    eligible: list[list[Any]] = []
    pending: dict[int, list[list[Any]]] = {}  # room -> blocks waiting for a length <= room
    waiting_rooms: list[int] = []  # max-heap (negated) of the rooms in `pending`
    blocks: list[list[Any]] = []
    next_index = 0  # the bins opened so far

    def park(block: list[Any]) -> None:
        room = block[2]
        if room >= min_length and block[3] > 0:
            waiting = pending.get(room)
            if waiting is None:
                pending[room] = [block]
                heapq.heappush(waiting_rooms, -room)
            else:
                waiting.append(block)

    # The sequences longer than M/2 come first, one per new bin (as the loop below would do).
    num_large = 0
    while num_large < len(items) and 2 * items[num_large][0] > max_seq_len:
        length, count = items[num_large]
        block = _block(next_index, count, max_seq_len - length, max_slots - 1, (None, length, 1))
        next_index += count
        blocks.append(block)
        if block[2] >= min_length and block[3] > 0:
            pending[block[2]] = [block]  # distinct lengths: distinct rooms
        num_large += 1
    if next_index >= limit:
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
            copies = min(block[2] // length, block[3])
            if block[1] * copies <= count:
                count -= block[1] * copies
                block[2] -= copies * length
                block[3] -= copies
                block[4] = (block[4], length, copies)
                park(block)
                j += 1
                continue
            full, rest = divmod(count, copies)
            count = 0
            _, _, room, slots, node = block
            if full:
                split = _block(
                    block[0], full, room - copies * length, slots - copies, (node, length, copies)
                )
                blocks.append(split)
                park(split)
                block[0] += full
                block[1] -= full
            if rest:
                split = _block(
                    block[0], 1, room - rest * length, slots - rest, (node, length, rest)
                )
                blocks.append(split)
                block[0] += 1
                block[1] -= 1
                if block[1]:
                    eligible.insert(j, split)
                else:
                    eligible[j] = split
        del eligible[:j]
        if count:
            copies = min(max_seq_len // length, max_slots)
            full, rest = divmod(count, copies)
            if next_index + full + (1 if rest else 0) >= limit:
                return None
            if full:
                room = max_seq_len - copies * length
                block = _block(next_index, full, room, max_slots - copies, (None, length, copies))
                next_index += full
                blocks.append(block)
                park(block)
            if rest:
                room = max_seq_len - rest * length
                block = _block(next_index, 1, room, max_slots - rest, (None, length, rest))
                next_index += 1
                blocks.append(block)
                eligible.append(block)
    return [(block[4], block[1]) for block in blocks if block[1]]


def _block(start: int, num_bins: int, room: int, slots: int, node: Node) -> list[Any]:
    """A run of identical consecutive bins for `ffd_groups` (a list: it is updated in place)."""
    return [start, num_bins, room, slots, node]
