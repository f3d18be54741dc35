"""The pattern heuristic: bins built whole and repeated, for histograms with large counts.

A sequential heuristic for cutting stock: take the longest remaining length, complete its bin as
exactly as possible, then repeat that bin (the pattern) as often as the counts allow. A pattern
is repeated until one of its lengths has fewer copies left than it needs, so the number of
patterns stays close to the number of distinct lengths, whatever the number of sequences. On
realistic length distributions it reaches the lower bound where BFD/FFD leave thousands of bins
of slack; `seqpack_cli.packing.histogram` runs it first.

The steps: `_complement_patterns` builds the bins `(top, M - top)` known before the main loop;
`PatternPacker.run` takes the tops longest first, `_fill_bin` completes the bin of a top (with
`_closing`: one length, `_pair` or `_triple`), and `_repeat_bin` repeats it and updates the
tables of available lengths.
"""

from __future__ import annotations

import numpy as np

from seqpack_cli.packing.groups import Group

__all__ = ["MAX_PATTERN_SEQ_LEN", "PatternPacker", "pattern_groups"]

MAX_PATTERN_SEQ_LEN = 1 << 20
"""Above this max_seq_len the heuristic is not run: its tables and bitsets are O(max_seq_len)."""

_SCAN_PAIRS_BELOW = 8  # `_pair` tries a window of fewer candidates one by one, not by bitsets


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
    max_slots = cap if cap is not None else max_seq_len
    counts = [0] * (max_seq_len + 1)
    for length, count in items:
        counts[length] = count
    complements = _complement_patterns(items, counts, max_seq_len, max_slots)
    return PatternPacker(counts, max_seq_len, max_slots, tries).run(complements)


def _complement_patterns(
    items: list[tuple[int, int]], counts: list[int], max_seq_len: int, max_slots: int
) -> list[Group]:
    """The bins `(t, M - t)` of every top t > M/2, taken from `counts`; tops descending.

    Tops come longest first, and a bin with top t' holds, besides t', only lengths <= M - t'.
    So when a top t > M/2 comes up, every earlier bin (t' > t) used lengths < M - t < t besides
    its top: the counts of t and M - t are untouched, and the main loop would build (t, M - t),
    the room closed by the one length equal to it, min(count t, count M - t) times. Those
    patterns are known now for every such t; `PatternPacker.run` merges them back in order of
    their tops.
    """
    complements: list[Group] = []
    if max_slots < 2:
        return complements
    for top, count in items:
        if 2 * top <= max_seq_len:
            break
        partner = counts[max_seq_len - top]  # counts[0] == 0: a top of M has none
        if partner:
            num_bins = count if count < partner else partner
            complements.append(((None, (top, max_seq_len - top), 0), num_bins))
            counts[top] -= num_bins
            counts[max_seq_len - top] -= num_bins
    return complements


