"""Exchanges between groups of identical bins that gather a capped packing's slack.

The LP's rounded packing of a large capped histogram leaves many bins that hold the cap's number
of sequences yet are some tokens short of max_seq_len (their templates come from the coarse LP
level, whose lengths are rounded up). Such a bin cannot take another sequence, but it can take a
longer one in exchange for one of its own. `tighten_bins` dissolves some bins below the cap into
a pool, lets every other bin swap one of its sequences for the longest pool sequence its slack
allows (or take a pool sequence outright where it is below the cap), so that the pool ends with
fewer tokens than it began, and packs the pool again with the greedy engine. It keeps the result
only where it has fewer bins. The pool then holds the short sequences the exchanges gave back,
where the capped greedy engine is about 1% over the pool's bound: a last round packs it with
the `repack` the caller gives (the default packer's LP, `seqpack_cli.packing.histogram`).

Everything moves whole groups of identical bins (a group splits only where the pool runs short
of a length), so the work does not grow with the number of sequences.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable

from seqpack_cli.packing.groups import BinTemplate

__all__ = ["tighten_bins"]

Greedy = Callable[[list[tuple[int, int]]], Counter[BinTemplate]]

# How much to dissolve into the pool: its bins hold this many times the packing's slack in
# tokens. Too little and the exchanges find few sequences to take; too much and the pool (whose
# repacking is greedy) reaches bins the exchanges cannot save; in between, the bins saved vary
# unevenly with it (the greedy repacking). Each is tried, the fewest bins kept.
_POOL_SLACK_FACTORS = (16.0, 32.0, 64.0, 128.0)
# A dissolve-exchange-repack round leaves new bins (the pool's) with slack of their own: up to
# this many rounds, while each saves bins.
_MAX_ROUNDS = 3
# Then, where a `repack` better than the greedy engine is given (the default packer's, with its
# LP: on the pool's few hundred lengths the capped greedy engine is ~1% over the pool's bound,
# the very slack the exchanges gather), _REPACK_ROUNDS more rounds at this factor repack the
# pool with it: one factor, as each repack is an LP (`chat`, 4,096 tokens, 8 per bin, 1e8
# sequences: 20,980,665 -> 20,971,673 bins, the LP bound 20,957,660, for ~1 s; three rounds
# reach 20,969,135 for ~2.5 s).
_REPACK_FACTOR = 64.0
_REPACK_ROUNDS = 1
# A deterministic bound on the exchange steps of one round (each a group's swap: microseconds),
# against pathological inputs; the benchmark histograms of 8,192 tokens take up to ~22,000.
_MAX_STEPS = 100_000


def tighten_bins(
    templates: Counter[BinTemplate],
    max_seq_len: int,
    cap: int | None,
    greedy: Greedy,
    repack: Greedy | None = None,
) -> Counter[BinTemplate]:
    """`templates` (a packing with at most `cap` sequences a bin) with fewer bins where
    exchanges into the slack of its bins at the cap allow, else `templates` itself. `greedy`
    packs items (length, count), longest first; `repack`, where given, packs the pool of the
    last rounds (`_REPACK_FACTOR`) instead, better than `greedy` (and slower)."""
    if cap is None:
        return templates  # every bin can take a sequence outright: nothing to exchange for
    best = templates
    for factor in _POOL_SLACK_FACTORS:
        current = _tighten_rounds(templates, max_seq_len, cap, greedy, factor)
        if sum(current.values()) < sum(best.values()):
            best = current
    if repack is not None:
        best = _tighten_rounds(best, max_seq_len, cap, repack, _REPACK_FACTOR, _REPACK_ROUNDS)
    return best


def _tighten_rounds(
    templates: Counter[BinTemplate],
    max_seq_len: int,
    cap: int,
    pack: Greedy,
    factor: float,
    rounds: int = _MAX_ROUNDS,
) -> Counter[BinTemplate]:
    """Up to `rounds` rounds of `_tighten_once`, while each saves bins."""
    current, current_bins = templates, sum(templates.values())
    for _ in range(rounds):
        candidate = _tighten_once(current, max_seq_len, cap, pack, factor)
        candidate_bins = sum(candidate.values())
        if candidate_bins >= current_bins:
            break
        current, current_bins = candidate, candidate_bins
    return current


def _tighten_once(
    templates: Counter[BinTemplate], max_seq_len: int, cap: int, greedy: Greedy, factor: float
) -> Counter[BinTemplate]:
    """One round: dissolve `factor` times the slack into the pool, exchange, repack the pool."""
    slack = sum((max_seq_len - sum(template)) * n for template, n in templates.items())
    if slack < max_seq_len:
        return templates  # not even one bin's worth of slack to gather
    if factor * slack >= max_seq_len * sum(templates.values()) - slack:
        # every bin would be dissolved: no exchange, the whole histogram repacked from scratch,
        # as the packer did before (where the count, not the tokens, limits the bins, as at 8
        # per bin and 8,192 tokens: a quarter of the tokens is slack; 2 s for no bin saved)
        return templates
    kept, pool = _dissolve(templates, factor * slack, cap)
    if not pool:
        return templates
    exchanged = _exchange(kept, pool, max_seq_len, cap)
    rest = sorted(((length, n) for length, n in pool.items() if n), reverse=True)
    if rest:
        exchanged.update(greedy(rest))
    return exchanged


def _dissolve(
    templates: Counter[BinTemplate], tokens: float, cap: int
) -> tuple[list[tuple[BinTemplate, int]], Counter[int]]:
    """The groups kept, and the pool: the sequences of about `tokens` worth of bins.

    Bins of one sequence or at the cap come last (dissolving them frees no room for a sequence
    in the pool's repacking), then those whose longest sequence is longest (the pool's sequences
    are to replace shorter ones in bins at the cap).
    """

    def order(item: tuple[BinTemplate, int]) -> tuple[bool, int, int, BinTemplate]:
        template = item[0]
        return (len(template) in (1, cap), template[0], len(template), template)

    pool: Counter[int] = Counter()
    kept: list[tuple[BinTemplate, int]] = []
    taken = 0
    ordered = sorted(templates.items(), key=order)
    for at, (template, num_bins) in enumerate(ordered):
        if taken >= tokens:
            # the pool is full: the rest, most of the groups, are kept whole
            kept.extend(group for group in ordered[at:] if group[1] > 0)
            break
        size = sum(template)
        wanted = 0
        if size > 0:
            wanted = min(num_bins, -(-(int(tokens) - taken) // size))
        for length in template:
            pool[length] += wanted
        taken += wanted * size
        if num_bins > wanted:
            kept.append((template, num_bins - wanted))
    return kept, pool


def _exchange(
    groups: list[tuple[BinTemplate, int]], pool: Counter[int], max_seq_len: int, cap: int
) -> Counter[BinTemplate]:
    """The bins of `groups` after each took pool sequences into its slack while any fits (a
    longer one for one of its own at the cap, one more below it); `pool` is updated in place.
    Every exchange adds tokens to its bins, so the loop ends."""
    available = sorted(length for length, n in pool.items() if n)  # the pool's lengths
    result: Counter[BinTemplate] = Counter()
    work = list(groups)
    steps = 0
    while work:
        template, num_bins = work.pop()
        steps += 1
        move = _best_move(template, available, max_seq_len, cap) if steps <= _MAX_STEPS else None
        if move is None:
            result[template] += num_bins
            continue
        out, into = move
        moved = min(num_bins, pool[into])
        pool[into] -= moved
        if pool[into] == 0:
            del available[bisect.bisect_left(available, into)]
        parts = list(template)
        if out:
            if pool[out] == 0:
                bisect.insort(available, out)
            pool[out] += moved
            parts.remove(out)
        parts.append(into)
        parts.sort(reverse=True)
        work.append((tuple(parts), moved))  # it may have slack left for another exchange
        if num_bins > moved:
            work.append((template, num_bins - moved))
    return result


def _best_move(
    template: BinTemplate, available: list[int], max_seq_len: int, cap: int
) -> tuple[int, int] | None:
    """(length given to the pool, 0 for none; length taken) filling the most of the bin's
    slack, or None where no pool sequence fits."""
    room = max_seq_len - sum(template)
    if room <= 0 or not available:
        return None
    if len(template) < cap:
        at = bisect.bisect_right(available, room)
        return (0, available[at - 1]) if at else None
    best: tuple[int, int] | None = None
    gain = 0
    previous = 0
    for out in template:  # longest first; each distinct length once
        if out == previous:
            continue
        previous = out
        at = bisect.bisect_right(available, out + room)
        if at and available[at - 1] - out > gain:
            gain = available[at - 1] - out
            best = (out, available[at - 1])
    return best
