"""Length multiples: templates packed on lengths rounded up to a multiple m.

Context parallelism pads every sequence to a multiple of `2 * cp` (`PackedCollator(format="thd")`),
so bins packed on the exact lengths can overflow once padded. With `length_multiple=m` a sequence
of l tokens takes a slot of `slot_length(l, m) = ceil(l / m) * m` tokens: templates hold slot
lengths, and a slot of length R takes any sequence whose length lies in (R - m, R] (its pool is
theirs, read as one: `seqpack_cli.prepared.slot_pools`). `max_seq_len` must be a multiple of m
(otherwise the last `max_seq_len % m` tokens of every bin could never be used; the error says the
multiple to pass).

The packing figures (`slot_stats`) count the real tokens: efficiency is real tokens over
bins * max_seq_len, and `multiple_padding` is what the multiple costs (slots minus real tokens).

Part of the training-time runtime: imports neither duckdb nor rich.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

from seqpack_cli.checks import check_int
from seqpack_cli.errors import ConfigError, SeqpackError, option

__all__ = [
    "check_length_multiple",
    "multiple_padding",
    "pack_slots",
    "slot_counts",
    "slot_length",
    "slot_stats",
    "with_real_tokens",
]


def check_length_multiple(
    value: Any, max_seq_len: int, *, error: type[SeqpackError] = ConfigError, where: str = ""
) -> int:
    """`length_multiple` as an int >= 1 (None is 1) that divides `max_seq_len`, or `error`
    naming the multiple to pass. `where` prefixes the message (e.g. the directory)."""
    if value is None:
        return 1
    name = option("length_multiple")
    multiple = check_int(
        f"{where}{name}",
        value,
        minimum=1,
        fix="pass the multiple every sequence is padded to (2 * cp_size with context "
        "parallelism), or leave it unset for 1",
        error=error,
    )
    if max_seq_len % multiple:
        usable = max_seq_len // multiple * multiple
        fix = (
            f"pass {option(f'max_seq_len {usable}', python=f'max_seq_len={usable}')}"
            if usable
            else f"raise {option('max_seq_len')} to at least {multiple}"
        )
        raise error(
            f"{where}{name} {multiple} does not divide {option('max_seq_len')} {max_seq_len}: "
            f"every slot is a multiple of {multiple} tokens, so a bin could hold at most "
            f"{usable}; {fix} (a multiple of {multiple}), or a {name} that divides {max_seq_len}"
        )
    return multiple


def slot_length(length: int, multiple: int) -> int:
    """The slot a sequence of `length` tokens takes: `length` rounded up to `multiple`."""
    return -(-length // multiple) * multiple


def slot_counts(counts: Mapping[int, int], multiple: int) -> dict[int, int]:
    """The histogram of slot lengths (ascending) of the histogram `counts` of real lengths."""
    slots: dict[int, int] = {}
    for length, count in counts.items():
        if count:
            slot = slot_length(int(length), multiple)
            slots[slot] = slots.get(slot, 0) + int(count)
    return dict(sorted(slots.items()))


def multiple_padding(counts: Mapping[int, int], multiple: int) -> int:
    """Tokens of padding the multiple adds: the slots' tokens minus the real tokens."""
    return sum(
        (slot_length(int(length), multiple) - int(length)) * int(count)
        for length, count in counts.items()
    )


def pack_slots(
    counts: Mapping[int, int],
    max_seq_len: int,
    *,
    max_seqs_per_bin: int | None,
    packer: str = "batched",
    length_multiple: int = 1,
) -> Counter[tuple[int, ...]]:
    """The templates `prepare` packs the real-length histogram `counts` into: its packer
    (`batched` or `per-item`) on the slot lengths of `length_multiple`."""
    from seqpack_cli.packing.histogram import (
        pack_length_histogram,
        pack_length_histogram_batched,
    )

    pack = pack_length_histogram_batched if packer == "batched" else pack_length_histogram
    return pack(
        slot_counts(counts, length_multiple), max_seq_len, max_seqs_per_bin=max_seqs_per_bin
    )


def slot_stats(
    templates: Any,
    counts: Mapping[int, int],
    max_seq_len: int,
    *,
    max_seqs_per_bin: int | None,
) -> Any:
    """`PackingStats` of templates of slot lengths, with the token figures of the real lengths
    `counts` (`with_real_tokens`)."""
    from seqpack_cli.packing.efficiency import PackingStats

    stats = PackingStats.from_templates(templates, max_seq_len, max_seqs_per_bin=max_seqs_per_bin)
    return with_real_tokens(stats, counts)


def with_real_tokens(stats: Any, counts: Mapping[int, int]) -> Any:
    """`stats` (a `PackingStats` of slot lengths) with tokens, capacity, efficiency and padding
    counted on the real lengths `counts`; bins, fullness and bound stay the slots'."""
    from seqpack_cli.packing.efficiency import fill_figures

    real_tokens = sum(int(length) * int(count) for length, count in counts.items())
    if real_tokens == stats.num_tokens:
        return stats
    figures = fill_figures(stats.num_bins, stats.num_sequences, real_tokens, stats.max_seq_len)
    keys = ("num_tokens", "capacity", "efficiency", "padding", "padding_ratio")
    return dataclasses.replace(stats, **{key: figures[key] for key in keys})
