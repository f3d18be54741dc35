"""Per-sequence packers: bins as lists of indices into `lengths`.

`greedy_pack_sequences` (first-fit decreasing) and `heap_pack_sequences` (worst-fit decreasing)
keep the reference's signatures and semantics. With `tolerance=1` (only exact ties shuffle) the
lengths are packed as a histogram by `pack_length_histogram_batched` and the ids of each length,
in sorted or seed-shuffled order, are dealt to the template slots with numpy: no per-sequence
Python loop, and never more bins than per-item FFD, BFD or MFFD. With `tolerance > 1` the
reference algorithm runs as written (sort with bucket shuffle, then one sequence at a time).
"""

from __future__ import annotations

import gc
import heapq
from collections import Counter
from typing import Any

import numpy as np

from seqpack_cli.checks import (
    check_max_seq_len,
    check_max_seqs_per_bin,
    check_tolerance,
    validate_length_array,
)
from seqpack_cli.packing.histogram import BinTemplate, pack_length_histogram_batched
from seqpack_cli.seeding import check_seed, numpy_seed

__all__ = [
    "greedy_pack_sequences",
    "heap_pack_sequences",
    "length_histogram_from_lengths",
    "sort_indices_by_length",
]


_MAX_BINCOUNT_LENGTH = 1 << 20
"""Lengths up to this are counted with a table indexed by length (8 MiB at most)."""


def _stable_argsort(keys: np.ndarray) -> np.ndarray:
    """`np.argsort(keys, kind="stable")` for non-negative keys; 5x faster when they fit 16 bits.

    numpy's stable sort is a radix sort for 16-bit integers (lengths <= 65535 almost always).
    """
    if keys.size and int(keys.max()) <= np.iinfo(np.uint16).max:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def sort_indices_by_length(
    lengths_arr: Any, tolerance: int = 1, seed: int | None = None
) -> np.ndarray:
    """Indices of `lengths_arr` sorted by length, longest first (int64 array).

    With `seed=None` the order is deterministic: descending length, ties by ascending index.
    With a seed, sequences are ordered by tolerance bucket (`length // tolerance`), longest
    bucket first, and shuffled within each bucket (numpy PCG64 stream, the same on every machine).

    Args:
        lengths_arr: the sequences' lengths (a 1-D sequence or array of positive integers).
        tolerance: the bucket width the seeded order shuffles within (1: exact ties only).
        seed: any int64 (see `seeding.check_seed`); None (the default): no shuffle.

    Returns:
        An int64 array of `len(lengths_arr)` indices into `lengths_arr`.

    Raises:
        InputError: for a length that is not a positive integer.
        ConfigError: for a bad `tolerance` or `seed`.
    """
    lengths = validate_length_array(lengths_arr, None)
    tolerance = check_tolerance(tolerance)
    seed = check_seed(seed)
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int64)
    if seed is None:
        return _stable_argsort(lengths.max() - lengths)
    permutation = np.random.default_rng(numpy_seed(seed)).permutation(lengths.size)
    buckets = lengths[permutation] // tolerance
    return permutation[_stable_argsort(buckets.max() - buckets)]


def length_histogram_from_lengths(lengths: Any) -> tuple[Counter[int], dict[int, np.ndarray]]:
    """`(counts, pools)` of a flat list of lengths: the in-memory input of the histogram path.

    `counts` is `Counter{length: number of sequences}`; `pools[length]` is the int64 array of
    the indices (ids) of the sequences of that length, ascending. Keys come longest first.

    Args:
        lengths: the sequences' lengths (a 1-D sequence or array of positive integers); the
            index of a length is its sequence's id.

    Returns:
        `(counts, pools)` as above; both empty for no lengths.

    Raises:
        InputError: for a length that is not a positive integer.
    """
    array = validate_length_array(lengths, None)
    if array.size == 0:
        return Counter(), {}
    order = _stable_argsort(array)  # ids grouped by length, ascending within
    values, starts, sizes = np.unique(array[order], return_index=True, return_counts=True)
    pools = {
        int(value): order[start : start + size].copy()
        for value, start, size in zip(values[::-1], starts[::-1], sizes[::-1], strict=True)
    }
    return Counter({length: int(ids.size) for length, ids in pools.items()}), pools


