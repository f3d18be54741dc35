"""Johnson and Garey's modified first-fit decreasing (MFFD) on a histogram, in O(groups) steps.

"A 71/60 theorem for bin packing" (J. Complexity 1985). Like the strategies of
`seqpack_cli.packing.fit` it is exactly its per-item version (benchmarks/reference_packers.py) on
the lengths sorted longest first, moves runs of identical bins together, and stops with None
once it cannot use fewer bins than `limit`.
"""

from __future__ import annotations

import bisect
from typing import Any

from seqpack_cli.packing.bounds import residual_lower_bound
from seqpack_cli.packing.fit import ffd_groups
from seqpack_cli.packing.groups import Group

__all__ = ["mffd_groups"]

_UNLIMITED = float("inf")


def mffd_groups(
    items: list[tuple[int, int]],
    max_seq_len: int,
    cap: int | None,
    limit: float = _UNLIMITED,
) -> list[Group] | None:
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
    num_a_bins = sum(piece[0] for piece in pieces)
    if num_a_bins >= limit:
        return None

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
            drop_used_up(medium, counts, length)
            num_bins -= taken
        if num_bins:
            stepped.append([num_bins, room, slots, node, False])
    # (3) backward through the bins without a medium: the shortest small, then the longest fit
    small = sorted(length for length in counts if 6 * length > max_seq_len >= 3 * length)
    backward: list[list[Any]] = []
    for piece in reversed(stepped):
        num_bins, room, slots, node, has_medium = piece
        while num_bins and not has_medium and slots >= 2 and small:
            pair = take_small_pair(small, counts, room, num_bins)
            if pair is None:
                break  # the two shortest smalls do not fit together: every bin here skips
            shortest, partner, taken = pair
            # per-item goes backward, so the last `taken` bins of the run get the pair
            pair_node = ((node, shortest, 1), partner, 1)
            backward.append([taken, room - shortest - partner, slots - 2, pair_node, False])
            num_bins -= taken
        if num_bins:
            backward.append([num_bins, room, slots, node, has_medium])
    backward.reverse()
    if limit != _UNLIMITED:
        # Steps 4 and 5 pack the A-bins (taken whole) and what is left: no fewer bins than a
        # lower bound on that instance. Here it often proves MFFD cannot win before the costly
        # step 4 (on the uniform distribution, for one).
        sizes = [max_seq_len - piece[1] for piece in backward]
        sizes.extend(counts)
        nums = [piece[0] for piece in backward]
        nums.extend(counts.values())
        if residual_lower_bound(sizes, nums, max_seq_len) >= limit:
            return None
    # (4) forward through all bins: fill each with the longest remaining sequence that fits
    remaining = sorted(length for length, count in counts.items() if count)
    groups: list[Group] = []
    for num_bins, room, slots, node, _ in backward:
        while num_bins and remaining:
            pattern = greedy_fill(remaining, counts, room, slots)
            if not pattern:
                break
            taken = min(num_bins, *(counts[length] // copies for length, copies in pattern))
            filled = node
            for length, copies in pattern:
                filled = (filled, length, copies)
                counts[length] -= taken * copies
                drop_used_up(remaining, counts, length)
            groups.append((filled, taken))
            num_bins -= taken
        if num_bins:
            groups.append((node, num_bins))
    # (5) the rest: FFD into new bins (nothing left fits in any A-bin after step 4)
    rest = [(length, counts[length]) for length in reversed(remaining)]
    if rest:
        new_bins = ffd_groups(rest, max_seq_len, cap, limit - num_a_bins)
        if new_bins is None:
            return None
        groups.extend(new_bins)
    elif num_a_bins >= limit:
        return None
    return groups


def greedy_fill(
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


def drop_used_up(lengths: list[int], counts: dict[int, int], length: int) -> None:
    """Remove `length` from the sorted `lengths` once its count has run out."""
    if counts[length] == 0:
        del lengths[bisect.bisect_left(lengths, length)]


def take_small_pair(
    small: list[int], counts: dict[int, int], room: int, num_bins: int
) -> tuple[int, int, int] | None:
    """MFFD step 3 on a run of `num_bins` bins with `room`: the pair they take, and how many do.

    The pair is the shortest remaining small and the longest small that fits beside it;
    returns `(shortest, partner, taken)` after taking them from `counts` (and `small`, for the
    lengths used up), or None when the two shortest smalls do not fit together.
    """
    shortest = small[0]
    i = bisect.bisect_right(small, room - shortest) - 1
    if i < 0 or (i == 0 and counts[shortest] < 2):
        return None
    partner = small[i]
    if partner == shortest:
        taken = min(num_bins, counts[shortest] // 2)
    else:
        taken = min(num_bins, counts[shortest], counts[partner])
    counts[shortest] -= taken
    counts[partner] -= taken
    drop_used_up(small, counts, partner)
    if partner != shortest:
        drop_used_up(small, counts, shortest)
    return shortest, partner, taken
