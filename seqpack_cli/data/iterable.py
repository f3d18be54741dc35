"""`PackedIterableDataset`: the epoch split across ranks and DataLoader workers, in batches of
B collated rows, with a resume state of a few integers."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import IterableDataset

from seqpack_cli.checks import check_int
from seqpack_cli.data.epochs import PackedEpochs
from seqpack_cli.errors import ConfigError
from seqpack_cli.sharding import batch_stop, deal_batches, rank_and_world_size, worker_share

__all__ = ["PackedIterableDataset"]

logger = logging.getLogger(__name__)

# The integers a state holds; the last four only check that the state fits this dataset.
_STATE_KEYS = ("epoch", "num_bins_consumed", "num_bins", "seed", "rank", "world_size")


class PackedIterableDataset(PackedEpochs, IterableDataset):
    """Batches of `batch_size` collated rows (one bin per row), the epoch split across ranks and
    DataLoader workers.

    An item is `collator(bins)` for `batch_size` consecutive bins of this rank's epoch
    (`input_ids` is `[B, max_seq_len]` with format="padded"); the last item of a pass holds the
    bins left over, unless `drop_remainder=True` leaves them out. Load it with
    `PackedDataLoader(ds, num_workers=W)` (or `DataLoader(ds, batch_size=None)`): the batches are
    made in the workers, and each step gets one.

    Sharding (`seqpack_cli.sharding`): rank r of `world_size` takes `EpochPlan(..., rank=r,
    world_size=...)`'s bins (as torch's `DistributedSampler`: disjoint, the same count on every
    rank, the last ones wrapped around unless `drop_last=True`), so every rank makes the same
    number of batches. From the pass's first bin, batch j is dealt to worker j % W; torch's
    in-order DataLoader takes one item from each worker in turn, so the training loop receives
    the rank's bins in order, whatever W and B.

    Resume: `state_dict()` is a few integers, `{"epoch", "num_bins_consumed", ...}`, where
    `num_bins_consumed` counts the bins (rows) of this rank's epoch that the training loop has
    taken; `load_state_dict(state)` makes the next pass start right after them, so a resumed run
    sees exactly the rest of the epoch, in the same batches (with the same `batch_size`; the
    state itself does not depend on B or W). Each pass (each `iter(loader)`) starts at that
    resume point (0 after `set_epoch` of a new epoch).
    - Through `PackedDataLoader` (any num_workers) or iterated in this process: the loader, or
      the dataset itself, counts the batches the loop took; `state_dict()` is exact at any time.
    - A plain `DataLoader` with workers makes the batches in other processes, which this
      dataset cannot see: pass the rows taken in this pass, `ds.state_dict(num_bins_taken=n)`.

    Args:
        source, token_source, max_seq_len, pad_token_id, seed, epoch, label_pad_id, format,
            return_loss_weights, max_num_seqs, labels_source, loss_mask_source, truncate,
            verify: as for `PackedDataset`.
        pad_to: as for `PackedCollator`; at least `batch_size * max_seq_len`, which any item
            fits (with format="hf", every item is then `[1, pad_to]`).
        rank, world_size: this process's data-parallel rank and their number; default to
            `torch.distributed`'s when it is initialised (else 0 and 1).
        drop_last: drop the bins that do not divide evenly across ranks instead of wrapping.
        batch_size: rows (bins) per item; 1 gives the one-row items of earlier versions.
        drop_remainder: leave out a pass's last batch when it holds fewer than `batch_size`
            rows (fixed shapes on every step).
    """

    def __init__(
        self,
        source: Any,
        token_source: Any = None,
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
        labels_source: Any = None,
        loss_mask_source: Any = None,
        truncate: bool | None = None,
        verify: bool = False,
        pad_to: int | None = None,
        batch_size: int = 1,
        drop_remainder: bool = False,
    ) -> None:
        rank, world_size = rank_and_world_size(rank, world_size)
        self.batch_size = check_int(
            "batch_size",
            batch_size,
            minimum=1,
            fix="pass the number of packed rows per step (1 for one row)",
        )
        self.drop_remainder = bool(drop_remainder)
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
            labels_source=labels_source,
            loss_mask_source=loss_mask_source,
            truncate=truncate,
            verify=verify,
            pad_to=pad_to,
        )
        if pad_to is not None and pad_to < self.batch_size * self.max_seq_len:
            raise ConfigError(
                f"pad_to={pad_to} but a batch of batch_size={self.batch_size} rows may hold "
                f"{self.batch_size * self.max_seq_len} tokens; pass pad_to="
                f"{self.batch_size * self.max_seq_len} (batch_size * max_seq_len)"
            )
        self._start = 0  # where the next pass begins, in this rank's order
        self._position = 0  # bins consumed, counted by this process (or PackedDataLoader)

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
        """Items (batches) the next pass yields, on this rank, all workers together."""
        stop = batch_stop(len(self.plan), self._start, self.batch_size, self.drop_remainder)
        return -(-(stop - self._start) // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        share = worker_share()
        counting = share.in_main_process  # only the training process's own iteration is the truth
        if counting:
            self._position = self._start
        batches = deal_batches(
            self.plan, self._start, self.batch_size, share, drop_remainder=self.drop_remainder
        )
        for end, bins in batches:
            batch = self.collator(bins)
            if counting:
                # Counted before the yield: once the consumer holds the batch, its bins are done.
                self._position = end
            yield batch

    def _take(self, num_batches: int) -> None:
        """Record that the loop has taken the pass's first `num_batches` items (what
        `PackedDataLoader` calls, as it hands the training loop each batch)."""
        self._position = min(self._start + num_batches * self.batch_size, len(self.plan))

    def state_dict(self, num_bins_taken: int | None = None) -> dict[str, int]:
        """The resume state, a dict of ints; see the class docstring.

        Args:
            num_bins_taken: with a plain DataLoader with workers, the rows (bins, not batches)
                taken from it since this pass began. None: the count of this dataset (iterated
                in this process) or of its `PackedDataLoader`.
        """
        if num_bins_taken is None:
            consumed = self._position
        else:
            taken = check_int("num_bins_taken", num_bins_taken, minimum=0)
            consumed = self._start + taken
            if consumed > len(self.plan):
                raise ConfigError(
                    f"num_bins_taken={taken} but this pass has only {len(self.plan) - self._start}"
                    f" bins (from bin {self._start} of {len(self.plan)}); pass the number of "
                    "rows taken from the DataLoader in this pass, or use PackedDataLoader"
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
            f"batch_size={self.batch_size}, epoch={self._epoch}, rank={self.rank}, "
            f"world_size={self.world_size}, {self.collator!r})"
        )
