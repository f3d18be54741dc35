"""`PackedRowsCollator`: the `data_collator` that lets HF `Trainer` (or a plain `DataLoader` with
`batch_size=B`) take the items of a `PackedDataset` with `CollateOptions(format="hf")`.

An item of such a dataset is already a batch: one packed row flattened to
`[1, tokens]`. Trainer's default collator stacks items along a new dimension (`expand(...)`
fails on `[1, 1, T]`), and torch's `default_collate` cannot stack rows of different lengths. This
collator concatenates B items into one flattened `[1, total]` row, as `PackedCollator(format="hf")`
gives for those B bins together: `input_ids`, `labels`, `position_ids`, `seq_idx`,
`cu_seq_lens_q`/`_k`, `max_length_q`/`_k` (and `loss_weights` where every item has it).

It reads only `input_ids`, `labels` and `position_ids` (a sequence starts where its positions
restart at 0), because `Trainer(remove_unused_columns=True)`, its default, strips every key a
model's `forward` does not name (`seq_idx`, `cu_seq_lens_*`) before the collator runs; the
boundaries are rebuilt here, after that filter, so `seqpack_varlen` gets its `cu_seq_lens_q`.

Torch is imported when the collator is called; transformers never.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.collate import flat_boundaries
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.masking import check_max_num_seqs, require_torch

__all__ = ["PackedRowsCollator"]

_KEYS = ("input_ids", "labels", "position_ids")


def _flat(item: Mapping[str, Any], key: str, k: int) -> np.ndarray:
    """`item[key]` as a 1-D numpy array, checked to be one flattened `[1, T]` row."""
    if key not in item:
        raise InputError(
            f"item {k} of the batch has no {key!r} (keys: {', '.join(map(str, item))}); "
            "expected PackedDataset(..., collate=CollateOptions(format='hf')) items"
        )
    values = np.asarray(item[key])
    if values.ndim != 2 or values.shape[0] != 1:
        raise InputError(
            f"item {k}'s {key} has shape {list(values.shape)}; expected one flattened row "
            "[1, tokens]: use PackedDataset(..., collate=CollateOptions(format='hf'))"
        )
    return values[0]


def _sequence_lengths(position_ids: np.ndarray) -> np.ndarray:
    """The lengths of the sequences of a flattened row, from where its positions restart at 0."""
    starts = np.flatnonzero(position_ids == 0)
    expected = np.arange(position_ids.shape[0]) - np.repeat(
        starts, np.diff(np.append(starts, position_ids.shape[0]))
    )
    if starts.size == 0 or starts[0] != 0 or not np.array_equal(position_ids, expected):
        raise InputError(
            "position_ids of the batch do not count 0, 1, 2, ... within each sequence; expected "
            "PackedDataset(..., collate=CollateOptions(format='hf')) items"
        )
    return np.diff(np.append(starts, position_ids.shape[0]))


class PackedRowsCollator:
    """B `format="hf"` `PackedDataset` items -> one flattened `[1, total]` batch.

    ```
    dataset = PackedDataset(prepared, seed=0, collate=CollateOptions(pad_token_id=0, format="hf"))
    trainer = Trainer(model, args, train_dataset=dataset,
                      data_collator=PackedRowsCollator(pad_to=B * max_seq_len))
    ```
    with `per_device_train_batch_size=B`: each step is B packed rows (B bins), flattened.

    Args:
        pad_to: make every batch exactly this many tokens (at least B * max_seq_len), the slack
            one trailing padding span of its own, labelled `label_pad_id` (see
            `PackedCollator`'s `pad_to`): one shape for `torch.compile`. None: ΣT tokens.
        max_num_seqs: fix `cu_seq_lens_*` at K + 1 entries (the padding span counts as one).
        pad_token_id: the token of the padding span (never attended to by a real token, never a
            target).
        label_pad_id: the label of untargeted positions, as the items use it.
    """

    def __init__(
        self,
        *,
        pad_to: int | None = None,
        max_num_seqs: int | None = None,
        pad_token_id: int = 0,
        label_pad_id: int = -100,
    ) -> None:
        self.pad_to = None if pad_to is None else check_int("pad_to", pad_to, minimum=1)
        self.max_num_seqs = None if max_num_seqs is None else check_max_num_seqs(max_num_seqs)
        self.pad_token_id = check_int("pad_token_id", pad_token_id)
        self.label_pad_id = check_int("label_pad_id", label_pad_id)

    def __repr__(self) -> str:
        return (
            f"PackedRowsCollator(pad_to={self.pad_to}, max_num_seqs={self.max_num_seqs}, "
            f"pad_token_id={self.pad_token_id}, label_pad_id={self.label_pad_id})"
        )

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        torch = require_torch()
        if len(items) == 0:
            raise InputError("the batch holds no items; expected at least one packed row")
        for k, item in enumerate(items):
            if "attention_mask" in item:
                # A padded row's mask neither separates its sequences nor may reach a model
                # with packed rows (transformers would then ignore position_ids).
                raise ConfigError(
                    f"item {k} has an attention_mask (format='padded' rows); PackedRowsCollator "
                    "takes format='hf' items: "
                    "PackedDataset(..., collate=CollateOptions(format='hf'))"
                )
        keys = list(_KEYS)
        if all("loss_weights" in item for item in items):
            keys.append("loss_weights")
        features = {
            key: np.concatenate([_flat(item, key, k) for k, item in enumerate(items)])[None]
            for key in keys
        }
        lengths = _sequence_lengths(features["position_ids"][0])
        features["seq_idx"] = np.repeat(np.arange(lengths.shape[0], dtype=np.int32), lengths)[None]
        cu_seqlens, max_length = flat_boundaries(
            features,
            lengths,
            pad_to=self.pad_to,
            max_num_seqs=self.max_num_seqs,
            pad_token_id=self.pad_token_id,
            label_pad_id=self.label_pad_id,
        )
        batch: dict[str, Any] = {
            k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in features.items()
        }
        cu_seq_lens = torch.from_numpy(cu_seqlens)
        batch["cu_seq_lens_q"], batch["cu_seq_lens_k"] = cu_seq_lens, cu_seq_lens.clone()
        batch["max_length_q"] = batch["max_length_k"] = max_length
        return batch
