"""The remote layer against a real S3 API: moto's standalone server, started by the tests.

Listing (objects, prefixes searched like directories, globs), reading parquet columns through
`open_input` and `arrow_filesystem` (equal to reading the same bytes locally, and fetching only
a fraction of the object for 2 of 20 columns), a rewritten or deleted object noticed by
`changed`, and every failure as one line: no such bucket, no such object, access denied naming
the credential source, an unreachable endpoint naming its timeout, a listing matching nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from remote_servers import (
    ByteCountingProxy,
    aws_credentials,
    closed_port,
    moto_server,
    parquet_bytes,
    put_object,
    put_parquet,
    s3_client,
)

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.remote import (
    RemoteFile,
    arrow_filesystem,
    changed,
    identity,
    open_input,
    open_stream,
    parse_storage_options,
    resolve_remote,
)

BUCKET = "corpus"

# The objects every listing test sees: parquet of three spellings, JSON Lines, and files a
# search leaves out (metadata .json, a README, a marker without extension).
LAYOUT = {
    "data/a.parquet": b"",
    "data/b.PQ": b"",
    "data/sub/c.parq": b"",
    "data/sub/deeper/d.parquet": b"",
    "data/e.jsonl": b'{"length": 3}\n',
    "data/f.jsonl.gz": b"",
    "data/dataset_info.json": b"{}",
    "data/README.md": b"# not data",
    "data/_SUCCESS": b"",
    "other/x.parquet": b"",
    "dataset.parquet": b"",
}

# What a search under data/ takes: parquet by any of its extensions (any case) and
# .jsonl/.jsonl.gz, sorted by URL; the .json metadata, the README and the marker are left out.
DATA_SEARCHED = [
    "data/a.parquet",
    "data/b.PQ",
    "data/e.jsonl",
    "data/f.jsonl.gz",
    "data/sub/c.parq",
    "data/sub/deeper/d.parquet",
]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with aws_credentials(), moto_server() as url:
        table = pa.table({"length": [1, 2, 3]})
        for key, body in LAYOUT.items():
            if body:
                put_object(url, BUCKET, key, body)
            else:
                put_parquet(url, BUCKET, key, table)
        yield url


@pytest.fixture
def options(endpoint: str) -> dict[str, str]:
    return parse_storage_options([f"endpoint_url={endpoint}"])


def _keys(files: list[RemoteFile]) -> list[str]:
    return [file.url.removeprefix(f"s3://{BUCKET}/") for file in files]


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        # A prefix is searched recursively, like a local directory.
        (["s3://corpus/data/"], DATA_SEARCHED),
        # The same key without the slash: no object has it, so it is a prefix.
        (["s3://corpus/data/sub"], ["data/sub/c.parq", "data/sub/deeper/d.parquet"]),
        # `*` stays in one segment, `**` spans several (zero included).
        (["s3://corpus/data/*.parquet"], ["data/a.parquet"]),
        (["s3://corpus/data/**/*.parquet"], ["data/a.parquet", "data/sub/deeper/d.parquet"]),
        (["s3://corpus/data/sub/*/d.parquet"], ["data/sub/deeper/d.parquet"]),
        (["s3://corpus/data/[ab].*"], ["data/a.parquet", "data/b.PQ"]),
        # A glob that spells .json takes .json files; a search does not.
        (["s3://corpus/data/*.json"], ["data/dataset_info.json"]),
        # A named object is taken; names reaching the same object give it once; sorted by URL.
        (
            ["s3://corpus/other/x.parquet", "s3://corpus/dataset.parquet", "s3://corpus/other/"],
            ["dataset.parquet", "other/x.parquet"],
        ),
        # The whole bucket.
        (
            ["s3://corpus"],
            [*DATA_SEARCHED, "dataset.parquet", "other/x.parquet"],
        ),
    ],
)
def test_resolve_remote_lists_files_prefixes_and_globs(
    options: dict[str, str], inputs: list[str], expected: list[str]
) -> None:
    files = resolve_remote(inputs, options)
    assert _keys(files) == expected
    assert [file.url for file in files] == sorted(file.url for file in files)


def test_each_file_carries_its_size_and_etag(endpoint: str, options: dict[str, str]) -> None:
    head = s3_client(endpoint).head_object(Bucket=BUCKET, Key="data/e.jsonl")
    (file,) = resolve_remote(["s3://corpus/data/e.jsonl"], options)
    assert file == RemoteFile("s3://corpus/data/e.jsonl", head["ContentLength"], head["ETag"])
    assert identity(file) == {
        "url": "s3://corpus/data/e.jsonl",
        "bytes": head["ContentLength"],
        "version": head["ETag"],
    }


def test_the_endpoint_comes_from_aws_endpoint_url(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The AWS SDK inside pyarrow does not read AWS_ENDPOINT_URL: the layer does.
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    assert _keys(resolve_remote(["s3://corpus/other/"], {})) == ["other/x.parquet"]


def _wide_table(num_rows: int, num_columns: int = 20) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {f"c{index:02d}": rng.integers(0, 1 << 40, num_rows) for index in range(num_columns)}
    )


def test_parquet_columns_read_remotely_equal_local_ones(
    endpoint: str, options: dict[str, str], tmp_path: Path
) -> None:
    table = _wide_table(5_000)
    body = parquet_bytes(table, row_group_size=2_000)
    put_object(endpoint, BUCKET, "wide/w.parquet", body)
    (tmp_path / "w.parquet").write_bytes(body)
    local = pq.read_table(tmp_path / "w.parquet", columns=["c03", "c17"])
    (file,) = resolve_remote(["s3://corpus/wide/w.parquet"], options)
    with open_input(file, options) as handle:
        assert pq.ParquetFile(handle).read(columns=["c03", "c17"]).equals(local)
    filesystem, path = arrow_filesystem(file.url, options)
    assert path == "corpus/wide/w.parquet"
    assert pq.read_table(path, filesystem=filesystem, columns=["c03", "c17"]).equals(local)


def test_two_of_twenty_columns_fetch_a_fraction_of_the_object(endpoint: str) -> None:
    # 20 int64 columns of 100,000 random values: ~16 MB; 2 columns are a tenth of it.
    body = parquet_bytes(_wide_table(100_000), compression="none")
    put_object(endpoint, BUCKET, "wide/big.parquet", body)
    port = int(endpoint.rsplit(":", 1)[1])
    with ByteCountingProxy(port) as proxy:
        options = parse_storage_options([f"endpoint_url={proxy.endpoint}"])
        filesystem, path = arrow_filesystem("s3://corpus/wide/big.parquet", options)
        proxy.reset()
        read = pq.read_table(path, filesystem=filesystem, columns=["c00", "c11"])
        fetched = proxy.bytes_down
    assert read.num_rows == 100_000
    assert fetched < 0.15 * len(body), (fetched, len(body))
    assert fetched > 0.09 * len(body)  # the two columns themselves came through the proxy


def test_changed_notices_a_rewritten_and_a_deleted_object(
    endpoint: str, options: dict[str, str]
) -> None:
    put_object(endpoint, BUCKET, "moving/m.jsonl", b'{"length": 1}\n')
    (file,) = resolve_remote(["s3://corpus/moving/m.jsonl"], options)
    record = identity(file)
    assert changed(record, options) is None
    # Same size, other bytes: only the ETag tells.
    put_object(endpoint, BUCKET, "moving/m.jsonl", b'{"length": 2}\n')
    reason = changed(record, options)
    assert reason is not None
    assert reason.startswith("s3://corpus/moving/m.jsonl changed: version ")
    assert "\n" not in reason
    s3_client(endpoint).delete_object(Bucket=BUCKET, Key="moving/m.jsonl")
    assert changed(record, options) == (
        f"s3://corpus/moving/m.jsonl is gone (no such object now); it was {file.size} bytes"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://no-such-bucket/data/", "s3://no-such-bucket/data/: no such bucket no-such-bucket"),
        ("s3://no-such-bucket/a.parquet", "s3://no-such-bucket/a.parquet: no such bucket"),
        ("s3://corpus/data/missing.parquet", "s3://corpus/data/missing.parquet: no such object"),
        ("s3://corpus/nothing/", "s3://corpus/nothing/: no such object or prefix"),
        ("s3://corpus/data/*.csv", "s3://corpus/data/*.csv matches no parquet or JSON Lines"),
        ("s3://corpus/data/README.md", "s3://corpus/data/README.md is neither parquet nor JSON"),
    ],
)
def test_missing_inputs_are_one_line(options: dict[str, str], url: str, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        resolve_remote([url], options)
    message = str(caught.value)
    assert message.startswith(expected), message
    assert "\n" not in message
    assert "Request ID" not in message  # the SDK's own words stay out


def test_open_input_of_a_missing_object_is_one_line(options: dict[str, str]) -> None:
    with pytest.raises(InputError, match=r"^s3://corpus/gone\.parquet: no such object"):
        open_input("s3://corpus/gone.parquet", options)


def test_access_denied_names_the_credential_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with aws_credentials(), moto_server(auth=True) as endpoint:
        options = parse_storage_options([f"endpoint_url={endpoint}"])
        with pytest.raises(InputError) as from_env:
            resolve_remote(["s3://corpus/data/"], options)
        assert str(from_env.value) == (
            "s3://corpus/data/: access denied with the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "environment variables; give credentials that may read it (environment variables, "
            "a profile, storage_option), or anonymous=true for public data"
        )
        assert "--storage-option" in from_env.value.cli_message()
        given = {**options, "access_key_id": "AKIDEXAMPLE", "secret_access_key": "x"}
        with pytest.raises(InputError, match="access denied with the access key given as"):
            resolve_remote(["s3://corpus/data/a.parquet"], given)
        # A profile in a credentials file: the SDK reads it (moto knows no key of it).
        credentials = tmp_path / "credentials"
        credentials.write_text(
            "[training]\naws_access_key_id = AKIDTRAINING\naws_secret_access_key = s\n"
        )
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        monkeypatch.setenv("AWS_PROFILE", "training")
        with pytest.raises(
            InputError,
            match="access denied with profile training "
            + re.escape(f"(AWS_PROFILE) in {credentials}"),
        ):
            changed({"url": "s3://corpus/a.parquet", "bytes": 1, "version": None}, options)


def test_an_unreachable_endpoint_is_one_line_with_its_timeout() -> None:
    port = closed_port()
    options = parse_storage_options([f"endpoint_url=http://127.0.0.1:{port}", "max_attempts=2"])
    started = time.monotonic()
    with aws_credentials(), pytest.raises(InputError) as caught:
        resolve_remote(["s3://corpus/data/"], options)
    assert time.monotonic() - started < 10  # a refused connection is not waited on for long
    assert str(caught.value) == (
        f"s3://corpus/data/: cannot reach http://127.0.0.1:{port} (connect timeout 5 s, 2 "
        "attempt(s)); check the network and the endpoint, or raise storage_option "
        "connect_timeout=SECONDS"
    )


def test_a_storage_option_of_another_scheme_is_refused(endpoint: str) -> None:
    with pytest.raises(ConfigError, match=r"storage_option token=x does not apply to s3://"):
        resolve_remote(["s3://corpus/data/"], {"endpoint_url": endpoint, "token": "x"})


def test_a_stream_reads_an_object_front_to_back(endpoint: str, options: dict[str, str]) -> None:
    import gzip
    import io

    lines = b"".join(b'{"length": %d}\n' % (index % 700 + 1) for index in range(50_000))
    put_object(endpoint, BUCKET, "stream/s.jsonl.gz", gzip.compress(lines))
    (file,) = resolve_remote(["s3://corpus/stream/"], options)
    with open_stream(file, options, buffer_bytes=64 << 10) as raw:
        assert gzip.GzipFile(fileobj=io.BufferedReader(raw)).read() == lines


def test_a_versioned_bucket_records_the_version_id(endpoint: str, options: dict[str, str]) -> None:
    client = s3_client(endpoint)
    client.create_bucket(Bucket="versioned")
    client.put_bucket_versioning(Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
    first = client.put_object(Bucket="versioned", Key="a.jsonl", Body=b'{"length": 1}\n')
    (file,) = resolve_remote(["s3://versioned/a.jsonl"], options)
    assert file.version == first["VersionId"]
    # The same bytes again: the ETag stays, the version does not, and the version tells.
    second = client.put_object(Bucket="versioned", Key="a.jsonl", Body=b'{"length": 1}\n')
    assert second["ETag"] == first["ETag"]
    assert changed(identity(file), options) == (
        f"s3://versioned/a.jsonl changed: version {first['VersionId']} recorded, "
        f"{second['VersionId']} now (14 -> 14 bytes)"
    )


@pytest.mark.slow
def test_a_prefix_of_more_objects_than_a_listing_page(
    endpoint: str, options: dict[str, str]
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    # S3 lists 1,000 keys a page: 1,100 objects take two pages, and 1,100 HEADs for the ETags.
    client = s3_client(endpoint)
    client.create_bucket(Bucket="paged")
    keys = [f"d/{index % 7}/{index:05d}.jsonl" for index in range(1_100)]
    with ThreadPoolExecutor(8) as pool:
        etags = list(
            pool.map(lambda key: client.put_object(Bucket="paged", Key=key, Body=b"{}\n"), keys)
        )
    files = resolve_remote(["s3://paged/d/"], options)
    assert [file.url for file in files] == sorted(f"s3://paged/{key}" for key in keys)
    by_url = {f"s3://paged/{key}": put["ETag"] for key, put in zip(keys, etags, strict=True)}
    assert all(file.version == by_url[file.url] and file.size == 3 for file in files)


def test_an_s3_filesystem_pickles_for_workers(options: dict[str, str]) -> None:
    import pickle

    filesystem, path = arrow_filesystem("s3://corpus/data/e.jsonl", options)
    with pickle.loads(pickle.dumps(filesystem)).open_input_file(path) as handle:
        assert handle.read() == LAYOUT["data/e.jsonl"]
