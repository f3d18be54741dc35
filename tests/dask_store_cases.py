"""Datasets and runs shared by the token-store tests of the Dask engine (test_dask_store,
test_dask_split): token lists in uneven files, ids, both engines run on the same inputs.

`run_both` prepares with `--engine local` and `--engine dask`; `messages_of_both` gets both
engines' one-line errors for the same bad inputs and checks neither wrote anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dask_datasets import leftovers
from token_datasets import write_token_files

from seqpack_cli.errors import SeqpackError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning

SMALL = ClusterTuning(group_rows=40, merge_ids=150, check_ids=60, block_ids=64, samples=8)
"""Groups of a file or two, id index ranges of a few dozen ids."""

CUTS = (13, 13, 40, 71, 90, 120)  # uneven files, one empty


def random_sequences(count: int, seed: int = 0, longest: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, int(rng.integers(1, longest))).tolist() for _ in range(count)]


def store_config(inputs: Path, output: Path, **options: Any) -> PrepareConfig:
    base: dict[str, Any] = {
        "length_column": "n", "max_seq_len": 64, "tokens_column": "input_ids",
    }  # fmt: skip
    return PrepareConfig(inputs=[inputs], output=output, **{**base, **options})


def dask_options(cluster: Any, tuning: ClusterTuning = SMALL) -> dict[str, Any]:
    return {"engine": "dask", "scheduler": cluster.scheduler_address, "cluster_tuning": tuning}


def run_both(cluster: Any, inputs: Path, out: Path, **options: Any) -> tuple[Path, Path]:
    local, dask = out / "local", out / "dask"
    prepare_dataset(store_config(inputs, local, **options))
    prepare_dataset(store_config(inputs, dask, **dask_options(cluster), **options))
    return local, dask


def messages_of_both(cluster: Any, inputs: Path, out: Path, **options: Any) -> tuple[str, str]:
    """Both engines' messages for the same bad inputs; neither wrote anything."""
    messages = []
    out.mkdir()
    for name, extra in (("local", {}), ("dask", dask_options(cluster))):
        with pytest.raises(SeqpackError) as error:
            prepare_dataset(store_config(inputs, out / name, **extra, **options))
        assert not (out / name).exists() and leftovers(out) == []
        messages.append(str(error.value))
    assert "\n" not in messages[0]
    return messages[0], messages[1]


def sparse_ids(count: int, seed: int = 1) -> list[int]:
    return (np.random.default_rng(seed).permutation(count) * 7 + 1_000).tolist()


def dense_ids(count: int, seed: int = 2) -> list[int]:
    return np.random.default_rng(seed).permutation(count).tolist()


def write_tokens(root: Path, sequences: list[list[int]], **data: Any) -> Path:
    if data.get("labels") is True:  # labels or a mask made from the tokens
        data["labels"] = [[t % 7 - 3 if t % 5 else -100 for t in s] for s in sequences]
    if data.get("mask") is True:
        data["mask"] = [[t % 2 for t in s] for s in sequences]
    return write_token_files(root, sequences, cuts=CUTS, row_group_size=9, **data)
