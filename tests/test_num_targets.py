"""Each sequence's number of loss targets, stored beside a loss mask or labels (`num_targets.npy`,
`seqpack_cli.target_counts`): written by every engine of `prepare` and by `write_token_source`,
checked at load, read by id through `Prepared.num_targets` / `FlatTokenSource.num_targets`.

The oracle is the collator itself: a sequence's count is the number of labels other than -100
that `PackedCollator(format="padded")` gives it, collated alone (truncated as the datasets
truncate under `--over-cap truncate`); and, for the counting function, a per-position loop.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from token_datasets import store_config, write_token_files

from seqpack_cli import target_counts
from seqpack_cli.collate import PackedCollator
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError
from seqpack_cli.prepare import job as job_module
from seqpack_cli.prepare import load_prepared, one_pass, prepare_dataset
from seqpack_cli.prepare.token_files import write_token_source
from seqpack_cli.target_counts import NUM_TARGETS_NAME, count_targets
from seqpack_cli.token_sources import FlatTokenSource

MAX_SEQ_LEN = 16
_ROLES = {"labels": "labels_column", "loss_mask": "loss_mask_column"}
_COLUMNS = {"labels": "labels", "loss_mask": "mask"}


def _dataset(root: Path, seed: int = 0, count: int = 90) -> Path:
    """Token lists of 1-30 tokens (some over MAX_SEQ_LEN) over uneven files, with labels (-100
    on ~40% of the tokens) and a 0/1 loss mask."""
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, 500, int(rng.integers(1, 31))).tolist() for _ in range(count)]
    labels = [[t if rng.random() < 0.6 else -100 for t in s] for s in sequences]
    mask = [rng.integers(0, 2, len(s)).tolist() for s in sequences]
    ids = (rng.permutation(count) * 3 + 7).tolist()
    return write_token_files(
        root, sequences, cuts=(11, 11, 40), labels=labels, mask=mask, ids=ids, row_group_size=6
    )


def _store_ids(tokens: FlatTokenSource) -> np.ndarray:
    return np.arange(len(tokens)) if tokens.ids is None else np.asarray(tokens.ids)


def _collated_counts(
    tokens: Any, values: Any, role: str, ids: np.ndarray, truncate: bool
) -> np.ndarray:
    """Each id's labels other than -100 when `PackedCollator` collates it alone."""
    sources = {"labels_source" if role == "labels" else "loss_mask_source": values}
    max_seq_len = MAX_SEQ_LEN if truncate else 1_000  # whole sequences, else the first 16
    collator = PackedCollator(tokens, max_seq_len, 0, format="padded", truncate=truncate, **sources)
    return np.array([int((collator([[int(i)]])["labels"] != -100).sum()) for i in ids])


def _check_against_the_collator(prepared: Any, role: str, truncate: bool) -> None:
    counts = prepared.num_targets
    assert counts is not None and counts.role == role
    assert counts.truncated_to == (MAX_SEQ_LEN if truncate else None)
    assert counts.label_pad_id == (-100 if role == "labels" else None)
    ids = _store_ids(prepared.tokens)
    values = getattr(prepared, role)
    expected = _collated_counts(prepared.tokens, values, role, ids, truncate)
    shuffled = np.random.default_rng(1).permutation(ids.shape[0])
    got = counts.take(ids[shuffled])
    assert got.dtype == np.int64 and got.tolist() == expected[shuffled].tolist()
    assert values.num_targets is counts  # the same counts on the source a user passes


def _engine_runs(monkeypatch: pytest.MonkeyPatch, engine: str) -> list[str]:
    """Make the local engine run in one pass or in two; return the list that records which."""
    seen: list[str] = []
    real = one_pass.read_in_one_pass

    def spy(*args: Any, **kwargs: Any) -> Any:
        if engine == "two passes":  # as test_single_pass forces them: the one pass gives up
            outcome = one_pass.Fallback(one_pass.Fault("the test forces the two passes"))
        else:
            outcome = real(*args, **kwargs)
        seen.append(type(outcome).__name__)
        return outcome

    monkeypatch.setattr(one_pass, "read_in_one_pass", spy)
    return seen


