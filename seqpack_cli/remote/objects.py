"""One remote object: its identity (URL, size, ETag or version), reading it, and noticing change.

A prepared directory built from remote inputs records each object's `identity`; `changed`
compares that record with the object as it is now, so a re-run or `verify` notices data that
was rewritten or removed. The version recorded is the most specific the store gives: the S3
`VersionId` on a versioned bucket, else the ETag (S3, GCS, HTTP), else HTTP's Last-Modified;
on the hub, the file's git blob id (it changes with the content, whatever the branch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyarrow import fs as arrow_fs

from seqpack_cli.errors import InputError
from seqpack_cli.remote.faults import NOT_FOUND, classify, no_such_object, remote_error
from seqpack_cli.remote.filesystems import filesystem_for, path_in_filesystem
from seqpack_cli.remote.options import Settings, settings_for
from seqpack_cli.remote.urls import RemoteURL, parse_url

__all__ = [
    "STREAM_BUFFER_BYTES",
    "RemoteFile",
    "changed",
    "identity",
    "open_input",
    "open_stream",
    "stat_object",
]

_VERSION_KEYS = ("VersionId", "ETag", "etag", "generation", "Last-Modified", "blob_id")


@dataclass(frozen=True, order=True)
class RemoteFile:
    """A remote object to read: its canonical URL, its size in bytes and its version.

    `version` is the VersionId or ETag (s3), ETag (gs, http), Last-Modified (http without an
    ETag) or blob id (hf); None when the store gives none (then only the size tells a change).
    """

    url: str
    size: int
    version: str | None


def stat_object(parsed: RemoteURL, settings: Settings) -> RemoteFile | None:
    """The object at `parsed`, or None when there is none (nor is it a directory).

    Args:
        parsed: a URL naming one object.
        settings: its checked storage settings.

    Returns:
        The object's `RemoteFile`; None when no object has that key.

    Raises:
        InputError: any other failure (no such bucket, access denied, unreachable).
    """
    filesystem = filesystem_for(parsed, settings)
    path = path_in_filesystem(parsed)
    try:
        if isinstance(filesystem, arrow_fs.PyFileSystem):
            info = filesystem.handler.fs.info(path)
            if info.get("type") == "directory":
                return None
            return RemoteFile(parsed.url, int(info["size"]), _version(info))
        with filesystem.open_input_file(path) as handle:
            metadata = {key: value.decode() for key, value in handle.metadata().items()}
            return RemoteFile(parsed.url, handle.size(), _version(metadata))
    except Exception as error:  # the stores raise many classes: classify sorts them
        if classify(error) == NOT_FOUND:
            return None
        raise remote_error(parsed.url, error, settings) from None


def _version(info: Mapping[str, Any]) -> str | None:
    for key in _VERSION_KEYS:
        value = info.get(key)
        if value not in (None, "", "null"):
            return str(value)
    return None


def open_input(file: RemoteFile | str, options: Mapping[str, str] | None = None) -> pa.NativeFile:
    """A seekable binary file on a remote object: each read is a range request.

    `pyarrow.parquet.ParquetFile(open_input(file, options))` reads the footer and then only the
    column chunks asked for; JSON Lines readers read it front to back.

    Args:
        file: a `RemoteFile` from `resolve_remote`, or a URL.
        options: storage options from `parse_storage_options`.

    Returns:
        An open `pyarrow.NativeFile` (close it, or use it in a `with` block).

    Raises:
        InputError: no such object, access denied, endpoint unreachable.
    """
    url = file.url if isinstance(file, RemoteFile) else file
    parsed = parse_url(url)
    settings = settings_for(parsed.scheme, options or {})
    filesystem = filesystem_for(parsed, settings)
    try:
        return filesystem.open_input_file(path_in_filesystem(parsed))
    except Exception as error:
        if classify(error) == NOT_FOUND:
            raise InputError(no_such_object(url)) from None
        raise remote_error(url, error, settings) from None


STREAM_BUFFER_BYTES = 8 << 20
"""What `open_stream` fetches per request: large enough that a front-to-back read of a big
object costs few requests, small enough to hold for each file read at once."""


def open_stream(
    file: RemoteFile | str,
    options: Mapping[str, str] | None = None,
    *,
    buffer_bytes: int = STREAM_BUFFER_BYTES,
) -> pa.NativeFile:
    """A buffered front-to-back stream on a remote object (JSON Lines, gzip).

    `open_input` fetches exactly what each read asks for, one request per read: right for
    parquet, whose reader asks for whole column chunks, ruinous for a reader that asks for a
    line or 8 KiB at a time. This stream fetches `buffer_bytes` per request instead.

    Args:
        file: a `RemoteFile` from `resolve_remote`, or a URL.
        options: storage options from `parse_storage_options`.
        buffer_bytes: bytes fetched per request.

    Returns:
        An open, non-seekable `pyarrow.NativeFile` (`read`, `readline` via `io` wrappers).

    Raises:
        InputError: no such object, access denied, endpoint unreachable.
    """
    return pa.BufferedInputStream(open_input(file, options), buffer_bytes)


def identity(file: RemoteFile) -> dict[str, Any]:
    """What the manifest records of a remote input.

    Args:
        file: from `resolve_remote`.

    Returns:
        `{"url": ..., "bytes": size, "version": ETag/VersionId/blob id or None}`.
    """
    return {"url": file.url, "bytes": file.size, "version": file.version}


def changed(recorded: Mapping[str, Any], options: Mapping[str, str] | None = None) -> str | None:
    """Whether the object a manifest recorded is still the same.

    Args:
        recorded: an `identity` record.
        options: storage options from `parse_storage_options`.

    Returns:
        None when the object is there with the recorded size and version; else one line saying
        what changed (version, size) or that it is gone.

    Raises:
        InputError: the object cannot be checked (access denied, unreachable, no such bucket).
    """
    url = str(recorded["url"])
    parsed = parse_url(url)
    now = stat_object(parsed, settings_for(parsed.scheme, options or {}))
    if now is None:
        return f"{url} is gone (no such object now); it was {recorded['bytes']} bytes"
    if recorded.get("version") is not None and now.version != recorded["version"]:
        return (
            f"{url} changed: version {recorded['version']} recorded, {now.version} now "
            f"({recorded['bytes']} -> {now.size} bytes)"
        )
    if now.size != recorded["bytes"]:
        return f"{url} changed: {recorded['bytes']} bytes recorded, {now.size} now"
    return None
