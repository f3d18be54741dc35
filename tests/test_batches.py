"""B packed rows per step: PackedIterableDataset(rows_per_rank=B) and PackedDataLoader, with
workers, ranks and an exact resume (the state needs no counting by hand)."""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from conftest import next_fit_plan, same_batch, simulated_workers
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from seqpack_cli.collate import CollateOptions, PackedCollator  # noqa: E402
from seqpack_cli.data import PackedDataLoader, PackedDataset, PackedIterableDataset  # noqa: E402
from seqpack_cli.epoch.plan import EpochPlan  # noqa: E402
from seqpack_cli.errors import ConfigError  # noqa: E402
from seqpack_cli.seeding import seed_from_components  # noqa: E402

MAX_SEQ_LEN = 32
PAD = 0
SEED = 7

Row = tuple[int, ...]


def _corpus(num: int, seed: int) -> tuple[Counter, dict[int, np.ndarray], list[list[int]]]:
    """(templates, pools, tokens): next-fit templates over random lengths; every token of
    sequence i is i + 1 (0 is the padding), so a row tells which ids it holds."""
    lengths = np.random.default_rng(seed).integers(1, 20, num).tolist()
    templates, pools = next_fit_plan(lengths, MAX_SEQ_LEN)
    return templates, pools, [[i + 1] * length for i, length in enumerate(lengths)]


CORPUS = _corpus(90, seed=0)  # 40-odd bins


_COLLATE_FIELDS = {field.name for field in dataclasses.fields(CollateOptions)}


def _dataset(corpus: Any = CORPUS, **kwargs: Any) -> PackedIterableDataset:
    """The dataset over `corpus`; the collator's options among `kwargs` go to its
    `CollateOptions`, the others to the dataset."""
    templates, pools, tokens = corpus
    collate = {"pad_token_id": PAD, **{k: v for k, v in kwargs.items() if k in _COLLATE_FIELDS}}
    options = {"max_seq_len": MAX_SEQ_LEN, "seed": SEED}
    options |= {k: v for k, v in kwargs.items() if k not in _COLLATE_FIELDS}
    return PackedIterableDataset(
        (templates, pools), tokens, collate=CollateOptions(**collate), **options
    )


def _loader(dataset: PackedIterableDataset, num_workers: int, **options: Any) -> PackedDataLoader:
    if num_workers:
        options.setdefault("multiprocessing_context", "fork")
    return PackedDataLoader(dataset, num_workers=num_workers, **options)


def _plan(corpus: Any = CORPUS, epoch: int = 0, **kwargs: Any) -> EpochPlan:
    templates, pools, _ = corpus
    return EpochPlan(templates, pools, seed_from_components(SEED, epoch), **kwargs)


def _rows(batch: dict[str, Any]) -> list[Row]:
    """The sequence ids of each row of a padded batch, in order."""
    tokens = batch["input_ids"].tolist()
    starts = (batch["position_ids"] == 0) & (batch["attention_mask"] == 1)
    return [
        tuple(t - 1 for t, first in zip(row, flags, strict=True) if first)
        for row, flags in zip(tokens, starts.tolist(), strict=True)
    ]


# ---- what a batch is --------------------------------------------------------------------------


