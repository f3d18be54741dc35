"""`--over-cap split` (`PrepareConfig(over_cap="split", tokens_column=...)`): each sequence longer
than max_seq_len becomes pieces of max_seq_len tokens (the last one the remainder), each a
sequence of its own in the histogram, the pools and the token store, with a new id past the
largest input id, traced back by the piece table.

The oracle is the parquet's lists (pyarrow's `to_pylist`, files sorted by path).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from token_datasets import write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import InputError
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepared.store import piece_table

torch = pytest.importorskip("torch")
from seqpack_cli.collate import CollateOptions  # noqa: E402
from seqpack_cli.data import PackedDataset  # noqa: E402


def _write(root: Path, sequences: list[list[int]], **options: Any) -> None:
    write_token_files(root, sequences, row_group_size=5, label_type=pa.int32(), **options)


def _split(root: Path, cap: int, **changes: Any) -> Any:
    options: dict[str, Any] = {
        "inputs": [root / "in"],
        "length_column": "input_ids",
        "max_seq_len": cap,
        "output": root / "out",
        "tokens_column": "input_ids",
        "over_cap": "split",
    }
    options.update(changes)
    return prepare_dataset(PrepareConfig(**options))


split_cases = st.tuples(
    st.lists(st.integers(1, 60), min_size=1, max_size=40),
    st.integers(1, 20),
    st.sampled_from(["row index", "dense", "sparse"]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=split_cases)
def test_split_keeps_every_token_once_in_pieces_of_at_most_the_cap(tmp_path_factory, case) -> None:
    lengths, cap, id_kind, with_labels, seed = case
    root = tmp_path_factory.mktemp("split")
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, 1000, n).tolist() for n in lengths]
    labels = [[v if rng.random() < 0.8 else -100 for v in s] for s in sequences]
    ids = None
    if id_kind != "row index":
        step = 1 if id_kind == "dense" else 1 << 40
        ids = (rng.permutation(len(lengths)) * step + 7).tolist()
    cuts = tuple(sorted(set(rng.integers(0, len(lengths), 2).tolist())))
    _write(root, sequences, cuts=cuts, labels=labels if with_labels else None, ids=ids)
    prepared = _split(
        root,
        cap,
        id_column=None if ids is None else "doc",
        labels_column="labels" if with_labels else None,
    )
    loaded = load_prepared(root / "out", verify=True)
    source_ids = ids if ids is not None else list(range(len(lengths)))
    pooled = [int(i) for length in loaded.counts for i in loaded.pools[length]]
    assert len(pooled) == len(set(pooled)), "every id exactly once"
    # Every pooled sequence is in the store with its pool's length, at most the cap.
    for length in loaded.counts:
        assert length <= cap
        for seq_id in loaded.pools[length].tolist():
            assert loaded.tokens[seq_id].shape == (length,)
    # The pieces: new ids past the largest input id, by (source id, start).
    table = piece_table(root / "out")
    over = sorted((s, n) for s, n in zip(source_ids, lengths, strict=True) if n > cap)
    expected_table = []
    next_id = max(source_ids) + 1
    for source, n in over:
        for start in range(0, n, cap):
            expected_table.append([next_id, source, start])
            next_id += 1
    assert table.tolist() == expected_table
    kept = {s for s, n in zip(source_ids, lengths, strict=True) if n <= cap}
    assert set(pooled) == kept | {row[0] for row in expected_table}
    # Concatenating a source's pieces in order gives its tokens (and labels) back.
    pieces: dict[int, list[int]] = {}
    for piece, source, _start in table.tolist():
        pieces.setdefault(source, []).append(piece)
    for source, tokens, row_labels in zip(source_ids, sequences, labels, strict=True):
        parts = pieces.get(source, [source])
        assert np.concatenate([loaded.tokens[p] for p in parts]).tolist() == tokens
        if with_labels:
            assert np.concatenate([loaded.labels[p] for p in parts]).tolist() == row_labels
    summary = loaded.manifest["summary"]
    assert summary["num_split"] == len(over)
    assert summary["num_pieces"] == len(expected_table)
    assert summary["num_tokens_split"] == sum(n for _, n in over)
    assert summary["num_tokens"] == summary["num_input_tokens"] == sum(lengths)
    assert summary["num_sequences"] == len(pooled) == len(kept) + len(expected_table)
    assert (summary["num_dropped"], summary["num_truncated"]) == (0, 0)
    assert prepared.manifest == loaded.manifest


def test_piece_ids_do_not_depend_on_how_rows_are_spread_over_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    sequences = [rng.integers(0, 100, n).tolist() for n in rng.integers(1, 40, 30)]
    ids = (rng.permutation(30) * 3).tolist()
    outputs = []
    for name, cuts in (("a", (10,)), ("b", (3, 17, 25))):
        _write(tmp_path / name, sequences, cuts=cuts, ids=ids)
        _split(tmp_path / name, 8, id_column="doc")
        out = tmp_path / name / "out"
        outputs.append(
            {
                "pools": {
                    length: load_prepared(out).pools[length].tolist()
                    for length in load_prepared(out).counts
                },
                "pieces": piece_table(out).tolist(),
            }
        )
    assert outputs[0] == outputs[1]


def test_the_dataset_trains_on_pieces_with_no_loss_across_them(tmp_path: Path) -> None:
    sequences = [list(range(1000 * k + 1, 1000 * k + 1 + n)) for k, n in enumerate([25, 4, 9])]
    _write(tmp_path, sequences)
    prepared = _split(tmp_path, 10)
    assert prepared.counts == {4: 1, 5: 1, 9: 1, 10: 2}
    dataset = PackedDataset(
        prepared, collate=CollateOptions(pad_token_id=0, format="padding_free"), seed=0
    )
    seen = []
    for k in range(len(dataset)):
        batch = dataset[k]
        row = batch["input_ids"][0].tolist()
        expected = [t for seq_id in dataset.plan[k] for t in prepared.tokens[seq_id].tolist()]
        assert row == expected and len(row) <= 10
        # Each piece is a sequence: its first token is never a target, even in the middle
        # of a source (the previous piece does not predict it).
        starts = batch["cu_seqlens"].tolist()[:-1]
        assert all(batch["labels"][0, s].item() == -100 for s in starts)
        seen += row
    assert sorted(seen) == sorted(t for s in sequences for t in s), "every token once"


def test_cli_split_counts_and_table(tmp_path: Path) -> None:
    _write(tmp_path, [[1] * 5, [2] * 23, [3] * 10, [4] * 31])
    args = ["prepare", str(tmp_path / "in"), "--length-column", "input_ids", "--max-seq-len"]
    args += ["10", "--tokens-column", "input_ids", "--over-cap", "split"]
    result = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "j"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["config"]["over_cap"] == "split"
    assert (summary["num_split"], summary["num_pieces"], summary["num_tokens_split"]) == (2, 7, 54)
    assert summary["num_sequences"] == 9 and summary["num_tokens"] == 69
    assert summary["token_store"]["tokens"]["num_sequences"] == 9
    result = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert "2 over --max-seq-len split into 7 pieces" in result.stdout
    result = CliRunner().invoke(app, ["stats", str(tmp_path / "t"), "--verify", "--json"])
    assert result.exit_code == 0, result.output
    # --overwrite replaces a split store (its piece table is one of its own files).
    result = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "t"), "--overwrite"])
    assert result.exit_code == 0, result.output


def test_piece_ids_past_int64_are_one_line(tmp_path: Path) -> None:
    top = 2**63 - 2
    _write(tmp_path, [[1] * 25, [2] * 3], ids=[top, 5])
    with pytest.raises(InputError) as error:
        _split(tmp_path, 10, id_column="doc")
    text = str(error.value)
    assert "\n" not in text
    assert f"holds ids up to {top}" in text and "3 new ids of the pieces" in text
    assert not (tmp_path / "out").exists()


def test_a_fault_under_split_is_worded_by_the_two_passes(tmp_path: Path) -> None:
    sequences: list[Any] = [[1] * 25, [2] * 3, [3] * 4]
    _write(tmp_path, sequences, ids=[1, 2, 1])
    with pytest.raises(InputError, match=r"duplicated ids .* e\.g\. id 1 in"):
        _split(tmp_path, 10, id_column="doc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
