"""Which bins of an epoch this process makes: its data-parallel rank and its DataLoader worker.

`rank_and_world_size` fills in the rank and world size from `torch.distributed` when the caller
leaves them out. `EpochPlan(..., rank=r, world_size=...)` then gives the rank its bins, and
`deal_bins` splits those among the DataLoader's workers: worker w of W yields the bins k with
(k - start) % W == w, so torch's in-order DataLoader, which takes one item from each worker in
turn, hands the training loop bins start, start+1, start+2, ... whatever W.

Used by `seqpack_cli.data`; imports torch, so import it only where torch is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch.distributed as dist
from torch.utils.data import get_worker_info

from seqpack_cli.epoch.plan import EpochPlan

__all__ = ["WorkerShare", "deal_bins", "rank_and_world_size", "worker_share"]

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


def deal_bins(plan: EpochPlan, start: int, share: WorkerShare) -> Iterator[tuple[int, list[int]]]:
    """`(k, bin k)` for the bins k >= `start` of `plan` that `share`'s worker makes, in order.

    Bins are computed in vectorised chunks of `_CHUNK_BINS` per worker, never one at a time.
    """
    step = _CHUNK_BINS * share.num_workers
    for first in range(start, len(plan), step):
        bins = plan.bins(first, first + step)
        for offset in range(share.worker, len(bins), share.num_workers):
            yield first + offset, bins[offset]
