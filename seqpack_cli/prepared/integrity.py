"""The digests that tie a prepared directory together: the manifest's own, and the edges of the
token store's files.

- `manifest_digest`, `seal_manifest`: manifest.json carries `manifest_sha256`, the sha256 of its
  canonical JSON without that field. The files table covers every other file, so with it the
  manifest covers itself: an edited `max_seq_len` no longer loads. It is of the parsed content
  (keys sorted, no spaces), so re-indenting the file changes nothing; every load checks it
  (microseconds). Manifests of `format_version` 1 (before the digest) load with a warning.
- `file_digest`: the size and sha256 of every byte of a file (the files table's).
- `edge_digest`: the sha256 of a file's size, first and last MiB, recorded as `edges_sha256` for
  the token store's `.npy` files and checked at every load. Reading 2 MiB per file costs about a
  millisecond whatever the store's size, and catches a store file of another prepare with the
  same size (its headers, first and last tokens differ) and any change near either end; a
  change in between is what `verify=True` (a sha256 of every byte) is for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack_cli.prepared.format import MANIFEST_NAME, STORE_ROLES
from seqpack_cli.prepared.schema import unusable

__all__ = [
    "DIGEST_KEY",
    "EDGES_KEY",
    "EDGE_BYTES",
    "check_manifest_digest",
    "edge_digest",
    "file_digest",
    "manifest_digest",
    "seal_manifest",
    "with_edge_digests",
]

logger = logging.getLogger(__name__)

_HASH_BLOCK = 1 << 22

DIGEST_KEY = "manifest_sha256"
"""The manifest field holding the sha256 of the manifest's canonical JSON without it."""
EDGES_KEY = "edges_sha256"
"""The files-table field holding a token store file's `edge_digest`."""
EDGE_BYTES = 1 << 20
"""Bytes read at each end of a file for its `edge_digest`."""
_FIRST_DIGEST_VERSION = 2
_STORE_DIRS = tuple(f"{role}/" for role in STORE_ROLES)

_warned: set[str] = set()


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """The sha256 of `manifest`'s canonical JSON (keys sorted, no spaces), `DIGEST_KEY` left
    out."""
    content = {key: value for key, value in manifest.items() if key != DIGEST_KEY}
    # ASCII escapes: a path that is not UTF-8 reaches the manifest as lone surrogates, which
    # json writes escaped and UTF-8 cannot encode.
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def seal_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """`manifest` with its `DIGEST_KEY` set (last, for people reading the file)."""
    content = {key: value for key, value in manifest.items() if key != DIGEST_KEY}
    return {**content, DIGEST_KEY: manifest_digest(content)}


def check_manifest_digest(
    path: Path, manifest: Mapping[str, Any], *, actual: str | None = None
) -> str | None:
    """The manifest's recorded digest, checked against its content (`actual`, its
    `manifest_digest` if already computed); None for a manifest of `format_version` 1, which
    has none (a warning, once per directory and process)."""
    if manifest["format_version"] < _FIRST_DIGEST_VERSION:
        if os.fspath(path) not in _warned:
            _warned.add(os.fspath(path))
            logger.warning(
                "%s was written with format_version 1: its manifest.json carries no digest, so "
                "an edit of it cannot be detected; re-run `seqpack prepare ... --output %s "
                "--overwrite` to add one",
                path,
                path,
            )
        return None
    recorded = manifest.get(DIGEST_KEY)
    if recorded is None:
        raise unusable(path, f"{MANIFEST_NAME} has no {DIGEST_KEY} (its own digest)")
    if actual is None:
        actual = manifest_digest(manifest)
    if recorded != actual:
        raise unusable(
            path,
            f"{MANIFEST_NAME} was edited since prepare wrote it: its {DIGEST_KEY} is "
            f"{str(recorded)[:16]}..., its content's {actual[:16]}...",
        )
    return actual


def edge_digest(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> str:
    """The sha256 of a file's size (8 bytes), first `EDGE_BYTES` and last `EDGE_BYTES` (the
    whole file when it is shorter than both); `path` relative to `dir_fd` if given."""
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        size = os.fstat(fd).st_size
        digest = hashlib.sha256(size.to_bytes(8, "little"))
        head = os.pread(fd, min(size, EDGE_BYTES), 0)
        tail_start = max(len(head), size - EDGE_BYTES)
        tail = os.pread(fd, size - tail_start, tail_start)
    finally:
        os.close(fd)
    digest.update(head)
    digest.update(tail)
    return digest.hexdigest()


def file_digest(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> tuple[int, str]:
    """(size, sha256) of every byte of a file, read in 4 MiB blocks: the files table's digest,
    computed the same way by the writer, the engines and `verify=True`; `path` relative to
    `dir_fd` if given."""
    digest, size = hashlib.sha256(), 0
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    with open(fd, "rb", closefd=True) as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def with_edge_digests(
    root: Path, files: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The files table `files` with `EDGES_KEY` added for the token store's `.npy` files (read
    from the directory `root`)."""
    table = {name: dict(entry) for name, entry in files.items()}
    for name, entry in table.items():
        if name.startswith(_STORE_DIRS) and name.endswith(".npy"):
            entry[EDGES_KEY] = edge_digest(root / name)
    return table
