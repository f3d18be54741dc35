"""Token sources written from parquet (`seqpack_cli.prepare.token_files.write_token_source`),
`FlatTokenSource` with an id index, `FlatTokenSource.open`, and the check against a prepared
directory (`check_token_source`, `check_pool_lengths`).

The oracle of every round trip is pyarrow's `to_pylist` of the column, the files read in
`resolve_inputs`' order (sorted by path).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack_cli.collate import CollateOptions
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset, token_reading
from seqpack_cli.prepare.token_files import check_token_source, write_token_source
from seqpack_cli.prepared.alignment import check_pool_lengths
from seqpack_cli.token_sources import (
    INFO_NAME,
    TOKENS_NAME,
    FlatTokenSource,
)

LIST_TYPES = [
    pa.list_(pa.int32()),
    pa.large_list(pa.int64()),
    pa.list_(pa.uint16()),
    pa.list_(pa.int8()),
]


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


def _write_split(
    root: Path,
    sequences: list[list[int]],
    cuts: list[int],
    *,
    list_type: pa.DataType | None = None,
    row_group_size: int | None = None,
    ids: list[int] | None = None,
    names: list[str] | None = None,
    write_statistics: bool = True,
) -> list[Path]:
    """`sequences` over len(cuts) + 1 files (column input_ids, lengths n, maybe ids doc)."""
    bounds = [0, *cuts, len(sequences)]
    paths = []
    for k in range(len(bounds) - 1):
        part = slice(bounds[k], bounds[k + 1])
        columns = {
            "input_ids": pa.array(sequences[part], list_type or pa.list_(pa.int32())),
            "n": pa.array([len(s) for s in sequences[part]], pa.int64()),
        }
        if ids is not None:
            columns["doc"] = pa.array(ids[part], pa.int64())
        name = names[k] if names else f"part-{k:03d}.parquet"
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table(columns),
            path,
            row_group_size=row_group_size,
            write_statistics=write_statistics,
        )
        paths.append(path)
    return paths


def _expected(paths: list[Path], column: str = "input_ids") -> list[list[int]]:
    """The oracle: the column's lists, files sorted by path."""
    rows: list[list[int]] = []
    for path in sorted(paths, key=lambda p: p.as_posix()):
        rows.extend(pq.read_table(path, columns=[column]).column(column).to_pylist())
    return rows


def _as_lists(source: FlatTokenSource, ids) -> list[list[int]]:
    return [np.asarray(source[int(i)]).tolist() for i in ids]


# ---- round trips -------------------------------------------------------------------------------

sequences_strategy = st.lists(
    st.lists(st.integers(0, 127), min_size=0, max_size=40), min_size=1, max_size=60
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sequences=sequences_strategy,
    data=st.data(),
    list_type=st.sampled_from(LIST_TYPES),
    row_group_size=st.sampled_from([None, 1, 3, 17]),
    target=st.sampled_from([1, 5, 64, 1 << 22]),
)
def test_round_trip_matches_pyarrow(
    tmp_path_factory, monkeypatch, sequences, data, list_type, row_group_size, target
) -> None:
    root = tmp_path_factory.mktemp("round_trip")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(sequences)), max_size=3)))
    # File names whose sorted order is not the order they were written in.
    names = [f"{chr(ord('z') - k)}.parquet" for k in range(len(cuts) + 1)]
    paths = _write_split(
        root / "in",
        sequences,
        cuts,
        list_type=list_type,
        row_group_size=row_group_size,
        names=names,
    )
    monkeypatch.setattr(token_reading, "TARGET_VALUES_PER_BATCH", target)  # many batches
    source = write_token_source(root / "in", "input_ids", output=root / "out")
    expected = _expected(paths)
    assert len(source) == len(expected)
    assert _as_lists(source, range(len(source))) == expected
    tokens, lengths = source.take(np.arange(len(source))[::-1])
    assert lengths.tolist() == [len(s) for s in expected[::-1]]
    assert tokens.tolist() == [t for s in expected[::-1] for t in s]
    assert source.tokens.dtype == np.uint8
    assert isinstance(source.tokens, np.memmap) or source.tokens.size == 0
    reopened = FlatTokenSource.open(root / "out")
    assert np.array_equal(reopened.offsets, source.offsets)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequences=sequences_strategy, seed=st.integers(0, 2**32 - 1))
