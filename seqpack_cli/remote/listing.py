"""Remote inputs -> the sorted list of objects to read: files, prefixes and globs.

As for local inputs: a URL naming an object is that object (a parquet or JSON Lines file by its
extension); a prefix (`s3://bucket/data/`, or a key that is no object but has objects under it)
is searched recursively like a directory, taking parquet (`.parquet`, `.parq`, `.pq`) and JSON
Lines (`.jsonl`, `.jsonl.gz`) objects; a glob (`*`, `?`, `[...]`, `**`) takes the matching
objects of those kinds, and `.json` ones too when the pattern spells `.json`. HTTP has no
listing: each https:// file is named. The result is sorted by URL, each object once.

The list is one request per 1,000 keys (S3's page), then one HEAD per object for its ETag or
version (run 16 at a time): the listing API of pyarrow's S3 filesystem does not return ETags.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pyarrow import fs as arrow_fs

from seqpack_cli.errors import InputError
from seqpack_cli.input_names import JSONL_SUFFIXES, PARQUET_SUFFIXES, SEARCHED_SUFFIXES
from seqpack_cli.remote.faults import no_such_bucket, no_such_object, remote_error
from seqpack_cli.remote.filesystems import filesystem_for, path_in_filesystem
from seqpack_cli.remote.objects import RemoteFile, stat_object
from seqpack_cli.remote.options import Settings, check_storage_options, settings_for
from seqpack_cli.remote.urls import RemoteURL, glob_pattern, has_glob, parse_url

__all__ = ["resolve_remote"]

logger = logging.getLogger(__name__)


_HEAD_THREADS = 16


def resolve_remote(
    inputs: Sequence[str], options: Mapping[str, str] | None = None
) -> list[RemoteFile]:
    """The objects that remote inputs name, sorted by URL, each once.

    Args:
        inputs: URLs as the user gave them: objects, prefixes, globs.
        options: storage options from `parse_storage_options`.

    Returns:
        One `RemoteFile(url, size, version)` per object.

    Raises:
        InputError: a malformed URL; an input that matches nothing; no such bucket or object;
            access denied; an unreachable endpoint; an https:// prefix or glob (HTTP cannot list).
        ConfigError: a storage option that does not apply to an input's scheme.
        MissingDependencyError: the scheme needs the `remote` extra.
    """
    parsed_inputs = [(text, parse_url(text)) for text in inputs]
    check_storage_options(options or {}, (parsed.scheme for _, parsed in parsed_inputs))
    found: dict[str, RemoteFile] = {}
    for text, parsed in parsed_inputs:
        settings = settings_for(parsed.scheme, options or {})
        for file in _resolve_one(text, parsed, settings):
            found.setdefault(file.url, file)
    files = sorted(found.values())
    logger.info("remote: %d input(s) -> %d object(s)", len(inputs), len(files))
    return files


def _resolve_one(text: str, parsed: RemoteURL, settings: Settings) -> list[RemoteFile]:
    listable = parsed.scheme not in ("http", "https")
    if has_glob(parsed.key):
        if not listable:
            raise InputError(f"{text}: HTTP has no listing, so a glob cannot match; name each file")
        prefix, pattern = glob_pattern(parsed.key)
        takes_json = parsed.key.lower().endswith(".json")
        keys = [
            (key, size)
            for key, size in _list(text, parsed.with_key(prefix), settings)
            if pattern.match(key) and _is_data(key, searched=not takes_json)
        ]
        return _stat_all(text, parsed, keys, settings)
    if parsed.key == "" or parsed.key.endswith("/"):
        if not listable:
            raise InputError(
                f"{text}: HTTP has no listing; name each file (https://host/f.parquet)"
            )
        return _search(text, parsed, settings)
    file = stat_object(parsed, settings)
    if file is not None:
        if not _is_data(parsed.key, searched=False):
            raise InputError(
                f"{text} is neither parquet nor JSON Lines by its extension "
                f"({', '.join(PARQUET_SUFFIXES + JSONL_SUFFIXES)}); rename it or convert it"
            )
        return [file]
    if not listable:
        raise InputError(no_such_object(text))
    return _search(text, parsed.with_key(parsed.key + "/"), settings)


def _search(text: str, parsed: RemoteURL, settings: Settings) -> list[RemoteFile]:
    """A prefix, searched recursively like a local directory."""
    listed = _list(text, parsed, settings)
    if not listed:
        _check_root(text, parsed, settings)
        raise InputError(no_such_object(text))
    keys = [(key, size) for key, size in listed if _is_data(key, searched=True)]
    return _stat_all(text, parsed, keys, settings)


def _stat_all(
    text: str, parsed: RemoteURL, keys: list[tuple[str, int]], settings: Settings
) -> list[RemoteFile]:
    if not keys:
        _check_root(text, parsed, settings)
        raise InputError(
            f"{text} matches no parquet or JSON Lines object ({', '.join(SEARCHED_SUFFIXES)}; "
            ".json when a glob spells it); check the prefix or pattern, or name the files"
        )
    urls = [parsed.with_key(key) for key, _ in keys]
    with ThreadPoolExecutor(max_workers=min(_HEAD_THREADS, len(urls))) as pool:
        stats = list(pool.map(lambda url: stat_object(url, settings), urls))
    # An object deleted between the listing and its HEAD is left out, as if listed a moment later.
    return [file for file in stats if file is not None]


def _list(text: str, parsed: RemoteURL, settings: Settings) -> list[tuple[str, int]]:
    """(key, size) of every object under the prefix `parsed.key` (which ends in `/` or is empty)."""
    filesystem = filesystem_for(parsed, settings)
    base = path_in_filesystem(parsed)
    root = path_in_filesystem(parsed.with_key(""))
    selector = arrow_fs.FileSelector(base, recursive=True, allow_not_found=True)
    try:
        infos = filesystem.get_file_info(selector)
    except Exception as error:
        raise remote_error(text, error, settings) from None
    return [
        (_key_of(info.path, root), int(info.size or 0))
        for info in infos
        if info.type == arrow_fs.FileType.File
    ]


def _key_of(path: str, root: str) -> str:
    """The key of a listed path: the path after the bucket, host or repository."""
    if path.startswith(("http://", "https://")):
        return path.split("/", 3)[3] if path.count("/") >= 3 else ""
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    # The hub lists `type/org/name/key` even when asked under `type/org/name@revision`.
    return path.split("/", 3)[3] if path.count("/") >= 3 else path


def _check_root(text: str, parsed: RemoteURL, settings: Settings) -> None:
    """Raise "no such bucket" when the bucket itself is missing (a listing of it is empty)."""
    if parsed.scheme not in ("s3", "gs"):
        return
    filesystem = filesystem_for(parsed, settings)
    try:
        info = filesystem.get_file_info(parsed.root)
    except Exception as error:
        raise remote_error(text, error, settings) from None
    if info.type == arrow_fs.FileType.NotFound:
        raise InputError(no_such_bucket(text, settings))


def _is_data(key: str, *, searched: bool) -> bool:
    name = key.rsplit("/", 1)[-1].lower()
    return name.endswith(SEARCHED_SUFFIXES if searched else PARQUET_SUFFIXES + JSONL_SUFFIXES)
