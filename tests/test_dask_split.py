"""`--engine dask --over-cap split`: the cut store (offsets, id index, `pieces.npy`) and the pools
built by tasks are the local engine's, byte for byte (every file, the manifest but its `engine`
entry), whatever the file groups and chunks; a bad input gets the local engine's message and
leaves nothing.

The cluster and helpers are `test_dask_store`'s: `SMALL` cuts a few hundred rows into many file
groups and chunks of a few dozen ids, so that pieces fall on every cut.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dask_datasets import assert_same_output, kill_the_worker_running
from dask_store_cases import (
    SMALL,
    dense_ids,
    messages_of_both,
    random_sequences,
    run_both,
    sparse_ids,
    write_tokens,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from token_datasets import write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepare.engines.dask.driver import PAUSE_VARIABLE
from seqpack_cli.prepared.store import piece_table

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster(dask_cluster: Any) -> Any:
    return dask_cluster


SPLIT = {"over_cap": "split", "length_column": "input_ids"}

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "row indexes": ({}, {"max_seq_len": 16}),
    "sparse ids": ({"ids": sparse_ids(150)}, {"id_column": "doc", "max_seq_len": 16}),
    "dense ids, 3+ pieces": ({"ids": dense_ids(150)}, {"id_column": "doc", "max_seq_len": 7}),
    "labels, sparse ids": ({"ids": sparse_ids(150), "labels": True},
                           {"id_column": "doc", "labels_column": "labels", "max_seq_len": 12}),
    "loss mask, row indexes, 3+ pieces": ({"mask": True},
                                          {"loss_mask_column": "mask", "max_seq_len": 5}),
    "integer length column": ({"ids": sparse_ids(150)}, {"id_column": "doc", "max_seq_len": 16,
                              "length_column": "n"}),
    "ids past 2**32": ({"ids": [(i << 40) - 5 for i in sparse_ids(150)]},
                       {"id_column": "doc", "max_seq_len": 10}),
    "nothing over the cap": ({"ids": sparse_ids(150)}, {"id_column": "doc", "max_seq_len": 64}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_byte_identical_to_the_local_engine(cluster: Any, tmp_path: Path, case: str) -> None:
    data, options = CASES[case]
    inputs = write_tokens(tmp_path, random_sequences(150), **data)
    local, dask = run_both(cluster, inputs, tmp_path / "out", **{**SPLIT, **options})
    assert_same_output(local, dask)
    prepared = load_prepared(dask, verify=True)
    summary = prepared.manifest["summary"]
    lengths = [len(s) for s in random_sequences(150)]
    cap = options["max_seq_len"]
    assert summary["num_split"] == sum(n > cap for n in lengths)
    assert summary["num_tokens_split"] == sum(n for n in lengths if n > cap)
    assert summary["num_pieces"] == sum(-(-n // cap) for n in lengths if n > cap)
    assert piece_table(dask).shape == (summary["num_pieces"], 3)
    if cap <= 7:  # sequences of 3 pieces or more
        assert max(lengths) > 3 * cap


def test_a_sequence_across_many_groups_in_many_pieces(cluster: Any, tmp_path: Path) -> None:
    """Files of one row, each a file group; id chunks of 3 ids: rows of up to 23 pieces, their
    pieces numbered across groups and chunks."""
    rng = np.random.default_rng(3)
    sequences = [rng.integers(0, 9, int(n)).tolist() for n in rng.integers(1, 90, 12)]
    sequences[4] = list(range(200))
    ids = (rng.permutation(12) * 5).tolist()
    inputs = write_token_files(tmp_path, sequences, cuts=tuple(range(1, 12)), row_group_size=2,
                               ids=ids)  # fmt: skip
    options = {**SPLIT, "id_column": "doc", "max_seq_len": 9, "tokens_column": "input_ids"}
    tuning = dataclasses.replace(SMALL, group_rows=1, check_ids=3)
    local, dask = tmp_path / "local", tmp_path / "dask"
    prepare_dataset(PrepareConfig(inputs=[inputs], output=local, **options))
    dask_options = {"engine": "dask", "cluster_tuning": tuning,
                    "scheduler": cluster.scheduler_address}  # fmt: skip
    prepare_dataset(PrepareConfig(inputs=[inputs], output=dask, **dask_options, **options))
    assert_same_output(local, dask)
    assert load_prepared(dask).manifest["engine"]["file_groups"] == 12
    assert piece_table(dask)[:, 1].tolist().count(ids[4]) == 23  # 200 tokens, 9 a piece


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=50),
    cuts=st.lists(st.integers(0, 50), max_size=4),
    ids=st.sampled_from(["rows", "sparse", "dense"]),
    cap=st.integers(1, 12),
    labels=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_datasets_are_byte_identical(
    cluster: Any, tmp_path_factory: Any, lengths, cuts, ids, cap, labels, seed
) -> None:
    root = tmp_path_factory.mktemp("random")
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, 300, n).tolist() for n in lengths]
    cuts = tuple(sorted(min(cut, len(sequences)) for cut in cuts))
    data: dict[str, Any] = {"labels": True} if labels else {}
    options: dict[str, Any] = {**SPLIT, "max_seq_len": cap}
    if ids != "rows":
        step = 3 if ids == "sparse" else 1
        data["ids"] = (rng.permutation(len(sequences)) * step - 40).tolist()
        options["id_column"] = "doc"
    if labels:
        options["labels_column"] = "labels"
    inputs = write_token_files(root, sequences, cuts=cuts, row_group_size=5,
                               **({"ids": data["ids"]} if "ids" in data else {}),
                               labels=[[t % 7 - 3 for t in s] for s in sequences] if labels
                               else None)  # fmt: skip
    tuning = dataclasses.replace(SMALL, group_rows=10, check_ids=20, block_ids=3)  # 7 blocks
    local, dask = root / "local", root / "dask"
    prepare_dataset(PrepareConfig(inputs=[inputs], output=local, tokens_column="input_ids",
                                  **options))  # fmt: skip
    prepare_dataset(PrepareConfig(inputs=[inputs], output=dask, tokens_column="input_ids",
                                  engine="dask", scheduler=cluster.scheduler_address,
                                  cluster_tuning=tuning, **options))  # fmt: skip
    assert_same_output(local, dask)


# ---- bad inputs: the local engine's message ----------------------------------------------------


def _null_list(root: Path) -> dict[str, Any]:
    sequences: list[Any] = random_sequences(150)
    sequences[100] = None
    write_tokens(root, sequences, lengths=[5] * 150)
    return {"max_seq_len": 8, "length_column": "n"}


def _empty_list(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    sequences[95] = []
    write_tokens(root, sequences)
    return {"max_seq_len": 8}


def _repeated_id(root: Path) -> dict[str, Any]:
    """Repeated among split rows."""
    sequences = random_sequences(150, longest=60)
    ids = sparse_ids(150)
    long = [k for k, s in enumerate(sequences) if len(s) > 40]
    ids[long[-1]] = ids[long[0]]
    write_tokens(root, sequences, ids=ids)
    return {"id_column": "doc", "max_seq_len": 10}


def _labels_mismatch(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    labels = [list(s) for s in sequences]
    labels[130] = labels[130] + [1]
    write_tokens(root, sequences, labels=labels)
    return {"labels_column": "labels", "max_seq_len": 10}


def _length_column_over_the_cap(root: Path) -> dict[str, Any]:
    """Lengths over the cap that are not the lists' (truncate's checks let them pass; the local
    split refuses them)."""
    sequences = random_sequences(150, longest=60)
    lengths = [len(s) for s in sequences]
    long = [k for k, n in enumerate(lengths) if n > 20]
    lengths[long[0]], lengths[long[1]] = lengths[long[1]], lengths[long[0]]
    lengths[long[2]] += 3
    write_tokens(root, sequences, lengths=lengths)
    return {"max_seq_len": 10, "length_column": "n"}


def _piece_ids_overflow(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    ids = sparse_ids(150)
    ids[77] = 2**63 - 3
    write_tokens(root, sequences, ids=ids)
    return {"id_column": "doc", "max_seq_len": 10}


BAD = {
    "NULL token list": (_null_list, "is NULL in"),
    "empty token list": (_empty_list, "NULL or empty token lists"),
    "repeated id": (_repeated_id, "duplicated ids"),
    "labels length mismatch": (_labels_mismatch, "one labels value per token"),
    "length column over the cap": (_length_column_over_the_cap, "changed"),
    "piece ids past int64": (_piece_ids_overflow, "new ids of the pieces"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_word_as_the_local_engine(cluster: Any, tmp_path: Path, case: str) -> None:
    make, fragment = BAD[case]
    options = {**SPLIT, **make(tmp_path)}
    local, dask = messages_of_both(cluster, tmp_path / "in", tmp_path / "out", **options)
    assert fragment in local
    assert dask == local


def test_the_cli_splits_on_the_cluster_as_locally(cluster: Any, tmp_path: Path) -> None:
    """`seqpack prepare --engine dask --over-cap split --json`: the local summary, the local
    files."""
    write_tokens(tmp_path, random_sequences(150), ids=sparse_ids(150))
    args = [
        "prepare",
        str(tmp_path / "in"),
        "--length-column",
        "n",
        "--max-seq-len",
        "10",
        "--tokens-column",
        "input_ids",
        "--id-column",
        "doc",
        "--over-cap",
        "split",
        "--json",
    ]
    local = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "a")])
    dask = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "b"), "--engine", "dask",
                                    "--scheduler", cluster.scheduler_address])  # fmt: skip
    assert local.exit_code == dask.exit_code == 0, dask.stderr
    mine, theirs = json.loads(dask.stdout), json.loads(local.stdout)
    assert mine.pop("engine")["name"] == "dask" and mine["num_split"] > 0
    for summary in (mine, theirs):
        del summary["output"], summary["seconds"]
    theirs.pop("engine", None)
    assert mine == theirs
    assert_same_output(tmp_path / "a", tmp_path / "b")


def test_a_worker_killed_mid_split_changes_nothing(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task pauses (`PAUSE_VARIABLE`) halfway; the worker writing the split's id index
    and pools is killed then (SIGKILL): Dask runs its task again elsewhere, the output is the
    same."""
    inputs = write_tokens(tmp_path, random_sequences(150), ids=sparse_ids(150), labels=True)
    options = {**SPLIT, "id_column": "doc", "labels_column": "labels", "max_seq_len": 9,
               "tokens_column": "input_ids", "inputs": [inputs]}  # fmt: skip
    monkeypatch.setenv(PAUSE_VARIABLE, "1")
    tuning = dataclasses.replace(SMALL, group_rows=80, check_ids=75)  # few pauses
    config = PrepareConfig(output=tmp_path / "dask", engine="dask", cluster_tuning=tuning,
                           scheduler=cluster.scheduler_address, **options)  # fmt: skip
    client = distributed.Client(cluster.scheduler_address)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            run = pool.submit(prepare_dataset, config)
            kill_the_worker_running(client, run, "-split_ids-")
            run.result(timeout=120)
        monkeypatch.delenv(PAUSE_VARIABLE)
        prepare_dataset(PrepareConfig(output=tmp_path / "local", **options))
        assert_same_output(tmp_path / "local", tmp_path / "dask")
        client.wait_for_workers(2, timeout=60)  # the nanny started a new one
    finally:
        client.close()