class PatternPacker:
    """The state of the main loop: the counts left, the bin being built, the available lengths.

    The lengths still available are kept three ways, each updated in O(1) when a length runs
    out: `alive[x] == 1` (rfind/find/count give the longest, shortest and number of available
    lengths in a range, in C), and the bitsets `have` (bit x) and `mirror` (bit M - x), whose
    windows ANDed give every pair of available lengths that sums to a room. The bin being built
    is `used[x]` (copies of each length) and `bin_lengths` (its distinct lengths, in the order
    they were taken: its template, longest first).
    """

    __slots__ = (
        "alive",
        "bin_lengths",
        "counts",
        "have",
        "longest_below",
        "m",
        "max_slots",
        "mirror",
        "shortest",
        "tries",
        "used",
    )

    def __init__(self, counts: list[int], max_seq_len: int, max_slots: int, tries: int) -> None:
        self.m = max_seq_len
        self.max_slots = max_slots
        self.tries = tries
        self.counts = counts
        self.used = [0] * (max_seq_len + 1)
        self.bin_lengths: list[int] = []
        self.alive = bytearray(map(bool, counts))
        flags = np.frombuffer(self.alive, dtype=np.uint8)
        self.have = bytearray(np.packbits(flags, bitorder="little").tobytes())
        self.mirror = bytearray(np.packbits(flags[::-1], bitorder="little").tobytes())
        # longest_below(1, 0, v): the longest available length < v (-1: none)
        self.longest_below = self.alive.rfind
        self.shortest = self.alive.find(1)

    def run(self, complements: list[Group]) -> list[Group]:
        """Build and repeat a pattern per top, longest top first, with `complements` merged in
        before the first bin of a shorter or equal top (where the main loop would build them)."""
        complement_tops = [node[1][0] for node, _ in complements]
        complement_tops.append(0)  # a sentinel below every top
        groups: list[Group] = []
        merged = 0  # complements[:merged] are in `groups`
        fill_bin, repeat_bin, longest_below = self._fill_bin, self._repeat_bin, self.longest_below
        top = longest_below(1)
        while top > 0:
            while complement_tops[merged] >= top:
                groups.append(complements[merged])
                merged += 1
            fill_bin(top)
            groups.append(repeat_bin(top))
            top = longest_below(1, 0, top + 1)  # the same top again if it has copies left
        groups.extend(complements[merged:])
        return groups

    def _fill_bin(self, top: int) -> None:
        """Build the bin of `top` in `used` and `bin_lengths`: the longest lengths that fit,
        until one, two or three of them close its room exactly (or nothing fits)."""
        counts, used, longest_below = self.counts, self.used, self.longest_below
        bin_lengths = self.bin_lengths
        # A length joins `bin_lengths` with its first copy (inlined: this loop is the hot path).
        room = self.m - top
        used[top] = 1
        bin_lengths.append(top)
        slots = self.max_slots - 1
        x = top  # the candidate length, <= top; it only gets shorter
        while room and slots:
            # the longest length <= room still available for this bin
            if x > room:
                x = longest_below(1, 0, room + 1)
            while x > 0 and counts[x] <= used[x]:
                x = longest_below(1, 0, x)
            if x <= 0:
                return
            if room > 3 * x:
                # too much room to close with three lengths <= x: take copies of x first (as
                # many as leave more than 2x, within the copies left and the slots; ifs, not
                # min(): this runs for most short tops)
                copies = (room - 2 * x - 1) // x
                if copies > counts[x] - used[x]:
                    copies = counts[x] - used[x]
                if copies > slots:
                    copies = slots
            else:
                closing = self._closing(room, x, slots)
                if closing is not None:
                    for z in closing:
                        if not used[z]:
                            bin_lengths.append(z)
                        used[z] += 1
                    return
                copies = 1  # no exact closing yet: one more x, and try again
            if not used[x]:
                bin_lengths.append(x)
            used[x] += copies
            room -= copies * x
            slots -= copies

    def _closing(self, room: int, x: int, slots: int) -> tuple[int, ...] | None:
        """One, two or three available lengths <= x that fill `room` exactly, or None."""
        if room <= x and self.counts[room] > self.used[room]:
            return (room,)
        closing: tuple[int, ...] | None = None
        if slots >= 2 and room <= 2 * x:  # else no two lengths <= x add up to the room
            closing = self._pair(room, x)
        if closing is None and slots >= 3 and room >= 3 * self.shortest:  # else none closes
            closing = self._triple(room, x)
        return closing

    def _pair(self, room: int, top: int) -> tuple[int, int] | None:
        """Lengths y <= x <= top with x + y == room, the largest y first (it keeps the short
        lengths for later), both available for this bin; None when there are none."""
        counts, used = self.counts, self.used
        low = room - top
        if low < self.shortest:
            low = self.shortest  # y is an available length
        half = room >> 1
        if low > half:
            return None
        # The first candidate alone (on dense histograms it usually fits), then the rest of
        # the window: one by one when short, else from the bitsets.
        x = room - half
        if counts[x] > used[x] + (x == half) and counts[half] > used[half]:
            return x, half
        half -= 1
        if half - low < _SCAN_PAIRS_BELOW:
            for y in range(half, low - 1, -1):
                x = room - y
                if counts[x] > used[x] + (x == y) and counts[y] > used[y]:
                    return x, y
            return None
        return self._pair_from_bitsets(room, low, half)

    def _pair_from_bitsets(self, room: int, low: int, high: int) -> tuple[int, int] | None:
        """`_pair` for y in [low, high]: the candidates whose y and room - y are both available
        are the set bits of a window of `have` ANDed with the matching window of `mirror`."""
        counts, used, have, mirror = self.counts, self.used, self.have, self.mirror
        from_bytes = int.from_bytes
        start = self.m - room + low  # mirror bit of length room - y is start + (y - low)
        both = (from_bytes(have[low >> 3 : (high >> 3) + 1], "little") >> (low & 7)) & (
            from_bytes(mirror[start >> 3 : ((start + high - low) >> 3) + 1], "little")
            >> (start & 7)
        )
        both &= (2 << (high - low)) - 1
        while both:
            bit = both.bit_length() - 1
            y = low + bit
            x = room - y
            if counts[x] > used[x] + (x == y) and counts[y] > used[y]:
                return x, y
            both ^= 1 << bit
        return None

    def _triple(self, room: int, x: int) -> tuple[int, int, int] | None:
        """z + a `_pair` filling `room`, z walked down the available lengths from x over at
        most `tries` candidates; None when none of them closes it.

        Every available z <= x is a candidate: the bin holds only lengths >= x (the candidate
        only gets shorter), x has a copy left, and x < room (a length equal to the room closes
        it alone). The pair sums to room - z with both lengths in [shortest, z], so only z in
        [room / 3, room - 2 shortest] can succeed: the candidates above are counted as tries
        without a call, and the walk stops below room / 3 (the same closing as trying them
        one by one).
        """
        counts, used, longest_below = self.counts, self.used, self.longest_below
        limit = room - 2 * self.shortest
        tried = 0
        z = x
        if limit < x:
            low = limit + 1 if limit >= 0 else 0
            tried = self.alive.count(1, low, x + 1)
            z = longest_below(1, 0, low)
        while z > 0 and tried < self.tries:
            if 3 * z < room:
                return None  # z plus two lengths <= z stays below the room from here on
            tried += 1
            # z has a copy left: always here, not always in `slot_patterns` (whose bins take
            # short lengths before they close)
            if counts[z] > used[z]:
                used[z] += 1
                found = self._pair(room - z, z)
                used[z] -= 1
                if found:
                    return z, found[0], found[1]
            z = longest_below(1, 0, z)
        return None

    def _repeat_bin(self, top: int) -> Group:
        """The bin built for `top`, repeated as often as the counts allow, taken from them;
        the bin being built is reset and the lengths that run out are no longer available."""
        counts, used, bin_lengths = self.counts, self.used, self.bin_lengths
        num_bins = counts[top]
        parts: list[int] = []
        for x in bin_lengths:
            if counts[x] // used[x] < num_bins:
                num_bins = counts[x] // used[x]
            parts += [x] * used[x]
        for x in bin_lengths:
            counts[x] -= num_bins * used[x]
            used[x] = 0
            if not counts[x]:
                self._use_up(x)
        bin_lengths.clear()
        return ((None, tuple(parts), 0), num_bins)

    def _use_up(self, length: int) -> None:
        """Mark `length`, whose count has run out, as no longer available."""
        m = self.m
        self.alive[length] = 0
        self.have[length >> 3] ^= 1 << (length & 7)
        self.mirror[(m - length) >> 3] ^= 1 << ((m - length) & 7)
        if length == self.shortest:
            self.shortest = self.alive.find(1, length)
