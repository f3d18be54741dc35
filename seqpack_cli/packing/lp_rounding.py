"""From the LP's fractional solution to bin templates: round, assign slots, finish greedily.

A template used `x` times in the LP's vertex solution gives `floor(x)` bins, or `ceil(x)` when
the fraction reaches a threshold (`ROUNDING_THRESHOLDS`: each is tried, the fewest bins in the
end kept). The slots of those bins are handed to the sequences (`assign_slots`): longest first,
every length takes the slots of its own length, then the shortest free slots of longer lengths
(the LP's exchange columns let a longer slot stand in for a shorter sequence; a bin stays within
max_seq_len when a sequence replaces a longer one), and the slots no sequence needs are left
empty (rounding up, and the LP covering counts "at least", leave some). The sequences left over
are few (at most about one bin per template the solution uses) and go to the greedy engine.
Where the cap binds, the bins at the cap short of max_seq_len then take longer sequences from a
few dissolved bins in exchange for theirs (`seqpack_cli.packing.bin_exchange`).

(Solving the restricted LP again on the leftovers, as cutting-stock codes often do, gains
nothing here: every template then gets less than one bin, which rounds down to none.)

Everything moves whole groups of identical bins, so nothing here grows with the number of
sequences: a group is split only where the slot assignment changes between its bins.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from seqpack_cli.packing.bin_exchange import tighten_bins
from seqpack_cli.packing.column_generation import Template
from seqpack_cli.packing.groups import BinTemplate
from seqpack_cli.packing.lp import LPSolution, solve_lp

__all__ = ["ROUNDING_THRESHOLDS", "assign_slots", "pack_with_lp", "round_lp_solution"]

ROUNDING_THRESHOLDS = (1.0, 0.8, 0.65, 0.5)
"""A template's fractional bin rounds up from these fractions on (1.0: always down). Rounding up
leaves slots empty, rounding down leaves sequences over for the greedy engine: which costs less
depends on the histogram, so each is tried and the fewest bins kept (on a tie, the first)."""

_ROUNDING_SLACK = 1e-6  # x = 4.9999999 from the solver's tolerances is 5 bins

Greedy = Callable[[list[tuple[int, int]]], Counter[BinTemplate]]


def pack_with_lp(
    items: list[tuple[int, int]],
    max_seq_len: int,
    cap: int | None,
    start: Counter[BinTemplate],
    greedy: Greedy,
    *,
    effort: float = 1.0,
    repack: Greedy | None = None,
    exchange: bool = True,
    polish: bool = True,
) -> tuple[Counter[BinTemplate], int]:
    """Pack `items` ((length, count), longest first) from the LP: column generation started
    from the templates of `start` (a packing of the same items), with `effort` of its work
    budget and `polish` (`seqpack_cli.packing.lp.solve_lp`), then `round_lp_solution`
    (`repack`, `exchange`: as there). Returns the templates and the LP's lower bound on the
    bins of any packing of `items`."""
    lengths = np.array([length for length, _ in reversed(items)], dtype=np.int64)
    counts = np.array([count for _, count in reversed(items)], dtype=np.int64)
    index = {int(length): i for i, length in enumerate(lengths.tolist())}
    initial = []
    for template in start:
        found = Counter(index[length] for length in template)
        keys = sorted(found)
        initial.append((np.array(keys, dtype=np.int64), np.array([found[k] for k in keys])))
    solution = solve_lp(lengths, counts, max_seq_len, cap, initial, effort=effort, polish=polish)
    templates = round_lp_solution(solution, greedy, repack=repack, exchange=exchange)
    return templates, solution.bound


def round_lp_solution(
    solution: LPSolution, greedy: Greedy, *, repack: Greedy | None = None, exchange: bool = True
) -> Counter[BinTemplate]:
    """Bin templates for `solution`'s histogram: the fewest bins over the rounding thresholds
    of `ROUNDING_THRESHOLDS` (each rounded solution's slots assigned, what is left packed by
    `greedy`: items (length, count), longest first), then, with `exchange`, the slack of its
    bins at the cap gathered by exchanges (`seqpack_cli.packing.bin_exchange.tighten_bins`,
    its last rounds' pool packed by `repack` where given)."""
    best: Counter[BinTemplate] | None = None
    best_bins = 0
    for threshold in ROUNDING_THRESHOLDS:
        templates = _round_at(solution, threshold, greedy)
        num_bins = sum(templates.values())
        if best is None or num_bins < best_bins:
            best, best_bins = templates, num_bins
    assert best is not None
    if not exchange:
        return best
    return tighten_bins(best, solution.max_seq_len, solution.cap, greedy, repack)


def _round_at(solution: LPSolution, threshold: float, greedy: Greedy) -> Counter[BinTemplate]:
    """`solution` with each template's bins rounded up from `threshold` on (1: rounded down),
    its slots assigned, and what is left packed by `greedy`."""
    lengths = solution.lengths
    whole = [
        math.floor(x + 1.0 - threshold + _ROUNDING_SLACK) for x in solution.multiplicities.tolist()
    ]
    groups = [(t, m) for t, m in zip(solution.templates, whole, strict=True) if m > 0]
    templates, remaining = assign_slots(lengths, [int(c) for c in solution.counts.tolist()], groups)
    rest = [(int(lengths[i]), c) for i, c in reversed(list(enumerate(remaining))) if c]
    if rest:
        templates.update(greedy(rest))
    return templates


def assign_slots(
    lengths: np.ndarray, counts: list[int], groups: list[tuple[Template, int]]
) -> tuple[Counter[BinTemplate], list[int]]:
    """Fill the slots of `groups` ((template, bins) pairs) with the sequences of `counts`
    (per length, ascending): returns the templates of the filled bins and the counts left."""
    num_lengths = len(lengths)
    length_of = [int(length) for length in lengths.tolist()]  # Python ints: no numpy scalars
    # each group's arrays as lists once: the loops below read them several times
    plain = [(items.tolist(), copies.tolist(), num_bins) for (items, copies), num_bins in groups]
    slots = [0] * num_lengths
    for items_list, copies_list, num_bins in plain:
        for item, copy in zip(items_list, copies_list, strict=True):
            slots[item] += copy * num_bins
    fills, remaining = _allot(slots, counts)
    ends = [_run_ends(runs) for runs in fills]
    offsets = [0] * num_lengths  # the slots of each length handed out so far, group by group
    placed: Counter[BinTemplate] = Counter()
    for items_list, copies_list, num_bins in plain:
        for template, bins in _fill_group(
            items_list, copies_list, num_bins, offsets, fills, ends, length_of
        ):
            if template:
                placed[template] += bins
        for item, copy in zip(items_list, copies_list, strict=True):
            offsets[item] += copy * num_bins
    return placed, remaining


def _allot(slots: list[int], counts: list[int]) -> tuple[list[list[tuple[int, int]]], list[int]]:
    """Who takes the slots of each length: runs `(item, number)` per slot length (item -1:
    left empty), in slot order; and the sequences that found no slot.

    Longest first, each length takes its own slots, then the shortest longer free ones.
    """
    num_lengths = len(slots)
    free = [0] * num_lengths
    free_lengths: list[int] = []  # the lengths with free slots, ascending
    fills: list[list[tuple[int, int]]] = [[] for _ in range(num_lengths)]
    remaining = list(counts)
    for item in range(num_lengths - 1, -1, -1):
        if slots[item]:
            free[item] = slots[item]
            bisect.insort(free_lengths, item)
        need = remaining[item]
        at = bisect.bisect_left(free_lengths, item)
        while need and at < len(free_lengths):
            slot = free_lengths[at]
            taken = min(need, free[slot])
            fills[slot].append((item, taken))
            free[slot] -= taken
            need -= taken
            if free[slot] == 0:
                del free_lengths[at]
        remaining[item] = need
    for slot in free_lengths:
        fills[slot].append((-1, free[slot]))
    return fills, remaining


def _run_ends(runs: list[tuple[int, int]]) -> list[int]:
    total, ends = 0, []
    for _, number in runs:
        total += number
        ends.append(total)
    return ends


def _fill_group(
    items: list[int],
    copies: list[int],
    num_bins: int,
    offsets: list[int],
    fills: list[list[tuple[int, int]]],
    ends: list[list[int]],
    length_of: list[int],
) -> list[tuple[BinTemplate, int]]:
    """The bins of one group after the slot assignment: (template, bins) pairs.

    The group's slots of length j are the next `copies_j * num_bins` of that length, bin by
    bin; bins between two consecutive run boundaries (of any of its lengths) are identical.
    """
    cuts = {0, num_bins}
    for item, copy in zip(items, copies, strict=True):
        start = offsets[item]
        stop = start + copy * num_bins
        run_ends = ends[item]
        at = bisect.bisect_right(run_ends, start)
        while at < len(run_ends) and run_ends[at] < stop:
            local = run_ends[at] - start
            cuts.add(local // copy)
            cuts.add(-(-local // copy))
            at += 1
    bounds = sorted(cuts)
    result = []
    for low, high in itertools.pairwise(bounds):
        parts: list[int] = []
        for item, copy in zip(items, copies, strict=True):
            first = offsets[item] + low * copy
            run_ends = ends[item]
            at = bisect.bisect_right(run_ends, first)
            if at < len(run_ends) and run_ends[at] >= first + copy:
                # the common case, inline: the slots lie in one run, one length or empty
                taker = fills[item][at][0]
                if taker >= 0:
                    parts.extend([length_of[taker]] * copy)
            else:
                parts.extend(_slot_contents(fills[item], run_ends, first, copy, length_of))
        parts.sort(reverse=True)
        result.append((tuple(parts), high - low))
    return result


def _slot_contents(
    runs: list[tuple[int, int]], run_ends: list[int], first: int, number: int, length_of: list[int]
) -> list[int]:
    """The lengths placed in slots [first, first + number) of one slot length (empty ones left
    out)."""
    parts: list[int] = []
    at = bisect.bisect_right(run_ends, first)
    position = first
    stop = first + number
    while position < stop:
        item, _ = runs[at]
        upto = min(run_ends[at], stop)
        if item >= 0:
            parts.extend([length_of[item]] * (upto - position))
        position = upto
        at += 1
    return parts
