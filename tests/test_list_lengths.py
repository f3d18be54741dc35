"""A length column of token lists (`--length-column input_ids`): each sequence's length is its
number of elements, counted by DuckDB in the histogram pass, the pools pass and the bad-length
query, for `seqpack prepare` and the `seqpack stats` sweep over parquet.

The oracle is the same data with an integer length column: everything prepare writes is the
same bytes, and the sweep the same document.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import InputError
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset, scan
from seqpack_cli.prepare.footers import inspect_inputs
from seqpack_cli.prepare.pools.tuning import PoolTuning

LIST_TYPES = {
    "list<int32>": pa.list_(pa.int32()),
    "large_list<int64>": pa.large_list(pa.int64()),
    "list<uint16>": pa.list_(pa.uint16()),
    "list<int8>": pa.list_(pa.int8()),
}


def _tokens(lengths, *, seed: int = 0) -> list[list[int] | None]:
    rng = np.random.default_rng(seed)
    return [None if length is None else rng.integers(0, 100, length).tolist() for length in lengths]


def _write_files(
    root: Path, lengths: list[int | None], *, list_type=None, num_files: int = 3, ids=None
) -> list[Path]:
    """The sequences over `num_files` files (the last ones maybe empty), with their token lists
    (`input_ids`), their lengths (`n`) and a shuffled id column (`doc`)."""
    list_type = list_type or pa.list_(pa.int32())
    tokens = _tokens(lengths)
    ids = ids if ids is not None else (np.arange(len(lengths))[::-1] * 3 + 11).tolist()
    cuts = np.linspace(0, len(lengths), num_files + 1).astype(int)
    paths = []
    for i in range(num_files):
        part = slice(cuts[i], cuts[i + 1])
        table = pa.table(
            {
                "input_ids": pa.array(tokens[part], list_type),
                "n": pa.array(lengths[part], pa.int64()),
                "doc": pa.array(ids[part], pa.int64()),
            }
        )
        path = root / f"part-{i}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=7)
        paths.append(path)
    return paths


def _files_bytes(path: Path) -> dict[str, bytes]:
    """counts.json, templates.json and the pools: what depends on the data, not the options."""
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in path.rglob("*")
        if p.is_file() and p.name != "manifest.json"
    }


def _invoke(*args):
    return CliRunner().invoke(app, [*map(str, args)])


# ---- the footer checks ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LIST_TYPES))
def test_inspect_inputs_binds_integer_lists(tmp_path: Path, name: str) -> None:
    paths = _write_files(tmp_path, [3, 1, 4], list_type=LIST_TYPES[name], num_files=1)
    files = inspect_inputs(paths, "input_ids", "doc")
    element = {"list<int32>": "INTEGER", "large_list<int64>": "BIGINT"}.get(name)
    element = element or {"list<uint16>": "USMALLINT", "list<int8>": "TINYINT"}[name]
    assert files[0].column_types == (("input_ids", f"{element}[]"), ("doc", "BIGINT"))
    assert scan.is_token_lists(files, "input_ids")
    assert not scan.is_token_lists(inspect_inputs(paths, "n"), "n")
    assert scan.length_query(files, "input_ids", "length_histogram") == (
        "length_histogram_of_lists"
    )


def test_fixed_size_lists_are_token_lists(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    tokens = pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int16(), 2))
    pq.write_table(pa.table({"t": tokens}), path)
    assert scan.scan_length_histogram([path], "t") == {2: 3}


@pytest.mark.parametrize(
    ("values", "arrow_type", "shown"),
    [
        ([["a"], ["b", "c"]], pa.list_(pa.string()), "list<element: string>"),
        ([[1.5], [2.0]], pa.list_(pa.float64()), "list<element: double>"),
        ([[[1]], [[2, 3]]], pa.list_(pa.list_(pa.int32())), "list<element: list<element: int32>>"),
    ],
)
def test_lists_of_non_integers_are_refused_in_one_line(
    tmp_path: Path, values, arrow_type, shown
) -> None:
    path = tmp_path / "in" / "a.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"t": pa.array(values, arrow_type)}), path)
    with pytest.raises(InputError) as raised:
        inspect_inputs([path], "t")
    message = str(raised.value)
    assert f"length column 't' (length_column) in {path} holds {shown} values" in message
    assert "expected integer token counts, or lists of integer token ids" in message
    result = _invoke(
        "prepare", path.parent, "--length-column", "t", "--max-seq-len", 8, "-o", tmp_path / "o"
    )
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"holds {shown} values" in lines[0] and "--length-column" in lines[0]


def test_an_id_column_of_lists_is_still_refused(tmp_path: Path) -> None:
    paths = _write_files(tmp_path, [3, 1], num_files=1)
    with pytest.raises(InputError, match=r"id column 'input_ids' .* holds list<element: int32> "):
        inspect_inputs(paths, "n", "input_ids")


def test_integer_length_columns_still_name_the_cast(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"n": pa.array([1.5, 2.0])}), path)
    with pytest.raises(InputError, match=r"holds double values; expected integer token counts; "):
        inspect_inputs([path], "n")


# ---- the histogram pass -----------------------------------------------------------------------


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=60),
    name=st.sampled_from(list(LIST_TYPES)),
    num_files=st.integers(1, 3),
)
def test_histogram_counts_list_elements(tmp_path_factory, lengths, name, num_files) -> None:
    root = tmp_path_factory.mktemp("lists")
    paths = _write_files(root, lengths, list_type=LIST_TYPES[name], num_files=num_files)
    expected = dict(sorted(zip(*np.unique(lengths, return_counts=True), strict=True)))
    expected = {int(k): int(v) for k, v in expected.items()}
    assert scan.scan_length_histogram(paths, "input_ids") == expected
    assert scan.scan_length_histogram(paths, "n") == expected


@pytest.mark.parametrize(
    ("lengths", "first", "where"),
    [
        ([3, 1, None, 2, None], "NULL", "part-0.parquet at row 2 (0-based)"),
        ([3, 1, 4, 0, 2, 0], "an empty list", "part-0.parquet at row 3 (0-based)"),
        ([3, 1, 4, 5, 0, None], "an empty list", "part-0.parquet at row 4 (0-based)"),
    ],
)
def test_null_and_empty_lists_are_refused(tmp_path: Path, lengths, first, where) -> None:
    paths = _write_files(tmp_path / "in", lengths, num_files=1)
    bad = sum(1 for x in lengths if not x)
    with pytest.raises(InputError) as raised:
        scan.scan_length_histogram(paths, "input_ids")
    message = str(raised.value)
    assert (
        f"length column 'input_ids' has {bad} NULL or empty token lists, the first ({first}) "
        in message
    )
    assert where in message and "fix or drop those rows before prepare" in message
    for policy in ("error", "drop", "truncate"):
        result = _invoke(
            "prepare", tmp_path / "in", "--length-column", "input_ids", "--max-seq-len", 2,
            "-o", tmp_path / "out", "--over-cap", policy,
        )  # fmt: skip
        assert result.exit_code == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "NULL or empty token lists" in lines[0], result.stderr
        assert not (tmp_path / "out").exists()


# ---- prepare: the same output as from the integer column --------------------------------------


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    cap=st.integers(1, 30),
    policy=st.sampled_from(["drop", "truncate"]),
    by_id=st.booleans(),
    scatter=st.booleans(),
    name=st.sampled_from(list(LIST_TYPES)),
)
def test_prepare_from_lists_writes_what_the_length_column_gives(
    tmp_path_factory, lengths, cap, policy, by_id, scatter, name
) -> None:
    root = tmp_path_factory.mktemp("prepare_lists")
    if policy == "drop" and all(x > cap for x in lengths):
        lengths = [*lengths, 1]
    _write_files(root / "in", lengths, list_type=LIST_TYPES[name])
    outputs = {}
    for column in ("input_ids", "n"):
        config = PrepareConfig(
            inputs=[root / "in"],
            length_column=column,
            max_seq_len=cap,
            output=root / column,
            id_column="doc" if by_id else None,
            over_cap=policy,
            tuning=PoolTuning(max_map_ids=0 if scatter else 1 << 27, batch_rows=5),
        )
        prepared = prepare_dataset(config)
        outputs[column] = (_files_bytes(root / column), prepared.manifest["summary"])
    assert outputs["input_ids"] == outputs["n"]
    prepared = load_prepared(root / "input_ids")
    ids = (np.arange(len(lengths))[::-1] * 3 + 11) if by_id else np.arange(len(lengths))
    clamped = np.minimum(lengths, cap)
    keep = (np.array(lengths) <= cap) | (policy == "truncate")
    for length in np.unique(clamped[keep]):
        expected = np.sort(ids[keep & (clamped == length)])
        np.testing.assert_array_equal(prepared.pools[int(length)], expected)
    assert sum(prepared.counts.values()) == int(keep.sum())


def test_cli_prepare_from_a_token_column(tmp_path: Path) -> None:
    lengths = [5, 300, 17, 64, 1, 128, 129]
    _write_files(tmp_path / "data", lengths)
    result = _invoke(
        "prepare", tmp_path / "data", "--length-column", "input_ids", "--max-seq-len", 128,
        "--over-cap", "truncate", "-o", tmp_path / "out", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["num_input_tokens"] == sum(lengths)
    assert summary["num_truncated"] == 2 and summary["num_tokens_truncated"] == 172 + 1
    assert summary["config"]["length_column"] == "input_ids"
    assert load_prepared(tmp_path / "out").counts == {1: 1, 5: 1, 17: 1, 64: 1, 128: 3}


# ---- the stats sweep over parquet -------------------------------------------------------------


def test_stats_sweep_over_a_token_column(tmp_path: Path) -> None:
    lengths = np.random.default_rng(3).integers(1, 400, 500).tolist()
    _write_files(tmp_path / "data", lengths)
    documents = {}
    for column in ("input_ids", "n"):
        result = _invoke(
            "stats", tmp_path / "data", "--length-column", column, "--max-seq-len", "128,256",
            "--json",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        documents[column] = json.loads(result.stdout)
    by_list, by_int = documents["input_ids"], documents["n"]
    assert by_list["lengths"] == by_int["lengths"]
    assert by_list["lengths"]["num_tokens"] == sum(lengths)
    assert by_list["rows"] == by_int["rows"]
    row = by_list["rows"][0]
    assert row["num_over_cap"] == sum(1 for x in lengths if x > 128)
    assert row["num_tokens_over_cap"] == sum(x for x in lengths if x > 128)
