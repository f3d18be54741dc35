"""`--engine dask --tokens-column`: the token store built by tasks on a `LocalCluster` of 2
worker processes is the local engine's, byte for byte (every file, the manifest but its `engine`
entry), whatever the file groups; a bad input gets the local engine's message, word for word,
whichever groups hold the faults, and leaves nothing.

Each case runs both engines on the same inputs. `ClusterTuning` cuts a few hundred rows into
many file groups and id ranges, so that every cut shows.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dask_datasets import (
    assert_same_output,
    kill_the_worker_running,
    leftovers,
    write_dataset,
)
from dask_store_cases import (
    SMALL,
    dask_options,
    dense_ids,
    messages_of_both,
    random_sequences,
    run_both,
    sparse_ids,
    store_config,
    write_tokens,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from token_datasets import write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.prepare import load_prepared, prepare_dataset
from seqpack_cli.prepare.engines.dask.driver import PAUSE_VARIABLE

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster(dask_cluster: Any) -> Any:
    return dask_cluster


CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "sparse ids": ({"ids": sparse_ids(150)}, {"id_column": "doc"}),
    "dense ids": ({"ids": dense_ids(150)}, {"id_column": "doc"}),
    "row indexes": ({}, {}),
    "labels, sparse ids": ({"ids": sparse_ids(150), "labels": True}, {"id_column": "doc",
                           "labels_column": "labels"}),
    "loss mask, row indexes": ({"mask": True}, {"loss_mask_column": "mask"}),
    "truncate, ids": ({"ids": sparse_ids(150)}, {"id_column": "doc", "max_seq_len": 16,
                      "over_cap": "truncate"}),
    "drop, labels": ({"labels": True}, {"labels_column": "labels", "max_seq_len": 16,
                     "over_cap": "drop"}),
    "no statistics, labels": ({"statistics": False, "labels": True},
                              {"labels_column": "labels"}),
    "token lists as lengths": ({"ids": dense_ids(150)}, {"id_column": "doc",
                               "length_column": "input_ids"}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_byte_identical_to_the_local_engine(cluster: Any, tmp_path: Path, case: str) -> None:
    data, options = CASES[case]
    inputs = write_tokens(tmp_path, random_sequences(150), **data)
    local, dask = run_both(cluster, inputs, tmp_path / "out", **options)
    assert_same_output(local, dask)
    prepared = load_prepared(dask)
    assert prepared.tokens is not None and prepared.manifest["engine"]["name"] == "dask"


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    ids=st.sampled_from(["rows", "sparse"]),
    over_cap=st.sampled_from(["drop", "truncate"]),
    seed=st.integers(0, 2**16),
    vocabulary=st.sampled_from([200, 300, 70_000]),
)
def test_random_datasets_are_byte_identical(
    cluster: Any, tmp_path_factory: Any, lengths, cuts, ids, over_cap, seed, vocabulary
) -> None:
    root = tmp_path_factory.mktemp("random")
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, vocabulary, n).tolist() for n in [3, *lengths]]  # one always kept
    cuts = tuple(sorted(min(cut, len(sequences)) for cut in cuts))
    extra: dict[str, Any] = {}
    if ids == "sparse":
        extra["ids"] = (rng.permutation(len(sequences)) * 3 - 40).tolist()
    inputs = write_token_files(root, sequences, cuts=cuts, row_group_size=5, **extra)
    options = {"max_seq_len": 12, "over_cap": over_cap}
    if ids == "sparse":
        options["id_column"] = "doc"
    local, dask = run_both(cluster, inputs, root / "out", **options)
    assert_same_output(local, dask)


def test_a_multi_file_dataset_of_token_lists(cluster: Any, tmp_path: Path) -> None:
    """The Dask engine's own test dataset with token lists as lengths (many row groups)."""
    inputs = write_dataset(tmp_path / "in", ids="blocks", lists=True, rows=600, max_length=80)
    options = {"length_column": "n", "tokens_column": "n", "id_column": "doc_id",
               "max_seq_len": 64, "over_cap": "truncate"}  # fmt: skip
    local, dask = run_both(cluster, inputs, tmp_path / "out", **options)
    assert_same_output(local, dask)


