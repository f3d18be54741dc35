"""The remote layer against a local HTTP server with range requests (`serve_folder`).

The server itself first (a range is the bytes asked for, a bad range is 416), then https-style
inputs: a file's size and ETag, parquet columns read through range requests equal to reading
the file locally while fetching a fraction of it, a rewritten file noticed, a missing file and
an HTTP prefix or glob as one line.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from remote_servers import RangeServer, closed_port, serve_folder

from seqpack_cli.errors import InputError
from seqpack_cli.remote import (
    arrow_filesystem,
    changed,
    identity,
    open_input,
    open_stream,
    resolve_remote,
)

pytest.importorskip("aiohttp")

BODY = bytes(range(256)) * 40  # 10,240 bytes, each offset's value known


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    (root / "bytes.bin").write_bytes(BODY)
    rng = np.random.default_rng(3)
    table = pa.table({f"c{index:02d}": rng.integers(0, 1 << 40, 100_000) for index in range(20)})
    pq.write_table(table, root / "wide.parquet", compression="none")
    (root / "lines.jsonl").write_bytes(b'{"length": 4}\n{"length": 9}\n')
    return root


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[RangeServer]:
    with serve_folder(folder) as running:
        yield running


def _get(url: str, range_header: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers={"Range": range_header} if range_header else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, b"", dict(error.headers)


@settings(max_examples=60, deadline=None)
@given(start=st.integers(0, len(BODY) + 10), length=st.integers(1, 3000))
def test_the_server_serves_exactly_the_range_asked_for(
    server: RangeServer, start: int, length: int
) -> None:
    end = start + length - 1
    status, body, headers = _get(f"{server.url}/bytes.bin", f"bytes={start}-{end}")
    if start >= len(BODY):
        assert status == 416
        return
    assert status == 206
    assert body == BODY[start : end + 1]
    assert headers["Content-Range"] == f"bytes {start}-{min(end, len(BODY) - 1)}/{len(BODY)}"


def test_the_server_counts_what_it_sends_and_takes_suffix_and_open_ranges(
    server: RangeServer,
) -> None:
    server.reset()
    assert _get(f"{server.url}/bytes.bin", "bytes=-100")[1] == BODY[-100:]
    assert _get(f"{server.url}/bytes.bin", "bytes=10200-")[1] == BODY[10200:]
    status, body, headers = _get(f"{server.url}/bytes.bin")
    assert (status, body, headers["Accept-Ranges"]) == (200, BODY, "bytes")
    assert server.bytes_served == 100 + 40 + len(BODY)
    assert server.requests == 3
    assert _get(f"{server.url}/bytes.bin", "bytes=1-2,5-6")[0] == 416  # one range only


def test_an_http_file_has_its_size_and_etag(server: RangeServer, folder: Path) -> None:
    url = f"{server.url}/lines.jsonl"
    (file,) = resolve_remote([url])
    stat = (folder / "lines.jsonl").stat()
    assert identity(file) == {
        "url": url,
        "bytes": stat.st_size,
        "version": f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"',
    }
    with open_input(file) as handle:
        assert handle.read() == (folder / "lines.jsonl").read_bytes()


def test_parquet_columns_over_http_equal_local_and_fetch_a_fraction(
    server: RangeServer, folder: Path
) -> None:
    local = pq.read_table(folder / "wide.parquet", columns=["c02", "c19"])
    size = (folder / "wide.parquet").stat().st_size
    url = f"{server.url}/wide.parquet"
    server.reset()
    with open_input(url) as handle:
        assert pq.ParquetFile(handle).read(columns=["c02", "c19"]).equals(local)
    through_file = server.bytes_served
    server.reset()
    filesystem, path = arrow_filesystem(url)
    assert path == url
    assert pq.read_table(path, filesystem=filesystem, columns=["c02", "c19"]).equals(local)
    through_filesystem = server.bytes_served
    # Two of twenty equal columns are a tenth of the file; the reader's read-ahead adds a little.
    assert 0.09 * size < through_file < 0.3 * size, (through_file, size)
    assert 0.09 * size < through_filesystem < 0.3 * size, (through_filesystem, size)


def test_changed_notices_a_rewritten_http_file(server: RangeServer, folder: Path) -> None:
    path = folder / "moving.jsonl"
    path.write_bytes(b'{"length": 1}\n')
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    (file,) = resolve_remote([f"{server.url}/moving.jsonl"])
    record = identity(file)
    assert changed(record) is None
    path.write_bytes(b'{"length": 2}\n')  # same size, new mtime: a new ETag
    reason = changed(record)
    assert reason is not None
    assert reason.startswith(f"{server.url}/moving.jsonl changed: version ")
    path.unlink()
    assert changed(record) == (
        f"{server.url}/moving.jsonl is gone (no such object now); it was 14 bytes"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing.parquet", "{url}: no such object or prefix"),
        ("*.parquet", "{url}: HTTP has no listing, so a glob cannot match; name each file"),
        ("", "{url}: HTTP has no listing; name each file"),
        ("bytes.bin", "{url} is neither parquet nor JSON Lines by its extension"),
    ],
)
def test_http_inputs_that_cannot_be_read_are_one_line(
    server: RangeServer, name: str, expected: str
) -> None:
    url = f"{server.url}/{name}"
    with pytest.raises(InputError) as caught:
        resolve_remote([url])
    assert str(caught.value).startswith(expected.format(url=url)), str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_unreachable_http_host_is_one_line_with_its_timeout() -> None:
    url = f"http://127.0.0.1:{closed_port()}/f.parquet"
    with pytest.raises(InputError) as caught:
        resolve_remote([url], {"connect_timeout": "2"})
    assert str(caught.value).startswith(
        f"{url}: cannot reach the http service (connect timeout 2 s, 1 attempt)"
    ), str(caught.value)


def test_a_stream_reads_front_to_back_in_few_requests(server: RangeServer, folder: Path) -> None:
    import gzip
    import io

    lines = b"".join(b'{"length": %d}\n' % (index % 900 + 1) for index in range(200_000))
    (folder / "many.jsonl.gz").write_bytes(gzip.compress(lines))
    url = f"{server.url}/many.jsonl.gz"
    size = (folder / "many.jsonl.gz").stat().st_size
    server.reset()
    with open_stream(url, buffer_bytes=256 << 10) as raw:
        # gzip asks for 8 KiB at a time: unbuffered, that would be a request per read.
        read = gzip.GzipFile(fileobj=io.BufferedReader(raw)).read()
    assert read == lines
    # One HEAD, then ceil(size / 256 KiB) range GETs (and one at the end that finds nothing).
    assert server.requests <= 2 + -(-size // (256 << 10)), (server.requests, size)
    assert server.bytes_served == size


def test_files_and_filesystems_pickle_for_workers(server: RangeServer, folder: Path) -> None:
    import pickle

    # Dask workers get the files (and may get a filesystem) pickled: both must come back whole.
    (file,) = resolve_remote([f"{server.url}/lines.jsonl"])
    assert pickle.loads(pickle.dumps(file)) == file
    filesystem, path = arrow_filesystem(file.url)
    copy = pickle.loads(pickle.dumps(filesystem))
    with copy.open_input_file(path) as handle:
        assert handle.read() == (folder / "lines.jsonl").read_bytes()
