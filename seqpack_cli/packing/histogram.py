"""Packing a length histogram into bin templates: the public API and the engine.

A histogram `{length: count}` is packed into templates: `Counter{(l1 >= l2 >= ...): bins}` with
every template's sum <= max_seq_len (and, when capped, at most `max_seqs_per_bin` lengths).
`pack_length_histogram_batched` is the engine. It runs the greedy engine
(`pack_length_histogram_greedy`: the pattern heuristic of `seqpack_cli.packing.patterns` and the
exact grouped BFD, FFD (`seqpack_cli.packing.fit`) and MFFD (`seqpack_cli.packing.mffd`), each
given the best packing so far as its `limit` so that it stops as soon as it cannot win, the best
kept), in milliseconds; where that misses the cheap lower bound of `seqpack_cli.packing.bounds`,
it also packs from the LP relaxation (`seqpack_cli.packing.lp_rounding`) and keeps the packing
with fewer bins.
"""

from __future__ import annotations

import gc
import heapq
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from seqpack_cli.checks import check_max_seqs_per_bin, validate_length_counts
from seqpack_cli.errors import ConfigError, option
from seqpack_cli.packing.bounds import LowerBound, lower_bound, lower_bounds
from seqpack_cli.packing.fit import bfd_groups, ffd_groups
from seqpack_cli.packing.groups import BinTemplate, Group, count_bins, group_templates
from seqpack_cli.packing.lp_rounding import pack_with_lp
from seqpack_cli.packing.mffd import mffd_groups
from seqpack_cli.packing.packed import HistogramBound, PackedTemplates
from seqpack_cli.packing.patterns import MAX_PATTERN_SEQ_LEN, pattern_groups
from seqpack_cli.packing.slot_patterns import slot_pattern_groups

__all__ = [
    "BinTemplate",
    "lower_bound_bins",
    "pack_length_histogram",
    "pack_length_histogram_batched",
    "pack_length_histogram_bfd",
    "pack_length_histogram_ffd",
    "pack_length_histogram_greedy",
    "pack_length_histogram_mffd",
]

logger = logging.getLogger(__name__)

LengthCounts = Mapping[int, int] | Iterable[tuple[int, int]]

Strategy = Callable[..., list[Group] | None]

_NO_BINS = LowerBound(0, 0, 0)  # the bound of an empty histogram

# The LP runs where it can gain bins worth its time (`_lp_budget_share`): the greedy packing
# more than _LP_GAIN_SHARE and more than _LP_GAIN_BINS bins above the cheap bound (issue 21: a
# power law at 8,192 tokens, 1e8 sequences, packs greedily in 0.11 s 5 bins above the volume
# bound; the LP took 7-12 s to save 3 of them), or any histogram of at most _SMALL_HISTOGRAM
# lengths (its LP costs milliseconds). Its work budget grows with the gap, all of it from
# _FULL_BUDGET_GAP on: below that the greedy packing is within the packer's 0.1% target
# already (the LP bound is at least the cheap one).
_LP_GAIN_SHARE = 1e-4
_LP_GAIN_BINS = 2
_SMALL_HISTOGRAM = 64
_FULL_BUDGET_GAP = 1e-3
# The share of the packer's LP effort the pool of its bin exchanges gets (`_pack_exchange_pool`,
# an LP on a few hundred lengths: `chat` at 8 per bin, 1e8 sequences, 20,971,673 bins in 1.0 s
# more; 0.1: 20,970,589 in 1.4 s; `code`, 8,192 tokens, 1e6 sequences: 152,289 in 1.4 s more,
# 152,268 in 2.5 s; none: 20,980,665 and 152,325).
_POOL_LP_EFFORT = 0.02
# ... where `lp_effort` is at least this: the stats sweep's 0.5 trades bins for time, and there
# the repack cost 0.3-0.6 s per capped row of 8M rows at 1024-4096 tokens (+20% of the sweep)
# for 0-0.02% of the bins.
_POOL_LP_FROM_EFFORT = 1.0

