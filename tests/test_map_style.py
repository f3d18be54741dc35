"""`PackedDataset[k]` reads bins in blocks when the items come in order (`PackedDataset._bin`):
whatever the order of the reads (in order, backwards, random, negative indexes, a DataLoader
worker's share, across `set_epoch`), item k is bin k of the plan, collated."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import same_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack_cli.packing import length_histogram_from_lengths, pack_length_histogram_batched

torch = pytest.importorskip("torch")
from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataset, map_style  # noqa: E402


def _dataset(num: int = 600, seed: int = 0) -> tuple[PackedDataset, list[list[int]]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, num).tolist()
    counts, pools = length_histogram_from_lengths(lengths)
    templates = pack_length_histogram_batched(counts, 64)
    tokens = [rng.integers(1, 1000, n).tolist() for n in lengths]
    return PackedDataset(
        (templates, pools),
        tokens,
        collate=CollateOptions(pad_token_id=0),
        seed=seed,
        max_seq_len=64,
    ), (tokens)


reads = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(-50, 400), st.integers(1, 40)),
        st.tuples(st.just("one"), st.integers(-400, 400), st.just(1)),
        st.tuples(st.just("epoch"), st.integers(0, 2), st.just(0)),
    ),
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads=reads, block=st.sampled_from([1, 3, 256]))
def test_items_are_the_plans_bins_whatever_the_order(reads, block) -> None:
    dataset, _ = _dataset()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(map_style, "_BLOCK_BINS", block)
        for kind, first, count in reads:
            if kind == "epoch":
                dataset.set_epoch(first)
                continue
            size = len(dataset)
            for k in range(first, first + count):
                if not -size <= k < size:
                    with pytest.raises(IndexError):
                        dataset[k]
                    continue
                expected = dataset.collator([dataset.plan[k]])
                assert same_batch(dataset[k], expected)


def test_a_worker_share_reads_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A DataLoader worker reads every W-th item: after two reads in order, they come from
    # blocks; random reads never compute one.
    dataset, _ = _dataset(2000)
    computed = []
    plan = dataset.plan
    original = type(plan).bins

    def counting(self, start, stop):
        computed.append((start, stop))
        return original(self, start, stop)

    monkeypatch.setattr(type(plan), "bins", counting)
    for k in range(1, min(len(dataset), 700), 3):
        assert same_batch(dataset[k], dataset.collator([plan[k]]))
    assert 1 <= len(computed) <= len(range(1, min(len(dataset), 700), 3)) // 50
    computed.clear()
    rng = np.random.default_rng(1)
    for k in rng.permutation(len(dataset))[:300].tolist():
        assert same_batch(dataset[k], dataset.collator([plan[k]]))
    assert len(computed) <= 3


def test_the_block_is_not_pickled(tmp_path: Path) -> None:
    dataset, _ = _dataset()
    first = dataset[0]
    dataset[1]
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy._block == (None, 0, [], -1, 0)
    assert same_batch(copy[0], first)
