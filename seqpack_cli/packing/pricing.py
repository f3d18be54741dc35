"""The pricing problem of column generation: the most valuable bin under given item values.

Given values `π_i >= 0` for the distinct lengths `l_i` (the duals of the LP), a bin template
(pattern) is worth the sum of the values of the sequences it holds; the packer's LP
(`seqpack_cli.packing.lp`) needs the most valuable template, and one good template per length,
among those with total length <= `max_seq_len` and, when capped, at most `max_seqs_per_bin`
sequences. Copies of a length are not limited by its count here: a relaxation, so the bound the
LP derives from it stays valid, and cheaper.

The dynamic programs run in exact integer arithmetic. Values are floored onto a grid of
`2**-fraction_bits` (`Quantized`) and every DP cell holds `value << index_bits | item`, the item
that completed it: one `np.maximum` per item both adds the item and records it, so the templates
are read back (`_backtrack`) without a second table, ties go to the longer item on every
machine, and the best value is exact, which the rigorous lower bound needs.

- capped: `dp[j, c]`, the best of exactly j sequences with total length <= c, one layer per j
  (O(cap x items x max_seq_len));
- uncapped: `dp[c]`, one array, each length added in binary pieces of 1, 2, 4, ... copies
  (O(items x log(max_seq_len) x max_seq_len)).

Only the lengths worth more than every shorter length take part (`staircase`): a shorter length
worth as much fits wherever the longer one does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "Pricing",
    "Quantized",
    "best_template_units",
    "certified_bound",
    "price_templates",
    "quantize",
    "staircase",
]

_WORD_BITS = 62  # the cells are int64; one bit of headroom for the sentinel arithmetic
_EMPTY = np.int64(-(1 << _WORD_BITS))  # no template reaches this cell (capped layers)
# `certified_bound` reads the duals as fractions of denominators up to this: a vertex's duals
# solve a system of templates' copies, whose determinants are small on the histograms where the
# LP converges; the solver's floats (accurate to ~1e-9) identify such fractions uniquely.
_MAX_DENOMINATOR = 10_000


@dataclass(frozen=True)
class Quantized:
    """Item values floored onto the grid `2**-fraction_bits`: `units[i] / 2**fraction_bits`."""

    units: np.ndarray  # int64, >= 0
    fraction_bits: int

    def value(self, units: int) -> float:
        return units / float(1 << self.fraction_bits)


@dataclass(frozen=True)
class Pricing:
    """The outcome of one pricing round.

    best_units: the exact value of the most valuable template, in `quantized` units (every
        template is worth at most that under `quantized`: the lower bound divides by it).
    item_units[i]: the value of the best template found that holds length i.
    templates: (items, copies) per length: `templates[i]` is that template as arrays of item
        indices and copies (only for the lengths asked for; others are None).
    """

    quantized: Quantized
    best_units: int
    item_units: np.ndarray
    templates: list[tuple[np.ndarray, np.ndarray] | None]


def quantize(values: np.ndarray, max_items: int, num_items: int) -> Quantized:
    """`values` (clipped at 0) on the finest grid whose template sums and item indices fit a
    DP cell: a template holds at most `max_items` sequences; items are numbered 1..num_items."""
    values = np.maximum(np.asarray(values, dtype=np.float64), 0.0)
    index_bits = int(num_items).bit_length()
    largest = max(float(values.max(initial=0.0)), 1.0) * max(max_items, 1)
    value_bits = int(np.ceil(np.log2(largest + 1.0))) + 1
    fraction_bits = min(_WORD_BITS - index_bits - value_bits, 52)
    if fraction_bits < 16:
        raise ValueError("too many items or too large values to price exactly")
    units = np.floor(values * float(1 << fraction_bits)).astype(np.int64)
    return Quantized(units, fraction_bits)


def staircase(units: np.ndarray) -> np.ndarray:
    """Indices of the lengths (ascending) worth more than every shorter length, and > 0."""
    if not len(units):
        return np.zeros(0, dtype=np.int64)
    best_shorter = np.concatenate(([0], np.maximum.accumulate(units)[:-1]))
    return np.flatnonzero(units > best_shorter)


def price_templates(
    lengths: np.ndarray,
    values: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    wanted: np.ndarray | None = None,
) -> Pricing:
    """The most valuable template under `values`, and the best template holding each length.

    `lengths`: distinct, ascending, each in [1, max_seq_len]; `values`: one per length (the
    duals). `wanted`: the lengths (indices) whose best template is read back (None: all).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    max_items = max_seq_len // int(lengths[0]) if cap is None else min(cap, max_seq_len)
    quantized = quantize(values, max_items, len(lengths))
    index_bits = len(lengths).bit_length()
    table = _table(lengths, quantized.units, max_seq_len, cap, index_bits)
    # uncapped: the best with any number of sequences, total <= c; capped: at most cap - 1 more
    rest = table if cap is None else table[:cap].max(axis=0)
    mask = np.int64((1 << index_bits) - 1)
    best = table.max() if table.size else np.int64(0)
    best_units = max(int(best >> index_bits), 0)
    room = max_seq_len - lengths
    item_units = quantized.units + np.maximum(rest[room] >> index_bits, 0)
    chosen = np.arange(len(lengths)) if wanted is None else np.asarray(wanted, dtype=np.int64)
    templates: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(lengths)
    if chosen.size:
        if cap is None:
            starts = np.stack([np.zeros_like(chosen), room[chosen]])
        else:
            rest_layers = np.argmax(table[:cap][:, room[chosen]], axis=0)
            starts = np.stack([rest_layers, room[chosen]])
        rows, items = _backtrack(table, lengths, starts, mask, capped=cap is not None)
        rows = np.concatenate((np.arange(chosen.size), rows))  # each length itself, then the rest
        items = np.concatenate((chosen, items))
        read_back = _templates_of(rows, items, chosen.size)
        for item, template in zip(chosen.tolist(), read_back, strict=True):
            templates[item] = template
    return Pricing(quantized, best_units, item_units, templates)


