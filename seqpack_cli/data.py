"""Torch datasets over packed epochs: one collated row per bin.

`source` is a prepared directory as `load_prepared` returns it (`Prepared`), or a
`(templates, pools)` pair. Each epoch's bins come from `EpochPlan(templates, pools,
seed_from_components(seed, epoch), ...)`, so the pairings change every epoch, are the same in
every process, and bin k is computed directly (no epoch is ever materialised).

An item is `collator([bin])`: the dict `PackedCollator` gives for a batch of ONE bin, so it keeps
the batch dimension (`input_ids` is `[1, max_seq_len]` with format="padded", `[1, num_tokens]`
with "padding_free"; `cu_seqlens` and `max_seqlen` describe that one row). Load it with
`DataLoader(dataset, batch_size=None)`: each step gets one packed row, ready for the model.
For B rows per step, batch bins before collating: `DataLoader(dataset.plan, batch_size=B,
collate_fn=dataset.collator)` (an `EpochPlan` is a map-style dataset of bins), or accumulate
gradients over B steps.

This module imports torch (the datasets subclass torch's `Dataset` and `IterableDataset`);
import it only where torch is installed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from seqpack_cli.checks import check_int
from seqpack_cli.collate import PackedCollator
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError
from seqpack_cli.seeding import seed_from_components
from seqpack_cli.sharding import deal_bins, rank_and_world_size, worker_share

__all__ = ["PackedDataset", "PackedIterableDataset"]

logger = logging.getLogger(__name__)

# The integers a state holds; the last four only check that the state fits this dataset.
_STATE_KEYS = ("epoch", "num_bins_consumed", "num_bins", "seed", "rank", "world_size")


def _split_source(source: Any) -> tuple[Any, Mapping[int, Any], int | None, Path | None]:
    """(templates, pools, the prepared max_seq_len, the prepared path) from either source."""
    if hasattr(source, "templates") and hasattr(source, "pools"):
        path = getattr(source, "path", None)
        return (
            source.templates,
            source.pools,
            getattr(source, "max_seq_len", None),
            None if path is None else Path(path).absolute(),
        )
    if isinstance(source, (tuple, list)) and len(source) == 2:
        return source[0], source[1], None, None
    raise ConfigError(
        f"source is a {type(source).__name__}; expected what load_prepared returns or a "
        "(templates, pools) pair"
    )


class _PackedEpochs:
    """What both datasets share: the source, the collator, the seed and the current epoch's plan."""

    def __init__(
        self,
        source: Any,
        token_source: Any,
        *,
        max_seq_len: int | None,
        pad_token_id: int,
        seed: int,
        epoch: int,
        rank: int,
        world_size: int,
        drop_last: bool,
        label_pad_id: int,
        format: str,
        return_loss_weights: bool,
        max_num_seqs: int | None,
    ) -> None:
        self._templates, self._pools, prepared_max_seq_len, self._prepared_path = _split_source(
            source
        )
        if max_seq_len is None:
            if prepared_max_seq_len is None:
                raise ConfigError(
                    "max_seq_len is not set and the source is a (templates, pools) pair; pass "
                    "max_seq_len=... (the length the templates were packed for)"
                )
            max_seq_len = prepared_max_seq_len
        self.seed = check_int("seed", seed, minimum=0)
        self.rank, self.world_size, self.drop_last = rank, world_size, bool(drop_last)
        self.collator = PackedCollator(
            token_source,
            max_seq_len,
            pad_token_id,
            label_pad_id=label_pad_id,
            format=format,
            return_loss_weights=return_loss_weights,
            max_num_seqs=max_num_seqs,
        )
        self.max_seq_len = self.collator.max_seq_len
        self._epoch = check_int("epoch", epoch, minimum=0)
        self._plan: EpochPlan | None = None
        # Built now, so bad templates/pools/rank fail here rather than inside a worker.
        plan = self.plan
        if plan.max_seq_len_needed > self.max_seq_len:
            raise ConfigError(
                f"max_seq_len={self.max_seq_len} but the templates hold bins of up to "
                f"{plan.max_seq_len_needed} tokens; pass the max_seq_len they were packed for "
                f"(at least {plan.max_seq_len_needed})"
            )

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def plan(self) -> EpochPlan:
        """The current epoch's plan (this rank's bins), built once per epoch."""
        if self._plan is None:
            self._plan = EpochPlan(
                self._templates,
                self._pools,
                seed_from_components(self.seed, self._epoch),
                rank=self.rank,
                world_size=self.world_size,
                drop_last=self.drop_last,
            )
        return self._plan

    def _switch_epoch(self, epoch: Any) -> bool:
        """Make `epoch` current; True when it changed."""
        epoch = check_int("epoch", epoch, minimum=0)
        if epoch == self._epoch:
            return False
        self._epoch, self._plan = epoch, None
        return True

    def __getstate__(self) -> dict[str, Any]:
        # What a worker started with "spawn"/"forkserver" receives. The plan is cheap to rebuild,
        # and the pools of a prepared directory are re-opened (memory-mapped) on the other side
        # rather than copied: pickling a mapped array would copy every id into every worker.
        state = self.__dict__.copy()
        state["_plan"] = None
        if self._prepared_path is not None:
            state["_pools"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._pools is None:
            from seqpack_cli.prepared import load_prepared

            self._pools = load_prepared(self._prepared_path).pools


class PackedDataset(_PackedEpochs, Dataset):
    """Map-style: `ds[k]` is `ds.collator([ds.plan[k]])`, bin k of the current epoch, collated.

    Items keep a batch dimension of one (see the module docstring): use
    `DataLoader(ds, batch_size=None)`. Call `set_epoch(epoch)` before each epoch (before
    `iter(loader)`, as workers copy the dataset when the iteration starts); the epoch's seed is
    `seed_from_components(seed, epoch)`. The dataset is the whole epoch: for several ranks use
    `PackedIterableDataset`, or a `DistributedSampler(ds, shuffle=False)` (the order is already
    seeded).

    Args:
        source: `load_prepared(...)`'s result, or a `(templates, pools)` pair.
        token_source: sequence id -> tokens (see `seqpack_cli.collate`).
        max_seq_len: row length; defaults to the prepared directory's (required for a pair).
        pad_token_id, label_pad_id, format, return_loss_weights, max_num_seqs: as for
            `PackedCollator`.
        seed: the run's seed (an integer >= 0); epoch e uses `seed_from_components(seed, e)`.
        epoch: the initial epoch.
    """

    def __init__(
        self,
        source: Any,
        token_source: Any,
        *,
        pad_token_id: int,
        seed: int,
        max_seq_len: int | None = None,
        epoch: int = 0,
        label_pad_id: int = -100,
        format: str = "padded",
        return_loss_weights: bool = False,
        max_num_seqs: int | None = None,
    ) -> None:
        super().__init__(
            source,
            token_source,
            max_seq_len=max_seq_len,
            pad_token_id=pad_token_id,
            seed=seed,
            epoch=epoch,
            rank=0,
            world_size=1,
            drop_last=False,
            label_pad_id=label_pad_id,
            format=format,
            return_loss_weights=return_loss_weights,
            max_num_seqs=max_num_seqs,
        )

    def set_epoch(self, epoch: int) -> None:
        """Use epoch `epoch`'s pairings and order from now on."""
        self._switch_epoch(epoch)

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, k: int) -> dict[str, Any]:
        return self.collator([self.plan[k]])

    def __repr__(self) -> str:
        return f"PackedDataset(bins={len(self)}, epoch={self._epoch}, {self.collator!r})"


