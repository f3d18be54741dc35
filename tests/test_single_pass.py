"""`prepare --tokens-column` in one pass (`seqpack_cli.prepare.one_pass`) against the two passes
(DuckDB's histogram and pools passes, then the store, `prepare.token_store`), which stay the
reference: the same inputs give the same bytes in every file (pools, counts, templates, the
store, the manifest), and the same error, word for word, for every fault.

The two passes are forced by making the one pass give up (`read_in_one_pass` returns a
`Fallback`), as it does by itself on any fault.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from token_datasets import write_token_files

from seqpack_cli.errors import SeqpackError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepare import one_pass as one_pass_module
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepare.token_stream import Fault

_write = write_token_files


def _config(root: Path, output: str, **changes: Any) -> PrepareConfig:
    options: dict[str, Any] = {
        "inputs": [root / "in"],
        "length_column": "input_ids",
        "max_seq_len": 16,
        "output": root / output,
        "tokens_column": "input_ids",
    }
    options.update(changes)
    return PrepareConfig(**options)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _two_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    def give_up(*args: Any, **kwargs: Any) -> one_pass_module.Fallback:
        return one_pass_module.Fallback(Fault("the test forces the two passes"))

    monkeypatch.setattr(one_pass_module, "read_in_one_pass", give_up)


def _both(root: Path, **changes: Any) -> tuple[Any, Any]:
    """(one pass's outcome, two passes' outcome): a Prepared directory's files, or the error."""
    outcomes = []
    for name in ("one", "two"):
        with pytest.MonkeyPatch.context() as monkeypatch:
            if name == "two":
                _two_passes(monkeypatch)
            try:
                prepare_dataset(_config(root, name, **changes))
            except SeqpackError as error:
                outcomes.append((type(error).__name__, str(error).replace(str(root), "ROOT")))
                assert not (root / name).exists()
                continue
        outcomes.append(_files(root / name))
    return outcomes[0], outcomes[1]


def _differences(one: dict[str, bytes], two: dict[str, bytes]) -> list[str]:
    names = sorted(set(one) | set(two))
    return [name for name in names if one.get(name) != two.get(name)]


cases = st.tuples(
    st.lists(st.lists(st.integers(0, 70_000), min_size=1, max_size=24), min_size=1, max_size=50),
    st.sampled_from(["none", "labels", "mask"]),
    st.sampled_from(["row index", "dense", "sparse"]),
    st.sampled_from(["error", "drop", "truncate"]),
    st.sampled_from(["input_ids", "n"]),
    st.integers(1, 9),
    st.sampled_from([pa.list_(pa.int32()), pa.large_list(pa.int64()), pa.list_(pa.uint32())]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases)
def test_one_pass_writes_the_bytes_of_the_two_passes(tmp_path_factory, caplog, case) -> None:
    sequences, extra, ids, over_cap, length_column, row_group_size, kind, statistics, seed = case
    root = tmp_path_factory.mktemp("same")
    rng = np.random.default_rng(seed)
    labels = [[int(v) if rng.random() < 0.7 else -100 for v in s] for s in sequences]
    mask = [rng.integers(0, 2, len(s)).tolist() for s in sequences]
    seq_ids = None
    if ids != "row index":
        step = 1 if ids == "dense" else 1 << 40
        seq_ids = (rng.permutation(len(sequences)) * step - 3).tolist()
    cuts = tuple(sorted(set(rng.integers(0, len(sequences), 2).tolist())))
    _write(root, sequences, cuts=cuts, labels=labels, mask=mask, ids=seq_ids,
           row_group_size=row_group_size, token_type=kind, statistics=statistics)  # fmt: skip
    cap = 12 if over_cap != "error" else 24
    if over_cap != "error" and max(map(len, sequences)) <= cap:
        over_cap = "error"
    changes = {
        "max_seq_len": cap,
        "over_cap": over_cap,
        "length_column": length_column,
        "id_column": None if seq_ids is None else "doc",
        "labels_column": "labels" if extra == "labels" else None,
        "loss_mask_column": "mask" if extra == "mask" else None,
        # Small chunks: the pools come from several chunks of ascending ids.
        "tuning": PoolTuning(map_chunk_ids=int(rng.integers(1, 8))),
    }
    with caplog.at_level(logging.INFO, logger="seqpack_cli.prepare.one_pass"):
        one, two = _both(root, **changes)
    assert any("store written and hashed" in r.message for r in caplog.records), "one pass ran"
    if isinstance(one, dict) and isinstance(two, dict):
        assert _differences(one, two) == []
    else:  # drop leaving nothing to pack: the same error
        assert one == two and "nothing is left to pack" in one[1], (one, two)


def _sequences(n: int = 30, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 300, rng.integers(1, 16)).tolist() for _ in range(n)]


def _null_list(root: Path) -> dict[str, Any]:
    sequences: list[Any] = _sequences()
    sequences[17] = None
    _write(root, sequences, cuts=(10,))
    return {}