# ---- bad inputs: the local engine's message ----------------------------------------------------


def _null_list(root: Path) -> dict[str, Any]:
    sequences: list[Any] = random_sequences(150)
    sequences[100] = None
    sequences[20] = None
    write_tokens(root, sequences, lengths=[5] * 150)
    return {"max_seq_len": 64}


def _empty_list(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    sequences[95] = []
    write_tokens(root, sequences, lengths=[max(1, len(s)) for s in sequences])
    return {"max_seq_len": 64}


def _negative(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    sequences[110][2] = -5
    sequences[75][0] = -100
    write_tokens(root, sequences)
    return {"max_seq_len": 64}


def _labels_mismatch(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    labels = [list(s) for s in sequences]
    labels[130] = labels[130] + [1]
    labels[80] = labels[80][:-1] or [1, 2]
    write_tokens(root, sequences, labels=labels)
    return {"labels_column": "labels", "max_seq_len": 64}


def _bad_mask_and_token(root: Path) -> dict[str, Any]:
    """A mask value of 2 early, a negative token late: the tokens' fault comes first."""
    sequences = random_sequences(150)
    mask = [[1] * len(s) for s in sequences]
    mask[3][0] = 2
    sequences[140][0] = -1
    write_tokens(root, sequences, mask=mask)
    return {"loss_mask_column": "mask", "max_seq_len": 64}


def _lengths_disagree(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    lengths = [len(s) for s in sequences]
    lengths[120] += 1
    lengths[60] -= 1 if lengths[60] > 1 else -1
    write_tokens(root, sequences, lengths=lengths, ids=sparse_ids(150))
    return {"id_column": "doc", "max_seq_len": 64}


def _repeated_id(root: Path) -> dict[str, Any]:
    """Repeated among rows the pools drop: only the store's id index sees it."""
    sequences = random_sequences(150, longest=60)
    ids = sparse_ids(150)
    long = [k for k, s in enumerate(sequences) if len(s) > 40]
    ids[long[-1]] = ids[long[0]]
    ids[long[-2]] = ids[long[1]]  # two ids repeated: the smaller one is reported
    write_tokens(root, sequences, ids=ids)
    return {"id_column": "doc", "max_seq_len": 40, "over_cap": "drop"}


def _missing_labels(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    write_tokens(root, sequences)
    return {"labels_column": "labels", "max_seq_len": 64}


def _labels_before_lengths(root: Path) -> dict[str, Any]:
    """A labels list too long early, a NULL labels list late: the NULL comes first (the labels
    are streamed whole before their lengths are compared)."""
    sequences = random_sequences(150)
    labels: list[Any] = [list(s) for s in sequences]
    labels[5] = labels[5] + [7]
    labels[145] = None
    write_tokens(root, sequences, labels=labels)
    return {"labels_column": "labels", "max_seq_len": 64}


def _id_before_labels(root: Path) -> dict[str, Any]:
    """A repeated (dropped) id late, a mask value of 3 early: the id comes first."""
    options = _repeated_id(root)
    table = pq.read_table(root / "in" / "part-000.parquet")
    rows = table.column("input_ids").to_pylist()
    mask = pa.array([[1] * len(s) for s in rows[:-1]] + [[1] * (len(rows[-1]) - 1) + [3]],
                    pa.list_(pa.int8()))  # fmt: skip
    pq.write_table(table.append_column("mask", mask), root / "in" / "part-000.parquet")
    for path in sorted((root / "in").glob("part-00[1-9].parquet")):
        part = pq.read_table(path)
        ones = [[1] * len(s) for s in part.column("input_ids").to_pylist()]
        pq.write_table(part.append_column("mask", pa.array(ones, pa.list_(pa.int8()))), path)
    return {**options, "loss_mask_column": "mask"}


def _truncated_too_short(root: Path) -> dict[str, Any]:
    sequences = random_sequences(150)
    lengths = [len(s) for s in sequences]
    lengths[90], sequences[90] = 50, [1] * 10  # over the cap, but its list is shorter
    lengths[30] = 45
    sequences[30] = sequences[30][:20] + [1] * 30
    write_tokens(root, sequences, lengths=lengths, ids=sparse_ids(150))
    return {"id_column": "doc", "max_seq_len": 24, "over_cap": "truncate"}


BAD = {
    "NULL token list": (_null_list, "is NULL in"),
    "empty token list": (_empty_list, "holds 0 tokens"),
    "negative token": (_negative, "negative"),
    "labels length mismatch": (_labels_mismatch, "one labels value per token"),
    "tokens before the mask": (_bad_mask_and_token, "negative"),
    "length column disagrees": (_lengths_disagree, "length_column 'n'"),
    "repeated id": (_repeated_id, "more than once"),
    "no labels column": (_missing_labels, "labels column 'labels'"),
    "labels streamed before their lengths": (_labels_before_lengths, "is NULL in"),
    "a repeated id before the mask": (_id_before_labels, "more than once"),
    "truncated, too short": (_truncated_too_short, "at least 24"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_word_as_the_local_engine(cluster: Any, tmp_path: Path, case: str) -> None:
    make, fragment = BAD[case]
    options = make(tmp_path)
    local, dask = messages_of_both(cluster, tmp_path / "in", tmp_path / "out", **options)
    assert fragment in local
    assert dask == local


def test_a_footer_count_that_is_not_the_tokens(cluster: Any, tmp_path: Path) -> None:
    """An empty list in a dropped row: the footer counts a value for it, the store holds none."""
    sequences = random_sequences(150)
    sequences[70] = []
    lengths = [len(s) or 100 for s in sequences]
    inputs = write_tokens(tmp_path, sequences, lengths=lengths)
    local, dask = run_both(cluster, inputs, tmp_path / "out", over_cap="drop")
    assert_same_output(local, dask)
    assert isinstance(pa, object) and pq is not None


def test_a_worker_killed_mid_store_changes_nothing(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task pauses (`PAUSE_VARIABLE`) halfway; the worker running a store task is killed
    then (SIGKILL): Dask runs its tasks again elsewhere, and the output is the same."""
    inputs = write_tokens(tmp_path, random_sequences(150), ids=sparse_ids(150), labels=True)
    options = {"id_column": "doc", "labels_column": "labels"}
    monkeypatch.setenv(PAUSE_VARIABLE, "1")
    tuning = dataclasses.replace(SMALL, group_rows=80)  # few groups: few pauses
    config = store_config(inputs, tmp_path / "dask", **dask_options(cluster, tuning), **options)
    client = distributed.Client(cluster.scheduler_address)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            run = pool.submit(prepare_dataset, config)
            kill_the_worker_running(client, run, "-tokens-")
            run.result(timeout=120)
        monkeypatch.delenv(PAUSE_VARIABLE)
        prepare_dataset(store_config(inputs, tmp_path / "local", **options))
        assert_same_output(tmp_path / "local", tmp_path / "dask")
        client.wait_for_workers(2, timeout=60)  # the nanny started a new one
    finally:
        client.close()


def test_the_cli_exits_1_with_the_local_line(cluster: Any, tmp_path: Path) -> None:
    _negative(tmp_path)
    args = ["prepare", str(tmp_path / "in"), "--length-column", "n", "--max-seq-len", "64",
            "--tokens-column", "input_ids"]  # fmt: skip
    local = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "a")])
    dask = CliRunner().invoke(
        app, [*args, "-o", str(tmp_path / "b"), "--engine", "dask", "--scheduler",
              cluster.scheduler_address],
    )  # fmt: skip
    assert local.exit_code == dask.exit_code == 1
    assert dask.stderr == local.stderr and dask.stderr.count("\n") == 1
    assert "negative" in dask.stderr and "Traceback" not in dask.stderr
    assert not (tmp_path / "b").exists() and leftovers(tmp_path) == []
