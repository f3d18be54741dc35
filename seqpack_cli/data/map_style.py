"""`PackedDataset`: the current epoch's bins as a map-style torch dataset, one row per item."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.utils.data import Dataset

from seqpack_cli.collate import CollateOptions
from seqpack_cli.data.epochs import PackedEpochs, collate_options, rows_per_rank_option
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW

__all__ = ["PackedDataset"]

_BLOCK_BINS = 256
"""Bins computed at once for reads in order (see `PackedDataset._bin`)."""
_MAX_STRIDE = 64
"""A read at most this far past the previous one counts as in order (a worker's share)."""


class PackedDataset(PackedEpochs, Dataset):
    """Map-style: `ds[k]` is `ds.collator([ds.plan[k]])`, bin k of the current epoch, collated.

    Items keep a batch dimension of one (see `seqpack_cli.data`): use
    `DataLoader(ds, batch_size=None)`, or for B rows per step
    `DataLoader(ds.plan, batch_size=B, collate_fn=ds.collator)` (the plan is a map-style
    dataset of bins). Call `set_epoch(epoch)` before each epoch (before `iter(loader)`, as
    workers copy the dataset when the iteration starts); the epoch's seed is
    `seed_from_components(seed, epoch)`. The dataset is the whole epoch: for several ranks, for
    batches made in the workers and for exact resume use `PackedIterableDataset` with
    `PackedDataLoader`, or a `DistributedSampler(ds, shuffle=False)` (the order is already
    seeded).

    Args:
        source: `load_prepared(...)`'s result, a prepared directory's path, or a
            `(templates, pools)` pair.
        token_source: sequence id -> tokens (see `seqpack_cli.collate`); None (the default):
            the prepared directory's token store (`prepare --tokens-column`), with its labels or
            loss mask unless `labels_source` / `loss_mask_source` is given.
        max_seq_len: row length; defaults to the prepared directory's (required for a pair).
        collate: the collator's options, a `CollateOptions` (`pad_token_id`, `format`,
            `label_pad_id`, `return_loss_weights`, `max_num_seqs`, `pad_to`, `truncate`,
            `cp_size`, `cp_rank`, `length_multiple`: see `PackedCollator`). `truncate=None`
            (the default) truncates exactly when the source was prepared with
            `--over-cap truncate`; with format="thd" every context-parallel rank of a
            data-parallel rank reads the same bins and gets its share of each, and
            `num_items_in_batch` stays the step's targets over all ranks. The same options as
            keywords of the dataset still work, each with a `DeprecationWarning`.
        labels_source, loss_mask_source: per-token labels or a loss mask, as for
            `PackedCollator`.
        seed: the run's seed (any int64); epoch e uses `seed_from_components(seed, e)`.
        epoch: the initial epoch.
        verify: check every file's sha256 first (`load_prepared(..., verify=True)`: reads
            every byte, ~0.3 s per GB here); every load already checks sizes, structure and
            the token store's first and last MiB.
        rows_per_rank, grad_accum, return_num_items_in_batch: with
            `return_num_items_in_batch`, item k carries `num_items_in_batch`, the loss targets
            of its optimizer step: the items k with the same `k // (rows_per_rank *
            grad_accum)`, i.e. `grad_accum` batches of `rows_per_rank` rows (the DataLoader's
            batch size; `seqpack_cli.data.targets`).
        balance, cost_per_token, balance_window: as for `PackedIterableDataset` (one rank here:
            "cost" only groups rows of like attention cost into steps of `rows_per_rank`).
        batch_size: `rows_per_rank`'s name before: deprecated, with a `DeprecationWarning`.
        **collator_options: `CollateOptions`' fields as keywords, the way before `collate=`:
            deprecated, each with a `DeprecationWarning`; not with `collate=` (`ConfigError`).
    """

    def __init__(
        self,
        source: Any,
        token_source: Any = None,
        *,
        seed: int,
        collate: CollateOptions | None = None,
        max_seq_len: int | None = None,
        epoch: int = 0,
        labels_source: Any = None,
        loss_mask_source: Any = None,
        verify: bool = False,
        rows_per_rank: int = 1,
        grad_accum: int = 1,
        return_num_items_in_batch: bool = False,
        balance: str | None = None,
        cost_per_token: float | None = None,
        balance_window: int = DEFAULT_BALANCE_WINDOW,
        batch_size: int | None = None,
        **collator_options: Any,
    ) -> None:
        rows_per_rank = rows_per_rank_option(
            "PackedDataset",
            rows_per_rank,
            batch_size,
            fix="pass the rows per training step (the DataLoader's batch size)",
        )
        super().__init__(
            source,
            token_source,
            collate=collate_options("PackedDataset", collate, collator_options),
            max_seq_len=max_seq_len,
            seed=seed,
            epoch=epoch,
            rank=0,
            world_size=1,
            drop_last=False,
            labels_source=labels_source,
            loss_mask_source=loss_mask_source,
            verify=verify,
            rows_per_rank=rows_per_rank,
            grad_accum=grad_accum,
            return_num_items_in_batch=return_num_items_in_batch,
            balance=balance,
            cost_per_token=cost_per_token,
            balance_window=balance_window,
        )
        # (plan, first bin, its bins, the last bin read, reads in order): see `_bin`.
        self._block: tuple[Any, int, list[list[int]], int, int] = (None, 0, [], -1, 0)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_block"] = (None, 0, [], -1, 0)  # it holds the plan, which workers rebuild
        return state

    def set_epoch(self, epoch: int) -> None:
        """Use epoch `epoch`'s pairings and order from now on.

        Args:
            epoch: the epoch, an int >= 0.
        """
        self._switch_epoch(epoch)

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, k: int) -> dict[str, Any]:
        item = self.collator([self._bin(k)])
        if self.return_num_items_in_batch:
            index = operator.index(k)
            step = (index + len(self) if index < 0 else index) // self.rows_per_rank
            count = self.num_items_in_batch(step)
            item["num_items_in_batch"] = torch.tensor(count, dtype=torch.int64)
        return item

    def _bin(self, k: int) -> list[int]:
        """`plan[k]`, from a block of bins computed at once when the items are read in order.

        One bin at a time, the plan costs ~100 us per bin, as much as collating it; a block of
        `_BLOCK_BINS` bins computed together (`EpochPlan.bins`) costs ~15 us per bin, but ~4 ms
        at once. So a block is computed only once the reads are seen to go in order: twice in a
        row a little past the previous one (in order, or a DataLoader worker's share: every
        W-th item); random reads take their bin alone.
        """
        plan = self.plan
        index = operator.index(k)
        index = index + len(plan) if index < 0 else index
        cached_plan, start, block, last, streak = self._block
        if cached_plan is not plan:
            start, block, last, streak = 0, [], -1, 0
        if start <= index < start + len(block):
            self._block = (plan, start, block, index, streak)
            return block[index - start]
        streak = streak + 1 if 0 < index - last <= _MAX_STRIDE else 0
        if streak >= 2 and index < len(plan):
            block = plan.bins(index, index + _BLOCK_BINS)
            self._block = (plan, index, block, index, streak)
            return block[0]
        bin_ids = plan[k]
        self._block = (plan, index, [bin_ids], index, streak)
        return bin_ids

    def __repr__(self) -> str:
        return f"PackedDataset(bins={len(self)}, epoch={self._epoch}, {self.collator!r})"
