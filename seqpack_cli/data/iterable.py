"""`PackedIterableDataset`: the epoch split across ranks and DataLoader workers, in batches of
B collated rows (a step of each rank), with a small resume state."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset

from seqpack_cli.checks import check_int
from seqpack_cli.collate import CollateOptions
from seqpack_cli.data.epochs import PackedEpochs, collate_options, rows_per_rank_option
from seqpack_cli.epoch.cursor import EpochCursor
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError
from seqpack_cli.sharding import batch_stop, deal_batches, rank_and_world_size, worker_share

__all__ = ["PackedIterableDataset"]


logger = logging.getLogger(__name__)

# What every state holds (states saved before steps and balancing hold only these).
_STATE_KEYS = ("epoch", "num_bins_consumed", "num_bins", "seed", "rank", "world_size")
# How the saved run dealt its steps; a state without them was saved by a strided plan.
_LAYOUT_KEYS = ("world_size", "rows_per_rank", "balance", "cost_per_token", "balance_window")


def _saved_layout(state: Mapping[str, Any], drop_last: bool) -> dict[str, Any]:
    """How the run that saved `state` dealt its steps (a state saved before steps and balancing
    existed: one row per step, DistributedSampler's order, this dataset's drop_last)."""
    if not all(key in state for key in _LAYOUT_KEYS):
        return {
            "world_size": state["world_size"],
            "rows_per_rank": 1,
            "balance": None,
            "cost_per_token": None,
            "balance_window": DEFAULT_BALANCE_WINDOW,
            "drop_last": drop_last,
            "cursor": EpochCursor(),
        }
    layout = {key: state[key] for key in _LAYOUT_KEYS}
    layout["drop_last"] = bool(state.get("drop_last", drop_last))
    layout["cursor"] = EpochCursor.from_state(state.get("cursor", EpochCursor().to_state()))
    return layout


def _same_deal(saved: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether two layouts deal the same bins to the same ranks in the same order (a strided
    deal does not depend on the rows per step, nor on a cost)."""
    keys = ["world_size", "drop_last", "cursor", "balance"]
    if current["balance"] is not None:
        keys += ["rows_per_rank", "cost_per_token", "balance_window"]
    return all(saved[key] == current[key] for key in keys)


