"""Packing: lengths in, bins or bin templates out. Pure numpy and Python; no I/O.

- `per_sequence`: the reference's per-sequence packers (`greedy_pack_sequences`,
  `heap_pack_sequences`) and `length_histogram_from_lengths`;
- `histogram`: the histogram engine (`pack_length_histogram[_batched]`), the greedy engine alone
  (`pack_length_histogram_greedy`) and its strategy registry;
- `groups`, `fit`, `mffd`, `patterns`: the greedy strategies, on groups of identical bins
  (`groups`): best/first fit decreasing, modified FFD, and the pattern heuristic that closes bins
  exactly;
- `lp` (`lp_lower_bound`), `column_generation`, `pricing`, `lp_rounding`: the LP relaxation
  (Gilmore and Gomory, by column generation) the engine packs from where the greedy engine misses
  the cheap bound by more than 0.01%, and the LP lower bound;
- `coarsening`: the LP's coarser levels (lengths rounded up in groups);
  `bin_exchange`: exchanges between groups of bins that gather a capped packing's slack;
  `slot_patterns`: the pattern heuristic for capped histograms;
- `bounds`: the cheap lower bounds, computed in one place; `dff`: bounds from dual-feasible
  functions;
- `packed`: `PackedTemplates`, the engine's result: its templates and the bound it proved (the LP
  bound where it solved the LP), which every report of that packing shows;
- `efficiency`: `PackingStats`, the summary of a packing (re-exported by `seqpack_cli.stats`);
- `online`: `pack_stream`, packing an unbounded stream with a bounded buffer.

The epoch and seeding names are re-exported here so that every name the reference imports from
`seqpack.packing` imports from `seqpack_cli.packing`. They resolve lazily (PEP 562), so the modules
of this package (which the prepare job imports) never load the epoch machinery they do not use.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BinTemplate": "seqpack_cli.packing.histogram",
    "pack_length_histogram": "seqpack_cli.packing.histogram",
    "pack_length_histogram_batched": "seqpack_cli.packing.histogram",
    "pack_length_histogram_greedy": "seqpack_cli.packing.histogram",
    "greedy_pack_sequences": "seqpack_cli.packing.per_sequence",
    "heap_pack_sequences": "seqpack_cli.packing.per_sequence",
    "length_histogram_from_lengths": "seqpack_cli.packing.per_sequence",
    "sort_indices_by_length": "seqpack_cli.packing.per_sequence",
    "EpochPlan": "seqpack_cli.epoch",
    "materialize_epoch": "seqpack_cli.epoch",
    "seed_from_components": "seqpack_cli.seeding",
    "shuffle_bins": "seqpack_cli.seeding",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'seqpack_cli.packing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # cache: later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