# Below that effort (the stats sweep's), a capped histogram the greedy engine misses is first
# packed by the slot-aware pattern heuristic (`seqpack_cli.packing.slot_patterns`) with the last
# bins, where its loss is, repacked by the greedy engine and an LP at _TAIL_LP_EFFORT (a few
# hundred lengths; its vertex not polished: a packing is all it gives); that packing is kept
# without the histogram's LP where it is within _SWEEP_WITHIN of the cheap bound, the packer's
# promise. Which share of the bins to repack depends on the histogram, so each of _TAIL_SHARES
# is tried (over the cheap bound, 2% / 5% / 8%: 8M chat-like lengths at 8,192 and 16 per bin
# 0.146 / 0.028 / 0.074%, `wikipedia` at 8 per bin 0.000 / 0.042 / 0.076%, `code` at 16
# 0.003 / 0.041 / 0.074%). On those 8M lengths (issue 21): 8 per bin, 993,607 bins in 0.4 s
# (the LP path: 993,679 in 4.0 s); 16 per bin, 747,542 in 1.5 s (747,755 in 6.5 s).
_TAIL_SHARES = (0.02, 0.05)
_TAIL_LP_EFFORT = 0.05
_SWEEP_WITHIN = 1e-3

# The exact classic strategies. Each runs once, with the bins of the best packing so far as its
# `limit`: bins are only ever opened, so it stops (None) as soon as it has opened that many, and
# a strategy that finishes has beaten the best and has its templates already.
_CLASSICS: dict[str, Strategy] = {"bfd": bfd_groups, "ffd": ffd_groups, "mffd": mffd_groups}
# The order the engine tries the strategies in (on a tie the earlier one is kept). The pattern
# heuristic comes first: it closes bins exactly, so it reaches the bound wherever the volume
# (tokens) is what limits the packing, as on every realistic shape. Where the number of
# sequences is what limits it (the bound by number exceeds the others: e.g. many sequences
# just over M/3, only two of which fit a bin), exact closings do not help and BFD, which pairs
# the long sequences first, is the likely winner, so it goes first.
_ORDER = ("patterns", "bfd", "ffd", "mffd")
_ORDER_BY_NUMBER = ("bfd", "patterns", "ffd", "mffd")