def test_round_trip_with_an_id_column(tmp_path_factory, sequences, seed) -> None:
    root = tmp_path_factory.mktemp("ids")
    rng = np.random.default_rng(seed)
    ids = (rng.choice(10 * len(sequences) + 10, size=len(sequences), replace=False) - 5).tolist()
    cut = len(sequences) // 2
    _write_split(root / "in", sequences, [cut], ids=ids, row_group_size=4)
    source = write_token_source(root / "in", "input_ids", output=root / "out", id_column="doc")
    assert _as_lists(source, ids) == sequences
    # Stored in row order; the index maps ids to rows.
    assert [
        list(source.tokens[source.offsets[r] : source.offsets[r + 1]])
        for r in range(len(sequences))
    ] == sequences
    assert source.ids is not None and source.ids.tolist() == sorted(ids)
    order = rng.permutation(len(ids))
    tokens, lengths = source.take(np.array(ids)[order])
    assert tokens.tolist() == [t for k in order for t in sequences[k]]
    assert lengths.tolist() == [len(sequences[k]) for k in order]
    assert source.info["id_column"] == "doc" and source.info["ids"] == "id_column"


def test_dtype_is_the_smallest_unsigned_that_holds_the_largest_id(tmp_path: Path) -> None:
    for k, (largest, expected) in enumerate(
        [
            (0, np.uint8),
            (255, np.uint8),
            (256, np.uint16),
            (65_535, np.uint16),
            (65_536, np.uint32),
            (2**32 - 1, np.uint32),
            (2**32, np.uint64),
        ]
    ):
        for statistics in (True, False):
            root = tmp_path / f"{k}-{statistics}"
            _write_split(
                root / "in",
                [[1, largest], [0]],
                [],
                list_type=pa.list_(pa.int64()),
                write_statistics=statistics,
            )
            # With statistics the footers decide; without, a first pass over the column.
            footers = token_reading.inspect_token_inputs(
                list((root / "in").iterdir()), "input_ids", None
            )
            assert (footers[0].value_range is not None) == statistics
            source = write_token_source(root / "in", "input_ids", output=root / "out")
            assert source.tokens.dtype == expected, (largest, statistics)
            assert source[0].tolist() == [1, largest]
            assert source.info["dtype"] == np.dtype(expected).name


def test_a_given_dtype_is_used_and_checked(tmp_path: Path) -> None:
    _write_split(tmp_path / "in", [[1, 2], [-100, 7]], [], list_type=pa.list_(pa.int64()))
    labels = write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "a", dtype="int32")
    assert labels.tokens.dtype == np.int32 and labels[1].tolist() == [-100, 7]
    with pytest.raises(InputError) as error:
        write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "b", dtype="uint32")
    assert "row 1 (0-based) holds -100, which is negative" in _one_line(error)
    for bad in ("float32", "bool", "nonsense", object):
        with pytest.raises(ConfigError, match="dtype"):
            write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "c", dtype=bad)
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


# ---- bad data: one line naming the file, the row and the value --------------------------------


def test_bad_values_name_file_row_and_value(tmp_path: Path) -> None:
    sequences = [[1, 2], [3], [4, 5, 6], [7, -5, 8], [9]]
    paths = _write_split(
        tmp_path / "in", sequences, [2], list_type=pa.list_(pa.int64()), row_group_size=1
    )
    with pytest.raises(InputError) as error:
        write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "out")
    text = _one_line(error)
    assert f"{paths[1]} at row 1 (0-based) holds -5" in text and "negative" in text
    assert not os.path.exists(tmp_path / "out")
    _write_split(tmp_path / "big", [[1], [2, 300]], [], list_type=pa.list_(pa.int64()))
    with pytest.raises(InputError) as error:
        write_token_source(tmp_path / "big", "input_ids", output=tmp_path / "out", dtype="uint8")
    text = _one_line(error)
    assert "at row 1 (0-based) holds 300, which is outside uint8 [0, 255]" in text
    assert not os.path.exists(tmp_path / "out")