def best_template_units(
    lengths: np.ndarray, units: np.ndarray, max_seq_len: int, cap: int | None
) -> int | None:
    """The exact value of the most valuable template under integer item values `units`
    (lengths distinct, ascending), or None where the values are too large for a DP cell."""
    lengths = np.asarray(lengths, dtype=np.int64)
    max_items = max_seq_len // int(lengths[0]) if cap is None else min(cap, max_seq_len)
    index_bits = len(lengths).bit_length()
    largest = int(max(units, default=0)) * max(max_items, 1)
    if largest.bit_length() + index_bits + 1 > _WORD_BITS:
        return None
    table = _table(lengths, np.asarray(units, dtype=np.int64), max_seq_len, cap, index_bits)
    return max(int(table.max()) >> index_bits, 0) if table.size else 0


def _table(
    lengths: np.ndarray, units: np.ndarray, max_seq_len: int, cap: int | None, index_bits: int
) -> np.ndarray:
    """The pricing DP's table under integer item values `units` (`_uncapped_table` or, with a
    cap, `_capped_table`), over the `staircase` of the lengths."""
    stair = staircase(units)
    if cap is None:
        return _uncapped_table(lengths, units, stair, max_seq_len, index_bits)
    return _capped_table(lengths, units, stair, max_seq_len, cap, index_bits)