def pack_length_histogram(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Pack a histogram with strict per-item worst-fit-decreasing (the reference; O(N log B)).

    Sequences are placed one at a time, longest first, each into the open bin with the most room
    (ties: the oldest bin) or into a new bin when none has room. It loops over every sequence, so
    it is for tests and parity checks; `pack_length_histogram_batched` is the engine.

    Args:
        length_counts: the histogram, `{length: count}` or `(length, count)` pairs; every
            length in [1, max_seq_len], every count a non-negative integer.
        max_seq_len: the most tokens in one bin.
        max_seqs_per_bin: the most sequences in one bin; None (the default): no limit.

    Returns:
        `Counter{template: number of bins}`, each template a tuple of lengths, longest first.

    Raises:
        InputError: for a length outside [1, max_seq_len] or a bad count.
        ConfigError: for a bad `max_seq_len` or `max_seqs_per_bin`.
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


def lower_bound_bins(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> int:
    """A lower bound on the number of bins any packing needs.

    The largest of: ceil(total tokens / max_seq_len); ceil(sequences / max_seqs_per_bin) when
    capped; Martello and Toth's L2, which counts the sequences longer than M/2 (no two share
    a bin) and adds the volume of the shorter ones that cannot fit beside them; the
    sequences longer than M/(k+1) divided by k, for every k (at most k of them share a bin);
    and the bounds of a few dual-feasible functions (`seqpack_cli.packing.dff`).
    """
    items = validate_length_counts(length_counts, max_seq_len)
    return lower_bound(items, max_seq_len, check_max_seqs_per_bin(max_seqs_per_bin))


def _run_classic(
    strategy: Strategy,
    length_counts: LengthCounts,
    max_seq_len: int,
    max_seqs_per_bin: int | None,
) -> Counter[BinTemplate]:
    items = validate_length_counts(length_counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    if not items:
        return Counter()
    groups = strategy(items, max_seq_len, cap)
    assert groups is not None  # only a finite limit stops a strategy early
    return group_templates(groups)


def pack_length_histogram_bfd(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Best-fit decreasing on the histogram: the same templates as per-item BFD, in O(groups)."""
    return _run_classic(bfd_groups, length_counts, max_seq_len, max_seqs_per_bin)


def pack_length_histogram_ffd(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """First-fit decreasing on the histogram: the same templates as per-item FFD."""
    return _run_classic(ffd_groups, length_counts, max_seq_len, max_seqs_per_bin)


def pack_length_histogram_mffd(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Johnson and Garey's modified FFD on the histogram: the same templates as per-item MFFD."""
    return _run_classic(mffd_groups, length_counts, max_seq_len, max_seqs_per_bin)


def pack_length_histogram_batched(
    length_counts: LengthCounts,
    max_seq_len: int,
    *,
    max_seqs_per_bin: int | None = None,
    lp_effort: float = 1.0,
) -> PackedTemplates:
    """Pack a length histogram into bin templates: the engine; its cost does not grow with N.

    Runs the greedy engine (`pack_length_histogram_greedy`). Where that misses the cheap lower
    bound (`lower_bound_bins`) by more than 0.01% and 2 bins (or at all, on a histogram of at
    most 64 lengths), it also packs from the LP relaxation
    (`seqpack_cli.packing.lp_rounding`: column generation, rounding, the greedy engine on what
    is left), with a work budget in proportion to the gap (all of it from 0.1% on), and keeps
    that packing when it has fewer bins. So the result never has more bins than the greedy
    engine's, and is at the bound, within 0.01% of it, or near the LP optimum; where greedy is
    near the bound it costs what greedy does. `lp_effort` (0 to 1):
    the share of the LP's work budget to spend; less packs faster, a little farther from the
    optimum (the `max_seq_len` sweep of `seqpack stats`, which packs many histograms, spends
    half; below 1 the bin exchanges' pool is repacked by the greedy engine only, and a capped
    histogram is first packed by the slot-aware pattern heuristic, its tail repacked, which is
    kept without the LP where it is within 0.1% of the cheap bound).

    Args:
        length_counts: the histogram, `{length: count}` or `(length, count)` pairs; every
            length in [1, max_seq_len], every count a non-negative integer.
        max_seq_len: the most tokens in one bin.
        max_seqs_per_bin: the most sequences in one bin; None (the default): no limit.
        lp_effort: the share of the LP's work budget to spend, in (0, 1] (see above); 1, the
            default, packs closest to the optimum.

    Returns:
        The templates, `Counter{template: number of bins}` (a `PackedTemplates`), carrying as
        `bound` the lower bound the engine proved for this histogram (the LP's where it solved
        it), which `PackingStats.from_templates` and the reports show. Empty for an empty
        histogram.

    Raises:
        InputError: for a length outside [1, max_seq_len] or a bad count.
        ConfigError: for a bad `max_seq_len`, `max_seqs_per_bin` or `lp_effort`.
    """
    items = validate_length_counts(length_counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    effort = _check_effort(lp_effort)
    if not items:
        return PackedTemplates(bound=HistogramBound.of_items(items, max_seq_len, cap, _NO_BINS))
    bounds = lower_bounds(items, max_seq_len, cap)
    greedy = _pack_greedy(items, max_seq_len, cap, bounds)
    greedy_bins = sum(greedy.values())
    share = _lp_budget_share(greedy_bins, bounds.value, len(items))
    if share == 0:  # at the bound, or too near it for the LP to be worth its time
        return PackedTemplates(greedy, HistogramBound.of_items(items, max_seq_len, cap, bounds))
    if cap is not None and effort < _POOL_LP_FROM_EFFORT and max_seq_len <= MAX_PATTERN_SEQ_LEN:
        slotted = _pack_slots_with_tail(items, max_seq_len, cap)
        slotted_bins = sum(slotted.values())
        if slotted_bins < greedy_bins and slotted_bins <= bounds.value * (1 + _SWEEP_WITHIN):
            logger.debug("slot patterns: %d bins (cheap bound %d)", slotted_bins, bounds.value)
            bound = HistogramBound.of_items(items, max_seq_len, cap, bounds)
            return PackedTemplates(slotted, bound)

    def finish(rest: list[tuple[int, int]]) -> Counter[BinTemplate]:
        return _pack_greedy(rest, max_seq_len, cap)

    def repack(pool: list[tuple[int, int]]) -> Counter[BinTemplate]:
        return _pack_exchange_pool(pool, max_seq_len, cap, effort * share)

    # the exchanges' last pool repacked by the LP too, at the full effort only (prepare's)
    exchange_pool = repack if effort >= _POOL_LP_FROM_EFFORT else None
    packed, by_lp = pack_with_lp(
        items, max_seq_len, cap, greedy, finish, effort=effort * share, repack=exchange_pool
    )
    packed_bins = sum(packed.values())
    logger.debug(
        "greedy %d bins, LP packing %d (cheap bound %d, LP bound %d)",
        greedy_bins,
        packed_bins,
        bounds.value,
        by_lp,
    )
    bound = HistogramBound.of_items(items, max_seq_len, cap, replace(bounds, by_lp=by_lp))
    return PackedTemplates(packed if packed_bins < greedy_bins else greedy, bound)


def _pack_exchange_pool(
    items: list[tuple[int, int]], max_seq_len: int, cap: int | None, effort: float
) -> Counter[BinTemplate]:
    """The pool of the bin exchanges (`seqpack_cli.packing.bin_exchange`) packed as the default
    packs a histogram, with `_POOL_LP_EFFORT` of `effort` and no exchanges of its own: the
    greedy engine, then the LP where it can gain. The pool holds the sequences the exchanges
    gave back, short ones: there the capped greedy engine is about 1% over the pool's bound
    (`chat`, 4,096 tokens, 8 per bin: 836,706 bins for a bound of 827,632; the LP, 827,633)."""
    bounds = lower_bounds(items, max_seq_len, cap)
    greedy = _pack_greedy(items, max_seq_len, cap, bounds)
    greedy_bins = sum(greedy.values())
    share = _lp_budget_share(greedy_bins, bounds.value, len(items))
    if share == 0:
        return greedy

    def finish(rest: list[tuple[int, int]]) -> Counter[BinTemplate]:
        return _pack_greedy(rest, max_seq_len, cap)

    effort = effort * share * _POOL_LP_EFFORT
    packed, _ = pack_with_lp(items, max_seq_len, cap, greedy, finish, effort=effort, exchange=False)
    return packed if sum(packed.values()) < greedy_bins else greedy


def _pack_slots_with_tail(
    items: list[tuple[int, int]], max_seq_len: int, cap: int
) -> Counter[BinTemplate]:
    """The slot-aware pattern heuristic's packing with its tail repacked (`_repack_tail`): the
    fewest bins over the tail shares of `_TAIL_SHARES`."""
    groups = slot_pattern_groups(items, max_seq_len, cap)
    packings = [_repack_tail(groups, share, max_seq_len, cap) for share in _TAIL_SHARES]
    return min(packings, key=lambda templates: sum(templates.values()))


def _repack_tail(
    groups: list[Group], share: float, max_seq_len: int, cap: int
) -> Counter[BinTemplate]:
    """`groups` (in the order they were built) with their last `share` of bins, where only
    lengths near the mean were left to the heuristic, repacked together: the greedy engine,
    then the LP at `_TAIL_LP_EFFORT` where it can gain; the repacking is kept where it has
    fewer bins."""
    num_kept = int(count_bins(groups) * (1 - share))
    kept: Counter[BinTemplate] = Counter()
    tail: Counter[BinTemplate] = Counter()
    for (_, template, _), num_bins in groups:
        taken = min(num_bins, num_kept)
        num_kept -= taken
        if taken:
            kept[template] += taken
        if num_bins > taken:
            tail[template] += num_bins - taken
    pool: Counter[int] = Counter()
    for template, num_bins in tail.items():
        for length in template:
            pool[length] += num_bins
    rest = sorted(pool.items(), reverse=True)
    if not rest:
        return kept
    bounds = lower_bounds(rest, max_seq_len, cap)
    repacked = _pack_greedy(rest, max_seq_len, cap, bounds)
    lp_share = _lp_budget_share(sum(repacked.values()), bounds.value, len(rest))
    if lp_share > 0:

        def finish(left: list[tuple[int, int]]) -> Counter[BinTemplate]:
            return _pack_greedy(left, max_seq_len, cap)

        effort = _TAIL_LP_EFFORT * lp_share
        by_lp, _ = pack_with_lp(
            rest, max_seq_len, cap, repacked, finish, effort=effort, polish=False
        )
        if sum(by_lp.values()) < sum(repacked.values()):
            repacked = by_lp
    if sum(repacked.values()) < sum(tail.values()):
        tail = repacked
    return kept + tail


def _lp_budget_share(greedy_bins: int, bound: int, num_lengths: int) -> float:
    """The share of the LP's work budget worth spending on a histogram of `num_lengths` lengths
    that the greedy engine packs into `greedy_bins`, with `bound` its cheap lower bound: 0 (no
    LP) at the bound or within `_LP_GAIN_SHARE` and `_LP_GAIN_BINS` of it (except on a small
    histogram, whose LP costs milliseconds), else in proportion to what the LP can gain, all of
    it from `_FULL_BUDGET_GAP` above the bound on."""
    gap = greedy_bins - bound
    if gap <= 0:
        return 0.0
    small = num_lengths <= _SMALL_HISTOGRAM
    if not small and (gap <= _LP_GAIN_BINS or gap <= _LP_GAIN_SHARE * bound):
        return 0.0
    return 1.0 if small else min(1.0, gap / (_FULL_BUDGET_GAP * bound))


def _check_effort(lp_effort: object) -> float:
    """`lp_effort` as a float in (0, 1], or `ConfigError`."""
    if (
        isinstance(lp_effort, bool)
        or not isinstance(lp_effort, int | float)
        or not 0 < lp_effort <= 1
    ):
        raise ConfigError(
            f"{option('lp_effort')} is {lp_effort!r}; expected a number in (0, 1], "
            "e.g. 0.25 for a quicker LP packing, 1 (the default) for the closest to the optimum"
        )
    return float(lp_effort)


def pack_length_histogram_greedy(
    length_counts: LengthCounts, max_seq_len: int, *, max_seqs_per_bin: int | None = None
) -> Counter[BinTemplate]:
    """Pack a length histogram with the greedy engine alone (no LP); milliseconds, whatever N.

    Runs the pattern heuristic and grouped BFD, FFD and MFFD (each exactly its per-item
    version), and keeps the packing with the fewest bins (the earliest on a tie; BFD runs first
    where the bound by number of sequences is the one that binds). It stops as soon as one
    reaches `lower_bound_bins` (nothing can do better), and a classic strategy stops part-way
    once it has proved it cannot beat the best so far. So the result never has more bins than
    per-item BFD, FFD or MFFD on the same histogram, and is at the bound wherever the pattern
    heuristic gets there (all the realistic uncapped benchmark shapes).
    Raises `InputError` for a length outside [1, max_seq_len] and `ConfigError` for a bad
    `max_seq_len` or `max_seqs_per_bin`.
    """
    items = validate_length_counts(length_counts, max_seq_len)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    if not items:
        return Counter()
    return _pack_greedy(items, max_seq_len, cap)


def _pack_greedy(
    items: list[tuple[int, int]],
    max_seq_len: int,
    cap: int | None,
    bounds: LowerBound | None = None,
) -> Counter[BinTemplate]:
    """`pack_length_histogram_greedy` on validated items (length, count), longest first;
    `bounds`: their `lower_bounds`, where the caller has them already."""
    # The strategies allocate tens of thousands of small acyclic tuples: pausing the cyclic
    # collector spares repeated collections that find nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if bounds is None:
            bounds = lower_bounds(items, max_seq_len, cap)
        name, groups = _best_groups(items, max_seq_len, cap, bounds)
        if name == "patterns":  # its templates are all different: no need to add any up
            return Counter({node[1]: num_bins for node, num_bins in groups})
        return group_templates(groups)
    finally:
        if collecting:
            gc.enable()


def _best_groups(
    items: list[tuple[int, int]], max_seq_len: int, cap: int | None, bounds: LowerBound
) -> tuple[str, list[Group]]:
    """The name of the winning strategy and its groups (`bounds`: the items' lower bounds)."""
    bound = bounds.value
    by_number = bounds.by_number > max(bounds.by_volume, bounds.by_size)
    best: tuple[str, list[Group]] = ("", [])
    best_bins: float = float("inf")
    for name in _ORDER_BY_NUMBER if by_number else _ORDER:
        if best_bins == bound:
            break
        if name == "patterns":
            if max_seq_len > MAX_PATTERN_SEQ_LEN:
                continue  # its per-length tables and bitsets are O(max_seq_len)
            groups: list[Group] | None = pattern_groups(items, max_seq_len, cap)
        else:
            groups = _CLASSICS[name](items, max_seq_len, cap, best_bins)
        if groups is None:
            logger.debug("strategy %s: stopped, it cannot beat %s bins", name, best_bins)
            continue
        num_bins = count_bins(groups)
        logger.debug("strategy %s: %d bins (lower bound %d)", name, num_bins, bound)
        if num_bins < best_bins:
            best, best_bins = (name, groups), num_bins
    return best