# ---- every engine, labels and a loss mask, truncated or not ----------------------------------


@pytest.mark.parametrize("over_cap", ["drop", "truncate", "split"])
@pytest.mark.parametrize("role", ["labels", "loss_mask"])
@pytest.mark.parametrize("engine", ["one pass", "two passes"])
def test_the_local_engine_stores_the_collators_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, role: str, over_cap: str
) -> None:
    if over_cap == "split" and engine == "two passes":
        pytest.skip("the local engine splits in its one pass only")
    _dataset(tmp_path)
    seen = _engine_runs(monkeypatch, engine)
    options = {_ROLES[role]: _COLUMNS[role], "id_column": "doc", "over_cap": over_cap}
    written = prepare_dataset(store_config(tmp_path, **options))
    assert seen == (["OnePass"] if engine == "one pass" else ["Fallback"])
    truncate = over_cap == "truncate"
    _check_against_the_collator(written, role, truncate)  # as prepare returns it
    prepared = load_prepared(tmp_path / "out", verify=True)
    _check_against_the_collator(prepared, role, truncate)
    entry = prepared.manifest["files"][f"{role}/{NUM_TARGETS_NAME}"]
    assert entry["bytes"] == (tmp_path / "out" / role / NUM_TARGETS_NAME).stat().st_size
    assert np.load(tmp_path / "out" / role / NUM_TARGETS_NAME).dtype == np.dtype("<i4")


def test_both_local_passes_write_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dataset(tmp_path)
    options = {"loss_mask_column": "mask", "over_cap": "truncate"}
    prepare_dataset(store_config(tmp_path, output=tmp_path / "one", **options))
    _engine_runs(monkeypatch, "two passes")
    prepare_dataset(store_config(tmp_path, output=tmp_path / "two", **options))
    for name in (NUM_TARGETS_NAME, "token_source.json"):
        one = (tmp_path / "one" / "loss_mask" / name).read_bytes()
        assert one == (tmp_path / "two" / "loss_mask" / name).read_bytes()


@pytest.mark.parametrize(
    ("role", "over_cap"),
    [("labels", "drop"), ("labels", "truncate"), ("loss_mask", "truncate"), ("labels", "split")],
)
def test_the_dask_engine_stores_the_collators_counts(
    dask_cluster: Any, tmp_path: Path, role: str, over_cap: str
) -> None:
    from dask_store_cases import dask_options

    _dataset(tmp_path)
    options = {_ROLES[role]: _COLUMNS[role], "id_column": "doc", "over_cap": over_cap}
    prepare_dataset(store_config(tmp_path, **options))
    dask = dask_options(dask_cluster)
    prepare_dataset(store_config(tmp_path, output=tmp_path / "dask", **options, **dask))
    prepared = load_prepared(tmp_path / "dask", verify=True)
    _check_against_the_collator(prepared, role, over_cap == "truncate")
    for name in (NUM_TARGETS_NAME, "token_source.json"):  # the local engine's bytes
        local = (tmp_path / "out" / role / name).read_bytes()
        assert (tmp_path / "dask" / role / name).read_bytes() == local


def test_no_counts_without_a_loss_mask_or_labels(tmp_path: Path) -> None:
    _dataset(tmp_path)
    prepared = prepare_dataset(store_config(tmp_path, over_cap="drop"))
    assert prepared.num_targets is None and prepared.tokens.num_targets is None
    assert not [name for name in prepared.manifest["files"] if NUM_TARGETS_NAME in name]


# ---- the counting function ---------------------------------------------------------------------


