"""PackedDataset / PackedIterableDataset: epochs split across ranks and workers, resume, seeds."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from itertools import islice, pairwise
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import next_fit_plan, same_batch, simulated_workers
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import seqpack_cli.sharding as sharding_module  # noqa: E402
from seqpack_cli.collate import (  # noqa: E402
    CollateOptions,
    PackedCollator,
)
from seqpack_cli.data import PackedDataset, PackedIterableDataset  # noqa: E402
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW  # noqa: E402
from seqpack_cli.epoch.plan import EpochPlan  # noqa: E402
from seqpack_cli.errors import ConfigError, PreparedFormatError  # noqa: E402
from seqpack_cli.seeding import seed_from_components  # noqa: E402

MAX_SEQ_LEN = 32
PAD = 0


def _lengths(num: int = 60, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 20, num).tolist()


def _token_source(lengths: list[int]) -> list[list[int]]:
    # Every token of sequence i is i + 1 (0 is the padding), so a row tells which ids it holds.
    return [[i + 1] * length for i, length in enumerate(lengths)]


def _ids(row: dict[str, Any]) -> list[int]:
    """The sequence ids in a padded batch-of-one row, in order."""
    (tokens,) = row["input_ids"].tolist()
    (positions,) = row["position_ids"].tolist()
    (mask,) = row["attention_mask"].tolist()
    return [t - 1 for t, p, m in zip(tokens, positions, mask, strict=True) if m and p == 0]


@pytest.fixture
def corpus() -> tuple[list[int], Counter, dict[int, np.ndarray], list[list[int]]]:
    lengths = _lengths()
    templates, pools = next_fit_plan(lengths, MAX_SEQ_LEN)
    return lengths, templates, pools, _token_source(lengths)


def _iterable(corpus: Any, **kwargs: Any) -> PackedIterableDataset:
    _, templates, pools, tokens = corpus
    options = {"max_seq_len": MAX_SEQ_LEN, "seed": 7, **kwargs}
    return PackedIterableDataset(
        (templates, pools), tokens, collate=CollateOptions(pad_token_id=PAD), **options
    )


def _plan(corpus: Any, epoch: int = 0, **kwargs: Any) -> EpochPlan:
    _, templates, pools, _ = corpus
    return EpochPlan(templates, pools, seed_from_components(7, epoch), **kwargs)


# ---- map-style --------------------------------------------------------------------------------


@pytest.mark.parametrize("format", ["padded", "padding_free", "maxtext"])
def test_map_item_is_the_collator_on_the_plan_bin(corpus: Any, format: str) -> None:
    _, templates, pools, tokens = corpus
    ds = PackedDataset(
        (templates, pools),
        tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD, format=format),
        seed=7,
        epoch=3,
    )
    plan = _plan(corpus, epoch=3)
    collator = PackedCollator(tokens, MAX_SEQ_LEN, PAD, format=format)
    assert len(ds) == len(plan) == sum(templates.values())
    for k in range(len(ds)):
        assert same_batch(ds[k], collator([plan[k]]))
    assert same_batch(ds[-1], collator([plan[len(plan) - 1]]))


def test_map_item_keeps_a_batch_of_one(corpus: Any) -> None:
    _, templates, pools, tokens = corpus
    ds = PackedDataset(
        (templates, pools),
        tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD),
        seed=1,
    )
    row = ds[0]
    assert row["input_ids"].shape == (1, MAX_SEQ_LEN)
    assert row["cu_seqlens"][-1] == row["attention_mask"].sum()


def test_map_epoch_covers_every_sequence_once_and_epochs_differ(corpus: Any) -> None:
    lengths, templates, pools, tokens = corpus
    ds = PackedDataset(
        (templates, pools),
        tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD),
        seed=1,
    )
    pairings = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        bins = [_ids(ds[k]) for k in range(len(ds))]
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        pairings.append({frozenset(b) for b in bins})
    assert pairings[0] != pairings[1] != pairings[2] != pairings[0]


def test_map_dataset_through_a_dataloader(corpus: Any) -> None:
    _, templates, pools, tokens = corpus
    ds = PackedDataset(
        (templates, pools),
        tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD),
        seed=1,
    )
    rows = list(DataLoader(ds, batch_size=None))
    assert len(rows) == len(ds)
    assert all(same_batch(row, ds[k]) for k, row in enumerate(rows))


def test_several_rows_per_step_batch_bins_from_the_plan(corpus: Any) -> None:
    # The documented recipe for B rows per step: the plan is a map-style dataset of bins.
    _, templates, pools, tokens = corpus
    ds = PackedDataset(
        (templates, pools),
        tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD),
        seed=1,
    )
    batch = next(iter(DataLoader(ds.plan, batch_size=4, collate_fn=ds.collator)))
    assert batch["input_ids"].shape == (4, MAX_SEQ_LEN)
    assert torch.equal(batch["input_ids"][2:3], ds[2]["input_ids"])


# ---- iterable: sharding across ranks and workers ----------------------------------------------


def _rank_rows(corpus: Any, rank: int, world_size: int, **kwargs: Any) -> list[list[int]]:
    ds = _iterable(corpus, rank=rank, world_size=world_size, **kwargs)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    return [_ids(row) for row in loader]


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_two_workers_cover_the_epoch_once(corpus: Any, drop_last: bool) -> None:
    lengths, templates, *_ = corpus
    num_bins = sum(templates.values())
    per_rank = [_rank_rows(corpus, rank, 2, drop_last=drop_last) for rank in range(2)]
    for rank, rows in enumerate(per_rank):
        plan = _plan(corpus, rank=rank, world_size=2, drop_last=drop_last)
        # The DataLoader hands the workers' bins out round-robin: the rank's plan order, exactly.
        assert rows == [plan[k] for k in range(len(plan))]
    seen = Counter(i for rows in per_rank for b in rows for i in b)
    if drop_last:
        # floor(B / 2) bins per rank: at most one bin (the odd one out) is dropped, none repeat.
        assert max(seen.values()) == 1
        assert sum(len(rows) for rows in per_rank) == num_bins - num_bins % 2
    else:
        # ceil(B / 2) per rank: every id at least once; only an odd count wraps one bin around.
        assert set(seen) == set(range(len(lengths)))
        assert sum(len(rows) for rows in per_rank) == num_bins + num_bins % 2


@settings(max_examples=20, deadline=None)
@given(
    num_workers=st.integers(1, 5),
    world_size=st.integers(1, 3),
    start_fraction=st.floats(0, 1),
)
def test_workers_split_a_rank_disjointly_in_interleaved_order(
    num_workers: int, world_size: int, start_fraction: float
) -> None:
    lengths = _lengths(40, seed=3)
    templates, pools = next_fit_plan(lengths, MAX_SEQ_LEN)
    corpus = (lengths, templates, pools, _token_source(lengths))
    for rank in range(world_size):
        ds = _iterable(corpus, rank=rank, world_size=world_size)
        start = int(start_fraction * ds.num_bins)
        ds.load_state_dict({**ds.state_dict(), "num_bins_consumed": start})
        streams, merged = simulated_workers(ds, num_workers, _ids)
        plan = _plan(corpus, rank=rank, world_size=world_size)
        assert merged == [plan[k] for k in range(start, len(plan))]
        assert sum(map(len, streams)) == len(plan) - start == len(ds)


def test_rank_and_world_size_default_to_torch_distributed(
    corpus: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharding_module.dist, "is_available", lambda: True)
    monkeypatch.setattr(sharding_module.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(sharding_module.dist, "get_rank", lambda: 2)
    monkeypatch.setattr(sharding_module.dist, "get_world_size", lambda: 3)
    ds = _iterable(corpus)
    assert (ds.rank, ds.world_size) == (2, 3)
    assert [_ids(row) for row in ds] == list(_plan(corpus, rank=2, world_size=3))
    assert _iterable(corpus, rank=0, world_size=1).world_size == 1  # explicit values win


def test_rank_and_world_size_without_torch_distributed(corpus: Any) -> None:
    ds = _iterable(corpus)
    assert (ds.rank, ds.world_size) == (0, 1)
    assert [_ids(row) for row in ds] == list(_plan(corpus))


# ---- iterable: epochs and resume --------------------------------------------------------------


def test_epochs_give_different_pairings_and_set_epoch_resets(corpus: Any) -> None:
    ds = _iterable(corpus)
    epoch0 = [_ids(row) for row in ds]
    ds.set_epoch(1)
    epoch1 = [_ids(row) for row in ds]
    assert sorted(map(sorted, epoch0)) != sorted(map(sorted, epoch1))
    assert sorted(i for b in epoch1 for i in b) == sorted(i for b in epoch0 for i in b)
    assert epoch1 == list(_plan(corpus, epoch=1))


def test_resume_in_process_reproduces_the_rest_of_the_epoch(corpus: Any) -> None:
    ds = _iterable(corpus, epoch=2)
    full = [_ids(row) for row in ds]
    assert ds.state_dict()["num_bins_consumed"] == len(full)

    rows = iter(ds)
    head = [_ids(next(rows)) for _ in range(5)]
    state = ds.state_dict()
    assert state == {
        "epoch": 2,
        "num_bins_consumed": 5,
        "num_bins": len(full),
        "seed": 7,
        "rank": 0,
        "manifest_sha256": None,  # a (templates, pools) pair names no prepared directory
        "world_size": 1,
        "rows_per_rank": 1,
        "balance": None,
        "cost_per_token": None,
        "balance_window": DEFAULT_BALANCE_WINDOW,
        "drop_last": False,
        "cursor": {"pending": [], "next_position": 0},
    }
    assert json.loads(json.dumps(state)) == state  # a checkpoint can store it as JSON

    resumed = _iterable(corpus)  # a fresh process: epoch 0 until the state says otherwise
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the usual loop calls set_epoch again: it keeps the resume point
    assert len(resumed) == len(full) - 5
    tail = [_ids(row) for row in resumed]
    assert head + tail == full
    resumed.set_epoch(3)  # a new epoch starts from its first bin
    assert len(resumed) == len(full)


def test_resume_with_dataloader_workers(corpus: Any) -> None:
    ds = _iterable(corpus, rank=1, world_size=2, epoch=1)
    full = list(_plan(corpus, epoch=1, rank=1, world_size=2))
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    head = []
    for step, row in enumerate(loader):
        head.append(_ids(row))
        if step == 6:
            break
    state = ds.state_dict(num_bins_taken=step + 1)
    assert state["num_bins_consumed"] == 7

    resumed = _iterable(corpus, rank=1, world_size=2)
    resumed.load_state_dict(state)
    loader = DataLoader(resumed, batch_size=None, num_workers=2, multiprocessing_context="fork")
    tail = [_ids(row) for row in loader]
    assert head + tail == full
    # num_bins_taken counts from the pass's start: 3 more rows after resuming at 7 -> 10.
    assert resumed.state_dict(num_bins_taken=3)["num_bins_consumed"] == 10


def test_state_errors(corpus: Any) -> None:
    ds = _iterable(corpus)
    state = ds.state_dict()
    with pytest.raises(ConfigError, match="num_bins_taken=999"):
        ds.state_dict(num_bins_taken=999)
    with pytest.raises(ConfigError, match="missing num_bins_consumed"):
        ds.load_state_dict({"epoch": 0})
    with pytest.raises(ConfigError, match="saved with seed=7 but this dataset has seed=8"):
        _iterable(corpus, seed=8).load_state_dict(state)
    with pytest.raises(ConfigError, match="not a whole number of its steps of 3 rows"):
        _iterable(corpus, world_size=2).load_state_dict(
            {**state, "rows_per_rank": 3, "num_bins_consumed": 4}
        )
    with pytest.raises(ConfigError, match="num_bins_consumed=10000"):
        ds.load_state_dict({**state, "num_bins_consumed": 10_000})
    with pytest.raises(ConfigError, match="epoch is -1; expected a non-negative integer"):
        ds.load_state_dict({**state, "epoch": -1})


# ---- options and sources ----------------------------------------------------------------------


def test_bad_options_are_config_errors(corpus: Any) -> None:
    _, templates, pools, tokens = corpus
    with pytest.raises(ConfigError, match="max_seq_len is not set"):
        PackedDataset((templates, pools), tokens, collate=CollateOptions(pad_token_id=PAD), seed=1)
    with pytest.raises(ConfigError, match="templates hold bins of up to"):
        PackedDataset(
            (templates, pools),
            tokens,
            max_seq_len=8,
            collate=CollateOptions(pad_token_id=PAD),
            seed=1,
        )
    with pytest.raises(ConfigError, match="source is a dict"):
        PackedDataset(
            {}, tokens, max_seq_len=MAX_SEQ_LEN, collate=CollateOptions(pad_token_id=PAD), seed=1
        )
    # A path is loaded (load_prepared), so a missing one says so.
    with pytest.raises(PreparedFormatError, match="prepared directory prepared does not exist"):
        PackedDataset(
            "prepared/",
            tokens,
            max_seq_len=MAX_SEQ_LEN,
            collate=CollateOptions(pad_token_id=PAD),
            seed=1,
        )
    # One seed rule (seqpack_cli.seeding.check_seed): the signed 64-bit range, as EpochPlan.
    with pytest.raises(ConfigError, match="seed is 9223372036854775808; expected an integer in"):
        _iterable(corpus, seed=2**63)
    with pytest.raises(ConfigError, match=r"rank is 2; expected .* \(world_size is 2\)"):
        _iterable(corpus, rank=2, world_size=2)
    with pytest.raises(
        ConfigError, match="epoch is '1' of type str; expected a non-negative integer"
    ):
        _iterable(corpus).set_epoch("1")  # type: ignore[arg-type]


def test_prepared_like_source_gives_the_default_max_seq_len(corpus: Any) -> None:
    _, templates, pools, tokens = corpus
    prepared = SimpleNamespace(templates=templates, pools=pools, max_seq_len=MAX_SEQ_LEN)
    ds = PackedIterableDataset(prepared, tokens, collate=CollateOptions(pad_token_id=PAD), seed=7)
    assert ds.max_seq_len == MAX_SEQ_LEN
    assert [_ids(row) for row in ds] == list(_plan(corpus))


def test_datasets_pickle_without_their_plan(corpus: Any) -> None:
    # Workers started with "spawn" receive a pickled copy; the plan is rebuilt there.
    ds = _iterable(corpus, epoch=1)
    ds.load_state_dict({**ds.state_dict(), "num_bins_consumed": 3})
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._plan is None
    assert [_ids(row) for row in copy] == [_ids(row) for row in ds]


def _write_prepared(corpus: Any, path: Any) -> Any:
    from seqpack_cli.prepared import load_prepared, write_prepared

    lengths, templates, pools, _ = corpus
    write_prepared(
        path,
        counts=dict(Counter(lengths)),
        templates=templates,
        pools=pools,
        manifest={"config": {"max_seq_len": MAX_SEQ_LEN}},
    )
    return load_prepared(path)


def test_prepared_directory_source(corpus: Any, tmp_path: Any) -> None:
    prepared = _write_prepared(corpus, tmp_path / "prepared")
    tokens = corpus[3]
    ds = PackedDataset(prepared, tokens, collate=CollateOptions(pad_token_id=PAD), seed=7, epoch=1)
    assert ds.max_seq_len == MAX_SEQ_LEN  # from the manifest
    assert [_ids(ds[k]) for k in range(len(ds))] == list(_plan(corpus, epoch=1))
    iterable = PackedIterableDataset(
        prepared, tokens, collate=CollateOptions(pad_token_id=PAD), seed=7, rank=1, world_size=2
    )
    assert [_ids(row) for row in iterable] == list(_plan(corpus, rank=1, world_size=2))


def test_prepared_pools_are_reopened_not_pickled(corpus: Any, tmp_path: Any) -> None:
    # Pickled for spawn-started workers: the memory-mapped pools are re-opened from the
    # directory on the other side, so the pickle does not carry the ids.
    lengths = _lengths(5000, seed=5)
    templates, pools = next_fit_plan(lengths, MAX_SEQ_LEN)
    big = (lengths, templates, pools, _token_source(lengths))
    prepared = _write_prepared(big, tmp_path / "prepared")
    options = {"collate": CollateOptions(pad_token_id=PAD), "seed": 7, "max_seq_len": MAX_SEQ_LEN}
    from_dir = PackedIterableDataset(prepared, big[3], **options)
    from_pair = PackedIterableDataset((templates, pools), big[3], **options)
    assert len(pickle.dumps(from_pair)) - len(pickle.dumps(from_dir)) > 8 * len(lengths)
    copy = pickle.loads(pickle.dumps(from_dir))
    assert all(isinstance(pool, np.ndarray) for pool in copy._pools.values())
    assert [_ids(row) for row in islice(copy, 50)] == [_ids(r) for r in islice(from_dir, 50)]


def test_end_to_end_from_a_parquet_file(tmp_path: Any) -> None:
    # parquet -> prepare_dataset -> load_prepared -> PackedIterableDataset: every sequence of the
    # file comes out exactly once per epoch, with its own tokens, within max_seq_len.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from seqpack_cli.prepare import PrepareConfig, prepare_dataset

    rng = np.random.default_rng(11)
    token_lists = [rng.integers(1, 1000, int(n)).tolist() for n in rng.integers(1, 40, 150)]
    table = pa.table({"input_ids": token_lists, "num_tokens": [len(t) for t in token_lists]})
    pq.write_table(table, tmp_path / "train.parquet")
    prepared = prepare_dataset(
        PrepareConfig(
            inputs=[tmp_path / "train.parquet"],
            length_column="num_tokens",
            max_seq_len=64,
            output=tmp_path / "prepared",
        )
    )
    ds = PackedIterableDataset(
        prepared, token_lists, collate=CollateOptions(pad_token_id=0), seed=3
    )
    sequences = []
    for row in ds:
        assert row["input_ids"].shape == (1, 64)
        ends = row["cu_seqlens"].tolist()
        (tokens,) = row["input_ids"].tolist()
        sequences += [tokens[a:b] for a, b in pairwise(ends)]
    assert sorted(sequences) == sorted(token_lists)
