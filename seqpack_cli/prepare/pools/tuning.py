"""`PoolTuning`: the sizes the pools pass works in, one frozen object passed down.

The defaults are what the benchmarks (`benchmarks/bench_prepare.py`) chose on real sizes; tests
pass small values to reach every code path with a few rows (e.g. `PoolTuning(max_map_ids=0)`
sends dense ids down the scatter path). Nothing here changes what is written, only how.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from seqpack_cli.checks import check_int

__all__ = ["PoolTuning"]


@dataclass(frozen=True)
class PoolTuning:
    batch_rows: int = 1 << 21
    """Rows per Arrow batch streamed from DuckDB."""
    max_map_ids: int = 1 << 27
    """Id spans up to this use the id -> length map (`id_map`, 2 bytes per possible id: 256 MiB
    at most); wider spans are scattered by length and their pools sorted (`scatter`, `split`)."""
    map_chunk_ids: int = 1 << 22
    """Map slots per step when the map is turned into pools (about 100 MiB of work per chunk in
    flight): large, so that each pool gets a long run of ids per append, with thousands of
    pools."""
    min_append_bytes: int = 1 << 16
    """Smaller pieces of a pool wait to be written together (one write system call per piece
    costs more than the bytes: 4 KiB appends ran at half the speed of 64 KiB ones)."""
    max_batched_bytes: int = 1 << 26
    """At most this many bytes of pieces wait in memory (64 MiB), whatever the number of pools."""
    remap_rows: int = 1 << 23
    """Ids written through one mapping of the scatter's work file before it is re-mapped, so
    written pages leave this process's RSS (they stay in the page cache)."""
    unit_ids: int = 1 << 21
    """Split work unit: consecutive pools holding about this many ids (16 MiB)."""
    max_sort_ids: int = 1 << 22
    """A larger pool that needs sorting is sorted in runs of this size, then merged (32 MiB)."""
    max_table_length: int = 1 << 20
    """Lengths up to this find their pool in a table indexed by the length (4 MiB at most);
    longer lengths (up to 2**31 - 1) are searched among the sorted distinct lengths, so memory
    follows the number of distinct lengths, never the longest length."""
    check_bits_log2: int = 30
    """The duplicate-id bitmap of the scatter path has at most 2**this bits (128 MiB)."""
    max_candidates: int = 1 << 23
    """Past this many duplicate candidates from the bitmap, DuckDB checks every id instead."""
    max_workers: int = 8
    """Threads for placing and splitting, at most (and at most the cores)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            # 0 is meaningful for these two: no map at all, no table at all.
            minimum = 0 if field.name in ("max_map_ids", "max_table_length") else 1
            check_int(f"PoolTuning.{field.name}", getattr(self, field.name), minimum=minimum)
