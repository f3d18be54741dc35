"""`ClusterTuning`: the sizes the Dask engine cuts its work into, one frozen object passed down.

Nothing here changes what is written, only how the work is cut: the output is byte-identical
whatever these are (tests shrink them so that a few thousand rows make many tasks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from seqpack_cli.checks import check_int

__all__ = ["ClusterTuning"]


@dataclass(frozen=True)
class ClusterTuning:
    group_rows: int | None = None
    """Rows per file group (a histogram and a pools task each), whole files at a time; None:
    about `tasks_per_thread` groups per worker thread, at most `max_group_rows` rows each."""
    max_group_rows: int = 1 << 23
    """A group's pools task holds 8 to 26 bytes per row (`memory_ids`): 8M rows keep a task
    well under 1 GiB."""
    memory_ids: int = 1 << 23
    """A group with at most this many ids (kept rows) is ordered in memory; a larger one (a
    single file of more rows) in bounded memory, through the id map or a work file."""
    tasks_per_thread: int = 2
    """File groups per worker thread when `group_rows` is None: a few, so a slow file or worker
    does not hold the phase up."""
    footer_files: int = 64
    """Files whose footers one task reads, at most."""
    merge_ids: int = 1 << 22
    """Ids per merge task (consecutive lengths), at most: 32 MiB read from the groups' runs."""
    check_ids: int = 1 << 23
    """Ids per duplicate-check task (a range of id values), about."""
    block_ids: int = 1 << 20
    """Ids a streaming merge holds in its read blocks, over all its inputs (8 MiB)."""
    samples: int = 128
    """Sample ids each group returns so that the duplicate checks get ranges of equal size."""
    map_span_ratio: int = 4
    """A group's ids go through the id map (a counting sort) when their span is at most this
    many times their count; sparser ids are sorted."""
    wait_workers_s: int = 60
    """How long to wait for a scheduler's first worker, and mid-run, for a worker again once
    every worker is gone."""
    connect_timeout_s: int = 30
    """How long to try to reach the scheduler and hear it answer as one."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "group_rows" and value is None:
                continue
            check_int(f"ClusterTuning.{field.name}", value, minimum=1)
