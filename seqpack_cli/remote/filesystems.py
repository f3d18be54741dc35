"""One Arrow filesystem per remote scheme: what reads the objects.

- s3:// and gs://: pyarrow's own `S3FileSystem` and `GcsFileSystem` (`pyarrow.fs`). They need no
  package beyond pyarrow, release the GIL, read parquet column chunks by range requests, and
  take credentials from the usual environment variables and config files (the AWS SDK chain:
  AWS_ACCESS_KEY_ID..., AWS_PROFILE, ~/.aws/credentials, instance metadata).
- https:// and http://: fsspec's `HTTPFileSystem` (needs aiohttp), wrapped for Arrow by
  `pyarrow.fs.PyFileSystem(FSSpecHandler(...))`: pyarrow has no HTTP filesystem of its own, and
  fsspec's file objects seek by range requests.
- hf://: `huggingface_hub`'s `HfFileSystem` (also fsspec), wrapped the same way: it resolves
  revisions and the hub's LFS storage, which a plain HTTP reader would not.

The fsspec-based schemes come with the `seqpack-cli[remote]` extra; a missing one is one line
naming it. Filesystems are cached per (scheme, bucket or host, options): one connection pool
per bucket, shared by every file of it.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyarrow import fs as arrow_fs

from seqpack_cli.errors import import_optional
from seqpack_cli.remote.options import Settings, settings_for
from seqpack_cli.remote.urls import RemoteURL, parse_url

__all__ = ["arrow_filesystem", "filesystem_for"]

logger = logging.getLogger(__name__)


def arrow_filesystem(
    url: str | RemoteURL, options: Mapping[str, str] | None = None
) -> tuple[arrow_fs.FileSystem, str]:
    """The Arrow filesystem that reads `url`, and the path of `url` inside it.

    Hand both to pyarrow (`pyarrow.parquet.ParquetFile(path, filesystem=fs)`,
    `pyarrow.dataset.dataset(paths, filesystem=fs)`): it then fetches only the byte ranges it
    needs (the footer, then the chunks of the columns read).

    Args:
        url: a remote URL (`s3://bucket/key`, `gs://...`, `https://...`, `hf://...`).
        options: storage options from `parse_storage_options` (none: the environment only).

    Returns:
        (filesystem, path): `bucket/key` for s3 and gs, the whole URL for http(s),
        `type/org/name[@revision]/path` for hf.

    Raises:
        InputError: a malformed URL or a scheme seqpack does not read.
        ConfigError: a storage option that does not apply or has a bad value.
        MissingDependencyError: the scheme needs the `remote` extra and it is not installed.
    """
    parsed = url if isinstance(url, RemoteURL) else parse_url(url)
    settings = settings_for(parsed.scheme, options or {})
    return filesystem_for(parsed, settings), path_in_filesystem(parsed)


def path_in_filesystem(parsed: RemoteURL) -> str:
    """Where `parsed` lies inside the filesystem `filesystem_for` gives for it."""
    if parsed.scheme in ("http", "https"):
        return parsed.url
    root = parsed.root if parsed.revision is None else f"{parsed.root}@{parsed.revision}"
    return f"{root}/{parsed.key}".rstrip("/")


def filesystem_for(parsed: RemoteURL, settings: Settings) -> arrow_fs.FileSystem:
    """The (cached) filesystem for a parsed URL and its checked settings."""
    # Only s3 builds a filesystem per bucket (its region may differ); the others share one.
    bucket = parsed.root if parsed.scheme == "s3" else ""
    return _cached(parsed.scheme, bucket, settings, _environment_key())


_ENVIRONMENT = re.compile(r"^(AWS_|GOOGLE_|HF_|HUGGING_FACE_)")


def _environment_key() -> tuple[tuple[str, str], ...]:
    """The environment variables a filesystem reads when built: part of the cache key, so a
    change of credentials or profile builds a new filesystem instead of reusing the old one."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if _ENVIRONMENT.match(k)))


@functools.lru_cache(maxsize=64)
def _cached(
    scheme: str, bucket: str, settings: Settings, environment: tuple[tuple[str, str], ...]
) -> arrow_fs.FileSystem:
    if scheme == "s3":
        return _s3(bucket, settings)
    if scheme == "gs":
        return _gcs(settings)
    if scheme in ("http", "https"):
        return _wrap(_http(settings))
    return _wrap(_hf(settings))