def certified_bound(
    lengths: np.ndarray,
    counts: np.ndarray,
    duals: np.ndarray,
    max_seq_len: int,
    cap: int | None,
    max_denominator: int = _MAX_DENOMINATOR,
) -> int:
    """A lower bound on the bins of any packing, from `duals` (floats, one per length) read as
    the nearby fractions of denominators up to `max_denominator`, in exact arithmetic.

    A vertex of the dual LP is a vector of fractions with small denominators; the solver's
    floats are within ~1e-9 of it, which is a whole bin of error at a billion sequences, while
    the fractions are the vertex itself. With `Q` their common denominator and `units` = y Q
    (integers), the best template is worth `best` units (exact DP), and
    `ceil(sum(counts * units) / max(Q, best))` bounds the bins (Farley: scaled down by the
    best template's value where the fractions are not dual feasible), in Python integers
    whatever the counts. 0 where the fractions' common denominator is too large for the DP.
    """
    fractions = [
        Fraction(float(value)).limit_denominator(max_denominator)
        for value in np.maximum(np.asarray(duals, dtype=np.float64), 0.0).tolist()
    ]
    denominator = math.lcm(*(fraction.denominator for fraction in fractions))
    units = [fraction.numerator * (denominator // fraction.denominator) for fraction in fractions]
    best = best_template_units(lengths, np.array(units, dtype=object), max_seq_len, cap)
    if best is None or best == 0:
        return 0
    total = sum(int(count) * unit for count, unit in zip(counts.tolist(), units, strict=True))
    return -(-total // max(denominator, best))


def _templates_of(
    rows: np.ndarray, items: np.ndarray, num_rows: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each row's template, (item indices ascending, copies), from the (row, item) pairs of all
    the rows at once (one sort, no per-row `np.unique`)."""
    order = np.lexsort((items, rows))
    rows, items = rows[order], items[order]
    first = np.r_[True, (rows[1:] != rows[:-1]) | (items[1:] != items[:-1])]
    starts = np.flatnonzero(first)
    copies = np.diff(np.r_[starts, rows.size])
    rows, items = rows[starts], items[starts]
    bounds = np.searchsorted(rows, np.arange(num_rows + 1))
    return [
        (items[bounds[r] : bounds[r + 1]], copies[bounds[r] : bounds[r + 1]])
        for r in range(num_rows)
    ]


def _capped_table(
    lengths: np.ndarray,
    units: np.ndarray,
    stair: np.ndarray,
    max_seq_len: int,
    cap: int,
    index_bits: int,
) -> np.ndarray:
    """`dp[j, c]`: the best template of exactly j sequences with total length <= c, as
    `value << index_bits | last item + 1` (j = 0: the empty template, value 0)."""
    width = max_seq_len + 1
    dp = np.full((cap + 1, width), _EMPTY, dtype=np.int64)
    dp[0] = 0
    clear = np.int64(~((1 << index_bits) - 1))
    steps = [
        (int(lengths[i]), np.int64((int(units[i]) << index_bits) | (i + 1))) for i in stair.tolist()
    ]
    for layer in range(1, cap + 1):
        previous = dp[layer - 1] & clear  # the value part only: the item is replaced
        current = dp[layer]
        for length, cell in steps:
            target = current[length:]
            np.maximum(target, previous[: width - length] + cell, out=target)
    return dp


def _uncapped_table(
    lengths: np.ndarray,
    units: np.ndarray,
    stair: np.ndarray,
    max_seq_len: int,
    index_bits: int,
) -> np.ndarray:
    """`dp[c]`: the best template with total length <= c, any number of sequences, as
    `value << index_bits | last item + 1`; a length enters in pieces of 1, 2, 4, ... copies
    (so any number of copies up to max_seq_len // length is reachable)."""
    width = max_seq_len + 1
    dp = np.zeros(width, dtype=np.int64)
    clear = np.int64(~((1 << index_bits) - 1))
    for i in stair.tolist():
        length, value = int(lengths[i]), int(units[i])
        copies = 1
        while copies * length <= max_seq_len:
            shift = copies * length
            cell = np.int64(((value * copies) << index_bits) | (i + 1))
            # the right-hand side is evaluated first: a piece is added at most once
            candidate = (dp[: width - shift] & clear) + cell
            np.maximum(dp[shift:], candidate, out=dp[shift:])
            copies *= 2
    return dp


def _backtrack(
    table: np.ndarray,
    lengths: np.ndarray,
    starts: np.ndarray,
    mask: np.int64,
    *,
    capped: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The items of the templates stored at `starts` ((layer, capacity) per template; the
    layer is ignored when uncapped), all walked back one item per step at once: (row, item)
    pairs, the row numbering the templates of `starts`.

    A cell's item t was the last added to the best template of that cell, and the template
    without it is the best of the cell (layer - 1, capacity - l_t): an exact DP makes that
    so (see the module docstring).
    """
    layers, capacity = starts[0].copy(), starts[1].copy()
    rows = np.arange(capacity.size)
    found_rows: list[np.ndarray] = []
    found_items: list[np.ndarray] = []
    active = rows
    while active.size:
        cells = table[layers[active], capacity[active]] if capped else table[capacity[active]]
        items = (cells & mask) - 1
        keep = (cells >= 0) & (items >= 0)
        if capped:
            keep &= layers[active] > 0
        active, items = active[keep], items[keep]
        if not active.size:
            break
        found_rows.append(active)
        found_items.append(items)
        capacity[active] -= lengths[items]
        if capped:
            layers[active] -= 1
    if not found_rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(found_rows), np.concatenate(found_items)
