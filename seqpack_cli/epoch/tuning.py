"""The tunables of an epoch plan (`EpochTuning`): batch sizes, look-up tables, list layout.

None of them changes a single bin: an `EpochPlan` gives the same bins, in the same order, for
every tuning; they trade memory for speed. The defaults are the measured optimum on one core
(see `benchmarks/bench_epoch.py`); tests pass small values to force many batch, block and
group boundaries through small epochs.
"""

from __future__ import annotations

import dataclasses
import math

from seqpack_cli.checks import check_int

__all__ = ["MAX_LIST_BINS", "EpochTuning"]

MAX_LIST_BINS = 256
"""The largest `EpochTuning.list_bins`: a bin's place in its block of lists is then an int from
Python's small-int cache (0..256), so putting a block back in order allocates nothing."""


@dataclasses.dataclass(frozen=True)
class EpochTuning:
    """How an `EpochPlan` computes its bins (`seqpack_cli.epoch.plan`); every field is an int,
    checked at construction (`ConfigError` otherwise).

    Bins are computed in batches of about `ids_per_length` ids per distinct length (numpy calls
    are made per length present in a batch, and per cycle-walking round, and must each do enough
    work to amortise their overhead), within [`min_batch_ids`, `batch_ids`] ids and at most
    `max_batch_bins` bins: see `batch_bins`. The caps bound the work arrays of an iteration
    (`seqpack_cli.epoch.scratch`): ~10 int64 arrays per id and per bin of a batch, 35-50 MiB at
    the defaults.
    """

    ids_per_length: int = 256
    """Ids per distinct length a batch aims for."""
    batch_ids: int = 1 << 19
    """The most ids in a batch."""
    min_batch_ids: int = 1 << 16
    """The fewest ids a batch aims for, however few the lengths."""
    max_batch_bins: int = 1 << 18
    """The most bins in a batch."""
    merged_pool_ids: int = 1 << 20
    """The smallest pools are copied into one in-RAM array of at most this many ids (8 MiB), read
    with one `take` per batch for all of them (`seqpack_cli.epoch.pools`); 0 copies none."""
    min_merged_pools: int = 16
    """...and only when at least this many pools fit in it."""
    buckets_per_template: int = 32
    """Canonical bin -> template look-up (`seqpack_cli.epoch.tables`): a table over buckets of
    2**shift bins, at least this many buckets per template (at most `max_buckets`), so that ~2%
    of the bins fall in a bucket that straddles two templates (those, and only those, fall back
    to a binary search: ~3 ns per bin on average instead of ~8 with 8 buckets per template).
    int32 entries: 128-256 bytes per template."""
    max_buckets: int = 1 << 20
    """The most buckets of the look-up table."""
    list_bins: int = 256
    """Bins turned into Python lists at a time while iterating (1 to `MAX_LIST_BINS`; see
    `seqpack_cli.epoch.batches.Chunk`). The lists of a block are alive together while the
    consumer walks through it; small blocks keep few of them alive at each collection of the
    cyclic GC, which would otherwise promote and re-traverse them (1024-bin blocks iterate
    ~10-30% slower than 256-bin ones)."""
    min_group_bins: int = 24
    """A bin size gets its own group in a block's layout (see `Chunk`) when the batch has at
    least this many bins of it per block on average; one `tolist` call per group and block costs
    about as much as slicing a dozen bins from a flat list. 0 groups every size."""

    def __post_init__(self) -> None:
        minimums = {"merged_pool_ids": 0, "min_group_bins": 0}
        for field in dataclasses.fields(self):
            maximum = MAX_LIST_BINS if field.name == "list_bins" else None
            value = check_int(
                f"EpochTuning.{field.name}",
                getattr(self, field.name),
                minimum=minimums.get(field.name, 1),
                maximum=maximum,
                fix=f"pass another {field.name}, or leave it at its default ({field.default})",
            )
            object.__setattr__(self, field.name, value)  # a numpy integer becomes an int

    def batch_bins(self, num_lengths: int, num_sequences: int, num_bins: int) -> int:
        """Bins per batch of a plan of `num_bins` bins holding `num_sequences` ids of
        `num_lengths` distinct lengths."""
        mean_size = math.ceil(num_sequences / num_bins) if num_bins else 1
        batch_ids = min(self.batch_ids, max(self.min_batch_ids, self.ids_per_length * num_lengths))
        return max(1, min(self.max_batch_bins, batch_ids // mean_size))