@pytest.mark.parametrize("format", ["padded", "padding_free", "maxtext"])
@pytest.mark.parametrize("batch_size", [1, 4, 7])
def test_a_batch_is_the_collator_on_consecutive_bins(format: str, batch_size: int) -> None:
    ds = _dataset(rows_per_rank=batch_size, format=format, epoch=2)
    plan = _plan(epoch=2)
    collator = PackedCollator(CORPUS[2], MAX_SEQ_LEN, PAD, format=format)
    batches = list(ds)
    expected = [collator(plan.bins(i, i + batch_size)) for i in range(0, len(plan), batch_size)]
    assert len(batches) == len(expected) == len(ds) == -(-len(plan) // batch_size)
    assert all(same_batch(a, b) for a, b in zip(batches, expected, strict=True))
    if format == "padded":
        assert batches[0]["input_ids"].shape == (batch_size, MAX_SEQ_LEN)
        # The last batch holds what is left (the plan has 40-odd bins: never a multiple of 4, 7).
        assert batches[-1]["input_ids"].shape[0] == len(plan) - (len(batches) - 1) * batch_size


def test_drop_remainder_gives_full_batches_only() -> None:
    ds = _dataset(rows_per_rank=4, drop_remainder=True)
    plan = _plan()
    assert len(plan) % 4  # the test needs a remainder to drop
    rows = [_rows(batch) for batch in ds]
    assert len(rows) == len(ds) == len(plan) // 4
    assert all(len(batch) == 4 for batch in rows)
    assert [r for batch in rows for r in batch] == [tuple(b) for b in plan.bins(0, len(rows) * 4)]


def test_rows_per_rank_is_checked() -> None:
    with pytest.raises(
        ConfigError,
        match="rows_per_rank is 0; expected a positive integer; pass the number of packed rows",
    ):
        _dataset(rows_per_rank=0)
    with pytest.raises(
        ConfigError, match="rows_per_rank is the bool True; expected a positive integer"
    ):
        _dataset(rows_per_rank=True)


@pytest.mark.parametrize("name", ["PackedIterableDataset", "PackedDataset"])
def test_batch_size_is_the_deprecated_name_of_rows_per_rank(name: str) -> None:
    # One name: the datasets take rows_per_rank, as their state and EpochPlan name it;
    # batch_size= still works, with a DeprecationWarning pointing at the caller.
    cls = {"PackedIterableDataset": PackedIterableDataset, "PackedDataset": PackedDataset}[name]
    templates, pools, tokens = CORPUS
    common = {"max_seq_len": MAX_SEQ_LEN, "seed": SEED, "collate": CollateOptions(pad_token_id=PAD)}
    new = cls((templates, pools), tokens, rows_per_rank=3, **common)
    with pytest.warns(
        DeprecationWarning, match=rf"^{name}\(batch_size=...\) is deprecated: pass "
    ) as caught:
        old = cls((templates, pools), tokens, batch_size=3, **common)
    assert "rows_per_rank=3" in str(caught[0].message)
    assert [w.filename for w in caught] == [__file__]
    assert old.rows_per_rank == new.rows_per_rank == old.plan.rows_per_rank == 3
    items = (
        (lambda ds: list(ds))
        if name == "PackedIterableDataset"
        else (lambda ds: [ds[k] for k in range(len(ds))])
    )
    assert all(same_batch(a, b) for a, b in zip(items(old), items(new), strict=True))
    if name == "PackedIterableDataset":
        assert old.state_dict() == new.state_dict()
        assert new.state_dict()["rows_per_rank"] == 3
    with pytest.warns(DeprecationWarning, match=rf"^{name}.batch_size is deprecated: read rows"):
        assert new.batch_size == 3
    with pytest.raises(
        ConfigError, match="got rows_per_rank=2 and batch_size=3; pass rows_per_rank"
    ):
        cls((templates, pools), tokens, rows_per_rank=2, batch_size=3, **common)
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="batch_size is 0"):
        cls((templates, pools), tokens, batch_size=0, **common)


# ---- every bin once, in order, across ranks and workers (workers simulated, many cases) -------


def _expected_epoch(
    corpus: Any, epoch: int, world_size: int, drop_last: bool, stop: Callable[[int], int]
) -> Counter:
    """The bins every rank together makes in one epoch, from the global order: rank r's bin k is
    global position r + k * world_size (DistributedSampler), wrapped past the end; a rank makes
    its bins k < stop(its number of bins)."""
    whole = _plan(corpus, epoch)
    total = len(whole)
    per_rank = total // world_size if drop_last else -(-total // world_size)
    return Counter(
        tuple(whole[(r + k * world_size) % total])
        for r in range(world_size)
        for k in range(stop(per_rank))
    )


