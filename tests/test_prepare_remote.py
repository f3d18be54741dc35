"""`seqpack prepare s3://...` and `http(s)://...` end to end, against servers the tests start:
moto's S3 server and a local HTTP server with range requests (`remote_servers`).

The outputs are byte-identical to the same files prepared from a local disk (pools, counts,
templates, the token store), on both engines; the manifest lists each object's URL, size and
version; `load_prepared(verify=True)` notices an object rewritten since; every failure is one
line, exit 1, and nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_failed_cleanly
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli import load_prepared
from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset, remote_inputs
from seqpack_cli.prepare.input_batches import input_kind

remote_servers = pytest.importorskip("remote_servers")
pytest.importorskip("moto")
pytest.importorskip("boto3")

BUCKET = "data"


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 90, size=rows)
    return pa.table(
        {
            "n": pa.array(lengths, pa.int32()),
            "doc": pa.array(rng.permutation(rows) * 5 + 10_000 * seed, pa.int64()),
            "input_ids": [rng.integers(0, 30_000, size=n).tolist() for n in lengths],
            "text": [" ".join(["packing"] * int(n % 7 + 1)) for n in lengths],
            "unused": pa.array(["x" * 40] * rows),
        }
    )


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The moto server's endpoint, with three parquet objects under s3://data/train/ and a JSON
    Lines object under s3://data/text/; the same files in a local folder."""
    local = tmp_path_factory.mktemp("local")
    with remote_servers.moto_server() as endpoint, remote_servers.aws_credentials():
        for i in range(3):
            table = _table(400, seed=i)
            pq.write_table(table, local / f"part-{i}.parquet", row_group_size=150)
            body = (local / f"part-{i}.parquet").read_bytes()
            remote_servers.put_object(endpoint, BUCKET, f"train/part-{i}.parquet", body)
        rows = _table(50, seed=9).select(["text"]).to_pylist()
        text = "".join(json.dumps(row) + "\n" for row in rows).encode()
        (local.parent / f"{local.name}-text").mkdir()
        (local.parent / f"{local.name}-text" / "rows.jsonl").write_bytes(text)
        remote_servers.put_object(endpoint, BUCKET, "text/rows.jsonl", text)
        yield endpoint, local


def _tree(output: Path) -> dict[str, bytes]:
    names = sorted(
        p.relative_to(output).as_posix()
        for p in output.rglob("*")
        if p.is_file() and p.name not in ("manifest.json", "token_source.json")
    )
    return {name: (output / name).read_bytes() for name in names}


@pytest.mark.parametrize(
    "options",
    [
        {"over_cap": "drop"},
        {"id_column": "doc", "over_cap": "drop"},
        {"id_column": "doc", "tokens_column": "input_ids", "over_cap": "truncate"},
    ],
    ids=["rows", "ids", "store"],
)
def test_s3_gives_the_bytes_of_the_local_files(
    s3: tuple[str, Path], tmp_path: Path, options: dict[str, Any]
) -> None:
    endpoint, local = s3
    base = {"length_column": "n", "max_seq_len": 64, **options}
    prepare_dataset(PrepareConfig(inputs=[local], output=tmp_path / "a", **base))
    remote = prepare_dataset(
        PrepareConfig(
            inputs=[f"s3://{BUCKET}/train/"],
            output=tmp_path / "b",
            storage_options={"endpoint_url": endpoint},
            **base,
        )
    )
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    listed = remote.manifest["inputs"]["files"]
    assert [entry["path"] for entry in listed] == [
        f"s3://{BUCKET}/train/part-{i}.parquet" for i in range(3)
    ]
    assert [entry["bytes"] for entry in listed] == [
        (local / f"part-{i}.parquet").stat().st_size for i in range(3)
    ]
    assert all(entry["version"] for entry in listed)
    assert remote.manifest["summary"] == load_prepared(tmp_path / "a").manifest["summary"]
    load_prepared(tmp_path / "b", verify=True, storage_options={"endpoint_url": endpoint})