class PackedIterableDataset(_PackedEpochs, IterableDataset):
    """One collated row per bin, the epoch split across ranks and DataLoader workers.

    Sharding (`seqpack_cli.sharding`): rank r of `world_size` takes `EpochPlan(..., rank=r,
    world_size=...)`'s bins (as torch's `DistributedSampler`: disjoint, the same count on every
    rank, the last ones wrapped around unless `drop_last=True`). Its bins k = start, start+1, ...
    are dealt to the DataLoader's W workers in turn: worker w yields the bins k with
    (k - start) % W == w. Nothing is lost or repeated beyond what the rank sharding does. torch's
    DataLoader (with `batch_size=None` and in-order loading, the default) takes one item from
    each worker in turn, so the training loop receives bins start, start+1, start+2, ...
    exactly: the rank's global order, whatever W.

    Resume: `state_dict()` is a few integers, `{"epoch", "num_bins_consumed", ...}`, where
    `num_bins_consumed` counts the bins of this rank's epoch (in its global order) that the
    training loop has taken; `load_state_dict(state)` makes the next pass start right after them,
    so a resumed run sees exactly the rest of the epoch. Each pass (each `iter(loader)`) starts
    at that resume point (0 after `set_epoch` of a new epoch).
    - num_workers=0: the dataset is iterated in the training process and counts by itself;
      `ds.state_dict()` is exact at any time.
    - num_workers>0: the items are made in worker processes, which the training process's
      dataset cannot see; count the rows taken from the DataLoader in this pass and pass the
      count: `ds.state_dict(num_bins_taken=n)` (n = `step + 1` with
      `for step, row in enumerate(loader)`). Keep `batch_size=None` and in-order loading so that
      the rows taken are the first n of the pass. `persistent_workers=True` would keep the
      workers' copies across `set_epoch`/`load_state_dict`: leave it off.

    Args:
        source, token_source, max_seq_len, pad_token_id, seed, epoch, label_pad_id, format,
            return_loss_weights, max_num_seqs: as for `PackedDataset`.
        rank, world_size: this process's data-parallel rank and their number; default to
            `torch.distributed`'s when it is initialised (else 0 and 1).
        drop_last: drop the bins that do not divide evenly across ranks instead of wrapping.
    """

    def __init__(
        self,
        source: Any,
        token_source: Any,
        *,
        pad_token_id: int,
        seed: int,
        max_seq_len: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        epoch: int = 0,
        label_pad_id: int = -100,
        format: str = "padded",
        return_loss_weights: bool = False,
        max_num_seqs: int | None = None,
    ) -> None:
        rank, world_size = rank_and_world_size(rank, world_size)
        super().__init__(
            source,
            token_source,
            max_seq_len=max_seq_len,
            pad_token_id=pad_token_id,
            seed=seed,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            label_pad_id=label_pad_id,
            format=format,
            return_loss_weights=return_loss_weights,
            max_num_seqs=max_num_seqs,
        )
        self._start = 0  # where the next pass begins, in this rank's order
        self._position = 0  # bins consumed, counted when iterated in this process

    def set_epoch(self, epoch: int) -> None:
        """Move to epoch `epoch` (its first bin); setting the current epoch again changes
        nothing, so `load_state_dict(state)` followed by `set_epoch(state["epoch"])` resumes."""
        if self._switch_epoch(epoch):
            self._start = self._position = 0

    @property
    def num_bins(self) -> int:
        """Bins of this rank in the whole epoch."""
        return len(self.plan)

    def __len__(self) -> int:
        """Rows the next pass yields (on this rank, all workers together)."""
        return len(self.plan) - self._start

    def __iter__(self) -> Iterator[dict[str, Any]]:
        share = worker_share()
        counting = share.in_main_process  # only the training process's own iteration is the truth
        if counting:
            self._position = self._start
        for k, bin_ids in deal_bins(self.plan, self._start, share):
            row = self.collator([bin_ids])
            if counting:
                # Counted before the yield: once the consumer holds bin k, k + 1 are done.
                self._position = k + 1
            yield row

    def state_dict(self, num_bins_taken: int | None = None) -> dict[str, int]:
        """The resume state, a dict of ints; see the class docstring.

        Args:
            num_bins_taken: with DataLoader workers, the rows taken from the DataLoader since
                this pass began. None (num_workers=0): the dataset's own count.
        """
        if num_bins_taken is None:
            consumed = self._position
        else:
            taken = check_int("num_bins_taken", num_bins_taken, minimum=0)
            consumed = self._start + taken
            if consumed > len(self.plan):
                raise ConfigError(
                    f"num_bins_taken={taken} but this pass has only {len(self)} bins (from bin "
                    f"{self._start} of {len(self.plan)}); pass the number of rows taken from the "
                    "DataLoader in this pass"
                )
        return {
            "epoch": self._epoch,
            "num_bins_consumed": consumed,
            "num_bins": len(self.plan),
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume: the next pass starts right after the bins `state` says were consumed."""
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ConfigError(
                f"state is missing {', '.join(missing)}; expected the dict state_dict() returned"
            )
        for key in ("seed", "rank", "world_size"):
            if state[key] != getattr(self, key):
                raise ConfigError(
                    f"state was saved with {key}={state[key]} but this dataset has {key}="
                    f"{getattr(self, key)}; resume with the same {key} (a different one gives "
                    "different bins, so the saved position would not mean the same data)"
                )
        self._switch_epoch(state["epoch"])
        num_bins = len(self.plan)
        consumed = check_int("num_bins_consumed", state["num_bins_consumed"], minimum=0)
        if state["num_bins"] != num_bins or consumed > num_bins:
            raise ConfigError(
                f"state has num_bins={state['num_bins']} and num_bins_consumed={consumed} but "
                f"this dataset's epoch has {num_bins} bins on this rank; resume with the same "
                "prepared data, drop_last and world size"
            )
        self._start = self._position = consumed
        logger.debug(
            "resuming epoch %d at bin %d of %d (rank %d of %d)",
            self._epoch,
            consumed,
            num_bins,
            self.rank,
            self.world_size,
        )

    def __repr__(self) -> str:
        return (
            f"PackedIterableDataset(bins={self.num_bins}, start={self._start}, "
            f"epoch={self._epoch}, rank={self.rank}, world_size={self.world_size}, "
            f"{self.collator!r})"
        )