@settings(max_examples=60, deadline=None)
@given(
    batch_size=st.integers(1, 6),
    num_workers=st.integers(1, 4),
    world_size=st.integers(1, 3),
    drop_last=st.booleans(),
    drop_remainder=st.booleans(),
    resume_fraction=st.floats(0, 1),
    num=st.integers(1, 120),
)
def test_every_bin_once_across_ranks_and_workers(
    batch_size: int,
    num_workers: int,
    world_size: int,
    drop_last: bool,
    drop_remainder: bool,
    resume_fraction: float,
    num: int,
) -> None:
    corpus = _corpus(num, seed=num)
    options = {
        "rows_per_rank": batch_size,
        "drop_remainder": drop_remainder,
        "drop_last": drop_last,
    }
    seen: Counter = Counter()
    for rank in range(world_size):
        ds = _dataset(corpus, rank=rank, world_size=world_size, epoch=1, **options)
        # Resume after k whole batches, as a state saved after step k says.
        num_batches = len(ds)
        k = int(resume_fraction * num_batches)
        consumed = min(k * batch_size, ds.num_bins)  # the last batch may be short
        ds.load_state_dict({**ds.state_dict(), "num_bins_consumed": consumed})
        assert len(ds) == num_batches - k
        streams, merged = simulated_workers(ds, num_workers, _rows)
        assert len(merged) == num_batches - k == sum(map(len, streams))
        plan = _plan(corpus, 1, rank=rank, world_size=world_size, drop_last=drop_last)
        stop = len(plan) // batch_size * batch_size if drop_remainder else len(plan)
        head = [tuple(b) for b in plan.bins(0, consumed)]
        tail = [row for batch in merged for row in batch]
        # The rank's bins, in order, each batch B consecutive ones (only the last shorter).
        assert tail == [tuple(b) for b in plan.bins(consumed, stop)]
        assert all(len(batch) == batch_size for batch in merged[:-1])
        if drop_remainder:
            assert all(len(batch) == batch_size for batch in merged)
        seen.update(head + tail)

    def rank_stop(n: int) -> int:
        return n // batch_size * batch_size if drop_remainder else n

    assert seen == _expected_epoch(corpus, 1, world_size, drop_last, rank_stop)
    if world_size == 1 and not drop_remainder:
        # One rank, nothing dropped: every sequence of the epoch exactly once.
        assert sorted(i for row in seen.elements() for i in row) == list(range(num))


# ---- PackedDataLoader: real workers, exact resume across epochs and ranks ---------------------