def _empty_list(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    sequences[4] = []
    _write(root, sequences)
    return {}


def _negative(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    sequences[21][0] = -7
    _write(root, sequences, cuts=(20,))
    return {}


def _null_value(root: Path) -> dict[str, Any]:
    sequences: list[Any] = _sequences()
    sequences[3] = [1, None, 3]
    _write(root, sequences)
    return {}


def _negative_without_statistics(root: Path) -> dict[str, Any]:
    # No statistics: the dtype comes from a first pass over the column.
    sequences = _sequences()
    sequences[5][0] = -(2**40)
    _write(root, sequences, token_type=pa.list_(pa.int64()), statistics=False)
    return {}


def _labels_too_long(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    labels = [list(s) for s in sequences]
    labels[12] = [*labels[12], 5]
    _write(root, sequences, labels=labels, cuts=(6,))
    return {"labels_column": "labels"}


def _mask_of_twos(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    mask = [[1] * len(s) for s in sequences]
    mask[8][-1] = 2
    _write(root, sequences, mask=mask)
    return {"loss_mask_column": "mask"}


def _null_id(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    ids: list[Any] = list(range(100, 130))
    ids[9] = None
    _write(root, sequences, ids=ids)
    return {"id_column": "doc"}


def _duplicate_id(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    ids = list(range(100, 130))
    ids[25] = ids[2]
    _write(root, sequences, ids=ids, cuts=(15,))
    return {"id_column": "doc"}


def _sparse_duplicate_id(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    ids = [k << 40 for k in range(30)]
    ids[25] = ids[2]
    _write(root, sequences, ids=ids, cuts=(15,))
    return {"id_column": "doc"}


def _length_column_disagrees(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    lengths: list[Any] = [len(s) for s in sequences]
    lengths[11] += 1
    _write(root, sequences, lengths=lengths)
    return {"length_column": "n"}


def _length_column_null(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    lengths: list[Any] = [len(s) for s in sequences]
    lengths[11] = None
    _write(root, sequences, lengths=lengths)
    return {"length_column": "n"}


def _not_lists(root: Path) -> dict[str, Any]:
    _write(root, _sequences())
    return {"tokens_column": "n", "length_column": "n"}


def _over_the_cap(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    sequences[2] = list(range(40))
    _write(root, sequences)
    return {}


def _several_faults(root: Path) -> dict[str, Any]:
    # A bad token early, an empty list late and a duplicate id: the two passes word the empty
    # list first (their histogram pass comes before the store), and so must the one pass.
    sequences = _sequences()
    sequences[1][0] = -1
    sequences[28] = []
    ids = list(range(30))
    ids[5] = ids[6]
    _write(root, sequences, ids=ids)
    return {"id_column": "doc"}


def _over_cap_and_bad_token(root: Path) -> dict[str, Any]:
    sequences = _sequences()
    sequences[0][0] = -1
    sequences[20] = list(range(40))
    _write(root, sequences)
    return {}


FAULTS = {
    "NULL list": _null_list,
    "empty list": _empty_list,
    "negative token": _negative,
    "NULL token": _null_value,
    "negative token, no statistics": _negative_without_statistics,
    "labels longer than tokens": _labels_too_long,
    "mask of 2": _mask_of_twos,
    "NULL id": _null_id,
    "duplicate id": _duplicate_id,
    "sparse duplicate id": _sparse_duplicate_id,
    "length column disagrees": _length_column_disagrees,
    "NULL length": _length_column_null,
    "token column not lists": _not_lists,
    "over the cap": _over_the_cap,
    "several faults": _several_faults,
    "over the cap and a bad token": _over_cap_and_bad_token,
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_every_fault_is_worded_as_the_two_passes_word_it(tmp_path: Path, name: str) -> None:
    changes = FAULTS[name](tmp_path)
    one, two = _both(tmp_path, **changes)
    assert isinstance(two, tuple), f"the two passes accept {name!r}"
    assert one == two
    assert sorted(os.listdir(tmp_path)) == ["in"]


def _split_duplicate_id(root: Path) -> dict[str, Any]:
    # A sequence to be split shares its id with a short one: its pieces take new ids, but the
    # input ids are still checked.
    sequences = _sequences()
    sequences[3] = list(range(1, 41))
    ids = list(range(30))
    ids[20] = ids[3]
    _write(root, sequences, ids=ids)
    return {"id_column": "doc"}


SPLIT_FAULTS = {
    **{name: make for name, make in FAULTS.items() if "over the cap" not in name},
    "split sequence's id repeated": _split_duplicate_id,
}


@pytest.mark.parametrize("name", list(SPLIT_FAULTS))
def test_every_fault_under_split_is_worded_as_the_two_passes_word_it(
    tmp_path: Path, name: str
) -> None:
    # Under split the two passes check the inputs as truncate does.
    changes = SPLIT_FAULTS[name](tmp_path)
    one, two = _both(tmp_path, **changes, over_cap="split")
    assert isinstance(two, tuple), f"the two passes accept {name!r}"
    assert one == two
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_a_fault_in_the_one_pass_leaves_no_store_behind(tmp_path: Path) -> None:
    # The one pass gives up on a NULL id after writing part of the store; the two passes then
    # refuse the inputs, and nothing of either is left.
    _null_id(tmp_path)
    with pytest.raises(SeqpackError, match="NULL ids"):
        prepare_dataset(_config(tmp_path, "out", id_column="doc"))
    assert sorted(os.listdir(tmp_path)) == ["in"]


# ---- the pieces: ordered threads, range checks, cuts, the histogram ---------------------------


class _Item:
    def __init__(self, value: tuple[int, int], nbytes: int) -> None:
        self.value, self.nbytes = value, nbytes


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), max_size=12),
    workers=st.integers(1, 4),
    budget=st.integers(1, 40),
    failing=st.none() | st.integers(0, 11),
)
def test_ordered_parallel_hands_items_over_in_order(sizes, workers, budget, failing) -> None:
    from seqpack_cli.prepare.ordered import ordered_parallel

    def produce(unit: int) -> Any:
        for k in range(sizes[unit]):
            if unit == failing and k == sizes[unit] // 2:
                raise ValueError(f"unit {unit}")
            yield _Item((unit, k), nbytes=1 + (unit * 7 + k) % 9)

    expected = []
    for unit, size in enumerate(sizes):
        if unit == failing and size:
            expected += [(unit, k) for k in range(size // 2)]
            break
        expected += [(unit, k) for k in range(size)]
    got = []
    stream = ordered_parallel(range(len(sizes)), produce, workers=workers, budget_bytes=budget)
    raises = failing is not None and failing < len(sizes) and sizes[failing] > 0
    if raises:
        with pytest.raises(ValueError, match=f"unit {failing}"):
            for item in stream:
                got.append(item.value)
    else:
        got = [item.value for item in stream]
    assert got == expected


def test_ordered_parallel_stops_its_workers_when_closed_early() -> None:
    import threading

    from seqpack_cli.prepare.ordered import ordered_parallel

    def produce(unit: int) -> Any:
        for k in range(1000):
            yield _Item((unit, k), nbytes=1)

    before = threading.active_count()
    stream = ordered_parallel(range(50), produce, workers=3, budget_bytes=10)
    assert next(stream).value == (0, 0)
    stream.close()
    assert threading.active_count() == before


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "?"]),
    seed=st.integers(0, 2**32 - 1),
    bounds=st.sampled_from(
        [
            (0, 1),
            (0, 255),
            (0, 65535),
            (0, 2**32 - 1),
            (0, 2**64 - 1),
            (-(2**31), 2**31 - 1),
            (-(2**63), 2**63 - 1),
            (-100, 100),
        ]
    ),
)
def test_within_is_the_plain_range_check(dtype, seed, bounds) -> None:
    from seqpack_cli.prepare.token_batches import within

    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype)
    if kind == np.bool_:
        values = rng.integers(0, 2, 20).astype(bool)
    else:
        info = np.iinfo(kind)
        edges = [info.min, info.max, 0, 1, -1, 255, 256, 65535, 65536, -100, -101]
        pool = np.array([e for e in edges if info.min <= e <= info.max], dtype=kind)
        values = rng.choice(pool, rng.integers(0, 6))
        values = np.concatenate(
            [values, rng.integers(info.min, info.max, 5, dtype=kind, endpoint=True)]
        )
    low, high = bounds
    expected = all(low <= int(v) <= high for v in values.tolist())
    assert within(values, low, high) == expected


@given(st.lists(st.integers(1, 100), max_size=30), st.integers(1, 30))
def test_cut_lengths(lengths, cap) -> None:
    from seqpack_cli.over_cap import cut_lengths

    pieces, per_row = cut_lengths(np.array(lengths, dtype=np.int64), cap)
    expected = []
    for n in lengths:
        cut = [cap] * ((n - 1) // cap) + [n - cap * ((n - 1) // cap)]
        expected += cut
        assert sum(cut) == n
    assert pieces.tolist() == expected
    assert per_row.tolist() == [-(-n // cap) for n in lengths]


@given(
    st.lists(st.lists(st.sampled_from([1, 2, 7, 5000, 2**20 - 1, 2**20, 2**31 - 1]), max_size=9))
)
def test_length_counter_is_a_counter(batches) -> None:
    from collections import Counter

    from seqpack_cli.prepare.length_counter import LengthCounter

    counter = LengthCounter()
    for batch in batches:
        counter.add(np.array(batch, dtype=np.int64))
    expected = Counter(x for batch in batches for x in batch)
    assert counter.histogram() == dict(sorted(expected.items()))
    assert list(counter.histogram()) == sorted(expected)


def test_a_full_disk_while_the_store_streams_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from seqpack_cli.errors import ConfigError
    from seqpack_cli.prepare import store_files

    _write(tmp_path, _sequences(200))
    calls = []

    def full(fd: int, buffers: list[Any]) -> None:
        calls.append(fd)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_files, "write_all", full)
    with pytest.raises(ConfigError) as error:
        prepare_dataset(_config(tmp_path, "out", tuning=PoolTuning()))
    text = str(error.value)
    assert "\n" not in text and "cannot write the token store of" in text
    assert "No space left on device" in text
    assert sorted(os.listdir(tmp_path)) == ["in"]
