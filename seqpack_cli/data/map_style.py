"""`PackedDataset`: the current epoch's bins as a map-style torch dataset, one row per item."""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset

from seqpack_cli.data.epochs import PackedEpochs

__all__ = ["PackedDataset"]


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
        source: `load_prepared(...)`'s result, or a `(templates, pools)` pair.
        token_source: sequence id -> tokens (see `seqpack_cli.collate`); None (the default):
            the prepared directory's token store (`prepare --tokens-column`), with its labels or
            loss mask unless `labels_source` / `loss_mask_source` is given.
        max_seq_len: row length; defaults to the prepared directory's (required for a pair).
        pad_token_id, label_pad_id, format, return_loss_weights, max_num_seqs, labels_source,
            loss_mask_source: as for `PackedCollator`.
        truncate: keep the first max_seq_len tokens of longer sequences (`PackedCollator`);
            None (the default) does so exactly when the source was prepared with
            `--over-cap truncate`.
        seed: the run's seed (an integer >= 0); epoch e uses `seed_from_components(seed, e)`.
        epoch: the initial epoch.
    """

    def __init__(
        self,
        source: Any,
        token_source: Any = None,
        *,
        pad_token_id: int,
        seed: int,
        max_seq_len: int | None = None,
        epoch: int = 0,
        label_pad_id: int = -100,
        format: str = "padded",
        return_loss_weights: bool = False,
        max_num_seqs: int | None = None,
        labels_source: Any = None,
        loss_mask_source: Any = None,
        truncate: bool | None = None,
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
            labels_source=labels_source,
            loss_mask_source=loss_mask_source,
            truncate=truncate,
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
