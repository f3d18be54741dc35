"""Which prepared directory a `PackedIterableDataset` state belongs to (`manifest_sha256`).

Two directories prepared from the same lengths have the same histogram, templates and number of
bins, so a position in one's epoch passes every check of the other's: only the manifest's
digest tells them apart (it lists the inputs and each pool file's sha256).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataLoader, PackedIterableDataset  # noqa: E402
from seqpack_cli.errors import ConfigError  # noqa: E402
from seqpack_cli.prepare import PrepareConfig, prepare_dataset  # noqa: E402
from seqpack_cli.prepared import load_prepared  # noqa: E402

MAX_SEQ_LEN, NUM_SEQS, SEED = 48, 240, 5


def _prepare(root: Path, name: str, ids: np.ndarray, lengths: np.ndarray) -> Path:
    """A prepared directory with a token store whose every token of sequence `id` is id + 1."""
    tokens = [[int(i) + 1] * int(n) for i, n in zip(ids, lengths, strict=True)]
    path = root / f"{name}.parquet"
    pq.write_table(pa.table({"doc_id": ids, "input_ids": tokens}), path)
    prepare_dataset(
        PrepareConfig(
            inputs=[path],
            length_column="input_ids",
            tokens_column="input_ids",
            id_column="doc_id",
            max_seq_len=MAX_SEQ_LEN,
            output=root / name,
        )
    )
    return root / name


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("owners")
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, MAX_SEQ_LEN // 2, NUM_SEQS)
    ids = np.arange(NUM_SEQS)
    # The same lengths under other ids: the same histogram, other sequences in each pool.
    return _prepare(root, "a", ids, lengths), _prepare(root, "b", rng.permutation(ids), lengths)


def _dataset(path: Path, **options: Any) -> PackedIterableDataset:
    options = {"seed": SEED, "rows_per_rank": 2, **options}
    return PackedIterableDataset(
        load_prepared(path), collate=CollateOptions(pad_token_id=0), **options
    )


def _ids(batch: dict[str, Any]) -> list[int]:
    """The sequence ids of a padded batch, row after row (its tokens are id + 1)."""
    ids: list[int] = []
    for row, mask, positions in zip(
        batch["input_ids"], batch["attention_mask"], batch["position_ids"], strict=True
    ):
        ids += [int(t) - 1 for t, m, p in zip(row, mask, positions, strict=True) if m and p == 0]
    return ids


def _state_after(ds: PackedIterableDataset, steps: int) -> tuple[list[int], dict[str, Any]]:
    loader = PackedDataLoader(ds)
    seen: list[int] = []
    for step, batch in enumerate(loader, start=1) if steps else ():
        seen += _ids(batch)
        if step == steps:
            break
    return seen, loader.state_dict()


def test_the_directories_differ_only_in_their_ids(directories: tuple[Path, Path]) -> None:
    a, b = (load_prepared(path) for path in directories)
    assert a.counts == b.counts and a.templates == b.templates
    assert len(_dataset(directories[0])) == len(_dataset(directories[1]))
    assert a.manifest_sha256 != b.manifest_sha256


def test_a_state_names_its_directory(directories: tuple[Path, Path]) -> None:
    state = _dataset(directories[0]).state_dict()
    assert state["manifest_sha256"] == load_prepared(directories[0]).manifest_sha256
    assert json.loads(json.dumps(state)) == state


def test_another_directorys_state_is_refused(directories: tuple[Path, Path]) -> None:
    a, b = directories
    _, state = _state_after(_dataset(a), 3)
    other = _dataset(b)
    digests = [load_prepared(path).manifest_sha256 for path in directories]
    with pytest.raises(ConfigError) as caught:
        other.load_state_dict(state)
    message = str(caught.value)
    assert "\n" not in message
    assert f"manifest_sha256 {digests[0][:16]}..." in message
    assert f"reads {b.absolute()} (manifest_sha256 {digests[1][:16]}...)" in message
    assert "resume with the prepared directory the state was saved from" in message
    assert other.state_dict()["num_bins_consumed"] == 0  # nothing of the state was taken
    # Also through the loader, and from a state saved on another layout (world size 2).
    _, state = _state_after(_dataset(a, rank=1, world_size=2), 2)
    with pytest.raises(ConfigError, match="manifest_sha256"):
        PackedDataLoader(_dataset(b, world_size=3, rank=0)).load_state_dict(state)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.integers(0, 12), num_workers=st.sampled_from([0, 0, 2]))
def test_the_same_directory_resumes_exactly(
    directories: tuple[Path, Path], steps: int, num_workers: int
) -> None:
    path = directories[0]
    everything = [_ids(batch) for batch in _dataset(path)]
    head, state = _state_after(_dataset(path), steps)
    resumed = _dataset(path)  # loaded again, as a new process would
    resumed.load_state_dict(state)
    context = {"multiprocessing_context": "fork"} if num_workers else {}
    loader = PackedDataLoader(resumed, num_workers=num_workers, **context)
    tail = [i for batch in loader for i in _ids(batch)]
    assert head + tail == [i for batch in everything for i in batch]


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.integers(0, 10), new_world_size=st.integers(1, 4))
def test_the_same_directory_resumes_on_another_world_size(
    directories: tuple[Path, Path], steps: int, new_world_size: int
) -> None:
    path = directories[0]
    before: list[int] = []
    states = []
    for rank in range(2):
        seen, state = _state_after(_dataset(path, rank=rank, world_size=2, drop_last=True), steps)
        before += seen
        states.append(state)
    after: list[int] = []
    for rank in range(new_world_size):
        ds = _dataset(path, rank=rank, world_size=new_world_size, drop_last=True)
        ds.load_state_dict(states[rank % 2])  # any rank's state continues the epoch
        after += [i for batch in ds for i in _ids(batch)]
    seen = Counter(before + after)
    assert max(seen.values()) == 1  # no sequence twice
    # None skipped but what the resumed run's drop_last drops: less than one of its steps.
    missing = set(range(NUM_SEQS)) - set(seen)
    assert len(missing) < new_world_size * 2 * MAX_SEQ_LEN


def test_a_state_saved_before_the_digest_loads_with_a_warning(
    directories: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing says whose such a state is: it is taken, as before, with a warning naming the
    # directory it was not checked against.
    path = directories[0]
    everything = [i for batch in _dataset(path) for i in _ids(batch)]
    head, state = _state_after(_dataset(path), 4)
    del state["manifest_sha256"]
    resumed = _dataset(path)
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.data.iterable"):
        resumed.load_state_dict(state)
    (record,) = [r for r in caplog.records if "manifest_sha256" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "records no manifest_sha256" in record.getMessage()
    assert str(path.absolute()) in record.getMessage()
    assert head + [i for batch in resumed for i in _ids(batch)] == everything


def test_a_pair_source_is_not_checked(directories: tuple[Path, Path]) -> None:
    # A (templates, pools) pair has no manifest: its state says None, and either side's None
    # skips the check (there is nothing to compare).
    prepared = load_prepared(directories[0])
    pair = PackedIterableDataset(
        (prepared.templates, prepared.pools),
        prepared.tokens,
        max_seq_len=MAX_SEQ_LEN,
        collate=CollateOptions(pad_token_id=0),
        seed=SEED,
        rows_per_rank=2,
    )
    _, state = _state_after(pair, 2)
    assert state["manifest_sha256"] is None
    on_directory = _dataset(directories[1])
    on_directory.load_state_dict(state)
    assert on_directory.state_dict()["num_bins_consumed"] == 4
    _, state = _state_after(_dataset(directories[1]), 1)
    pair.load_state_dict(state)
    assert pair.state_dict()["num_bins_consumed"] == 2