def _brute_force(
    values: np.ndarray, lengths: list[int], role: str, truncated_to: int | None
) -> list[int]:
    counts, start = [], 0
    for length in lengths:
        kept = length if truncated_to is None else min(length, truncated_to)
        row = values[start : start + length].tolist()
        pad = -100 if role == "labels" else 0
        counts.append(sum(1 for p in range(1, kept) if row[p] != pad))
        start += length
    return counts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(0, 40), max_size=60),
    role=st.sampled_from(["labels", "loss_mask"]),
    truncated_to=st.one_of(st.none(), st.integers(1, 45)),
    chunks=st.tuples(st.integers(1, 9), st.integers(1, 50)),
    seed=st.integers(0, 2**32 - 1),
)
def test_counting_equals_the_brute_force(lengths, role, truncated_to, chunks, seed) -> None:
    rng = np.random.default_rng(seed)
    total = sum(lengths)
    if role == "labels":
        values = np.where(rng.random(total) < 0.5, -100, rng.integers(-5, 9, total))
    else:
        values = rng.integers(0, 2, total).astype(np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    expected = _brute_force(values, lengths, role, truncated_to)
    # Small chunks of rows and of values: every cut between and inside rows shows.
    rows_chunk, values_chunk = chunks
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target_counts, "_ROWS_CHUNK", rows_chunk)
        patch.setattr(target_counts, "_VALUES_CHUNK", values_chunk)
        got = count_targets(values, offsets, role=role, truncated_to=truncated_to)
    assert got.tolist() == expected
    assert count_targets(values, offsets, role=role, truncated_to=truncated_to).tolist() == expected


# ---- checked at load ---------------------------------------------------------------------------


def _prepared_with_mask(root: Path) -> Path:
    _dataset(root)
    prepare_dataset(
        store_config(root, loss_mask_column="mask", id_column="doc", over_cap="truncate")
    )
    return root / "out"


def test_a_resized_counts_file_is_refused_at_load(tmp_path: Path) -> None:
    out = _prepared_with_mask(tmp_path)
    with open(out / "loss_mask" / NUM_TARGETS_NAME, "ab") as handle:
        handle.write(b"\0\0\0\0")
    with pytest.raises(PreparedFormatError, match=rf"loss_mask/{NUM_TARGETS_NAME} has \d+ bytes"):
        load_prepared(out)


def test_changed_counts_are_refused_by_verify(tmp_path: Path) -> None:
    out = _prepared_with_mask(tmp_path)
    path = out / "loss_mask" / NUM_TARGETS_NAME
    data = bytearray(path.read_bytes())
    data[-4] ^= 0x01  # one count changed, the size kept
    path.write_bytes(bytes(data))
    with pytest.raises(PreparedFormatError, match=f"{NUM_TARGETS_NAME} does not match its sha256"):
        load_prepared(out, verify=True)
    with pytest.raises(PreparedFormatError, match="first or last MiB differs"):
        load_prepared(out)  # a small file lies within its edges: every load sees it


def test_a_store_of_an_older_seqpack_loads_without_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An older seqpack wrote the store as today's, less the post-pass.
    monkeypatch.setattr(job_module, "_count_targets", lambda *args, **kwargs: None)
    out = _prepared_with_mask(tmp_path)
    assert not (out / "loss_mask" / NUM_TARGETS_NAME).exists()
    prepared = load_prepared(out, verify=True)
    assert prepared.loss_mask is not None and prepared.num_targets is None
    assert prepared.loss_mask.num_targets is None


def test_counts_pickle_as_their_location(tmp_path: Path) -> None:
    _dataset(tmp_path, count=3000)
    prepare_dataset(store_config(tmp_path, labels_column="labels", over_cap="truncate"))
    prepared = load_prepared(tmp_path / "out")
    counts = prepared.num_targets
    data = pickle.dumps(counts)
    assert len(data) < 2_000 < 4 * len(counts)  # not a copy of the counts
    again = pickle.loads(data)
    ids = np.arange(0, 3000, 7)
    assert again.truncated_to == MAX_SEQ_LEN and again.label_pad_id == -100
    assert again.take(ids).tolist() == counts.take(ids).tolist()
    assert pickle.loads(pickle.dumps(prepared)).num_targets.take(ids).tolist() == (
        counts.take(ids).tolist()
    )


