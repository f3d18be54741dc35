"""Packing a length histogram into bin templates.

A histogram `{length: count}` is packed into templates: `Counter{(l1 >= l2 >= ...): bins}` with
every template's sum <= max_seq_len (and, when capped, at most `max_seqs_per_bin` lengths).
"""

from __future__ import annotations

import bisect
import heapq
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from seqpack_cli.lengths import check_max_seqs_per_bin, validate_length_counts

__all__ = [
    "BinTemplate",
    "lower_bound_bins",
    "pack_length_histogram",
    "pack_length_histogram_batched",
    "pack_length_histogram_bfd",
    "pack_length_histogram_ffd",
    "pack_length_histogram_mffd",
]

logger = logging.getLogger(__name__)

BinTemplate = tuple[int, ...]
"""The lengths packed into one bin, sorted descending; their sum is <= max_seq_len."""

LengthCounts = Mapping[int, int] | Iterable[tuple[int, int]]


def pack_length_histogram(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Pack a histogram with strict per-item worst-fit-decreasing (the reference; O(N log B)).

    Sequences are placed one at a time, longest first, each into the open bin with the most room
    (ties: the oldest bin) or into a new bin when none has room. It loops over every sequence, so
    it is for tests and parity checks; `pack_length_histogram_batched` is the engine.
    """
    items = validate_length_counts(length_counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    bins: list[list[int]] = []
    heap: list[tuple[int, int]] = []  # (-room, bin index): the roomiest bin that has a free slot
    for length, count in items:
        for _ in range(count):
            if heap and -heap[0][0] >= length:
                neg_room, index = heapq.heappop(heap)
                room = -neg_room - length
            else:
                index, room = len(bins), max_seq_len - length
                bins.append([])
            bins[index].append(length)
            if cap is None or len(bins[index]) < cap:
                heapq.heappush(heap, (-room, index))
    return Counter(tuple(lengths) for lengths in bins)


# ---- grouped strategies ----------------------------------------------------------------------
# Bins are never handled one by one. A group of identical bins is a (node, num_bins) pair, where
# a node is a persistent chain `(parent_node, length, copies)` (None is the empty bin): appending
# `copies` x `length` to a whole group is one tuple, whatever the number of bins. BFD, FFD and
# MFFD below are *exactly* their per-item versions on the sorted input (same templates), which
# tests/test_histogram.py checks against the per-item packers of benchmarks/reference_packers.py.

Node = Any  # None, (parent: Node, length: int, copies: int), or (None, BinTemplate, 0)
Group = tuple[Node, int]  # (node, num_bins)


def _template(node: Node) -> BinTemplate:
    if node is not None and node[2] == 0:
        return node[1]  # (None, template, 0): a template built whole (the pattern strategy)
    parts: list[int] = []
    while node is not None:
        node, length, copies = node
        parts.extend([length] * copies)
    parts.sort(reverse=True)  # MFFD places lengths out of order; BFD/FFD chains are sorted
    return tuple(parts)


def _templates(groups: Iterable[Group]) -> Counter[BinTemplate]:
    out: Counter[BinTemplate] = Counter()
    for node, num_bins in groups:
        if num_bins:
            out[_template(node)] += num_bins
    return out


def _bfd_groups(items: list[tuple[int, int]], max_seq_len: int, cap: int | None) -> list[Group]:
    """Best-fit decreasing on groups: exactly per-item BFD with one stack per bin state.

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
    keys: list[int] = []  # sorted keys of classes that may still take a sequence
    classes: dict[int, list] = {}  # key -> [num_bins, stack of (node, num_bins), top last]
    done: list[Group] = []  # bins that can take nothing more

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
    for length, count in items:
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


def _start(block: list) -> int:
    return block[0]


def _ffd_groups(items: list[tuple[int, int]], max_seq_len: int, cap: int | None) -> list[Group]:
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
    eligible: list[list] = []
    pending: dict[int, list[list]] = {}  # room -> blocks waiting for a length <= room
    waiting_rooms: list[int] = []  # max-heap (negated) of the rooms in `pending`
    blocks: list[list] = []
    next_index = 0

    def park(block: list) -> None:
        if block[2] >= min_length and block[3] > 0:
            if block[2] not in pending:
                pending[block[2]] = []
                heapq.heappush(waiting_rooms, -block[2])
            pending[block[2]].append(block)

    for length, count in items:
        while waiting_rooms and -waiting_rooms[0] >= length:
            for block in pending.pop(-heapq.heappop(waiting_rooms)):
                bisect.insort(eligible, block, key=_start)
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
                split = [
                    block[0],
                    full,
                    room - copies * length,
                    slots - copies,
                    (node, length, copies),
                ]
                blocks.append(split)
                park(split)
                block[0] += full
                block[1] -= full
            if rest:
                split = [block[0], 1, room - rest * length, slots - rest, (node, length, rest)]
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
            if full:
                block = [
                    next_index,
                    full,
                    max_seq_len - copies * length,
                    max_slots - copies,
                    (None, length, copies),
                ]
                next_index += full
                blocks.append(block)
                park(block)
            if rest:
                block = [
                    next_index,
                    1,
                    max_seq_len - rest * length,
                    max_slots - rest,
                    (None, length, rest),
                ]
                next_index += 1
                blocks.append(block)
                eligible.append(block)
    return [(block[4], block[1]) for block in blocks if block[1]]


def _mffd_groups(items: list[tuple[int, int]], max_seq_len: int, cap: int | None) -> list[Group]:
    """Johnson and Garey's modified first-fit decreasing on groups: exactly the per-item MFFD.

    Large sequences (> M/2) get one bin each, longest first (the A-bins). Then, one step per size
    class: (2) forward through the A-bins, each takes the longest medium (M/3, M/2] that fits;
    (3) backward through the A-bins without a medium, each takes the shortest remaining small
    (M/6, M/3] and then the longest remaining small that fits beside it, when the two shortest
    fit together; (4) forward through all bins, each is filled with the longest remaining
    sequence that fits until none does; (5) what is left is packed by FFD into new bins. Runs of
    identical bins ("pieces" `[num_bins, room, free slots, node, has_medium]`) move together.
    """
    max_slots = cap if cap is not None else max_seq_len
    counts = {length: count for length, count in items if 2 * length <= max_seq_len}
    pieces: list[list[Any]] = [
        [count, max_seq_len - length, max_slots - 1, (None, length, 1), False]
        for length, count in items
        if 2 * length > max_seq_len
    ]

    def drop(lengths: list[int], length: int) -> None:
        if counts[length] == 0:
            del lengths[bisect.bisect_left(lengths, length)]

    # (2) forward: the longest medium that fits
    medium = sorted(length for length in counts if 3 * length > max_seq_len)
    stepped: list[list[Any]] = []
    for num_bins, room, slots, node, _ in pieces:
        while num_bins and slots and medium:
            i = bisect.bisect_right(medium, room) - 1
            if i < 0:
                break
            length = medium[i]
            taken = min(num_bins, counts[length])
            stepped.append([taken, room - length, slots - 1, (node, length, 1), True])
            counts[length] -= taken
            drop(medium, length)
            num_bins -= taken
        if num_bins:
            stepped.append([num_bins, room, slots, node, False])
    # (3) backward through the bins without a medium: the shortest small, then the longest fit
    small = sorted(length for length in counts if 6 * length > max_seq_len >= 3 * length)
    backward: list[list[Any]] = []
    for piece in reversed(stepped):
        num_bins, room, slots, node, has_medium = piece
        while num_bins and not has_medium and slots >= 2 and small:
            shortest = small[0]
            i = bisect.bisect_right(small, room - shortest) - 1
            if i < 0 or (i == 0 and counts[shortest] < 2):
                break  # the two shortest smalls do not fit together: every bin here skips
            partner = small[i]
            if partner == shortest:
                taken = min(num_bins, counts[shortest] // 2)
            else:
                taken = min(num_bins, counts[shortest], counts[partner])
            # per-item goes backward, so the last `taken` bins of the run get the pair
            pair_node = ((node, shortest, 1), partner, 1)
            backward.append([taken, room - shortest - partner, slots - 2, pair_node, False])
            counts[shortest] -= taken
            counts[partner] -= taken
            drop(small, partner)
            if partner != shortest:
                drop(small, shortest)
            num_bins -= taken
        if num_bins:
            backward.append([num_bins, room, slots, node, has_medium])
    backward.reverse()
    # (4) forward through all bins: fill each with the longest remaining sequence that fits
    remaining = sorted(length for length, count in counts.items() if count)
    groups: list[Group] = []
    for num_bins, room, slots, node, _ in backward:
        while num_bins and remaining:
            pattern = _greedy_fill(remaining, counts, room, slots)
            if not pattern:
                break
            taken = min(num_bins, *(counts[length] // copies for length, copies in pattern))
            filled = node
            for length, copies in pattern:
                filled = (filled, length, copies)
                counts[length] -= taken * copies
                drop(remaining, length)
            groups.append((filled, taken))
            num_bins -= taken
        if num_bins:
            groups.append((node, num_bins))
    # (5) the rest: FFD into new bins (nothing left fits in any A-bin after step 4)
    rest = [(length, counts[length]) for length in reversed(remaining)]
    if rest:
        groups.extend(_ffd_groups(rest, max_seq_len, cap))
    return groups


def _pattern_groups(
    items: list[tuple[int, int]], max_seq_len: int, cap: int | None, tries: int = 32
) -> list[Group]:
    """Pattern by pattern (a sequential heuristic for cutting stock with large demands).

    Take the longest remaining length, complete its bin as exactly as possible, then repeat that
    bin (the pattern) as often as the counts allow: one step per pattern, and every pattern
    exhausts a length. A bin is filled with the longest lengths that fit until its room can be
    closed exactly by one, two or three lengths (pairs come from a bitset of the available
    lengths and its mirror image); among exact closings it prefers long lengths (the largest
    shorter partner), keeping the short lengths for the rooms only they can close. On realistic
    distributions this reaches the lower bound where BFD/FFD leave thousands of bins of slack.
    """
    m = max_seq_len
    max_slots = cap if cap is not None else m
    counts = [0] * (m + 1)
    for length, count in items:
        counts[length] = count
    lengths = sorted(length for length, _ in items)  # ascending, count > 0
    have = 0  # bit x: length x is available
    mirror = 0  # bit (m - x): length x is available
    for length in lengths:
        have |= 1 << length
        mirror |= 1 << (m - length)
    used = [0] * (m + 1)  # copies of each length in the bin being built
    groups: list[Group] = []

    def pair(room: int, top: int) -> tuple[int, int] | None:
        # y <= x <= top, x + y == room, largest y first (keeps the short lengths for later)
        low = room - top
        if 2 * low > room:
            return None
        both = (have & (mirror >> (m - room))) & ((2 << (room // 2)) - 1)
        while both:
            y = both.bit_length() - 1
            if y < low:
                return None
            x = room - y
            if counts[x] > used[x] + (x == y) and counts[y] > used[y]:
                return x, y
            both ^= 1 << y
        return None

    while lengths:
        top = lengths[-1]
        used[top] = 1
        touched = [top]
        room = m - top
        slots = max_slots - 1
        i = len(lengths) - 1  # index of the candidate length, <= top
        while room and slots:
            # the largest length <= room still available for this bin
            if lengths[i] > room:
                i = bisect.bisect_right(lengths, room, 0, i) - 1
            while i >= 0 and counts[lengths[i]] <= used[lengths[i]]:
                i -= 1
            if i < 0:
                break
            x = lengths[i]
            if room > 3 * x:
                # too much room to close with three lengths <= x: take copies of x first
                copies = min(counts[x] - used[x], (room - 2 * x - 1) // x, slots)
                used[x] += copies
                touched.append(x)
                room -= copies * x
                slots -= copies
                continue
            # try to close the bin exactly with one, two or three lengths <= x
            closing: tuple[int, ...] | None = None
            if counts[room] > used[room] and room <= x:
                closing = (room,)
            elif slots >= 2:
                closing = pair(room, x)
            if closing is None and slots >= 3:
                j, tried = i, 0
                while j >= 0 and tried < tries:
                    z = lengths[j]
                    j -= 1
                    if counts[z] <= used[z] or z >= room:
                        continue
                    tried += 1
                    used[z] += 1
                    found = pair(room - z, z)
                    used[z] -= 1
                    if found:
                        closing = (z, *found)
                        break
            if closing is not None:
                for z in closing:
                    used[z] += 1
                touched.extend(closing)
                break
            used[x] += 1
            touched.append(x)
            room -= x
            slots -= 1
        touched = sorted(set(touched), reverse=True)
        num_bins = counts[top]
        for x in touched:
            if counts[x] // used[x] < num_bins:
                num_bins = counts[x] // used[x]
        parts: list[int] = []
        for x in touched:
            copies = used[x]
            used[x] = 0
            parts += [x] * copies
            counts[x] -= num_bins * copies
            if not counts[x]:
                del lengths[bisect.bisect_left(lengths, x)]
                have ^= 1 << x
                mirror ^= 1 << (m - x)
        node = (None, tuple(parts), 0)  # a finished template (see _template)
        groups.append((node, num_bins))
    return groups


def _greedy_fill(
    lengths: list[int], counts: dict[int, int], room: int, slots: int
) -> list[tuple[int, int]]:
    """What one bin takes when filled with the longest remaining length that fits, repeatedly."""
    pattern = []
    bound = room
    while slots and bound > 0:
        i = bisect.bisect_right(lengths, bound) - 1
        if i < 0:
            break
        length = lengths[i]
        copies = min(counts[length], room // length, slots)
        pattern.append((length, copies))
        room -= copies * length
        slots -= copies
        bound = min(room, length - 1)  # this length is used up for this bin, or no longer fits
    return pattern


def lower_bound_bins(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> int:
    """A lower bound on the number of bins any packing needs.

    The largest of: ceil(total tokens / max_seq_len); ceil(sequences / max_seqs_per_bin) when
    capped; and Martello and Toth's L2, which counts the sequences longer than M/2 (no two share
    a bin) and adds the volume of the shorter ones that cannot fit beside them.
    """
    items = validate_length_counts(length_counts, max_seq_len)
    return _lower_bound(items, max_seq_len, check_max_seqs_per_bin(max_seqs_per_bin))


def _lower_bound(items: list[tuple[int, int]], max_seq_len: int, cap: int | None) -> int:
    if not items:
        return 0
    lengths = np.array([length for length, _ in reversed(items)], dtype=np.int64)  # ascending
    counts = np.array([count for _, count in reversed(items)], dtype=np.int64)
    tokens = lengths * counts
    num_cum = np.concatenate(([0], np.cumsum(counts)))  # sequences with index < i
    tok_cum = np.concatenate(([0], np.cumsum(tokens)))
    total_tokens = int(tok_cum[-1])
    best = -(-total_tokens // max_seq_len)
    if cap is not None:
        best = max(best, -(-int(num_cum[-1]) // cap))
    # L2(a) for a in {0} and every length <= M/2:
    #   J1: length > M - a;  J2: M/2 < length <= M - a;  J3: a <= length <= M/2
    #   L2(a) = |J1| + |J2| + max(0, ceil((sum J3 - (|J2| M - sum J2)) / M))
    alphas = np.concatenate(([0], lengths[2 * lengths <= max_seq_len]))
    half = int(np.searchsorted(lengths, max_seq_len // 2, side="right"))  # first index > M/2
    j2_end = np.searchsorted(lengths, max_seq_len - alphas, side="right")  # first > M - a
    j3_start = np.searchsorted(lengths, alphas, side="left")
    num_large = int(num_cum[-1] - num_cum[half])
    num_j2 = num_cum[j2_end] - num_cum[half]
    sum_j2 = tok_cum[j2_end] - tok_cum[half]
    sum_j3 = tok_cum[half] - tok_cum[j3_start]
    spill = sum_j3 - (num_j2 * max_seq_len - sum_j2)
    extra = np.maximum(0, -(-spill // max_seq_len))
    best = max(best, num_large + int(extra.max()))
    # at most k sequences longer than M/(k+1) share a bin (k = 2: two of M/3 + 1 already fill it)
    ks = np.arange(1, min(max_seq_len, 4096) + 1)
    longer = num_cum[-1] - num_cum[np.searchsorted(lengths, max_seq_len // (ks + 1), side="right")]
    return max(best, int((-(-longer // ks)).max()))


def _run(
    strategy: Any, length_counts: LengthCounts, max_seq_len: int, max_seqs_per_bin: int | None
) -> Counter[BinTemplate]:
    items = validate_length_counts(length_counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    return _templates(strategy(items, max_seq_len, cap)) if items else Counter()


def pack_length_histogram_bfd(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Best-fit decreasing on the histogram: the same templates as per-item BFD, in O(groups)."""
    return _run(_bfd_groups, length_counts, max_seq_len, max_seqs_per_bin)


def pack_length_histogram_ffd(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """First-fit decreasing on the histogram: the same templates as per-item FFD."""
    return _run(_ffd_groups, length_counts, max_seq_len, max_seqs_per_bin)


def pack_length_histogram_mffd(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Johnson and Garey's modified FFD on the histogram: the same templates as per-item MFFD."""
    return _run(_mffd_groups, length_counts, max_seq_len, max_seqs_per_bin)


_MAX_PATTERN_SEQ_LEN = 1 << 20  # the pattern strategy keeps O(max_seq_len) tables and bitsets

_STRATEGIES = {
    "patterns": _pattern_groups,
    "bfd": _bfd_groups,
    "ffd": _ffd_groups,
    "mffd": _mffd_groups,
}


def pack_length_histogram_batched(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Pack a length histogram into bin templates: the engine; its cost does not grow with N.

    Runs the grouped strategies (the pattern heuristic, then BFD, FFD and MFFD, each of those
    three exactly its per-item version) and keeps the one with the fewest bins (the earliest on
    a tie), stopping as soon as one reaches `lower_bound_bins` (nothing can do better). So the
    result never has more bins than per-item BFD, FFD or MFFD on the same histogram, and is at
    the bound wherever the pattern heuristic gets there (all the realistic benchmark shapes).
    Raises `InputError` for a length outside [1, max_seq_len] and `ConfigError` for a bad
    `max_seq_len` or `max_seqs_per_bin`.
    """
    items = validate_length_counts(length_counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    if not items:
        return Counter()
    bound = _lower_bound(items, max_seq_len, cap)
    best: list[Group] = []
    best_bins = 0
    for name, strategy in _STRATEGIES.items():
        if name == "patterns" and max_seq_len > _MAX_PATTERN_SEQ_LEN:
            continue  # its per-length tables and bitsets are O(max_seq_len)
        groups = strategy(items, max_seq_len, cap)
        num_bins = sum(num for _, num in groups)
        logger.debug("strategy %s: %d bins (lower bound %d)", name, num_bins, bound)
        if not best or num_bins < best_bins:
            best, best_bins = groups, num_bins
        if best_bins == bound:
            break
    return _templates(best)
