"""Small TRL-style token datasets for the token store's tests (test_token_store, test_split,
test_single_pass): parquet files of `input_ids` lists, with their lengths `n` and optional labels,
loss mask (`mask`) and ids (`doc`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.prepare import PrepareConfig


def write_token_files(
    root: Path,
    sequences: list[list[int]],
    *,
    cuts: tuple[int, ...] = (),
    labels: list[list[int]] | None = None,
    mask: list[list[int]] | None = None,
    ids: list[int] | None = None,
    lengths: list[int | None] | None = None,
    row_group_size: int = 7,
    token_type: pa.DataType | None = None,
    label_type: pa.DataType | None = None,
    statistics: bool = True,
) -> Path:
    """`sequences` over len(cuts) + 1 files in root/in (cut before each row index in `cuts`);
    `n` holds each list's length unless `lengths` says otherwise. Returns root/in."""
    bounds = [0, *cuts, len(sequences)]
    for k in range(len(bounds) - 1):
        part = slice(bounds[k], bounds[k + 1])
        columns: dict[str, Any] = {
            "input_ids": pa.array(sequences[part], token_type or pa.list_(pa.int32())),
            "n": pa.array(
                [len(s) if s is not None else None for s in sequences[part]]
                if lengths is None
                else lengths[part],
                pa.int64(),
            ),
        }
        if labels is not None:
            columns["labels"] = pa.array(labels[part], pa.list_(label_type or pa.int64()))
        if mask is not None:
            columns["mask"] = pa.array(mask[part], pa.list_(pa.int8()))
        if ids is not None:
            columns["doc"] = pa.array(ids[part], pa.int64())
        path = root / "in" / f"part-{k:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table(columns), path, row_group_size=row_group_size, write_statistics=statistics
        )
    return root / "in"


def store_config(root: Path, **changes: Any) -> PrepareConfig:
    """A prepare of root/in (as `write_token_files` writes it) into root/out with a token store
    of `input_ids`, lengths `n`, 16 tokens a bin; `changes` override any option."""
    options: dict[str, Any] = {
        "inputs": [root / "in"],
        "length_column": "n",
        "max_seq_len": 16,
        "output": root / "out",
        "tokens_column": "input_ids",
    }
    options.update(changes)
    return PrepareConfig(**options)