def test_null_lists_null_tokens_and_wrong_columns_are_refused(tmp_path: Path) -> None:
    write_parquet(tmp_path / "n" / "a.parquet", {"t": pa.array([[1], None], pa.list_(pa.int32()))})
    with pytest.raises(InputError) as error:
        write_token_source(tmp_path / "n", "t", output=tmp_path / "out")
    assert "is NULL in" in _one_line(error) and "at row 1 (0-based)" in str(error.value)
    write_parquet(
        tmp_path / "e" / "a.parquet", {"t": pa.array([[1], [2, None]], pa.list_(pa.int32()))}
    )
    with pytest.raises(InputError) as error:
        write_token_source(tmp_path / "e", "t", output=tmp_path / "out")
    assert "NULL token id" in _one_line(error) and "at row 1 (0-based)" in str(error.value)
    write_parquet(tmp_path / "f" / "a.parquet", {"t": pa.array([[1.5]]), "s": ["x"], "i": [1]})
    for column, match in (
        ("t", "holds list<.*double> values"),
        ("s", "holds string"),
        ("i", "holds int64"),
        ("missing", "is not in"),
    ):
        with pytest.raises(InputError, match=match) as error:
            write_token_source(tmp_path / "f", column, output=tmp_path / "out")
        _one_line(error)
    write_parquet(
        tmp_path / "g" / "a.parquet", {"t": pa.array([[1]]), "id": pa.array([None], pa.int64())}
    )
    with pytest.raises(InputError, match="id column 'id' is NULL"):
        write_token_source(tmp_path / "g", "t", output=tmp_path / "out", id_column="id")
    write_parquet(tmp_path / "d" / "a.parquet", {"t": pa.array([[1], [2], [3]]), "id": [4, 9, 4]})
    with pytest.raises(InputError) as error:
        write_token_source(tmp_path / "d", "t", output=tmp_path / "out", id_column="id")
    assert "holds the id 4 more than once" in _one_line(error)
    assert "at row 0 (0-based) and" in str(error.value) and "at row 2 (0-based)" in str(error.value)
    with pytest.raises(ConfigError, match="also the token column"):
        write_token_source(tmp_path / "d", "t", output=tmp_path / "out", id_column="t")
    with pytest.raises(ConfigError, match="expected a column name"):
        write_token_source(tmp_path / "d", "", output=tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


def test_fixed_size_lists_are_read(tmp_path: Path) -> None:
    column = pa.array([[1, 2], [3, 4], [5, 600]], pa.list_(pa.int16(), 2))
    write_parquet(tmp_path / "in" / "a.parquet", {"t": column})
    source = write_token_source(tmp_path / "in", "t", output=tmp_path / "out")
    assert source.tokens.dtype == np.uint16
    assert _as_lists(source, range(3)) == column.to_pylist()


def test_empty_lists_are_kept(tmp_path: Path) -> None:
    _write_split(tmp_path / "in", [[], [5], [], []], [1])
    source = write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "out")
    assert source.sequence_lengths(np.arange(4)).tolist() == [0, 1, 0, 0]
    _write_split(tmp_path / "none", [[], []], [])
    assert len(write_token_source(tmp_path / "none", "input_ids", output=tmp_path / "o2")) == 2


# ---- against a prepared directory --------------------------------------------------------------