def _s3(bucket: str, settings: Settings) -> arrow_fs.FileSystem:
    kwargs: dict[str, Any] = {
        "connect_timeout": settings.connect_timeout_s,
        "retry_strategy": arrow_fs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts),
        "anonymous": settings.anonymous,
    }
    if settings.access_key_id or settings.secret_access_key:
        kwargs.update(
            access_key=settings.access_key_id,
            secret_key=settings.secret_access_key,
            session_token=settings.session_token,
        )
    region = settings.region
    if settings.endpoint_url:
        scheme, _, host = settings.endpoint_url.partition("://")
        kwargs.update(scheme=scheme, endpoint_override=host.rstrip("/"))
        # A local S3-compatible server answers any region; the SDK must not look one up.
        region = region or "us-east-1"
    elif region is None and not _environment_region():
        region = _bucket_region(bucket)
    kwargs["region"] = region
    return arrow_fs.S3FileSystem(**kwargs)


def _environment_region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def _bucket_region(bucket: str) -> str | None:
    """The region AWS says `bucket` is in; None (the SDK's default chain) when it cannot say.

    Without it, a bucket outside the default region answers every request with a redirect.
    """
    try:
        return str(arrow_fs.resolve_s3_region(bucket))
    except (OSError, ValueError) as error:
        logger.debug("remote: no region resolved for bucket %s (%s)", bucket, error)
        return None


def _gcs(settings: Settings) -> arrow_fs.FileSystem:
    kwargs: dict[str, Any] = {
        "anonymous": settings.anonymous,
        # GCS has no per-request attempt count: retries stop after this much time.
        "retry_time_limit": datetime.timedelta(
            seconds=settings.connect_timeout_s * settings.max_attempts
        ),
    }
    if settings.access_token:
        kwargs.update(
            access_token=settings.access_token,
            credential_token_expiration=datetime.datetime.now(datetime.timezone.utc)
            + datetime.timedelta(hours=1),
        )
    if settings.project_id:
        kwargs["project_id"] = settings.project_id
    if settings.endpoint_url:
        scheme, _, host = settings.endpoint_url.partition("://")
        kwargs.update(scheme=scheme, endpoint_override=host.rstrip("/"))
    return arrow_fs.GcsFileSystem(**kwargs)


def _http(settings: Settings) -> Any:
    aiohttp = _optional("aiohttp", "reading https:// inputs")
    http = _optional("fsspec.implementations.http", "reading https:// inputs")
    timeout = aiohttp.ClientTimeout(
        sock_connect=settings.connect_timeout_s, sock_read=settings.connect_timeout_s * 6
    )
    # simple_links=False: never parse HTML pages for links (a file is named, never listed).
    return http.HTTPFileSystem(
        client_kwargs={"timeout": timeout},
        simple_links=False,
        skip_instance_cache=True,
    )


def _hf(settings: Settings) -> Any:
    hub = _optional("huggingface_hub", "reading hf:// inputs")
    kwargs: dict[str, Any] = {"skip_instance_cache": True}
    if settings.token:
        kwargs["token"] = settings.token
    if settings.endpoint_url:
        kwargs["endpoint"] = settings.endpoint_url.rstrip("/")
    return hub.HfFileSystem(**kwargs)


class _FSSpecHandler(arrow_fs.FSSpecHandler):
    """pyarrow's fsspec bridge, but opening a file without asking `isfile` first: over HTTP
    that is a whole-file GET, dropped after its status line (the open's HEAD finds a missing
    file anyway)."""

    def open_input_file(self, path: str) -> pa.NativeFile:
        # cache_type="none": each read is one range request of exactly its bytes, as with
        # pyarrow's S3 files (parquet readers coalesce their ranges themselves; front-to-back
        # readers take `open_stream`, which buffers).
        return pa.PythonFile(self.fs.open(path, mode="rb", cache_type="none"), mode="r")


def _wrap(filesystem: Any) -> arrow_fs.FileSystem:
    return arrow_fs.PyFileSystem(_FSSpecHandler(filesystem))


def _optional(module: str, needed_for: str) -> Any:
    return import_optional(module, needed_for, "remote")
