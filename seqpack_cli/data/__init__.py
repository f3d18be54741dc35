"""Torch datasets over packed epochs, and a loader that checkpoints them exactly.

`source` is a prepared directory as `load_prepared` returns it (`Prepared`), or a
`(templates, pools)` pair. Each epoch's bins come from `EpochPlan(templates, pools,
seed_from_components(seed, epoch), ...)`, so the pairings change every epoch, are the same in
every process, and bin k is computed directly (no epoch is ever materialised).

- `PackedIterableDataset(..., rows_per_rank=B)` (`iterable`): the rank's share of the epoch in
  items of B collated rows (one bin per row; item j is step j of the plan), made in the
  DataLoader's workers; sharded across data-parallel ranks (optionally balanced by attention
  cost) and workers, with `set_epoch` and a resume `state_dict` that also resumes on another
  world size.
- `PackedDataLoader(dataset, num_workers=W)` (`loader`): the DataLoader for it, which counts the
  batches the loop takes, so `state_dict()` is exact at any step with any W; resuming yields
  exactly the batches an uninterrupted run would have yielded next.
- `PackedDataset` (`map_style`): map-style, `ds[k]` is bin k collated as a batch of one row.
- `epochs`: what the datasets share (the source, the collator, the seed, the epoch's plan).
- `targets`: `num_items_in_batch`, the loss targets of a whole optimizer step, from the plan.

An item is the dict `PackedCollator` gives for its bins, so it has the batch dimension
(`input_ids` is `[B, max_seq_len]` with format="padded", `[1, num_tokens]` with
"padding_free"; `cu_seqlens` and `max_seqlen` describe the whole batch).

This package imports torch (the datasets subclass torch's `Dataset` and `IterableDataset`);
without it, importing the package raises `MissingDependencyError` naming the `torch` extra.
"""

from __future__ import annotations

from seqpack_cli.errors import MissingDependencyError

try:
    from seqpack_cli.data.iterable import PackedIterableDataset
    from seqpack_cli.data.loader import PackedDataLoader
    from seqpack_cli.data.map_style import PackedDataset
except ModuleNotFoundError as error:
    # Without torch, `from seqpack_cli.data import PackedDataset` names the extra to install
    # rather than torch's bare "No module named 'torch'" from deep inside a dataset module.
    if (error.name or "").partition(".")[0] != "torch":
        raise
    missing = MissingDependencyError(
        "seqpack_cli.data needs torch, which is not installed: pip install 'seqpack-cli[torch]'"
    )
    missing.name = "torch"  # what is missing, as ModuleNotFoundError says it
    raise missing from None

__all__ = ["PackedDataLoader", "PackedDataset", "PackedIterableDataset"]
