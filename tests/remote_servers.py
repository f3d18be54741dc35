"""Servers the remote-input tests read from, all on 127.0.0.1 and started by the tests themselves.

- `moto_server()`: moto's standalone S3 server (`python -m moto.server`) as a subprocess on a
  free port; waits until it answers, yields its endpoint, stops it. `auth=True` starts one that
  checks credentials (moto's INITIAL_NO_AUTH_ACTION_COUNT=0): every key is unknown to it, so
  each request is refused as S3 refuses a bad key.
- `aws_credentials()`: the dummy AWS credentials and settings moto takes, set in os.environ for
  the block (session fixtures cannot use monkeypatch), then restored.
- `s3_client`, `put_object`, `put_parquet`: buckets and objects made through the S3 API (boto3,
  which moto brings), not through the code under test.
- `ByteCountingProxy`: a TCP relay in front of a server that counts the bytes it passes back,
  so a test or benchmark sees how much of an object pyarrow fetched.
- `serve_folder(path)`: an HTTP server for a folder with single-range requests (`Range:
  bytes=a-b`, `a-`, `-n`; python's http.server has none), an ETag and a count of body bytes sent.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No lookups of an EC2 instance's metadata service from the test machine.
    "AWS_EC2_METADATA_DISABLED": "true",
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def closed_port() -> int:
    """A port with no server: connecting to it is refused at once."""
    return free_port()


@contextlib.contextmanager
def aws_credentials(**extra: str) -> Iterator[None]:
    """Set `CREDENTIALS` (and `extra`) in os.environ for the block; restore the old values."""
    values = {**CREDENTIALS, **extra}
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def moto_server(*, auth: bool = False, timeout_s: float = 300.0) -> Iterator[str]:
    """Run moto's S3 server on a free port; yield its endpoint `http://127.0.0.1:PORT`.

    Args:
        auth: check credentials (every request then fails as with an unknown access key).
        timeout_s: how long to wait for the server to answer before failing.
    """
    port = free_port()
    env = {**os.environ, **CREDENTIALS}
    if auth:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    # The server logs a line per request on stderr: into a file, never an unread pipe (a full
    # pipe stops the server after ~700 requests).
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        endpoint = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(endpoint, process, log, timeout_s)
            yield endpoint
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_up(
    endpoint: str, process: subprocess.Popen[bytes], log: IO[bytes], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            error = log.read().decode(errors="replace")
            raise RuntimeError(f"moto server exited with {process.returncode}: {error[-2000:]}")
        try:
            # moto's own API answers whatever the auth mode.
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto server at {endpoint} did not answer within {timeout_s} s")


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client on `endpoint` with the dummy credentials."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def put_object(endpoint: str, bucket: str, key: str, body: bytes) -> str:
    """Write an object (creating the bucket if needed); return its ETag."""
    client = s3_client(endpoint)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    return str(client.put_object(Bucket=bucket, Key=key, Body=body)["ETag"])


def parquet_bytes(table: pa.Table, **write_options: Any) -> bytes:
    """`table` as the bytes of a parquet file."""
    sink = io.BytesIO()
    pq.write_table(table, sink, **write_options)
    return sink.getvalue()


def put_parquet(endpoint: str, bucket: str, key: str, table: pa.Table, **write_options: Any) -> str:
    """Write `table` as a parquet object; return its ETag."""
    return put_object(endpoint, bucket, key, parquet_bytes(table, **write_options))


class ByteCountingProxy:
    """A TCP relay from a free local port to `target_port`, counting the bytes sent back.

    Use its `endpoint` instead of the server's; `bytes_down` is what clients received (headers
    included), `reset()` zeroes it.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.bytes_down = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.bytes_down = 0

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def __enter__(self) -> ByteCountingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while chunk := source.recv(1 << 16):
                sink.sendall(chunk)
                if count:
                    with self._lock:
                        self.bytes_down += len(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class RangeRequestHandler(http.server.SimpleHTTPRequestHandler):
    """`SimpleHTTPRequestHandler` plus single-range GETs, `Accept-Ranges`, an ETag, a byte count."""

    server: RangeServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no stderr per request
        return

    def end_headers(self) -> None:
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def send_head(self) -> Any:
        path = Path(self.translate_path(self.path))
        self.server.count_request()
        if not path.is_file():
            return super().send_head()
        stat = path.stat()
        size = stat.st_size
        etag = f'"{stat.st_mtime_ns:x}-{size:x}"'
        start, end = 0, size - 1
        header = self.headers.get("Range")
        if header:
            match = _RANGE.match(header.strip())
            if match is None or match.groups() == ("", ""):
                self.send_error(416, "only one range bytes=a-b is served")
                return None
            first, last = match.groups()
            if first == "":
                start = max(0, size - int(last))
            else:
                start, end = int(first), min(int(last), size - 1) if last else size - 1
            if start >= size or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.end_headers()
                return None
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", self.date_time_string(int(stat.st_mtime)))
        self.end_headers()
        handle = path.open("rb")
        handle.seek(start)
        return _Slice(handle, end - start + 1, self.server)


class _Slice(io.RawIOBase):
    """The bytes [start, start+length) of an open file, counted into the server as they are sent."""

    def __init__(self, handle: io.BufferedReader, length: int, server: RangeServer) -> None:
        self.handle, self.left, self.server = handle, length, server

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.handle.read(size)
        self.left -= len(data)
        self.server.count(len(data))
        return data

    def close(self) -> None:
        self.handle.close()
        super().close()


class RangeServer(http.server.ThreadingHTTPServer):
    """The HTTP server of `serve_folder`: `bytes_served` counts body bytes sent, `requests` GETs."""

    daemon_threads = True

    def __init__(self, folder: Path) -> None:
        self.bytes_served = 0
        self.requests = 0
        self._lock = threading.Lock()

        def handler(*args: Any) -> RangeRequestHandler:
            return RangeRequestHandler(*args, directory=str(folder))

        super().__init__(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, num_bytes: int) -> None:
        with self._lock:
            self.bytes_served += num_bytes

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that closes a connection early (a reader that stops after what it needs)
        # is not an error of the server; anything else is still printed.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    def count_request(self) -> None:
        with self._lock:
            self.requests += 1

    def reset(self) -> None:
        with self._lock:
            self.bytes_served = 0
            self.requests = 0


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[RangeServer]:
    """Serve `folder` over HTTP on 127.0.0.1 (a free port) for the block; root at `server.url`."""
    server = RangeServer(folder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
