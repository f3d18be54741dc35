"""The datasets' steps: balanced ranks, and a checkpoint resumed on another world size."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest

from seqpack_cli.packing import length_histogram_from_lengths, pack_length_histogram_batched

torch = pytest.importorskip("torch")
from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataLoader, PackedIterableDataset  # noqa: E402

MAX_SEQ_LEN, PAD = 64, 0


@pytest.fixture(scope="module")
def corpus() -> tuple[list[np.ndarray], Any]:
    rng = np.random.default_rng(4)
    lengths = np.clip(rng.lognormal(2.5, 0.9, size=400).astype(int), 1, MAX_SEQ_LEN)
    tokens = [np.full(n, i + 1) for i, n in enumerate(lengths)]  # token = id + 1: rows name ids
    histogram, pools = length_histogram_from_lengths(lengths)
    return tokens, (pack_length_histogram_batched(histogram, MAX_SEQ_LEN), pools)


def _dataset(corpus: Any, rank: int, world_size: int, rows_per_rank: int, **options: Any) -> Any:
    tokens, source = corpus
    return PackedIterableDataset(
        source, tokens, max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=PAD),
        seed=3, rank=rank,
        world_size=world_size, rows_per_rank=rows_per_rank, **options,
    )  # fmt: skip


def _ids(batch: dict[str, Any]) -> list[int]:
    """The sequence ids of a padded batch (its tokens are id + 1)."""
    ids = batch["input_ids"][batch["attention_mask"] == 1]
    return sorted(set((ids - 1).tolist()))


BALANCED = {"balance": "cost", "cost_per_token": 96.0, "balance_window": 4}


@pytest.mark.parametrize("new_layout", [(3, 1, {}), (2, 3, BALANCED), (5, 2, BALANCED)])
def test_a_checkpoint_resumes_on_another_world_size(corpus: Any, new_layout: Any) -> None:
    world_size, batch_size, steps = 4, 2, 5  # step 5 is mid-window (windows of 4 steps)
    ranks = [_dataset(corpus, r, world_size, batch_size, drop_last=True, **BALANCED)
             for r in range(world_size)]  # fmt: skip
    before: list[int] = []
    states = []
    for ds in ranks:
        loader = PackedDataLoader(ds)
        for step, batch in enumerate(loader):
            before += _ids(batch)
            if step + 1 == steps:
                break
        states.append(loader.state_dict())
    assert json.loads(json.dumps(states[0])) == states[0]
    new_world, new_batch, options = new_layout
    after: list[int] = []
    for r in range(new_world):
        resumed = _dataset(corpus, r, new_world, new_batch, drop_last=True, **options)
        resumed.load_state_dict(states[min(r, world_size - 1)])  # any rank's state
        after += [i for batch in resumed for i in _ids(batch)]
    seen = Counter(before + after)
    assert max(seen.values()) == 1  # no sequence twice
    tokens, _ = corpus
    # None skipped but what the resumed run's drop_last drops: less than one of its steps.
    missing = set(range(len(tokens))) - set(seen)
    assert len(missing) < new_world * new_batch * MAX_SEQ_LEN


def test_same_layout_resume_gives_the_same_batches(corpus: Any) -> None:
    ds = _dataset(corpus, 1, 3, 2, **BALANCED)
    full = [_ids(batch) for batch in ds]
    loader = PackedDataLoader(_dataset(corpus, 1, 3, 2, **BALANCED))
    head = []
    for step, batch in enumerate(loader):
        head.append(_ids(batch))
        if step == 6:
            break
    resumed = _dataset(corpus, 1, 3, 2, **BALANCED)
    resumed.load_state_dict(loader.state_dict())
    assert head + [_ids(batch) for batch in resumed] == full


def test_balanced_steps_have_equal_step_counts_and_cover_the_epoch(corpus: Any) -> None:
    ranks = [_dataset(corpus, r, 4, 2, **BALANCED) for r in range(4)]
    assert len({len(ds) for ds in ranks}) == 1
    seen = Counter(i for ds in ranks for batch in ds for i in _ids(batch))
    tokens, _ = corpus
    assert set(seen) == set(range(len(tokens)))