def test_an_unknown_id_is_the_token_stores_error(tmp_path: Path) -> None:
    out = _prepared_with_mask(tmp_path)
    prepared = load_prepared(out)
    with pytest.raises(InputError) as counted:
        prepared.num_targets.take(np.array([7, 8]))  # ids are 3k + 7: 8 is none
    with pytest.raises(InputError) as stored:
        prepared.loss_mask.take(np.array([7, 8]))
    assert str(counted.value) == str(stored.value)


# ---- write_token_source ------------------------------------------------------------------------


@pytest.mark.parametrize("truncate", [False, True])
@pytest.mark.parametrize("role", ["labels", "loss_mask"])
def test_write_token_source_stores_the_collators_counts(
    tmp_path: Path, role: str, truncate: bool
) -> None:
    inputs = _dataset(tmp_path)
    over_cap = "truncate" if truncate else "drop"
    prepared = prepare_dataset(store_config(tmp_path, id_column="doc", over_cap=over_cap))
    tokens = write_token_source(
        inputs, "input_ids", output=tmp_path / "tokens", id_column="doc", prepared=prepared
    )
    values = write_token_source(
        inputs,
        _COLUMNS[role],
        output=tmp_path / role,
        id_column="doc",
        prepared=prepared,
        role=role,
    )
    assert tokens.num_targets is None
    for source in (
        values,
        FlatTokenSource.open(tmp_path / role),
        pickle.loads(pickle.dumps(values)),
    ):
        counts = source.num_targets
        assert counts.truncated_to == (MAX_SEQ_LEN if truncate else None)
        ids = _store_ids(tokens)
        expected = _collated_counts(tokens, source, role, ids, truncate)
        assert counts.take(ids).tolist() == expected.tolist()
    assert pickle.loads(pickle.dumps(values.num_targets)).take(ids).tolist() == expected.tolist()


def test_write_token_source_without_prepared_counts_whole_sequences(tmp_path: Path) -> None:
    inputs = _dataset(tmp_path)
    mask = write_token_source(inputs, "mask", output=tmp_path / "mask", role="loss_mask")
    tokens = write_token_source(inputs, "input_ids", output=tmp_path / "tokens")
    assert mask.tokens.dtype == np.uint8 and mask.num_targets.truncated_to is None
    ids = np.arange(len(tokens))
    assert mask.num_targets.take(ids).tolist() == (
        _collated_counts(tokens, mask, "loss_mask", ids, truncate=False).tolist()
    )
    # Overwriting a source that holds the counts is replacing one of its own files.
    write_token_source(inputs, "mask", output=tmp_path / "mask", role="loss_mask", overwrite=True)


def test_write_token_source_refuses_a_bad_role_or_mask(tmp_path: Path) -> None:
    inputs = _dataset(tmp_path)
    with pytest.raises(ConfigError, match="role is 'mask'; expected one of"):
        write_token_source(inputs, "mask", output=tmp_path / "a", role="mask")
    with pytest.raises(InputError, match=r"loss mask column 'labels' .* holds -?\d+"):
        write_token_source(inputs, "labels", output=tmp_path / "b", role="loss_mask")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_token_source_with_bad_counts_is_refused(tmp_path: Path) -> None:
    inputs = _dataset(tmp_path)
    write_token_source(inputs, "labels", output=tmp_path / "labels", role="labels")
    path = tmp_path / "labels" / NUM_TARGETS_NAME
    counts = np.load(path)
    np.save(path, counts[:-1])  # a valid .npy, one count short
    with pytest.raises(InputError, match=f"{NUM_TARGETS_NAME} holds .* expected one <i4 count"):
        FlatTokenSource.open(tmp_path / "labels")
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(InputError, match="bytes, but its header says"):
        FlatTokenSource.open(tmp_path / "labels")
