"""`--engine dask` on a `LocalCluster` of 2 worker processes: the local engine's output, byte for
byte, whatever the file groups; its errors, word for word, whichever groups hold the faults.

Each case runs the local engine and the Dask engine on the same inputs and compares everything
(the manifest too, but its `engine` entry). `ClusterTuning` cuts a few thousand rows into many
file groups, merge units, id ranges and read blocks, so that every cut shows.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dask_datasets import assert_same_output, write_dataset
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError, SeqpackError
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepare.engines.dask.driver import ClusterEngine
from seqpack_cli.prepare.engines.dask.tasks import check_visible
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning

distributed = pytest.importorskip("distributed")

SMALL = ClusterTuning(group_rows=300, merge_ids=150, check_ids=200, block_ids=64, samples=8)
"""A few hundred rows per group, pools merged a few lengths at a time (the larger ones block
by block), ids checked in ranges of a few hundred."""
ON_DISK = dataclasses.replace(SMALL, memory_ids=1)
"""Groups ordered as a single large file is: through the id map or a work file."""


@pytest.fixture(scope="module")
def cluster(dask_cluster: Any) -> Any:
    return dask_cluster


def _config(inputs: Path, output: Path, **options: Any) -> PrepareConfig:
    base: dict[str, Any] = {"length_column": "n", "max_seq_len": 512, "id_column": "doc_id"}
    return PrepareConfig(inputs=[inputs], output=output, **{**base, **options})


def _both(
    cluster: Any, inputs: Path, out: Path, tuning: ClusterTuning = SMALL, **options: Any
) -> tuple[Path, Path]:
    local, dask = out / "local", out / "dask"
    prepare_dataset(_config(inputs, local, **options))
    dask_options = {"engine": "dask", "scheduler": cluster.scheduler_address}
    prepare_dataset(_config(inputs, dask, cluster_tuning=tuning, **dask_options, **options))
    return local, dask


CASES = {
    "sparse ids": ({"ids": "sparse"}, {}),
    "ids in dense blocks": ({"ids": "blocks"}, {}),
    "hashed ids": ({"ids": "hashed"}, {}),
    "row indexes": ({"ids": "rows"}, {"id_column": None}),
    "row indexes, on disk": ({"ids": "rows"}, {"id_column": None, "tuning": ON_DISK}),
    "sparse ids, on disk": ({"ids": "sparse"}, {"tuning": ON_DISK}),
    "hashed ids, on disk": ({"ids": "hashed"}, {"tuning": ON_DISK}),
    "row indexes, dropped": ({"ids": "rows"}, {"id_column": None, "max_seq_len": 40,
                                                "over_cap": "drop"}),
    "ids, truncated": ({"ids": "sparse"}, {"max_seq_len": 30, "over_cap": "truncate"}),
    "caps and per-item": ({"ids": "hashed"}, {"max_seqs_per_bin": 3, "packer": "per-item"}),
    "token lists": ({"ids": "sparse", "lists": True, "rows": 800}, {"max_seq_len": 64,
                                                                   "over_cap": "drop"}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_byte_identical_to_the_local_engine(cluster: Any, tmp_path: Path, case: str) -> None:
    data, options = CASES[case]
    inputs = write_dataset(tmp_path / "in", **data)
    local, dask = _both(cluster, inputs, tmp_path, **options)
    assert_same_output(local, dask)
    engine = load_prepared(dask, verify=True).manifest["engine"]
    assert engine["name"] == "dask" and engine["workers"] == 2
    assert engine["file_groups"] >= 2  # the cut shows: several groups
    assert load_prepared(local).manifest["engine"] == {"name": "local"}


@pytest.mark.parametrize(
    "tuning",
    [
        ClusterTuning(),
        ClusterTuning(group_rows=1, merge_ids=1, check_ids=1, block_ids=1),
        dataclasses.replace(ON_DISK, group_rows=10**6),
    ],
    ids=["default cuts", "one file and one length a task", "one group on disk"],
)
@pytest.mark.parametrize("ids", ["sparse", "rows"])
def test_any_cut_gives_the_same_bytes(cluster: Any, tmp_path: Path, tuning, ids: str) -> None:
    inputs = write_dataset(tmp_path / "in", ids=ids, rows=1500, seed=3)
    options = {"id_column": None} if ids == "rows" else {}
    local, dask = _both(cluster, inputs, tmp_path, tuning, **options)
    assert_same_output(local, dask)


def test_progress_reports_tasks_and_rows(cluster: Any, tmp_path: Path) -> None:
    inputs = write_dataset(tmp_path / "in", rows=600)
    calls: list[tuple[str, int, int]] = []
    config = _config(
        inputs, tmp_path / "out", engine="dask", scheduler=cluster.scheduler_address,
        cluster_tuning=SMALL,
    )  # fmt: skip
    prepare_dataset(config, progress=lambda *call: calls.append(call))
    last = {phase: (done, total) for phase, done, total in calls}
    assert set(last) == {"footers", "histogram", "pools", "check ids", "write pools", "dask tasks"}
    assert last["histogram"] == last["pools"] == (600, 600)
    assert last["write pools"] == (600, 600) and last["footers"] == (5, 5)
    done, total = last["dask tasks"]
    assert done == total == load_prepared(tmp_path / "out").manifest["engine"]["tasks"]


def test_ids_numbered_file_after_file_need_no_duplicate_check(cluster: Any, tmp_path: Path) -> None:
    inputs = write_dataset(tmp_path / "in", ids="blocks")  # each file its own range of ids
    phases: set[str] = set()
    config = _config(
        inputs, tmp_path / "dask", engine="dask", scheduler=cluster.scheduler_address,
        cluster_tuning=SMALL,
    )  # fmt: skip
    prepare_dataset(config, progress=lambda phase, *_: phases.add(phase))
    assert "pools" in phases and "check ids" not in phases
    prepare_dataset(_config(inputs, tmp_path / "local"))
    assert_same_output(tmp_path / "local", tmp_path / "dask")


# ---- the same errors ---------------------------------------------------------------------------


def _rewrite(path: Path, column: str, change) -> None:
    table = pq.read_table(path)
    values = change(table.column(column).to_pylist())
    index = table.schema.get_field_index(column)
    field = table.schema.field(index)
    pq.write_table(table.set_column(index, field, pa.array(values, field.type)), path)


def _files(inputs: Path) -> list[Path]:
    """The inputs in their order: part-00, part-01 (empty), part-03, part-04, sub/part-02."""
    return sorted(inputs.rglob("*.parquet"), key=lambda p: p.as_posix())


def _set(positions: dict[int, Any]):
    def change(values: list[Any]) -> list[Any]:
        for position, value in positions.items():
            values[position] = value
        return values

    return change


def _bad_lengths(inputs: Path) -> dict[str, Any]:
    files = _files(inputs)
    _rewrite(files[2], "n", _set({5: 0, 9: -3}))
    _rewrite(files[4], "n", _set({2: None}))  # sub/part-02, last in the inputs' order
    return {}


def _null_ids(inputs: Path) -> dict[str, Any]:
    files = _files(inputs)
    _rewrite(files[4], "doc_id", _set({3: None, 4: None}))
    _rewrite(files[2], "doc_id", _set({7: None}))
    return {}


def _duplicate_ids(inputs: Path) -> dict[str, Any]:
    files = _files(inputs)
    first = pq.read_table(files[0]).column("doc_id").to_pylist()
    _rewrite(files[2], "doc_id", _set({0: first[10], 1: first[11], 2: first[11]}))
    _rewrite(files[4], "doc_id", _set({5: first[10]}))
    return {}


def _duplicates_in_a_block(inputs: Path) -> dict[str, Any]:
    files = _files(inputs)  # ids in dense blocks: the id map, which keeps one copy of each
    ids = pq.read_table(files[2]).column("doc_id").to_pylist()
    _rewrite(files[2], "doc_id", _set({0: ids[1]}))
    return {}


def _schema_mismatch(inputs: Path) -> dict[str, Any]:
    path = _files(inputs)[2]
    table = pq.read_table(path)
    pq.write_table(table.set_column(1, "doc_id", table.column("doc_id").cast(pa.float64())), path)
    return {}


def _not_parquet(inputs: Path) -> dict[str, Any]:
    _files(inputs)[4].write_bytes(b"not parquet at all")
    return {}


def _over_cap(inputs: Path) -> dict[str, Any]:
    return {"max_seq_len": 50}


def _ids_past_int64(inputs: Path) -> dict[str, Any]:
    for path in _files(inputs):
        table = pq.read_table(path)
        ids = table.column("doc_id").cast(pa.uint64())
        if path == _files(inputs)[2]:
            ids = pa.array([2**63 + 5, *ids.to_pylist()[1:]], pa.uint64())
        pq.write_table(table.set_column(1, "doc_id", ids), path)
    return {}


FAULTS = {
    "bad lengths": ("sparse", _bad_lengths),
    "NULL ids": ("sparse", _null_ids),
    "duplicate ids across files": ("sparse", _duplicate_ids),
    "duplicate ids in one file": ("blocks", _duplicates_in_a_block),
    "schema mismatch": ("sparse", _schema_mismatch),
    "not parquet": ("sparse", _not_parquet),
    "over the cap": ("sparse", _over_cap),
    "ids past int64": ("sparse", _ids_past_int64),
}


POOL_FAULTS = ["NULL ids", "duplicate ids across files", "duplicate ids in one file"]


@pytest.mark.parametrize(
    "fault, tuning",
    [(fault, SMALL) for fault in FAULTS] + [(fault, ON_DISK) for fault in POOL_FAULTS],
    ids=[*FAULTS, *(f"{fault}, on disk" for fault in POOL_FAULTS)],
)
def test_bad_inputs_give_the_local_engines_message(
    cluster: Any, tmp_path: Path, fault: str, tuning: ClusterTuning
) -> None:
    ids, spoil = FAULTS[fault]
    inputs = write_dataset(tmp_path / "in", ids=ids)
    options = spoil(inputs)
    with pytest.raises(SeqpackError) as local:
        prepare_dataset(_config(inputs, tmp_path / "local", **options))
    dask_options = {"engine": "dask", "scheduler": cluster.scheduler_address}
    with pytest.raises(SeqpackError) as dask:
        prepare_dataset(_config(inputs, tmp_path / "dask", cluster_tuning=tuning, **dask_options,
                                **options))  # fmt: skip
    assert type(dask.value) is type(local.value)
    assert str(dask.value) == str(local.value)
    assert "\n" not in str(dask.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # nothing written, nothing left


def test_the_cli_says_the_same_in_one_line(cluster: Any, tmp_path: Path) -> None:
    inputs = write_dataset(tmp_path / "in")
    _duplicate_ids(inputs)
    base = [str(inputs), "--length-column", "n", "--id-column", "doc_id", "--max-seq-len", "512"]
    runner = CliRunner()
    local = runner.invoke(app, ["prepare", *base, "-o", str(tmp_path / "a")])
    dask = runner.invoke(
        app,
        ["prepare", *base, "-o", str(tmp_path / "b"), "--engine", "dask", "--scheduler",
         cluster.scheduler_address],
    )  # fmt: skip
    assert local.exit_code == dask.exit_code == 1
    assert dask.stderr == local.stderr and dask.stderr.count("\n") == 1
    assert "duplicated ids" in dask.stderr and "Traceback" not in dask.stderr


# ---- the cluster -------------------------------------------------------------------------------


def test_a_worker_that_cannot_see_an_input_or_the_output_says_so(
    cluster: Any, tmp_path: Path
) -> None:
    config = _config(tmp_path, tmp_path / "out", engine="dask", scheduler=cluster.scheduler_address)
    with ClusterEngine(config) as engine, pytest.raises(InputError) as error:
        engine.inspect([tmp_path / "elsewhere.parquet"])
    message = str(error.value)
    assert message.startswith(f"input file {tmp_path / 'elsewhere.parquet'} is not visible on ")
    assert "Dask worker tcp://127.0.0.1:" in message
    assert "a filesystem every worker sees at the same path" in message
    with distributed.Client(cluster) as client:
        future = client.submit(check_visible, [], [tmp_path / "gone"], pure=False)
        with pytest.raises(ConfigError, match=r"output's temporary directory .* is not visible"):
            future.result()


def test_an_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = _config(
        write_dataset(tmp_path / "in", rows=50), tmp_path / "out", engine="dask",
        scheduler=f"tcp://127.0.0.1:{port}", cluster_tuning=ClusterTuning(connect_timeout_s=1),
    )  # fmt: skip
    with pytest.raises(
        ConfigError, match=f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"
    ):
        prepare_dataset(config)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_workers_start_a_local_cluster_and_json_names_the_engine(tmp_path: Path) -> None:
    inputs = write_dataset(tmp_path / "in", ids="rows", rows=400)
    base = [str(inputs), "--length-column", "n", "--max-seq-len", "512", "--json"]
    runner = CliRunner()
    local = runner.invoke(app, ["prepare", *base, "-o", str(tmp_path / "a")])
    dask = runner.invoke(
        app, ["prepare", *base, "-o", str(tmp_path / "b"), "--engine", "dask", "--workers", "2"]
    )
    assert local.exit_code == dask.exit_code == 0, dask.stderr
    summary = json.loads(dask.stdout)
    assert summary["engine"]["name"] == "dask" and summary["engine"]["workers"] == 2
    expected = {
        k: v
        for k, v in json.loads(local.stdout).items()
        if k not in ("output", "seconds", "engine")
    }
    assert {k: v for k, v in summary.items() if k in expected} == expected
    assert_same_output(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scheduler", "tcp://h:1"], "error: --scheduler is set, which only --engine dask uses"),
        (["--engine", "dask"], "error: --engine dask needs one of --scheduler"),
        (["--engine", "dask", "--workers", "1", "--over-cap", "split"],
         "error: --over-cap split cuts the tokens of longer sequences into pieces, so it needs "
         "the token store"),
    ],
)  # fmt: skip
def test_bad_engine_options_on_the_command_line(tmp_path: Path, args, message) -> None:
    inputs = write_dataset(tmp_path / "in", rows=50)
    result = CliRunner().invoke(
        app, ["prepare", str(inputs), "--length-column", "n", "--max-seq-len", "8", "-o",
              str(tmp_path / "out"), *args],
    )  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()