def greedy_pack_sequences(
    lengths: Any,
    max_seq_len: int,
    tolerance: int = 1,
    seed: int | None = None,
    *,
    max_seqs_per_bin: int | None = None,
) -> list[list[int]]:
    """First-fit decreasing: bins of indices into `lengths`, each summing to <= max_seq_len.

    `seed` shuffles sequences of equal length (or of the same `length // tolerance` bucket)
    before packing: same templates, different pairings per epoch. `max_seqs_per_bin` caps the
    number of sequences per bin. `tolerance=1` takes the histogram path (see the module notes).

    Args:
        lengths: the sequences' lengths (a 1-D sequence or array of positive integers, each at
            most `max_seq_len`); a bin holds indices into it.
        max_seq_len: the most tokens in one bin.
        tolerance: the width of the length buckets whose sequences `seed` shuffles (1, the
            default: equal lengths only).
        seed: any int64 (see `seeding.check_seed`); None (the default): ties stay in index
            order.
        max_seqs_per_bin: the most sequences in one bin; None (the default): no limit.

    Returns:
        The bins, each a list of indices into `lengths`; every index appears in exactly one.
        Empty for no lengths.

    Raises:
        InputError: for a length that is not a positive integer or exceeds `max_seq_len`.
        ConfigError: for a bad `max_seq_len`, `tolerance`, `seed` or `max_seqs_per_bin`.
    """
    return _pack_sequences(lengths, max_seq_len, tolerance, seed, max_seqs_per_bin, _first_fit)


def heap_pack_sequences(
    lengths: Any,
    max_seq_len: int,
    tolerance: int = 1,
    seed: int | None = None,
    *,
    max_seqs_per_bin: int | None = None,
) -> list[list[int]]:
    """Worst-fit decreasing (each sequence into the roomiest bin, via a max-heap).

    With `tolerance=1` this and `greedy_pack_sequences` both take the histogram path and
    return the same bins.

    Args:
        lengths, max_seq_len, tolerance, seed, max_seqs_per_bin: as for
            `greedy_pack_sequences`.

    Returns:
        The bins, as `greedy_pack_sequences` returns them (and with its errors).
    """
    return _pack_sequences(lengths, max_seq_len, tolerance, seed, max_seqs_per_bin, _worst_fit)


def _pack_sequences(
    lengths: Any,
    max_seq_len: int,
    tolerance: int,
    seed: int | None,
    max_seqs_per_bin: int | None,
    per_item: Any,
) -> list[list[int]]:
    max_seq_len = check_max_seq_len(max_seq_len)
    array = validate_length_array(lengths, max_seq_len)
    tolerance = check_tolerance(tolerance)
    seed = check_seed(seed)
    cap = check_max_seqs_per_bin(max_seqs_per_bin)
    if array.size == 0:
        return []
    if tolerance == 1:
        histogram = _histogram(array)
        templates = pack_length_histogram_batched(histogram, max_seq_len, max_seqs_per_bin=cap)
        return _deal_ids(array, templates, seed)
    order = sort_indices_by_length(array, tolerance, seed)
    return per_item(array.tolist(), order.tolist(), max_seq_len, cap)


