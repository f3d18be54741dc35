"""The token store of `seqpack prepare --tokens-column` (`seqpack_cli.prepare.token_store`):
tokens, labels or a loss mask written into the prepared directory, atomically, recorded in the
manifest, checked against the pools; `load_prepared(...).tokens`; the datasets without a token
source argument.

The oracle of every round trip is pyarrow's `to_pylist` of the columns (files sorted by path),
and the datasets built from those lists in memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import same_batch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from token_datasets import store_config, write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError
from seqpack_cli.prepare import load_prepared, prepare_dataset

torch = pytest.importorskip("torch")
from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataset, PackedIterableDataset  # noqa: E402

_write = write_token_files


_config = store_config


def _rows(root: Path, column: str) -> list[list[int]]:
    rows: list[list[int]] = []
    for path in sorted((root / "in").glob("*.parquet")):
        rows.extend(pq.read_table(path, columns=[column]).column(column).to_pylist())
    return rows


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


def _sequences(n: int, seed: int = 0, *, longest: int = 16) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 300, rng.integers(1, longest + 1)).tolist() for _ in range(n)]


# ---- round trips --------------------------------------------------------------------------------

store_cases = st.tuples(
    st.lists(st.lists(st.integers(0, 70_000), min_size=1, max_size=20), min_size=1, max_size=40),
    st.sampled_from(["none", "labels", "mask"]),
    st.booleans(),
    st.sampled_from(["error", "drop", "truncate"]),
    st.integers(0, 2**32 - 1),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=store_cases)
@example(case=([[1] * 13], "none", False, "drop", 0))
def test_the_store_round_trips_through_the_datasets(tmp_path_factory, case) -> None:
    sequences, extra, with_ids, over_cap, seed = case
    root = tmp_path_factory.mktemp("store")
    rng = np.random.default_rng(seed)
    labels = [[int(v) if rng.random() < 0.7 else -100 for v in s] for s in sequences]
    mask = [rng.integers(0, 2, len(s)).tolist() for s in sequences]
    ids = rng.permutation(10 * len(sequences))[: len(sequences)].tolist() if with_ids else None
    cuts = tuple(sorted(set(rng.integers(0, len(sequences), 2).tolist())))
    _write(root, sequences, cuts=cuts, labels=labels, mask=mask, ids=ids)
    max_seq_len = 20 if over_cap == "error" else 12
    if over_cap != "error" and max(map(len, sequences)) <= 12:
        over_cap = "error"
    if over_cap == "drop" and min(map(len, sequences)) > 12:  # dropping all is refused
        over_cap = "truncate"
    prepared = prepare_dataset(
        _config(
            root,
            max_seq_len=max_seq_len,
            id_column="doc" if with_ids else None,
            over_cap=over_cap,
            labels_column="labels" if extra == "labels" else None,
            loss_mask_column="mask" if extra == "mask" else None,
        )
    )
    loaded = load_prepared(root / "out", verify=True)
    seq_ids = ids if with_ids else list(range(len(sequences)))
    for each in (prepared, loaded):
        assert each.tokens is not None and each.tokens.path == root / "out" / "tokens"
        for seq_id, tokens in zip(seq_ids, _rows(root, "input_ids"), strict=True):
            assert each.tokens[seq_id].tolist() == tokens
        assert (each.labels is not None) == (extra == "labels")
        assert (each.loss_mask is not None) == (extra == "mask")
    if extra == "labels":
        for seq_id, row in zip(seq_ids, _rows(root, "labels"), strict=True):
            assert loaded.labels[seq_id].tolist() == row
    store = loaded.manifest["token_store"]
    assert store["tokens"] == {
        "column": "input_ids",
        "dtype": "uint8"
        if max(map(max, sequences)) < 256
        else "uint16"
        if max(map(max, sequences)) < 65536
        else "uint32",
        "num_sequences": len(sequences),
        "num_tokens": sum(map(len, sequences)),
    }
    if extra == "labels":
        assert store["labels"]["dtype"] == "int32"
    if extra == "mask":
        assert store["loss_mask"]["dtype"] == "uint8"
    for name in os.listdir(root / "out" / "tokens"):
        assert f"tokens/{name}" in loaded.manifest["files"]

    # The datasets from the store equal the datasets given the parquet's lists in memory.
    by_id = dict(zip(seq_ids, _rows(root, "input_ids"), strict=True))
    memory: dict[str, Any] = {}
    if extra == "labels":
        memory["labels_source"] = dict(zip(seq_ids, _rows(root, "labels"), strict=True))
    if extra == "mask":
        memory["loss_mask_source"] = dict(zip(seq_ids, _rows(root, "mask"), strict=True))
    from_store = PackedDataset(loaded, collate=CollateOptions(pad_token_id=0), seed=3)
    positional = PackedDataset(
        loaded, loaded.tokens, collate=CollateOptions(pad_token_id=0), seed=3, **memory
    )
    in_memory = PackedDataset(
        loaded, by_id, collate=CollateOptions(pad_token_id=0), seed=3, **memory
    )
    assert len(from_store) == len(in_memory) == loaded.summary["num_bins"]
    for k in range(len(from_store)):
        assert list(from_store.plan[k]) == list(in_memory.plan[k])
        assert same_batch(from_store[k], in_memory[k])
        assert same_batch(positional[k], in_memory[k])
    iterable = PackedIterableDataset(
        loaded, collate=CollateOptions(pad_token_id=0), seed=3, rows_per_rank=2
    )
    reference = PackedIterableDataset(
        loaded, by_id, collate=CollateOptions(pad_token_id=0), seed=3, rows_per_rank=2, **memory
    )
    for a, b in zip(iterable, reference, strict=True):
        assert same_batch(a, b)


def test_the_cli_writes_the_store(tmp_path: Path) -> None:
    sequences = _sequences(50)
    labels = [[v if v % 3 else -100 for v in s] for s in sequences]
    _write(tmp_path, sequences, cuts=(20,), labels=labels)
    args = ["prepare", str(tmp_path / "in"), "--length-column", "n", "--max-seq-len", "32"]
    args += ["--output", str(tmp_path / "out"), "--tokens-column", "input_ids"]
    result = CliRunner().invoke(app, [*args, "--labels-column", "labels", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["token_store"]["tokens"]["dtype"] == "uint16"
    assert summary["token_store"]["labels"]["dtype"] == "int32"
    prepared = load_prepared(tmp_path / "out", verify=True)
    for k, (tokens, row) in enumerate(zip(sequences, labels, strict=True)):
        assert prepared.tokens[k].tolist() == tokens and prepared.labels[k].tolist() == row
    # --overwrite replaces a prepared directory with a store.
    result = CliRunner().invoke(app, [*args, "--overwrite", "--quiet"])
    assert result.exit_code == 0, result.output
    assert load_prepared(tmp_path / "out").labels is None


def test_without_tokens_column_nothing_changes(tmp_path: Path) -> None:
    _write(tmp_path, _sequences(30))
    prepared = prepare_dataset(_config(tmp_path, tokens_column=None))
    assert prepared.tokens is None and prepared.labels is None
    assert sorted(os.listdir(tmp_path / "out")) == [
        "counts.json",
        "manifest.json",
        "pools",
        "templates.json",
    ]
    assert "token_store" not in prepared.manifest
    with pytest.raises(ConfigError, match="no token store"):
        PackedDataset(
            load_prepared(tmp_path / "out"), collate=CollateOptions(pad_token_id=0), seed=0
        )


def test_an_old_manifest_without_a_store_loads(prepared_dir: Path) -> None:
    prepared = load_prepared(prepared_dir, verify=True)
    assert prepared.tokens is None and prepared.labels is None and prepared.loss_mask is None


def test_over_cap_truncate_keeps_the_longer_sequences(tmp_path: Path) -> None:
    sequences = [[1] * 5, [2] * 30, [3] * 12, [4] * 9]
    _write(tmp_path, sequences)
    prepared = prepare_dataset(_config(tmp_path, max_seq_len=12, over_cap="truncate"))
    assert prepared.tokens[1].shape == (30,)
    dataset = PackedDataset(
        prepared, collate=CollateOptions(pad_token_id=0, format="padding_free"), seed=0
    )
    rows = {tuple(dataset.plan[k]): dataset[k] for k in range(len(dataset))}
    assert rows[(1,)]["input_ids"][0].tolist() == [2] * 12


# ---- the files: sizes, hashes, atomicity -------------------------------------------------------


def test_verify_catches_a_flipped_byte_and_sizes_are_checked_without(tmp_path: Path) -> None:
    _write(tmp_path, _sequences(40), labels=_sequences(40))
    prepare_dataset(_config(tmp_path, labels_column="labels"))
    target = tmp_path / "out" / "labels" / "tokens.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.write_bytes(bytes(data))
    # Sizes agree: only the hashes tell. Every load reads the first and last MiB of the store's
    # files (edges_sha256); verify=True reads every byte.
    with pytest.raises(PreparedFormatError) as error:
        load_prepared(tmp_path / "out")
    assert "labels/tokens.npy is not the file prepare wrote" in _one_line(error)
    with pytest.raises(PreparedFormatError) as error:
        load_prepared(tmp_path / "out", verify=True)
    assert "labels/tokens.npy does not match its sha256" in _one_line(error)
    target.write_bytes(bytes(data[:-1]))
    with pytest.raises(PreparedFormatError) as error:
        load_prepared(tmp_path / "out")
    assert "labels/tokens.npy has" in _one_line(error) and "the manifest says" in str(error.value)


def test_a_store_missing_from_the_files_table_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, _sequences(10))
    prepare_dataset(_config(tmp_path))
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["files"]["tokens/offsets.npy"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(PreparedFormatError) as error:
        load_prepared(tmp_path / "out")
    assert "tokens/offsets.npy" in _one_line(error)


def _leftovers(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if name != "in")


def test_an_error_in_the_tokens_pass_leaves_nothing(tmp_path: Path) -> None:
    sequences = _sequences(40)
    sequences[33][2] = -5
    _write(tmp_path, sequences, cuts=(30,))
    with pytest.raises(InputError) as error:
        prepare_dataset(_config(tmp_path))
    text = _one_line(error)
    assert "part-001.parquet at row 3 (0-based) holds -5" in text and "negative" in text
    assert _leftovers(tmp_path) == []


def test_an_error_keeps_the_old_output(tmp_path: Path) -> None:
    _write(tmp_path, _sequences(20))
    prepare_dataset(_config(tmp_path))
    before = (tmp_path / "out" / "manifest.json").read_bytes()
    bad = _sequences(20)
    _write(tmp_path, bad, labels=[s[:-1] or [0, 0] for s in bad])
    with pytest.raises(InputError):
        prepare_dataset(_config(tmp_path, labels_column="labels", overwrite=True))
    assert (tmp_path / "out" / "manifest.json").read_bytes() == before
    assert _leftovers(tmp_path) == ["out"]


def test_a_length_column_that_disagrees_with_the_tokens(tmp_path: Path) -> None:
    sequences = _sequences(10)
    _write(tmp_path, sequences)
    pq.write_table(
        pa.table(
            {
                "input_ids": pa.array(sequences, pa.list_(pa.int32())),
                "n": [len(s) + (k == 6) for k, s in enumerate(sequences)],
            }
        ),
        tmp_path / "in" / "part-000.parquet",
    )
    with pytest.raises(InputError) as error:
        prepare_dataset(_config(tmp_path, max_seq_len=32))
    text = _one_line(error)
    assert "sequence id 6" in text and "part-000.parquet at row 6" in text
    assert "length_column 'n'" in text
    assert _leftovers(tmp_path) == []


# ---- bad inputs: one line, exit 1 -------------------------------------------------------------


def _cli(root: Path, *extra: str):
    args = ["prepare", str(root / "in"), "--length-column", "n", "--max-seq-len", "32"]
    return CliRunner().invoke(app, [*args, "--output", str(root / "out"), *extra])


def _bad_labels(root: Path) -> list[str]:
    sequences = _sequences(12)
    labels = [list(s) for s in sequences]
    labels[9] = labels[9] + [1]
    _write(root, sequences, cuts=(5,), labels=labels)
    return ["--tokens-column", "input_ids", "--labels-column", "labels"]


def _negative(root: Path) -> list[str]:
    sequences = _sequences(12)
    sequences[4][0] = -100
    _write(root, sequences)
    return ["--tokens-column", "input_ids"]


def _not_lists(root: Path) -> list[str]:
    _write(root, _sequences(12))
    return ["--tokens-column", "n"]


def _mask_of_twos(root: Path) -> list[str]:
    sequences = _sequences(12)
    mask = [[1] * len(s) for s in sequences]
    mask[7][-1] = 2
    _write(root, sequences, mask=mask)
    return ["--tokens-column", "input_ids", "--loss-mask-column", "mask"]


def _both(root: Path) -> list[str]:
    sequences = _sequences(12)
    _write(root, sequences, labels=sequences, mask=[[1] * len(s) for s in sequences])
    columns = ["--tokens-column", "input_ids", "--labels-column", "labels"]
    return [*columns, "--loss-mask-column", "mask"]


def _labels_alone(root: Path) -> list[str]:
    _write(root, _sequences(12), labels=_sequences(12))
    return ["--labels-column", "labels"]


BAD = {
    "labels length mismatch": (
        _bad_labels,
        ["labels column 'labels'", "part-001.parquet at row 4 (0-based)", "one labels value"],
    ),
    "negative token id": (_negative, ["token column 'input_ids'", "row 4", "-100", "negative"]),
    "not a list column": (_not_lists, ["token column 'n'", "int64", "lists of integer"]),
    "mask not 0/1": (_mask_of_twos, ["loss mask column 'mask'", "row 7", "holds 2", "[0, 1]"]),
    "labels and mask": (_both, ["--labels-column", "--loss-mask-column", "pass one"]),
    "labels without tokens": (_labels_alone, ["--labels-column", "--tokens-column"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_inputs_are_one_line_and_write_nothing(tmp_path: Path, name: str) -> None:
    make, fragments = BAD[name]
    result = _cli(tmp_path, *make(tmp_path))
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert _leftovers(tmp_path) == []
