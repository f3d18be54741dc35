"""Packing: lengths in, bins or bin templates out. Pure numpy and Python; no I/O.

- `per_sequence`: the reference's per-sequence packers (`greedy_pack_sequences`,
  `heap_pack_sequences`) and `length_histogram_from_lengths`;
- `histogram`: the histogram engine (`pack_length_histogram[_batched]`) and its strategy registry;
- `groups`, `fit`, `mffd`, `patterns`, `counts`: the strategies (best/first fit over length
  groups, modified FFD, exact patterns for small `max_seq_len`, and bin counting);
- `bounds`: the one lower bound every report uses;
- `efficiency`: `PackingStats`, the summary of a packing (re-exported by `seqpack_cli.stats`);
- `online`: `pack_stream`, packing an unbounded stream with a bounded buffer.

The epoch and seeding names are re-exported here so that every name the reference imports from
`seqpack.packing` imports from `seqpack_cli.packing`.
"""

from __future__ import annotations

from seqpack_cli.epoch import EpochPlan, materialize_epoch
from seqpack_cli.packing.histogram import (
    BinTemplate,
    pack_length_histogram,
    pack_length_histogram_batched,
)
from seqpack_cli.packing.per_sequence import (
    greedy_pack_sequences,
    heap_pack_sequences,
    length_histogram_from_lengths,
    sort_indices_by_length,
)
from seqpack_cli.seeding import seed_from_components, shuffle_bins

__all__ = [
    "BinTemplate",
    "EpochPlan",
    "greedy_pack_sequences",
    "heap_pack_sequences",
    "length_histogram_from_lengths",
    "materialize_epoch",
    "pack_length_histogram",
    "pack_length_histogram_batched",
    "seed_from_components",
    "shuffle_bins",
    "sort_indices_by_length",
]
