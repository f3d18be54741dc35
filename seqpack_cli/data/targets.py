"""`num_items_in_batch`: the number of loss targets of a whole optimizer step, on every rank.

With packing, data parallelism and gradient accumulation, the token-mean loss of a step is the
sum of every target token's loss over all ranks and micro-batches, divided by their number. Each
rank sees only its own micro-batch, but the plan (`EpochPlan.step_templates`,
`step_id_arrays`) tells every rank which sequences every rank trains on in every step, so each
rank can count the step's targets without communication:

- without a loss mask or labels, a sequence of l tokens has l - 1 targets (its first token is
  never predicted: `PackedCollator`), known from the templates alone (with a length multiple,
  whose templates hold rounded slots, from the token source's lengths);
- with them, each sequence's count is read from what `prepare` stored beside the token store
  (`num_targets`, one integer per sequence: no token read), or, for a token source given by
  hand without one, counted from its loss mask or labels (those of all ranks: slower).

An optimizer step is `grad_accum` consecutive steps of the plan (the epoch's last may be short).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from seqpack_cli.collate import PackedCollator
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.target_counts import count_targets
from seqpack_cli.token_sources import fetch

__all__ = ["StepTargets"]

logger = logging.getLogger(__name__)


class StepTargets:
    """Counts the targets of optimizer steps of a dataset's plans (see the module docstring).

    `counts`: an object with `take(seq_ids) -> int64 counts` and `truncated_to` (what prepare
    stores as `num_targets`), or None; used when its truncation matches the collator's.
    """

    def __init__(
        self, collator: PackedCollator, counts: Any, grad_accum: int, exact_templates: bool = True
    ) -> None:
        self.collator = collator
        self.grad_accum = grad_accum
        # Whether the templates' lengths are the sequences' (not slots rounded to a multiple).
        self._exact_templates = exact_templates
        masked = collator.labels_source is not None or collator.loss_mask_source is not None
        self._counts = counts if masked and _counts_match(counts, collator) else None
        self._masked = masked
        if masked and self._counts is None:
            logger.info(
                "num_items_in_batch: no stored target counts match this collator; counting them "
                "from the loss mask or labels of every rank's sequences"
            )
        self._last: tuple[int, int, int] | None = None  # (plan id, optimizer step, count)

    def for_step(self, plan: EpochPlan, step: int, num_steps: int | None = None) -> int:
        """The targets of the optimizer step that holds `step` of `plan` (all ranks), of the
        plan's first `num_steps` steps (all of them by default; fewer when a short last step
        is not trained on)."""
        first = step // self.grad_accum * self.grad_accum
        cached = self._last
        if cached is not None and cached[:2] == (id(plan), first):
            return cached[2]
        stop = plan.num_steps if num_steps is None else min(num_steps, plan.num_steps)
        count = self.of_steps(plan, first, min(first + self.grad_accum, stop))
        self._last = (id(plan), first, count)
        return count

    def of_steps(self, plan: EpochPlan, first: int, last: int) -> int:
        """The targets of every rank's bins in steps first..last-1 of `plan`."""
        if not self._masked and not self._exact_templates:
            ids, _ = plan.step_id_arrays(first, last)
            return self._from_lengths(ids)
        if not self._masked:
            t = plan.step_templates(first, last)
            per_template = np.array([sum(x) - len(x) for x in plan.templates], dtype=np.int64)
            return int(np.where(t < 0, 0, per_template.take(np.maximum(t, 0))).sum())
        ids, _ = plan.step_id_arrays(first, last)
        if self._counts is not None:
            return int(np.asarray(self._counts.take(ids), dtype=np.int64).sum())
        return self._counted(ids)

    def _from_lengths(self, ids: np.ndarray) -> int:
        """Targets of the sequences `ids` without a mask: their lengths (as the collator cuts
        them) less one each."""
        collator = self.collator
        source = collator.token_source
        sequence_lengths = getattr(source, "sequence_lengths", None)
        if sequence_lengths is not None:
            lengths = np.asarray(sequence_lengths(ids), dtype=np.int64)
        else:
            _, lengths = fetch(source, ids)
        if collator.truncate:
            lengths = np.minimum(lengths, collator.max_seq_len)
        return int((lengths - 1).sum())

    def _counted(self, ids: np.ndarray) -> int:
        """Targets of the sequences `ids`, counted from the collator's labels or loss mask
        (`target_counts.count_targets`, the rule `prepare` stores them by)."""
        collator = self.collator
        if collator.labels_source is not None:
            role = "labels"
            values, lengths = fetch(collator.labels_source, ids, name="labels_source")
        else:
            role = "loss_mask"
            values, lengths = fetch(
                collator.loss_mask_source, ids, name="loss_mask_source", allow_bool=True
            )
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])
        counts = count_targets(
            values,
            offsets,
            role=role,
            truncated_to=collator.max_seq_len if collator.truncate else None,
            label_pad_id=collator.label_pad_id,
        )
        return int(counts.sum())


def _counts_match(counts: Any, collator: PackedCollator) -> bool:
    """Whether stored counts describe what the collator trains on: counted for labels with the
    collator's pad id, and cut at the length the collator cuts at."""
    if counts is None:
        return False
    truncated_to = getattr(counts, "truncated_to", None)
    if collator.truncate:
        if truncated_to != collator.max_seq_len:
            return False
    elif truncated_to is not None:
        return False
    label_pad_id = getattr(counts, "label_pad_id", None)
    return not (
        collator.labels_source is not None
        and label_pad_id is not None
        and label_pad_id != collator.label_pad_id
    )
