"""The pattern heuristic for capped histograms: bins that spend their slots in proportion.

Under a cap of K sequences per bin, the pattern heuristic (`seqpack_cli.packing.patterns`)
fills each bin with the longest lengths that fit: the long sequences fill bins in a few slots,
and the short ones are left to the end, where K of them no longer fill a bin (14.5% over the
bound on 8M chat-like lengths at 8,192 tokens and 16 per bin; 20% at 8 per bin). Here every
bin aims at the number of sequences the whole packing needs per bin: the sequences left over
the bins their tokens need (`ceil(tokens / max_seq_len)`), at most K. A bin takes its top (the
longest length left), then lengths near its room's share per slot still wanted (the longest
length <= room / wanted), and closes with exactly the last one to three wanted lengths where
they fill the room exactly; where the cap binds (the target is K), exactly those, else any
closing of one to three lengths. So a long top takes short partners and a short top medium
ones, and the short sequences are spent along the way. On those 8M lengths: 0.056% over the
bound at 8 per bin, 0.16% at 16, in about 0.1 s; its last bins, where only lengths near the
mean are left, hold its loss (the stats sweep repacks them: `seqpack_cli.packing.histogram`).
"""

from __future__ import annotations

from seqpack_cli.packing.groups import Group
from seqpack_cli.packing.patterns import PatternPacker

__all__ = ["slot_pattern_groups"]


def slot_pattern_groups(items: list[tuple[int, int]], max_seq_len: int, cap: int) -> list[Group]:
    """Pack `items` ((length, count), lengths descending) at most `cap` per bin, pattern by
    pattern, each bin aiming at the sequences per bin the rest needs. Returns the groups of
    finished bins `(None, template, 0)`, in the order they were built (the last hold the loss)."""
    counts = [0] * (max_seq_len + 1)
    for length, count in items:
        counts[length] = count
    return _SlotPacker(counts, max_seq_len, cap).run([])


class _SlotPacker(PatternPacker):
    """`PatternPacker` whose bins aim at a number of sequences; it also tracks the sequences
    and tokens left, which give that number."""

    __slots__ = ("num_sequences", "num_tokens")

    def __init__(self, counts: list[int], max_seq_len: int, cap: int) -> None:
        super().__init__(counts, max_seq_len, cap, tries=32)
        self.num_sequences = sum(counts)
        self.num_tokens = sum(length * count for length, count in enumerate(counts))

    def _target(self) -> int:
        """The sequences per bin the rest needs, on average: left over the bins their tokens
        need, between 1 and the cap."""
        bins = -(-self.num_tokens // self.m)
        target = -(-self.num_sequences // max(bins, 1))
        return max(1, min(self.max_slots, target))

    def _fill_bin(self, top: int) -> None:
        counts, used, longest_below = self.counts, self.used, self.longest_below
        room = self.m - top
        self._take(top, 1)
        slots = self.max_slots - 1
        target = self._target()
        wanted = target - 1
        exact_count = target >= self.max_slots  # the cap binds: every slot counts
        while room and slots:
            if 1 <= wanted <= 3:
                closing = self._close(room, top, wanted, slots, exact_count)
                if closing is not None:
                    for length in closing:
                        self._take(length, 1)
                    return
            if wanted >= 1:  # the longest length near the room's share per wanted slot
                x = min(room // wanted, top)
                copies = wanted - 3 if wanted > 4 else 1  # the last three close the bin
            else:  # the target is met: the longest that fits, as the pattern heuristic
                x = min(room, top)
                copies = 1
            while x > 0 and counts[x] <= used[x]:
                x = longest_below(1, 0, x)
            if x <= 0:  # nothing as short as the share: the longest length that fits
                x = min(room, top)
                while x > 0 and counts[x] <= used[x]:
                    x = longest_below(1, 0, x)
                if x <= 0:
                    return
            if wanted <= 0:
                if room <= 3 * x:
                    closing = self._closing(room, x, slots)
                    if closing is not None:
                        for length in closing:
                            self._take(length, 1)
                        return
                else:  # copies of x, as many as leave more than 2x
                    copies = (room - 2 * x - 1) // x
            copies = min(copies, counts[x] - used[x], slots, room // x)
            self._take(x, copies)
            room -= copies * x
            slots -= copies
            wanted -= copies

    def _take(self, length: int, copies: int) -> None:
        """Put `copies` of `length` in the bin being built."""
        if not self.used[length]:
            self.bin_lengths.append(length)
        self.used[length] += copies

    def _close(
        self, room: int, top: int, wanted: int, slots: int, exact_count: bool
    ) -> tuple[int, ...] | None:
        """Available lengths that fill `room` exactly: `wanted` of them (1 to 3) where
        `exact_count`, else one, two or three (within `slots`); None when none do."""
        counts, used = self.counts, self.used
        x = min(room, top)
        while x > 0 and counts[x] <= used[x]:
            x = self.longest_below(1, 0, x)
        if x <= 0:
            return None
        if not exact_count:
            return self._closing(room, x, slots)
        if wanted == 1:
            return (room,) if room <= x and counts[room] > used[room] else None
        if wanted == 2:
            return self._pair(room, x) if room <= 2 * x else None
        if room < 3 * self.shortest or room > 3 * x:
            return None
        return self._triple(room, x)

    def _repeat_bin(self, top: int) -> Group:
        (_, parts, _), num_bins = super()._repeat_bin(top)
        if not num_bins:  # a bin holding more copies of a length than are left: never repeats
            raise RuntimeError(f"slot patterns built a bin {parts} the counts cannot fill")
        template = tuple(sorted(parts, reverse=True))  # its lengths were not taken in order
        self.num_sequences -= num_bins * len(template)
        self.num_tokens -= num_bins * sum(template)
        return ((None, template, 0), num_bins)
