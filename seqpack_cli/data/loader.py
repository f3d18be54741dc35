"""`PackedDataLoader`: a torch DataLoader over a `PackedIterableDataset` that knows how far the
training loop got, so a checkpoint needs no counting by hand, whatever the number of workers.

The batches are made in the DataLoader's workers; only the training process knows which of them
the loop has taken (the workers run ahead by `prefetch_factor` batches). The loader counts the
batches it hands out and keeps the dataset's position up to date, so `loader.state_dict()` (the
same dict as `dataset.state_dict()`) is exact at any step. The state is a position in the
epoch's bins, as in Grain or torchdata's `StatefulDataLoader` for a sampler: since an epoch is a
pure function of (templates, pools, seed, epoch), nothing of the workers' own state is saved;
resumed workers start right at the saved bin.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader

from seqpack_cli.checks import check_int
from seqpack_cli.data.iterable import PackedIterableDataset
from seqpack_cli.errors import ConfigError

__all__ = ["PackedDataLoader"]

# DataLoader options that would batch, reorder or keep stale copies of the dataset.
_BATCHING = ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


def _check_options(options: Mapping[str, Any]) -> None:
    for name in _BATCHING:
        if name in options:
            raise ConfigError(
                f"PackedDataLoader got {name}={options[name]!r}; the dataset makes the batches: "
                "pass rows_per_rank=B (and drop_remainder=True for fixed shapes) to "
                "PackedIterableDataset, whose order is already seeded"
            )
    if options.get("persistent_workers"):
        raise ConfigError(
            "PackedDataLoader got persistent_workers=True; workers that outlive a pass keep "
            "their copy of the dataset, so set_epoch and load_state_dict would not reach them: "
            "leave persistent_workers off"
        )
    if options.get("in_order", True) is not True:
        raise ConfigError(
            f"PackedDataLoader got in_order={options['in_order']!r}; the batches must arrive in "
            "order for the count of batches taken to name the bins consumed: leave in_order on"
        )


class PackedDataLoader:
    """Iterates a `PackedIterableDataset` with `num_workers` worker processes, one batch per
    step, and counts the batches the loop takes, so `state_dict()` is exact at any step.

    ```
    loader = PackedDataLoader(dataset, num_workers=2)
    loader.load_state_dict(state)                # resuming; state from loader.state_dict()
    for epoch in range(loader.epoch, num_epochs):
        loader.set_epoch(epoch)                  # keeps the resume point of the saved epoch
        for batch in loader:                     # the rest of the epoch, then the whole next
            ...
            checkpoint = loader.state_dict()     # a few ints: {"epoch", "num_bins_consumed", ...}
    ```

    Resuming from the state saved after step k yields exactly the batches k+1, k+2, ... of an
    uninterrupted run (also across the end of an epoch, and on every data-parallel rank: each
    saves and loads its own state). Each `iter(loader)` is one pass from the dataset's resume
    point to the end of the epoch, like a DataLoader's.

    Args:
        dataset: the `PackedIterableDataset` (its `rows_per_rank` rows per step).
        num_workers: DataLoader worker processes (0: make the batches in this process).
        **options: passed to `torch.utils.data.DataLoader` (`pin_memory`, `prefetch_factor`,
            `multiprocessing_context`, `worker_init_fn`, `timeout`, ...). Options that batch or
            reorder (`batch_size`, `shuffle`, `sampler`, `batch_sampler`, `drop_last`),
            `persistent_workers=True` and `in_order=False` are refused: the count of batches
            taken would no longer name the bins consumed.
    """

    def __init__(
        self, dataset: PackedIterableDataset, *, num_workers: int = 0, **options: Any
    ) -> None:
        if not isinstance(dataset, PackedIterableDataset):
            raise ConfigError(
                f"dataset is a {type(dataset).__name__}; expected a PackedIterableDataset"
            )
        _check_options(options)
        self.dataset = dataset
        self.num_workers = check_int("num_workers", num_workers, minimum=0)
        self.loader = DataLoader(dataset, batch_size=None, num_workers=self.num_workers, **options)

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        """`dataset.set_epoch(epoch)`: call it before each pass.

        Args:
            epoch: the epoch, an int >= 0.
        """
        self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches the next pass yields."""
        return len(self.dataset)

    def __iter__(self) -> Iterator[Any]:
        dataset = self.dataset
        dataset._take(0)
        for taken, batch in enumerate(self.loader, start=1):
            dataset._take(taken)  # before the yield: the loop holds this batch from now on
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The resume state after the batches taken so far.

        Returns:
            `dataset.state_dict()`: a small JSON-able dict (epoch, bins consumed, layout).
        """
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume: the next pass starts with the batch after those `state` says were taken.

        Args:
            state: what `state_dict()` returned (`dataset.load_state_dict(state)`).
        """
        self.dataset.load_state_dict(state)

    def __repr__(self) -> str:
        return f"PackedDataLoader({self.dataset!r}, num_workers={self.num_workers})"
