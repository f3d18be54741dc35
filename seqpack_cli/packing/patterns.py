"""The pattern heuristic: bins built whole and repeated, for histograms with large counts.

A sequential heuristic for cutting stock: take the longest remaining length, complete its bin as
exactly as possible, then repeat that bin (the pattern) as often as the counts allow. A pattern
is repeated until one of its lengths has fewer copies left than it needs, so the number of
patterns stays close to the number of distinct lengths, whatever the number of sequences. On
realistic length distributions it reaches the lower bound where BFD/FFD leave thousands of bins
of slack; `seqpack_cli.packing.histogram` runs it first.
"""

from __future__ import annotations

import numpy as np

from seqpack_cli.packing.groups import Group

__all__ = ["MAX_PATTERN_SEQ_LEN", "pattern_groups"]

MAX_PATTERN_SEQ_LEN = 1 << 20
"""Above this max_seq_len the heuristic is not run: its tables and bitsets are O(max_seq_len)."""


def pattern_groups(
    items: list[tuple[int, int]], max_seq_len: int, cap: int | None, tries: int = 32
) -> list[Group]:
    """Pack `items` (length, count), lengths descending, pattern by pattern.

    A bin is filled with the longest lengths that fit until its room can be closed exactly by
    one, two or three lengths; among exact closings it prefers long lengths (the largest shorter
    partner), keeping the short lengths for the rooms only they can close. Three-length closings
    try at most `tries` first lengths. Returns groups of finished bins `(None, template, 0)`,
    every template different: a pattern stops repeating when one of its lengths has fewer
    copies left than it needs, so it never comes back.
    """
    m = max_seq_len
    max_slots = cap if cap is not None else m
    counts = [0] * (m + 1)
    for length, count in items:
        counts[length] = count
    # Complements first. Tops come longest first, and a bin with top t' holds, besides t',
    # only lengths <= m - t'. So when a top t > m/2 comes up, every earlier bin (t' > t) used
    # lengths < m - t < t besides its top: the counts of t and m - t are untouched, and the
    # loop below would build (t, m - t), the room closed by the one length equal to it,
    # min(count t, count m - t) times. Those patterns are known now for every such t; they
    # are merged back in order of their tops as the loop runs.
    complements: list[Group] = []
    complement_tops: list[int] = []
    if max_slots >= 2:
        for top, count in items:
            if 2 * top <= m:
                break
            partner = counts[m - top]  # counts[0] == 0: a top of m has none
            if partner:
                num_bins = count if count < partner else partner
                complements.append(((None, (top, m - top), 0), num_bins))
                complement_tops.append(top)
                counts[top] -= num_bins
                counts[m - top] -= num_bins
    complement_tops.append(0)  # a sentinel below every top
    # The lengths still available, three ways, each updated in O(1) when a length runs out:
    # alive[x] == 1 (rfind/find/count give the longest, shortest and number of available
    # lengths in a range, in C), and the bitsets `have` (bit x) and `mirror` (bit m - x), whose
    # windows ANDed give every pair of available lengths that sums to a room.
    alive = bytearray(map(bool, counts))
    flags = np.frombuffer(alive, dtype=np.uint8)
    have = bytearray(np.packbits(flags, bitorder="little").tobytes())
    mirror = bytearray(np.packbits(flags[::-1], bitorder="little").tobytes())
    longest_below = alive.rfind  # longest_below(1, 0, v): the longest available length < v
    from_bytes = int.from_bytes
    shortest = alive.find(1)
    used = [0] * (m + 1)  # copies of each length in the bin being built
    bin_lengths: list[int] = []  # the distinct lengths of that bin, longest first
    groups: list[Group] = []

    def pair(room: int, top: int) -> tuple[int, int] | None:
        # y <= x <= top, x + y == room, largest y first (keeps the short lengths for later)
        low = room - top
        if low < shortest:
            low = shortest  # y is an available length
        half = room >> 1
        if low > half:
            return None
        # The first candidate alone (on dense histograms it usually fits), then the rest of
        # the window: one by one when short, else from the bitsets.
        x = room - half
        if counts[x] > used[x] + (x == half) and counts[half] > used[half]:
            return x, half
        half -= 1
        if half - low < 8:
            for y in range(half, low - 1, -1):
                x = room - y
                if counts[x] > used[x] + (x == y) and counts[y] > used[y]:
                    return x, y
            return None
        start = m - room + low  # mirror bit of length room - y is start + (y - low)
        both = (from_bytes(have[low >> 3 : (half >> 3) + 1], "little") >> (low & 7)) & (
            from_bytes(mirror[start >> 3 : ((start + half - low) >> 3) + 1], "little")
            >> (start & 7)
        )
        both &= (2 << (half - low)) - 1
        while both:
            bit = both.bit_length() - 1
            y = low + bit
            x = room - y
            if counts[x] > used[x] + (x == y) and counts[y] > used[y]:
                return x, y
            both ^= 1 << bit
        return None

    def triple(room: int, x: int) -> tuple[int, int, int] | None:
        # z + a pair, z walked down the available lengths from x over `tries` candidates. The
        # pair sums to room - z with both lengths in [shortest, z], so only z in
        # [room / 3, room - 2 shortest] can succeed: the candidates above are counted as tries
        # without a call, and the walk stops below room / 3 (the same closing as trying them
        # one by one).
        limit = room - 2 * shortest
        tried = 0
        z = x
        if limit < x:
            low = limit + 1 if limit >= 0 else 0
            tried = alive.count(1, low, x + 1)  # the candidates in [low, x], less those that
            for y in bin_lengths:  # are not: lengths used up in this bin, and the room itself
                if low <= y <= x and counts[y] <= used[y] and y != room:
                    tried -= 1
            if low <= room <= x and alive[room]:
                tried -= 1
            z = longest_below(1, 0, low)
        while z > 0 and tried < tries:
            if 3 * z < room:
                return None  # z plus two lengths <= z stays below the room from here on
            if counts[z] > used[z] and z < room:
                tried += 1
                used[z] += 1
                found = pair(room - z, z)
                used[z] -= 1
                if found:
                    return z, found[0], found[1]
            z = longest_below(1, 0, z)
        return None

    merged = 0  # complements[:merged] are in `groups`
    top = longest_below(1)
    while top > 0:
        while complement_tops[merged] >= top:
            groups.append(complements[merged])
            merged += 1
        room = m - top
        used[top] = 1
        bin_lengths.append(top)
        slots = max_slots - 1
        x = top  # the candidate length, <= top
        while room and slots:
            # the longest length <= room still available for this bin
            if x > room:
                x = longest_below(1, 0, room + 1)
            while x > 0 and counts[x] <= used[x]:
                x = longest_below(1, 0, x)
            if x <= 0:
                break
            if room > 3 * x:
                # too much room to close with three lengths <= x: take copies of x first
                copies = (room - 2 * x - 1) // x
                if copies > counts[x] - used[x]:
                    copies = counts[x] - used[x]
                if copies > slots:
                    copies = slots
                if not used[x]:
                    bin_lengths.append(x)
                used[x] += copies
                room -= copies * x
                slots -= copies
                continue
            # try to close the bin exactly with one, two or three lengths <= x
            closing: tuple[int, ...] | None = None
            if counts[room] > used[room] and room <= x:
                closing = (room,)
            elif slots >= 2 and room <= 2 * x:  # else no two lengths <= x add up to the room
                closing = pair(room, x)
            if closing is None and slots >= 3 and room >= 3 * shortest:  # else none closes
                closing = triple(room, x)
            if closing is not None:
                for z in closing:
                    if not used[z]:
                        bin_lengths.append(z)
                    used[z] += 1
                break
            if not used[x]:
                bin_lengths.append(x)
            used[x] += 1
            room -= x
            slots -= 1
        num_bins = counts[top]
        parts: list[int] = []
        for x in bin_lengths:
            if counts[x] // used[x] < num_bins:
                num_bins = counts[x] // used[x]
            parts += [x] * used[x]
        groups.append(((None, tuple(parts), 0), num_bins))
        for x in bin_lengths:
            counts[x] -= num_bins * used[x]
            used[x] = 0
            if not counts[x]:  # x runs out
                alive[x] = 0
                have[x >> 3] ^= 1 << (x & 7)
                mirror[(m - x) >> 3] ^= 1 << ((m - x) & 7)
                if x == shortest:
                    shortest = alive.find(1, x)
        bin_lengths.clear()
        top = longest_below(1, 0, top + 1)
    groups.extend(complements[merged:])
    return groups