def _histogram(lengths: np.ndarray) -> dict[int, int]:
    """`{length: count}` of a non-empty array of positive lengths, ascending."""
    if int(lengths.max()) <= _MAX_BINCOUNT_LENGTH:
        counts = np.bincount(lengths)  # fast, but sized by the longest length
        values = np.flatnonzero(counts)
        counts = counts[values]
    else:  # long lengths (up to 2**31 - 1): memory follows the number of sequences instead
        values, counts = np.unique(lengths, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def _deal_ids(
    lengths: np.ndarray, templates: Counter[BinTemplate], seed: int | None
) -> list[list[int]]:
    """Bins from templates: the ids of each length fill that length's slots, in bin order.

    Bins come template by template, longest first. Within a length the ids go in ascending
    order (seed None) or in a seeded shuffle, so a seed changes the pairings, not the templates.
    """
    ordered = sorted(templates.items(), reverse=True)
    sizes = np.array([len(template) for template, _ in ordered], dtype=np.int64)
    multiplicity = np.array([num for _, num in ordered], dtype=np.int64)
    flat_templates = np.fromiter(
        (length for template, _ in ordered for length in template), dtype=np.int64
    )
    # The packing is template after template, each repeated `multiplicity` times: slot s lies
    # in block t (its template) at offset (s - block start) % size in the template.
    block_sizes = sizes * multiplicity
    block_ends = np.cumsum(block_sizes)
    num_slots = int(block_ends[-1])
    slot_block = np.repeat(np.arange(len(ordered)), block_sizes)
    offset = (np.arange(num_slots) - (block_ends - block_sizes)[slot_block]) % sizes[slot_block]
    slot_lengths = flat_templates[(np.cumsum(sizes) - sizes)[slot_block] + offset]
    # ids grouped by length ascending (shuffled within a length when seeded), then dealt
    if seed is None:
        ids = _stable_argsort(lengths)
    else:
        permutation = np.random.default_rng(numpy_seed(seed)).permutation(lengths.size)
        ids = permutation[_stable_argsort(lengths[permutation])]
    slots = np.empty(num_slots, dtype=np.int64)
    slots[_stable_argsort(slot_lengths)] = ids
    # One reshape + tolist per template builds its bins in C. The cyclic garbage collector is
    # paused meanwhile: these millions of new (acyclic) lists would otherwise trigger repeated
    # full collections, which cost 3-4x the building itself.
    bins: list[list[int]] = []
    start = 0
    collecting = gc.isenabled()
    gc.disable()
    try:
        for size, num, end in zip(
            sizes.tolist(), multiplicity.tolist(), block_ends.tolist(), strict=True
        ):
            bins.extend(slots[start:end].reshape(num, size).tolist())
            start = end
    finally:
        if collecting:
            gc.enable()
    return bins


def _first_fit(
    lengths: list[int], order: list[int], max_seq_len: int, cap: int | None
) -> list[list[int]]:
    """Per-item first fit in `order`: the lowest-index bin with room and a free slot."""
    size = 1
    while size < len(order):
        size *= 2
    tree = [-1] * (2 * size)  # max over a subtree of "room, or -1 when full"
    bins: list[list[int]] = []
    rooms: list[int] = []
    for index in order:
        length = lengths[index]
        if tree[1] >= length:
            node = 1
            while node < size:
                node = 2 * node if tree[2 * node] >= length else 2 * node + 1
            b = node - size
            bins[b].append(index)
            rooms[b] -= length
        else:
            b = len(bins)
            bins.append([index])
            rooms.append(max_seq_len - length)
        node = b + size
        tree[node] = -1 if cap is not None and len(bins[b]) >= cap else rooms[b]
        node //= 2
        while node and tree[node] != max(tree[2 * node], tree[2 * node + 1]):
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return bins


def _worst_fit(
    lengths: list[int], order: list[int], max_seq_len: int, cap: int | None
) -> list[list[int]]:
    """Per-item worst fit in `order`: the roomiest bin with a free slot (ties: the oldest)."""
    bins: list[list[int]] = []
    heap: list[tuple[int, int]] = []  # (-room, bin index)
    for index in order:
        length = lengths[index]
        if heap and -heap[0][0] >= length:
            neg_room, b = heapq.heappop(heap)
            bins[b].append(index)
            room = -neg_room - length
        else:
            b = len(bins)
            bins.append([index])
            room = max_seq_len - length
        if cap is None or len(bins[b]) < cap:
            heapq.heappush(heap, (-room, b))
    return bins
