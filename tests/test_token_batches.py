"""The store's one batch kernel (`token_batches.check_batch`), checked row by row in Python on
random batches: what it refuses, the first mismatch, the lengths, the cast values; and the
local stream and the Dask store task both run it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.prepare.token_batches import StoreColumns, check_batch

_SPEC = StoreColumns(
    columns={"tokens": "input_ids", "labels": "labels"},
    dtypes={"tokens": np.dtype("<u2"), "labels": np.dtype("<i4")},
    ranges={"tokens": (0, 65535), "labels": (-(2**31), 2**31 - 1)},
    length_column="length",
    id_column="id",
)

_row = st.tuples(
    st.lists(st.integers(0, 70000), max_size=5),  # tokens (over uint16 now and then)
    st.integers(-1, 1),  # the labels list one shorter, as long, one longer
    st.booleans(),  # a NULL label value in the row
    st.integers(-1, 1),  # the length column off by this
    st.one_of(st.none(), st.integers(0, 2**64 - 1)),  # the id (None: NULL)
)


def _labels(tokens: list[int], shift: int) -> list[int | None]:
    """The row's labels: its tokens, one short (`shift` -1) or one more (+1)."""
    return list(tokens[: len(tokens) + shift]) if shift <= 0 else [*tokens, 7]


def _batch(rows: list[tuple[list[int], int, bool, int, int | None]]) -> pa.RecordBatch:
    labels = []
    for tokens, shift, null_label, _, _ in rows:
        row = _labels(tokens, shift)
        if null_label and row:
            row[0] = None
        labels.append(row)
    return pa.RecordBatch.from_pydict(
        {
            "input_ids": pa.array([row[0] for row in rows], pa.list_(pa.int64())),
            "labels": pa.array(labels, pa.list_(pa.int64())),
            "length": pa.array([len(row[0]) + row[3] for row in rows], pa.int64()),
            "id": pa.array([row[4] for row in rows], pa.uint64()),
        }
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(_row, min_size=1, max_size=12))
def test_check_batch_reports_what_each_row_holds(rows: list) -> None:
    check = check_batch(_SPEC, _batch(rows))
    tokens_bad = any(v > 65535 for row in rows for v in row[0])
    ids_bad = any(row[4] is None or row[4] >= 2**63 for row in rows)
    if tokens_bad or ids_bad:
        assert check.rows is None and check.refused == {"tokens"}
        return
    assert check.rows is not None
    lengths = [len(row[0]) for row in rows]
    assert check.rows.lengths.tolist() == lengths
    assert check.rows.values["tokens"].dtype == np.dtype("<u2")
    assert check.rows.values["tokens"].tolist() == [v for row in rows for v in row[0]]
    assert check.rows.ids is not None and check.rows.ids.tolist() == [row[4] for row in rows]
    assert check.empty == (min(lengths) == 0)
    label_lengths = [len(_labels(row[0], row[1])) for row in rows]
    null_label = any(row[2] and n for row, n in zip(rows, label_lengths, strict=True))
    assert check.refused == ({"labels"} if null_label else set())
    if null_label:
        assert "labels" not in check.rows.values and check.mismatch is None
    else:
        assert check.rows.values["labels"].dtype == np.dtype("<i4")
        # the first row whose labels are not as long as its tokens
        first = next((k for k, n in enumerate(label_lengths) if n != lengths[k]), None)
        expected = None if first is None else (first, label_lengths[first], lengths[first])
        assert check.mismatch == expected
    assert check.claimed is not None
    assert check.claimed.tolist() == [len(row[0]) + row[3] for row in rows]
    assert check.lengths_differ == any(row[3] for row in rows)


def test_a_null_length_is_reported_as_such() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "input_ids": pa.array([[1, 2]], pa.list_(pa.int64())),
            "labels": pa.array([[1, 2]], pa.list_(pa.int64())),
            "length": pa.array([None], pa.int64()),
            "id": pa.array([3], pa.uint64()),
        }
    )
    check = check_batch(_SPEC, batch)
    assert check.lengths_null and check.claimed is None and check.lengths_differ


def test_both_engines_check_batches_with_the_one_kernel() -> None:
    """The local stream and the Dask store task call `check_batch`, and no other prepare module
    flattens token lists to check them itself."""
    root = Path(__file__).resolve().parents[1] / "seqpack_cli" / "prepare"
    callers = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check_batch":
                callers.add(path.relative_to(root).as_posix())
    assert callers == {"token_stream.py", "engines/dask/store_tasks.py"}
