"""Which bins of an epoch this process makes: its data-parallel rank and its DataLoader worker.

`rank_and_world_size` fills in the rank and world size from `torch.distributed` when the caller
leaves them out. `EpochPlan(..., rank=r, world_size=...)` then gives the rank its bins, and
`deal_batches` splits those among the DataLoader's workers: from the pass's first bin `start`,
batch j holds the `batch_size` bins `start + j*B .. start + (j+1)*B - 1` (the last batch may be
shorter), and worker w of W makes the batches j with j % W == w. torch's in-order DataLoader
takes one item from each worker in turn, so the training loop receives batches 0, 1, 2, ...:
the rank's bins in order, whatever W.

Used by `seqpack_cli.data`; imports torch, so import it only where torch is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch.distributed as dist
from torch.utils.data import get_worker_info

from seqpack_cli.epoch.plan import EpochPlan

__all__ = ["WorkerShare", "deal_batches", "rank_and_world_size", "worker_share"]

# Bins computed per vectorised EpochPlan.bins call, per DataLoader worker: each call has a fixed
# cost of ~0.7 ms, so small chunks cost 10-15 us per bin and 512-bin chunks ~2 us.
_CHUNK_BINS = 512


def rank_and_world_size(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """`rank` and `world_size`, each taken from torch.distributed where not given and
    initialised (else 0 and 1)."""
    initialised = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    if world_size is None:
        world_size = dist.get_world_size() if initialised else 1
    return rank, world_size


@dataclass(frozen=True)
class WorkerShare:
    """This process's place among the DataLoader's workers: worker `worker` of `num_workers`."""

    num_workers: int
    worker: int
    in_main_process: bool
    """True when no DataLoader worker runs this code (num_workers=0): the training process
    iterates the dataset itself and so sees exactly which bins were consumed."""


def worker_share() -> WorkerShare:
    """The share of the DataLoader worker this code runs in (one share of one outside workers)."""
    info = get_worker_info()
    if info is None:
        return WorkerShare(num_workers=1, worker=0, in_main_process=True)
    return WorkerShare(num_workers=info.num_workers, worker=info.id, in_main_process=False)


def batch_stop(num_bins: int, start: int, batch_size: int, drop_remainder: bool) -> int:
    """The bin after the last one a pass from `start` yields: `num_bins`, or with
    `drop_remainder` the end of the last full batch."""
    if not drop_remainder:
        return num_bins
    return start + (num_bins - start) // batch_size * batch_size


def deal_batches(
    plan: EpochPlan,
    start: int,
    batch_size: int,
    share: WorkerShare,
    *,
    drop_remainder: bool = False,
) -> Iterator[tuple[int, list[list[int]]]]:
    """`(end, bins)` for the batches of `plan` from bin `start` that `share`'s worker makes, in
    order: `bins` is a list of up to `batch_size` consecutive bins (fewer only in the last
    batch, which `drop_remainder` leaves out) and `end` the bin after them.

    Bins are computed in vectorised chunks of about `_CHUNK_BINS` per worker, never one at a
    time; each chunk is a whole number of rounds (one batch per worker), so every worker sees
    the same chunk boundaries.
    """
    stop = batch_stop(len(plan), start, batch_size, drop_remainder)
    round_bins = batch_size * share.num_workers
    step = max(1, _CHUNK_BINS // batch_size) * round_bins
    for first in range(start, stop, step):
        bins = plan.bins(first, min(first + step, stop))
        for offset in range(share.worker * batch_size, len(bins), round_bins):
            batch = bins[offset : offset + batch_size]
            yield first + offset + len(batch), batch