class PackedIterableDataset(PackedEpochs, IterableDataset):
    """Batches of `rows_per_rank` collated rows (one bin per row), the epoch split across ranks and
    DataLoader workers.

    An item is `collator(bins)` for `rows_per_rank` consecutive bins of this rank's epoch
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

    Steps: item j is step j of this rank's plan (`EpochPlan(..., rows_per_rank=rows_per_rank)`):
    every rank makes the same number of items. `balance="cost"` (with `cost_per_token`, see
    `seqpack_cli.hf.cost_per_token`) deals each step's bins so that the ranks' attention costs
    are equal (`seqpack_cli.epoch.dealing`); None keeps DistributedSampler's order.
    `return_num_items_in_batch=True` adds `num_items_in_batch` to every item: the loss targets of
    the whole optimizer step (`grad_accum` items of every rank), computed from the plan
    (`seqpack_cli.data.targets`), so `model(**batch)` of a transformers model returns the sum of
    the token losses over that count, and the gradients summed over the micro-batches (and
    averaged by DDP, times the world size) are those of the step's token-mean loss.

    Resume: `state_dict()` is a small dict of numbers, `{"epoch", "num_bins_consumed", ...}`,
    where `num_bins_consumed` counts the bins (rows) of this rank's epoch that the training loop
    has taken; `load_state_dict(state)` makes the next pass start right after them, so a resumed
    run sees exactly the rest of the epoch, in the same batches. The state names the prepared
    directory it belongs to (`manifest_sha256`): another directory's state is refused, even one
    with the same histogram, whose bins hold other sequences. It also records how the
    steps were dealt (world size, `rows_per_rank`, balance) and where the epoch resumed
    (`cursor`): loaded by a run with another world size, rows per rank or balance, any rank's state
    continues the epoch from the global step reached, with no bin repeated or skipped (the rest
    of the epoch is dealt anew; the steps already taken must be whole).
    - Through `PackedDataLoader` (any num_workers) or iterated in this process: the loader, or
      the dataset itself, counts the batches the loop took; `state_dict()` is exact at any time.
    - A plain `DataLoader` with workers makes the batches in other processes, which this
      dataset cannot see: pass the rows taken in this pass, `ds.state_dict(num_bins_taken=n)`.

    Args:
        source, token_source, max_seq_len, seed, epoch, collate, labels_source,
            loss_mask_source, verify: as for `PackedDataset`. `collate.pad_to` is at least
            `rows_per_rank * max_seq_len`, which any item fits (with format="hf", every item is
            then `[1, pad_to]`).
        rank, world_size: this process's data-parallel rank and their number; default to
            `torch.distributed`'s when it is initialised (else 0 and 1).
        drop_last: drop the bins that do not divide evenly across ranks instead of wrapping.
        rows_per_rank: rows (bins) per item, the plan's `rows_per_rank` (what the state
            records); 1 gives the one-row items of earlier versions.
        drop_remainder: leave out a pass's last batch when it holds fewer than `rows_per_rank`
            rows (fixed shapes on every step).
        balance, cost_per_token, balance_window: how each step's bins are dealt to the ranks
            (`EpochPlan`): None (the default) or "cost".
        grad_accum: micro-batches (items) per optimizer step, for `num_items_in_batch`.
        return_num_items_in_batch: add `num_items_in_batch` (a 0-d int64 tensor) to every item.
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
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        epoch: int = 0,
        labels_source: Any = None,
        loss_mask_source: Any = None,
        verify: bool = False,
        rows_per_rank: int = 1,
        drop_remainder: bool = False,
        balance: str | None = None,
        cost_per_token: float | None = None,
        balance_window: int = DEFAULT_BALANCE_WINDOW,
        grad_accum: int = 1,
        return_num_items_in_batch: bool = False,
        batch_size: int | None = None,
        **collator_options: Any,
    ) -> None:
        rank, world_size = rank_and_world_size(rank, world_size)
        rows_per_rank = rows_per_rank_option(
            "PackedIterableDataset",
            rows_per_rank,
            batch_size,
            fix="pass the number of packed rows per step (1 for one row)",
        )
        self.drop_remainder = bool(drop_remainder)
        super().__init__(
            source,
            token_source,
            collate=collate_options("PackedIterableDataset", collate, collator_options),
            max_seq_len=max_seq_len,
            seed=seed,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            labels_source=labels_source,
            loss_mask_source=loss_mask_source,
            verify=verify,
            rows_per_rank=rows_per_rank,
            balance=balance,
            cost_per_token=cost_per_token,
            balance_window=balance_window,
            grad_accum=grad_accum,
            return_num_items_in_batch=return_num_items_in_batch,
        )
        pad_to = self.collator.pad_to
        rows = self.rows_per_rank
        if pad_to is not None and pad_to < rows * self.max_seq_len:
            raise ConfigError(
                f"pad_to={pad_to} but a batch of rows_per_rank={rows} rows may hold "
                f"{rows * self.max_seq_len} tokens; pass pad_to={rows * self.max_seq_len} "
                "(rows_per_rank * max_seq_len)"
            )
        self._start = 0  # where the next pass begins, in this rank's order
        self._position = 0  # bins consumed, counted by this process (or PackedDataLoader)

    def set_epoch(self, epoch: int) -> None:
        """Move to epoch `epoch` (its first bin); setting the current epoch again changes
        nothing, so `load_state_dict(state)` followed by `set_epoch(state["epoch"])` resumes.

        Args:
            epoch: the epoch, an int >= 0.
        """
        if self._switch_epoch(epoch):
            self._start = self._position = 0

    @property
    def num_bins(self) -> int:
        """Bins of this rank in the whole epoch."""
        return len(self.plan)

    def __len__(self) -> int:
        """Items (batches) the next pass yields, on this rank, all workers together."""
        stop = batch_stop(len(self.plan), self._start, self.rows_per_rank, self.drop_remainder)
        return -(-(stop - self._start) // self.rows_per_rank)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        share = worker_share()
        counting = share.in_main_process  # only the training process's own iteration is the truth
        if counting:
            self._position = self._start
        batches = deal_batches(
            self.plan, self._start, self.rows_per_rank, share, drop_remainder=self.drop_remainder
        )
        # The steps trained on: a short last step left out by drop_remainder has no targets.
        trained_steps = len(self.plan) // self.rows_per_rank if self.drop_remainder else None
        for end, bins in batches:
            batch = self.collator(bins)
            if self.return_num_items_in_batch:
                step = (end - len(bins)) // self.rows_per_rank
                count = self.num_items_in_batch(step, trained_steps)
                batch["num_items_in_batch"] = torch.tensor(count, dtype=torch.int64)
            if counting:
                # Counted before the yield: once the consumer holds the batch, its bins are done.
                self._position = end
            yield batch

    def _take(self, num_batches: int) -> None:
        """Record that the loop has taken the pass's first `num_batches` items (what
        `PackedDataLoader` calls, as it hands the training loop each batch)."""
        self._position = min(self._start + num_batches * self.rows_per_rank, len(self.plan))

    def state_dict(self, num_bins_taken: int | None = None) -> dict[str, Any]:
        """The resume state, a small JSON-able dict; see the class docstring.

        Args:
            num_bins_taken: with a plain DataLoader with workers, the rows (bins, not batches)
                taken from it since this pass began. None: the count of this dataset (iterated
                in this process) or of its `PackedDataLoader`.

        Returns:
            `{"epoch", "num_bins_consumed", "num_bins", "seed", "rank", "manifest_sha256",
            ...}` (`manifest_sha256`: the prepared directory's, which `load_state_dict` checks;
            None for a `(templates, pools)` pair) with the layout
            (`world_size`, `rows_per_rank`, `balance`, `cost_per_token`, `balance_window`,
            `drop_last`) and the epoch's `cursor` as a dict: plain Python values, so that
            `load_state_dict` resumes on any layout.

        Raises:
            ConfigError: for a `num_bins_taken` beyond this pass's bins.
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
            "manifest_sha256": self.manifest_sha256,
            **self._layout(),
            "cursor": self._cursor.to_state(),  # the layout's cursor, as plain ints
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next pass starts right after the bins `state` says were consumed; on
        another layout (world size, rows per rank, balance), at the global step they reached.

        Args:
            state: what `state_dict()` returned (here or on another layout).

        Raises:
            ConfigError: for a state with missing keys, another seed, another prepared
                directory (its `manifest_sha256`; a state saved before it was recorded loads
                with a warning), or a position that is not a whole number of steps on its
                layout.
        """
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ConfigError(
                f"state is missing {', '.join(missing)}; expected the dict state_dict() returned"
            )
        if state["seed"] != self.seed:
            raise ConfigError(
                f"state was saved with seed={state['seed']} but this dataset has seed="
                f"{self.seed}; resume with the same seed (a different one gives different bins, "
                "so the saved position would not mean the same data)"
            )
        self._check_owner(state)
        self._switch_epoch(state["epoch"])
        saved = _saved_layout(state, self.drop_last)
        consumed = check_int("num_bins_consumed", state["num_bins_consumed"], minimum=0)
        if _same_deal(saved, self._layout()):
            self._resume_in_place(state, consumed)
            return
        saved_plan = EpochPlan(
            self._templates,
            self._pools,
            self.plan.seed,
            world_size=saved["world_size"],
            drop_last=saved["drop_last"],
            rows_per_rank=saved["rows_per_rank"],
            balance=saved["balance"],
            cost_per_token=saved["cost_per_token"],
            balance_window=saved["balance_window"],
            cursor=saved["cursor"],
        )
        rows = saved["rows_per_rank"]
        if state["num_bins"] != len(saved_plan) or consumed > len(saved_plan):
            raise ConfigError(
                f"state has num_bins={state['num_bins']} and num_bins_consumed={consumed} but "
                f"its layout gives {len(saved_plan)} bins per rank on this data; resume with the "
                "same prepared data and seed"
            )
        if consumed % rows and consumed != len(saved_plan):
            raise ConfigError(
                f"state has num_bins_consumed={consumed}, not a whole number of its steps of "
                f"{rows} rows; resume on another layout from a state saved between steps"
            )
        steps = -(-consumed // rows)
        self._cursor, self._plan = saved_plan.cursor_after(steps), None
        self._start = self._position = 0
        logger.info(
            "epoch %d resumed after global step %d of a run of world size %d x %d rows "
            "(balance %s): %d bins left for rank %d of %d",
            self._epoch,
            steps,
            saved["world_size"],
            rows,
            saved["balance"],
            len(self.plan),
            self.rank,
            self.world_size,
        )

    def _check_owner(self, state: Mapping[str, Any]) -> None:
        """Refuse the state of another prepared directory (`manifest_sha256`, see
        `seqpack_cli.data.epochs.source_digest`); a state saved before it was recorded is
        accepted with a warning, a side without one (a `(templates, pools)` pair) is not
        checked."""
        if "manifest_sha256" not in state:
            logger.warning(
                "resume state records no manifest_sha256 (saved before seqpack recorded which "
                "prepared directory a state belongs to): it is not checked against %s; save a "
                "new state to have it checked",
                self._prepared_path or "this dataset's (templates, pools)",
            )
            return
        saved, current = state["manifest_sha256"], self.manifest_sha256
        if saved is None or current is None or saved == current:
            return
        where = self._prepared_path or "its prepared data"
        raise ConfigError(
            f"state was saved from the prepared directory with manifest_sha256 {str(saved)[:16]}"
            f"... but this dataset reads {where} (manifest_sha256 {current[:16]}...), where its "
            "position names other sequences; resume with the prepared directory the state was "
            "saved from, or start this one without load_state_dict"
        )

    def _layout(self) -> dict[str, Any]:
        """How this dataset deals its steps, as a state records it."""
        return {
            "world_size": self.world_size,
            "rows_per_rank": self.rows_per_rank,
            "balance": self.balance,
            "cost_per_token": self.cost_per_token,
            "balance_window": self.balance_window,
            "drop_last": self.drop_last,
            "cursor": self._cursor,
        }

    def _resume_in_place(self, state: Mapping[str, Any], consumed: int) -> None:
        """Resume on the layout the state was saved with: at the same bin of the same plan."""
        num_bins = len(self.plan)
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
            f"rows_per_rank={self.rows_per_rank}, epoch={self._epoch}, rank={self.rank}, "
            f"world_size={self.world_size}, {self.collator!r})"
        )