def _train(
    make: Callable[[], PackedDataLoader], num_epochs: int, state: dict[str, int] | None = None
) -> tuple[list[list[Row]], list[dict[str, int]]]:
    """The usual loop: batches (as rows of ids) and the state after each step."""
    loader = make()
    if state is not None:
        loader.load_state_dict(state)
    batches, states = [], []
    for epoch in range(loader.epoch, num_epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            batches.append(_rows(batch))
            states.append(loader.state_dict())
    return batches, states


@settings(max_examples=10, deadline=None)
@given(
    batch_size=st.integers(1, 5),
    num_workers=st.integers(0, 3),
    world_size=st.integers(1, 3),
    drop_remainder=st.booleans(),
    resume_fraction=st.floats(0, 1),
)
def test_resume_after_step_k_yields_the_batches_after_k(
    batch_size: int, num_workers: int, world_size: int, drop_remainder: bool, resume_fraction: float
) -> None:
    warnings.simplefilter("ignore", UserWarning)  # torch warns of 3 workers on a 2-core machine
    num_epochs = 2
    seen: list[Counter] = [Counter() for _ in range(num_epochs)]
    for rank in range(world_size):

        def make(rank: int = rank) -> PackedDataLoader:
            ds = _dataset(
                rank=rank,
                world_size=world_size,
                rows_per_rank=batch_size,
                drop_remainder=drop_remainder,
            )
            return _loader(ds, num_workers)

        full, states = _train(make, num_epochs)
        k = int(resume_fraction * len(full))  # 0: nothing taken; len(full): all taken
        rest, _ = _train(make, num_epochs, states[k - 1] if k else None)
        assert rest == full[k:]
        for state in states:  # what the state counts is what was yielded, step by step
            assert state["rank"] == rank and state["num_bins_consumed"] % batch_size in (
                0,
                state["num_bins"] % batch_size,
            )
        epoch_of = [state["epoch"] for state in states]
        for batch, epoch in zip(full, epoch_of, strict=True):
            seen[epoch].update(batch)

    def rank_stop(n: int) -> int:
        return n // batch_size * batch_size if drop_remainder else n

    for epoch in range(num_epochs):
        assert seen[epoch] == _expected_epoch(CORPUS, epoch, world_size, False, rank_stop)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_at_and_around_the_epoch_boundary(num_workers: int) -> None:
    def make() -> PackedDataLoader:
        return _loader(_dataset(rows_per_rank=4, rank=1, world_size=2), num_workers)

    full, states = _train(make, 3)
    per_epoch = len(make())
    assert len(full) == 3 * per_epoch
    # The state after the last batch of epoch 0 says so: epoch 0, all its bins taken.
    end_of_0 = states[per_epoch - 1]
    assert end_of_0["epoch"] == 0
    assert end_of_0["num_bins_consumed"] == end_of_0["num_bins"]
    for k in (1, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch, 3 * per_epoch):
        rest, _ = _train(make, 3, states[k - 1])
        assert rest == full[k:], k


def test_the_state_counts_batches_taken_not_made() -> None:
    # Workers run ahead (prefetch_factor batches each); the state names what the loop holds.
    ds = _dataset(rows_per_rank=3)
    loader = _loader(ds, 2, prefetch_factor=4)
    assert loader.state_dict()["num_bins_consumed"] == 0
    for step, _ in enumerate(loader, start=1):
        assert loader.state_dict()["num_bins_consumed"] == min(3 * step, ds.num_bins)
        assert ds.state_dict() == loader.state_dict()  # the dataset sees the loader's count
        if step == 5:
            break
    assert loader.state_dict()["num_bins_consumed"] == 15


def test_the_state_does_not_depend_on_the_workers() -> None:
    # Saved with 2 workers, resumed with none (or 3): the same batches follow.
    full, states = _train(lambda: _loader(_dataset(rows_per_rank=5), 2), 1)
    for num_workers in (0, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            rest, _ = _train(partial(_loader, _dataset(rows_per_rank=5), num_workers), 1, states[3])
        assert rest == full[4:]


def test_same_seed_same_batches_other_seed_other_batches() -> None:
    first, _ = _train(lambda: _loader(_dataset(rows_per_rank=4), 2), 2)
    again, _ = _train(lambda: _loader(_dataset(rows_per_rank=4), 0), 2)
    other, _ = _train(lambda: _loader(_dataset(rows_per_rank=4, seed=SEED + 1), 2), 2)
    assert first == again
    assert first != other
    assert sorted(r for b in first for r in b) != sorted(r for b in other for r in b)


def test_a_new_pass_restarts_at_the_resume_point() -> None:
    # Like a DataLoader: each iter() is one pass from the resume point; breaking off a pass and
    # iterating again starts that pass over.
    loader = _loader(_dataset(rows_per_rank=4), 0)
    first = [_rows(b) for b in loader]
    partial = iter(loader)
    next(partial)
    assert loader.state_dict()["num_bins_consumed"] == 4
    assert [_rows(b) for b in loader] == first
    assert len(loader) == len(first)


# ---- options ----------------------------------------------------------------------------------


def test_loader_refuses_options_that_break_the_count() -> None:
    ds = _dataset(rows_per_rank=2)
    refused: list[tuple[str, Any]] = [
        ("batch_size", 8),
        ("shuffle", True),
        ("sampler", [0, 1]),
        ("batch_sampler", [[0]]),
        ("drop_last", True),
    ]
    for name, value in refused:
        with pytest.raises(ConfigError, match=f"{name}=.*pass rows_per_rank=B"):
            PackedDataLoader(ds, **{name: value})
    with pytest.raises(ConfigError, match="persistent_workers=True"):
        PackedDataLoader(ds, num_workers=2, persistent_workers=True)
    with pytest.raises(ConfigError, match="in_order=False"):
        PackedDataLoader(ds, num_workers=2, in_order=False)
    with pytest.raises(ConfigError, match="num_workers is -1"):
        PackedDataLoader(ds, num_workers=-1)
    with pytest.raises(ConfigError, match="dataset is a list; expected a PackedIterableDataset"):
        PackedDataLoader([1, 2, 3])  # type: ignore[arg-type]
    # What the loader passes on reaches the DataLoader.
    loader = PackedDataLoader(ds, num_workers=2, prefetch_factor=3, pin_memory=False)
    assert (loader.loader.prefetch_factor, loader.loader.batch_size) == (3, None)


def test_loader_state_errors_are_the_datasets() -> None:
    loader = _loader(_dataset(rows_per_rank=2), 0)
    state = loader.state_dict()
    with pytest.raises(ConfigError, match="saved with seed=7 but this dataset has seed=8"):
        _loader(_dataset(seed=8), 0).load_state_dict(state)
    with pytest.raises(ConfigError, match="num_bins_consumed=10000"):
        loader.load_state_dict({**state, "num_bins_consumed": 10_000})


def test_a_plain_dataloader_with_the_rows_taken_resumes_too() -> None:
    # Without PackedDataLoader, the rows taken (batches * B) name the resume point.
    ds = _dataset(rows_per_rank=3)
    full = [_rows(b) for b in ds]
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    for step, _ in enumerate(loader):
        if step == 3:
            break
    state = ds.state_dict(num_bins_taken=(step + 1) * 3)
    assert state["num_bins_consumed"] == 12
    resumed = _dataset(rows_per_rank=3)
    resumed.load_state_dict(state)
    assert [_rows(b) for b in resumed] == full[4:]
