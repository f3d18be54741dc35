"""In-memory inputs (`PrepareConfig(inputs=[table])`): a pyarrow Table, RecordBatch or dataset,
a Polars DataFrame or LazyFrame, a datasets.Dataset give what the same rows written as parquet
give: the same counts, templates, pools and token store bytes, ids in row order.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack_cli import load_prepared
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset

polars = pytest.importorskip("polars")

STORE_FILES = ("tokens/tokens.npy", "tokens/offsets.npy", "tokens/ids.npy", "tokens/rows.npy")


def _rows(lengths: list[int], seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "n": pa.array(lengths, pa.int32()),
            "doc": pa.array(rng.permutation(len(lengths)) * 7 + 3, pa.int64()),
            "input_ids": [rng.integers(0, 50_000, size=n).tolist() for n in lengths],
            "other": pa.array(["x"] * len(lengths)),
        }
    )


def _as(kind: str, table: pa.Table, folder: Path) -> Any:
    if kind == "table":
        return table
    if kind == "batch":
        return table.combine_chunks().to_batches()[0] if table.num_rows else table
    if kind == "dataset":
        pq.write_table(table, folder / "source.parquet", row_group_size=7)
        return pads.dataset(folder / "source.parquet")
    if kind == "polars":
        return polars.from_arrow(table)
    if kind == "lazy":
        return polars.from_arrow(table).lazy()
    raise AssertionError(kind)


def _files(output: Path) -> dict[str, bytes]:
    names = ["counts.json", "templates.json", *STORE_FILES]
    names += [f"pools/{p.name}" for p in sorted((output / "pools").iterdir())]
    return {name: (output / name).read_bytes() for name in names if (output / name).exists()}


def _prepare(inputs: Any, output: Path, **options: Any) -> Any:
    config = PrepareConfig(inputs=inputs, length_column="n", max_seq_len=64, output=output,
                           **options)  # fmt: skip
    return prepare_dataset(config)


OPTIONS = [
    {"over_cap": "drop"},
    {"id_column": "doc", "over_cap": "drop"},
    {"id_column": "doc", "tokens_column": "input_ids", "over_cap": "truncate"},
    {"tokens_column": "input_ids", "length_column": "input_ids", "over_cap": "split"},
]


@pytest.mark.parametrize("kind", ["table", "batch", "dataset", "polars", "lazy"])
@pytest.mark.parametrize("options", OPTIONS, ids=["rows", "ids", "store", "split"])
def test_a_table_gives_the_bytes_of_the_same_rows_as_parquet(
    tmp_path: Path, kind: str, options: dict[str, Any]
) -> None:
    lengths = [int(n) for n in np.random.default_rng(1).integers(1, 90, size=300)]
    table = _rows(lengths)
    pq.write_table(table, tmp_path / "rows.parquet")
    options = dict(options)
    length = options.pop("length_column", "n")
    config = {"length_column": length, "max_seq_len": 64, **options}
    expected = prepare_dataset(PrepareConfig(inputs=[tmp_path / "rows.parquet"],
                                             output=tmp_path / "a", **config))  # fmt: skip
    got = prepare_dataset(PrepareConfig(inputs=[_as(kind, table, tmp_path)],
                                        output=tmp_path / "b", **config))  # fmt: skip
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert expected.manifest["summary"] == got.manifest["summary"]
    listed = got.manifest["inputs"]["files"]
    assert [entry["path"] for entry in listed] == [f"<memory:0 {_kind_name(kind)}>"]
    assert listed[0]["num_rows"] == 300
    assert not any(p.name == ".work" for p in (tmp_path / "b").rglob("*"))
    if got.tokens is not None:  # the store lists the table by its name too
        info = (tmp_path / "b" / "tokens" / "token_source.json").read_text()
        assert f"<memory:0 {_kind_name(kind)}>" in info and ".work" not in info
        load_prepared(tmp_path / "b", verify=True)


def _kind_name(kind: str) -> str:
    return {
        "table": "pyarrow.Table",
        "batch": "pyarrow.RecordBatch",
        "dataset": "pyarrow.dataset.Dataset",
        "polars": "polars.DataFrame",
        "lazy": "polars.LazyFrame",
    }[kind]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=120),
    cuts=st.lists(st.integers(0, 120), max_size=3),
)
def test_tables_in_order_are_files_in_order(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], cuts: list[int]
) -> None:
    """Several tables: ids are row indexes over the tables in the order given, as over files
    sorted by name."""
    folder = tmp_path_factory.mktemp("order")
    table = _rows(lengths).select(["n"])
    bounds = sorted({0, len(lengths), *(c for c in cuts if c <= len(lengths))})
    parts = [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    (folder / "in").mkdir()
    for i, part in enumerate(parts):
        pq.write_table(part, folder / "in" / f"part-{i:03d}.parquet")
    _prepare([folder / "in"], folder / "a")
    _prepare(parts, folder / "b")
    assert _files(folder / "a") == _files(folder / "b")


def test_a_hugging_face_dataset_and_its_selection(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    table = _rows([int(n) for n in np.random.default_rng(2).integers(1, 60, size=200)])
    dataset = datasets.Dataset(table).select(range(199, -1, -2))  # an indices mapping
    pq.write_table(table.take(list(range(199, -1, -2))), tmp_path / "rows.parquet")
    _prepare([tmp_path / "rows.parquet"], tmp_path / "a", id_column="doc")
    prepared = _prepare(dataset, tmp_path / "b", id_column="doc")
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert prepared.manifest["inputs"]["files"][0]["path"] == "<memory:0 datasets.Dataset>"


def test_a_table_of_text_with_a_tokenizer(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from tokenizer_fixtures import build_bpe_tokenizer

    from seqpack_cli.prepare.tokenize_options import TokenizeOptions

    tok = build_bpe_tokenizer(tmp_path / "tok")
    texts = pa.table({"text": ["the model packs", "a bin", "seed epoch pool"] * 5})
    pq.write_table(texts, tmp_path / "t.parquet")
    options = {"max_seq_len": 32, "tokenize": TokenizeOptions(tok, text_column="text")}
    prepare_dataset(PrepareConfig([tmp_path / "t.parquet"], None, output=tmp_path / "a", **options))  # type: ignore[arg-type]
    prepare_dataset(PrepareConfig(polars.from_arrow(texts), None, output=tmp_path / "b", **options))  # type: ignore[arg-type]
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


# ---- bad input: one line naming the table, nothing written ---------------------------------


def test_a_missing_column_names_the_table(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"column 'n' is not in <memory:1 polars.DataFrame>"):
        _prepare([polars.DataFrame({"n": [1]}), polars.DataFrame({"m": [1]})], tmp_path / "o")
    assert not (tmp_path / "o").exists()
    assert not list(tmp_path.iterdir())


def test_a_bad_length_names_the_table_not_its_copy(tmp_path: Path) -> None:
    with pytest.raises(InputError) as error:
        _prepare(pa.table({"n": pa.array([3, -1, 2], pa.int64())}), tmp_path / "o")
    assert "<memory:0 pyarrow.Table>" in str(error.value)
    assert ".work" not in str(error.value)
    assert not list(tmp_path.iterdir())


def test_mixed_or_unknown_inputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mixes paths and in-memory tables"):
        _prepare([tmp_path, pa.table({"n": [1]})], tmp_path / "o")
    with pytest.raises(ConfigError, match=r"inputs\[0\] is a builtins.dict"):
        _prepare([{"n": [1]}], tmp_path / "o")


@pytest.mark.parametrize("kind", ["table", "polars", "lazy"])
def test_write_token_source_takes_a_table(tmp_path: Path, kind: str) -> None:
    from seqpack_cli.prepare.token_files import write_token_source

    lengths = [int(n) for n in np.random.default_rng(4).integers(1, 40, size=150)]
    table = _rows(lengths)
    pq.write_table(table, tmp_path / "rows.parquet")
    expected = write_token_source(tmp_path / "rows.parquet", "input_ids", output=tmp_path / "a",
                                  id_column="doc")  # fmt: skip
    got = write_token_source(_as(kind, table, tmp_path), "input_ids", output=tmp_path / "b",
                             id_column="doc")  # fmt: skip
    for name in ("tokens.npy", "offsets.npy", "ids.npy", "rows.npy"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert len(got) == len(expected) == 150
    info = (tmp_path / "b" / "token_source.json").read_text()
    assert f"<memory:0 {_kind_name(kind)}>" in info and ".tables" not in info
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
        p.name for p in (tmp_path / "a").iterdir()
    )


def test_write_token_source_names_the_table_in_an_error(tmp_path: Path) -> None:
    from seqpack_cli.prepare.token_files import write_token_source

    table = pa.table({"input_ids": [[1, 2], None, [3]]})
    with pytest.raises(InputError, match=r"<memory:0 pyarrow.Table>"):
        write_token_source(table, "input_ids", output=tmp_path / "o")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("store", [False, True], ids=["pools", "store"])
def test_the_dask_engine_reads_the_tables_copies(
    dask_cluster: Any, tmp_path: Path, store: bool
) -> None:
    """The copies lie in the output's work directory, which the workers see as they see the
    output: the cluster's bytes are the local engine's on the same rows as parquet."""
    pytest.importorskip("distributed")
    from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning

    lengths = [int(n) for n in np.random.default_rng(5).integers(1, 90, size=400)]
    table = _rows(lengths)
    pq.write_table(table, tmp_path / "rows.parquet")
    options: dict[str, Any] = {"length_column": "n", "max_seq_len": 64, "id_column": "doc"}
    options["over_cap"] = "truncate" if store else "drop"
    if store:
        options["tokens_column"] = "input_ids"
    prepare_dataset(PrepareConfig([tmp_path / "rows.parquet"], output=tmp_path / "a", **options))
    small = ClusterTuning(group_rows=100, footer_files=1)
    prepare_dataset(PrepareConfig([polars.from_arrow(table)], output=tmp_path / "b",
                                  engine="dask", scheduler=dask_cluster.scheduler_address,
                                  cluster_tuning=small, **options))  # fmt: skip
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_missing_column_names_its_option_in_the_fix(tmp_path: Path) -> None:
    """A table is checked before the job's own column checks: the message still says which
    option named the column, as those checks do for files."""
    with pytest.raises(InputError) as error:
        _prepare(polars.DataFrame({"m": [1]}), tmp_path / "o")
    assert "column 'n' is not in <memory:0 polars.DataFrame>" in str(error.value)
    assert str(error.value).endswith("pass one of them as length_column")