def _dataset(root: Path, *, seed: int = 0, n: int = 400, ids: bool = False) -> list[Path]:
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, 50_000, rng.integers(1, 90)).tolist() for _ in range(n)]
    doc = (rng.permutation(n) * 5 + 3).tolist() if ids else None
    return _write_split(root, sequences, [n // 3, 2 * n // 3], ids=doc, row_group_size=50)


def _prepare(inputs, output: Path, **options) -> object:
    config = PrepareConfig(
        inputs=inputs,
        length_column=options.pop("length_column", "input_ids"),
        max_seq_len=options.pop("max_seq_len", 256),
        output=output,
        **options,
    )
    return prepare_dataset(config)


def test_an_aligned_source_passes_and_collates_to_each_sequences_tokens(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from seqpack_cli.data import PackedDataset

    paths = _dataset(tmp_path / "in")
    _prepare([tmp_path / "in"], tmp_path / "prepared")
    prepared = load_prepared(tmp_path / "prepared")
    source = write_token_source(
        tmp_path / "in", "input_ids", output=tmp_path / "tokens", prepared=prepared
    )
    assert check_token_source(source, tmp_path / "prepared") == prepared.summary["num_sequences"]
    expected = _expected(paths)
    dataset = PackedDataset(
        prepared, source, collate=CollateOptions(pad_token_id=0, format="padding_free"), seed=3
    )
    seen = 0
    for k in range(len(dataset)):
        batch = dataset[k]
        bounds = batch["cu_seqlens"].tolist()
        tokens = batch["input_ids"][0]
        for j, seq_id in enumerate(dataset.plan[k]):
            assert torch.equal(tokens[bounds[j] : bounds[j + 1]], torch.tensor(expected[seq_id]))
            seen += 1
    assert seen == len(expected)


def test_shuffled_file_order_or_another_file_is_caught(tmp_path: Path) -> None:
    paths = _dataset(tmp_path / "in")
    _prepare([tmp_path / "in"], tmp_path / "prepared")
    prepared = load_prepared(tmp_path / "prepared")
    # The same files under other names: another sorted order, so other row indexes.
    shutil.copytree(tmp_path / "in", tmp_path / "renamed")
    os.rename(tmp_path / "renamed" / paths[0].name, tmp_path / "renamed" / "z-last.parquet")
    with pytest.raises(InputError) as error:
        write_token_source(
            tmp_path / "renamed", "input_ids", output=tmp_path / "t", prepared=prepared
        )
    text = _one_line(error)
    assert "tokenise and prepare the same files in the same order" in text
    assert "but the prepared pools give it" in text and "(0-based)" in text
    assert not os.path.exists(tmp_path / "t")
    assert sorted(os.listdir(tmp_path)) == ["in", "prepared", "renamed"]  # no temporaries left
    # A different file in place of one of them.
    other = _dataset(tmp_path / "other", seed=1)
    shutil.copytree(tmp_path / "in", tmp_path / "mixed")
    shutil.copy(other[1], tmp_path / "mixed" / paths[1].name)
    with pytest.raises(InputError, match="tokenise and prepare the same files"):
        write_token_source(
            tmp_path / "mixed", "input_ids", output=tmp_path / "t", prepared=prepared
        )
    # Too few rows: an id of the pools is missing.
    with pytest.raises(InputError, match="has no sequence id") as error:
        write_token_source(paths[:2], "input_ids", output=tmp_path / "t", prepared=prepared)
    _one_line(error)
    # Checking a source written without prepared= afterwards catches the same.
    source = write_token_source(tmp_path / "renamed", "input_ids", output=tmp_path / "t")
    with pytest.raises(InputError, match="tokenise and prepare the same files"):
        check_token_source(source, prepared)


def test_an_id_column_aligns_whatever_the_file_order(tmp_path: Path) -> None:
    paths = _dataset(tmp_path / "in", ids=True)
    _prepare([tmp_path / "in"], tmp_path / "prepared", id_column="doc")
    shutil.copytree(tmp_path / "in", tmp_path / "renamed")
    os.rename(tmp_path / "renamed" / paths[0].name, tmp_path / "renamed" / "z-last.parquet")
    source = write_token_source(
        tmp_path / "renamed",
        "input_ids",
        output=tmp_path / "t",
        id_column="doc",
        prepared=tmp_path / "prepared",
    )
    assert source.ids is not None
    # The ids must come from the same column on both sides: caught up front.
    with pytest.raises(InputError, match="takes its sequence ids from id column 'doc'") as error:
        write_token_source(
            tmp_path / "in", "input_ids", output=tmp_path / "u", prepared=tmp_path / "prepared"
        )
    assert "id_column='doc'" in _one_line(error)
    _prepare([tmp_path / "in"], tmp_path / "by_row")
    with pytest.raises(InputError, match=r"from the row index, but token source .* from id column"):
        check_token_source(source, tmp_path / "by_row")
    # Ids of other rows: caught by the lengths.
    table = pq.read_table(paths[1])
    doc = table.column("doc").to_numpy()[::-1].copy()
    pq.write_table(table.set_column(2, "doc", pa.array(doc)), tmp_path / "renamed" / paths[1].name)
    with pytest.raises(InputError, match="tokenise and prepare the same files"):
        write_token_source(
            tmp_path / "renamed",
            "input_ids",
            output=tmp_path / "v",
            id_column="doc",
            prepared=tmp_path / "prepared",
        )


def test_truncate_accepts_longer_sequences_in_the_longest_pool(tmp_path: Path) -> None:
    # n is the length prepare reads; input_ids the tokens. Row 1 is over the cap of 10.
    def write(name: str, tokens: list[list[int]], n: list[int]) -> Path:
        return write_parquet(
            tmp_path / name / "a.parquet",
            {"input_ids": pa.array(tokens, pa.list_(pa.int32())), "n": n},
        )

    write("good", [[1, 2], list(range(50)), [3] * 10], [2, 50, 10])
    _prepare(
        [tmp_path / "good"], tmp_path / "p", length_column="n", max_seq_len=10, over_cap="truncate"
    )
    source = write_token_source(
        tmp_path / "good", "input_ids", output=tmp_path / "t1", prepared=tmp_path / "p"
    )
    assert source.sequence_lengths(np.array([1])).tolist() == [50]
    write("longer", [[1, 2], list(range(12)), [3] * 11], [2, 50, 10])
    write_token_source(
        tmp_path / "longer", "input_ids", output=tmp_path / "t2", prepared=tmp_path / "p"
    )
    write("shorter", [[1, 2], list(range(5)), [3] * 10], [2, 50, 10])
    with pytest.raises(InputError) as error:
        write_token_source(
            tmp_path / "shorter", "input_ids", output=tmp_path / "t3", prepared=tmp_path / "p"
        )
    assert "holds 5 tokens for sequence id 1" in _one_line(error)
    assert "at least 10" in str(error.value)
    # Without truncation the same extra tokens are a mismatch.
    _prepare([tmp_path / "good"], tmp_path / "p2", length_column="n", max_seq_len=64)
    with pytest.raises(InputError, match="holds 11 tokens for sequence id 2"):
        write_token_source(
            tmp_path / "longer", "input_ids", output=tmp_path / "t4", prepared=tmp_path / "p2"
        )


def test_check_pool_lengths_reads_any_source() -> None:
    sequences = [[1, 2], [3], [4, 5, 6]]
    pools = {1: np.array([1]), 2: np.array([0]), 3: np.array([2])}
    assert check_pool_lengths(sequences, pools) == 3
    with pytest.raises(InputError, match="holds 3 tokens for sequence id 2"):
        check_pool_lengths(sequences, {3: np.array([2]), 2: np.array([2])})
    assert check_pool_lengths(sequences, {2: np.array([0, 2])}, truncated_at=2) == 2
    flat = FlatTokenSource(np.arange(6), [0, 2, 3, 6], ids=[10, 20, 30])
    assert check_pool_lengths(flat, {2: np.array([10]), 3: np.array([30])}) == 2
    with pytest.raises(InputError, match="has no sequence id 0"):
        check_pool_lengths(flat, {2: np.array([0])})


# ---- FlatTokenSource: ids, open, pickling ------------------------------------------------------


def test_an_id_index_maps_ids_to_rows() -> None:
    source = FlatTokenSource(np.arange(6), [0, 2, 3, 6], ids=[-4, 7, 9], rows=[2, 0, 1])
    assert source[-4].tolist() == [3, 4, 5] and source[7].tolist() == [0, 1]
    assert source.find_rows(np.array([9, 8, -4]), missing="mark").tolist() == [1, -1, 2]
    assert source.sequence_lengths(np.array([8, 7]), missing="mark").tolist() == [-1, 2]
    with pytest.raises(InputError, match="sequence id 8 is not among"):
        source.take(np.array([7, 8]))
    with pytest.raises(InputError, match="strictly increasing"):
        FlatTokenSource(np.arange(6), [0, 2, 3, 6], ids=[1, 1, 2])
    with pytest.raises(InputError, match="within"):
        FlatTokenSource(np.arange(6), [0, 2, 3, 6], ids=[1, 2, 3], rows=[0, 1, 3])
    with pytest.raises(InputError, match="without ids"):
        FlatTokenSource(np.arange(6), [0, 2, 3, 6], rows=[0, 1, 2])
    copy = pickle.loads(pickle.dumps(source))
    assert copy.take(np.array([9, -4]))[0].tolist() == [2, 3, 4, 5]


def test_an_opened_source_pickles_as_its_path(tmp_path: Path) -> None:
    _write_split(tmp_path / "in", [list(range(1000))] * 50, [])
    source = write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "out")
    data = pickle.dumps(source)
    assert len(data) < 1000  # not the 50,000 tokens
    again = pickle.loads(data)
    assert again.path == tmp_path / "out" and again[49].tolist() == list(range(1000))


def test_open_refuses_what_is_not_a_complete_token_source(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a token source directory"):
        FlatTokenSource.open(tmp_path / "missing")
    _write_split(tmp_path / "in", [[1, 2], [3]], [])
    write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "out")
    info = json.loads((tmp_path / "out" / INFO_NAME).read_text())
    (tmp_path / "out" / INFO_NAME).write_text(json.dumps({**info, "num_tokens": 4}))
    with pytest.raises(InputError, match="records 4 tokens"):
        FlatTokenSource.open(tmp_path / "out")
    (tmp_path / "out" / INFO_NAME).write_text(json.dumps({**info, "format": "other"}))
    with pytest.raises(InputError, match="not a seqpack token source"):
        FlatTokenSource.open(tmp_path / "out")
    (tmp_path / "out" / INFO_NAME).write_text(json.dumps(info))
    with open(tmp_path / "out" / TOKENS_NAME, "r+b") as handle:
        handle.truncate(130)
    with pytest.raises(InputError, match=r"tokens.npy has 130 bytes, but its header says 131"):
        FlatTokenSource.open(tmp_path / "out")


# ---- the output: atomic, and never what it did not write ---------------------------------------


def test_output_refusals_and_overwrite(tmp_path: Path) -> None:
    _write_split(tmp_path / "in", [[1, 2], [3]], [])
    _write_split(tmp_path / "in2", [[9]], [])
    out = tmp_path / "out"
    write_token_source(tmp_path / "in", "input_ids", output=out)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    with pytest.raises(ConfigError, match="already exists; pass overwrite=True"):
        write_token_source(tmp_path / "in2", "input_ids", output=out)
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    replaced = write_token_source(tmp_path / "in2", "input_ids", output=out, overwrite=True)
    assert len(replaced) == 1 and replaced[0].tolist() == [9]
    # A directory holding something else is never replaced, even with overwrite.
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"'notes\.txt'"):
        write_token_source(tmp_path / "in", "input_ids", output=out, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "tokens.npy").write_bytes(b"not ours")
    with pytest.raises(ConfigError, match="is not a seqpack token source"):
        write_token_source(tmp_path / "in", "input_ids", output=foreign, overwrite=True)
    assert (foreign / "tokens.npy").read_bytes() == b"not ours"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        write_token_source(tmp_path / "in", "input_ids", output=tmp_path / "file", overwrite=True)
    (tmp_path / "empty").mkdir()
    assert (
        len(
            write_token_source(
                tmp_path / "in", "input_ids", output=tmp_path / "empty", overwrite=True
            )
        )
        == 2
    )
    # Nested missing parents are created; a failure removes them again.
    with pytest.raises(InputError):
        write_token_source(tmp_path / "in", "n", output=tmp_path / "a" / "b" / "c")
    assert not (tmp_path / "a").exists()
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []


def test_the_output_inside_the_input_directory_is_not_read(tmp_path: Path) -> None:
    _write_split(tmp_path / "data", [[1, 2], [3]], [])
    first = write_token_source(tmp_path / "data", "input_ids", output=tmp_path / "data" / "tok")
    again = write_token_source(
        tmp_path / "data", "input_ids", output=tmp_path / "data" / "tok", overwrite=True
    )
    assert len(first) == len(again) == 2
    with pytest.raises(InputError, match="lies inside the output directory"):
        write_token_source(tmp_path / "data", "input_ids", output=tmp_path / "data", overwrite=True)
    assert (tmp_path / "data" / "part-000.parquet").exists()