def test_the_cli_with_a_glob_and_storage_options(s3: tuple[str, Path], tmp_path: Path) -> None:
    endpoint, local = s3
    args = ["--length-column", "n", "--max-seq-len", "64", "--over-cap", "drop", "-q"]
    url = f"s3://{BUCKET}/train/part-[01].parquet"
    result = CliRunner().invoke(app, ["prepare", url, "-o", str(tmp_path / "b"), *args,
                                      "--storage-option", f"endpoint_url={endpoint}"])  # fmt: skip
    assert result.exit_code == 0, result.output
    prepare_dataset(PrepareConfig([local / "part-0.parquet", local / "part-1.parquet"], "n", 64,
                                  tmp_path / "a", over_cap="drop"))  # fmt: skip
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_a_remote_json_lines_object_through_a_tokenizer(
    s3: tuple[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("tokenizers")
    from tokenizer_fixtures import build_bpe_tokenizer

    from seqpack_cli.prepare.tokenize_options import TokenizeOptions

    endpoint, local = s3
    tokenize = TokenizeOptions(build_bpe_tokenizer(tmp_path / "tok"), text_column="text")
    base: dict[str, Any] = {"max_seq_len": 64, "tokenize": tokenize}
    text = local.parent / f"{local.name}-text"
    prepare_dataset(PrepareConfig([text], None, output=tmp_path / "a", **base))  # type: ignore[arg-type]
    prepare_dataset(PrepareConfig([f"s3://{BUCKET}/text/"], None, output=tmp_path / "b",  # type: ignore[arg-type]
                                  storage_options={"endpoint_url": endpoint}, **base))  # fmt: skip
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_http_with_range_requests(s3: tuple[str, Path], tmp_path: Path) -> None:
    _, local = s3
    with remote_servers.serve_folder(local) as server:
        url = f"{server.url}/part-1.parquet"
        prepare_dataset(PrepareConfig([url], "n", 64, tmp_path / "b", over_cap="drop"))
        served = server.bytes_served
    prepare_dataset(PrepareConfig([local / "part-1.parquet"], "n", 64, tmp_path / "a",
                                  over_cap="drop"))  # fmt: skip
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert served > 0  # read over HTTP (fsspec reads in blocks: a small file comes whole)


@pytest.mark.slow
def test_the_dask_engine_on_s3(s3: tuple[str, Path], dask_cluster: Any, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    endpoint, local = s3
    base = {"length_column": "n", "max_seq_len": 64, "id_column": "doc", "over_cap": "truncate",
            "tokens_column": "input_ids"}  # fmt: skip
    prepare_dataset(PrepareConfig(inputs=[local], output=tmp_path / "a", **base))
    # The workers of the session's cluster may have started before the credentials were set
    # here, as a cluster's workers hold their own environment: the options carry them.
    options = {"endpoint_url": endpoint, "access_key_id": "testing",
               "secret_access_key": "testing"}  # fmt: skip
    prepare_dataset(PrepareConfig(inputs=[f"s3://{BUCKET}/train/"], output=tmp_path / "b",
                                  engine="dask", scheduler=dask_cluster.scheduler_address,
                                  storage_options=options, **base))  # fmt: skip
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_verify_notices_an_object_rewritten_since(s3: tuple[str, Path], tmp_path: Path) -> None:
    endpoint, local = s3
    key = "changing/part.parquet"
    remote_servers.put_object(endpoint, BUCKET, key, (local / "part-0.parquet").read_bytes())
    options = {"endpoint_url": endpoint}
    prepare_dataset(PrepareConfig([f"s3://{BUCKET}/{key}"], "n", 64, tmp_path / "b",
                                  over_cap="drop", storage_options=options))  # fmt: skip
    load_prepared(tmp_path / "b", verify=True, storage_options=options)
    remote_servers.put_object(endpoint, BUCKET, key, (local / "part-1.parquet").read_bytes())
    load_prepared(tmp_path / "b")  # the directory itself is whole
    with pytest.raises(InputError, match=f"made from s3://{BUCKET}/{key}, which changed"):
        load_prepared(tmp_path / "b", verify=True, storage_options=options)


# ---- bad input: one line, exit 1, nothing written -------------------------------------------


def _fails(args: list[str], output: Path, *fragments: str) -> None:
    result = CliRunner().invoke(app, ["prepare", *args, "-o", str(output), "--length-column",
                                      "n", "--max-seq-len", "64"])  # fmt: skip
    assert_failed_cleanly(result, output, *fragments)


def test_remote_failures_are_one_line(s3: tuple[str, Path], tmp_path: Path) -> None:
    endpoint, _ = s3
    option = ["--storage-option", f"endpoint_url={endpoint}"]
    _fails(["s3://nobucket/x/", *option], tmp_path / "o", "no such bucket")
    _fails([f"s3://{BUCKET}/none/", *option], tmp_path / "o", f"s3://{BUCKET}/none/")
    _fails([f"s3://{BUCKET}/train/part-*.csv", *option], tmp_path / "o", "part-*.csv")
    port = remote_servers.closed_port()
    _fails([f"s3://{BUCKET}/train/", "--storage-option", f"endpoint_url=http://127.0.0.1:{port}"],
           tmp_path / "o", f"127.0.0.1:{port}")  # fmt: skip
    _fails([f"s3://{BUCKET}/train/", *option, "--id-column", "missing"], tmp_path / "o",
           "'missing'")  # fmt: skip


def test_access_denied_names_the_credentials(tmp_path: Path) -> None:
    with (
        remote_servers.moto_server(auth=True) as endpoint,
        remote_servers.aws_credentials(AWS_ACCESS_KEY_ID="nobody", AWS_SECRET_ACCESS_KEY="wrong"),
    ):
        _fails([f"s3://{BUCKET}/train/", "--storage-option", f"endpoint_url={endpoint}"],
               tmp_path / "o", "AWS_ACCESS_KEY_ID")  # fmt: skip


def test_an_object_that_changes_while_read_stops_the_job(
    s3: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import seqpack_cli.remote

    endpoint, _ = s3
    monkeypatch.setattr(seqpack_cli.remote, "changed", lambda *_: "ETag 'a', now 'b'")
    with pytest.raises(InputError, match="changed while prepare read it"):
        options = {"endpoint_url": endpoint}
        prepare_dataset(PrepareConfig([f"s3://{BUCKET}/train/"], "n", 64, tmp_path / "o",
                                      over_cap="drop", storage_options=options))  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_remote_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mixes remote URLs and local paths"):
        PrepareConfig([tmp_path, "s3://b/k.parquet"], "n", 8, tmp_path / "o")
    with pytest.raises(ConfigError, match="written to a local or shared filesystem"):
        PrepareConfig(["s3://b/k.parquet"], "n", 8, "s3://b/out")
    with pytest.raises(ConfigError, match="no input is a remote URL"):
        PrepareConfig([tmp_path], "n", 8, tmp_path / "o", storage_options={"region": "x"})
    with pytest.raises(ConfigError, match="storage"):
        PrepareConfig(["s3://b/k.parquet"], "n", 8, tmp_path / "o", storage_options=["region"])  # type: ignore[arg-type]


@given(
    stem=st.text("ab.-_", min_size=1, max_size=6),
    ending=st.sampled_from([".parquet", ".parq", ".pq", ".jsonl", ".jsonl.gz", ".json"]),
    upper=st.lists(st.booleans(), min_size=9, max_size=9),
)
def test_a_copy_is_read_as_the_kind_of_its_object(
    stem: str, ending: str, upper: list[bool]
) -> None:
    # The job reads each copy by its name (`input_kind`): the copy's ending must give the kind
    # the object's URL gives, in any case, and keep gzip.
    ending = "".join(c.upper() if up else c for c, up in zip(ending, upper, strict=False))
    url = f"s3://bucket/dir/{stem}{ending}"
    copy = f"00000{remote_inputs._suffix(url)}"
    assert input_kind(copy) == input_kind(url)
    assert copy.endswith(".gz") == url.lower().endswith(".gz")
