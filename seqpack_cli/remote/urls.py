"""Remote input URLs: which strings are remote, and their parts (scheme, bucket or host, key).

Parsing needs no network and no optional package, so the command line can tell a remote input
from a local path, and refuse a malformed URL, before anything is imported or contacted.

The schemes: `s3://bucket/key`, `gs://bucket/key` (also `gcs://`), `http(s)://host/path`, and
`hf://{datasets,models,spaces}/org/name[@revision]/path` (the Hugging Face Hub; `hf://org/name`
without a type is a model repository, as `huggingface_hub` reads it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from seqpack_cli.errors import InputError

__all__ = [
    "GLOB_CHARS",
    "SCHEMES",
    "RemoteURL",
    "glob_pattern",
    "has_glob",
    "is_remote",
    "parse_url",
]

SCHEMES = ("s3", "gs", "gcs", "http", "https", "hf")
"""The schemes this layer reads (`gcs` is an alias of `gs`)."""

GLOB_CHARS = "*?["
"""Characters that make a key a glob (as for local inputs)."""

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)
_HF_TYPES = ("datasets", "models", "spaces")


def is_remote(text: str) -> bool:
    """Whether `text` is a URL (`scheme://...`) rather than a local path.

    Any scheme counts, also one this layer does not read: `parse_url` refuses those with a line
    that names the schemes it reads, instead of a local "no such file".

    Args:
        text: an input as the user typed it.

    Returns:
        True for `s3://...`, `https://...`, `hf://...` and any other `scheme://...`.
    """
    return _URL.match(text) is not None


@dataclass(frozen=True)
class RemoteURL:
    """One remote input, split into what the filesystems need.

    `scheme` is normalised (`gcs` -> `gs`, lower case). `root` is the bucket (s3, gs), the
    `scheme://host[:port]` (http, https) or the `type/org/name` repository (hf); `key` is the
    path inside it, without a leading slash (empty for a whole bucket). `revision` is the hub
    revision named after `@` (hf only).
    """

    scheme: str
    root: str
    key: str
    revision: str | None = None

    @property
    def url(self) -> str:
        """The URL in its canonical spelling (what listings, sorting and the manifest use)."""
        if self.scheme in ("http", "https"):
            return f"{self.root}/{self.key}"
        root = self.root if self.revision is None else f"{self.root}@{self.revision}"
        return f"{self.scheme}://{root}/{self.key}" if self.key else f"{self.scheme}://{root}/"

    def with_key(self, key: str) -> RemoteURL:
        """The same bucket, host or repository with another key."""
        return RemoteURL(self.scheme, self.root, key, self.revision)


def parse_url(text: str) -> RemoteURL:
    """Split a remote input into scheme, root and key.

    Args:
        text: a URL, e.g. `s3://bucket/data/*.parquet` or `hf://datasets/org/name@main/train/`.

    Returns:
        The parts as a `RemoteURL`.

    Raises:
        InputError: not a URL, a scheme this layer does not read, or no bucket/host/repository.
    """
    match = _URL.match(text)
    if match is None:
        raise InputError(
            f"input {text!r} is not a URL; write it as scheme://... (s3, gs, https, hf)"
        )
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme not in SCHEMES:
        raise InputError(
            f"input {text} has the scheme {scheme}://, which seqpack does not read; "
            "use s3://, gs://, https:// or hf://, or download the file and pass its path"
        )
    if scheme in ("http", "https"):
        host, _, path = rest.partition("/")
        if not host:
            raise InputError(f"input {text} names no host; write it as {scheme}://host/path")
        return RemoteURL(scheme, f"{scheme}://{host}", path)
    if scheme == "hf":
        return _parse_hf(text, rest)
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise InputError(f"input {text} names no bucket; write it as {scheme}://bucket/key")
    return RemoteURL("gs" if scheme == "gcs" else scheme, bucket, key.lstrip("/"))


def _parse_hf(text: str, rest: str) -> RemoteURL:
    """`[type/]org/name[@revision]/path` -> RemoteURL("hf", "type/org/name", path, revision)."""
    parts = rest.split("/")
    repo_type = parts[0] if parts[0] in _HF_TYPES else "models"
    names = parts[1:] if parts[0] in _HF_TYPES else parts
    if len(names) < 2 or not names[0] or not names[1]:
        raise InputError(
            f"input {text} names no repository; write it as hf://datasets/org/name/path "
            "(or hf://datasets/org/name@revision/path)"
        )
    name, _, revision = names[1].partition("@")
    if not name or (names[1].endswith("@") and not revision):
        raise InputError(f"input {text} has an empty repository name or revision after '@'")
    path = names[2:]
    if revision == "refs" and len(path) >= 2:
        # The hub's special revisions hold slashes: refs/convert/parquet, refs/pr/12.
        revision, path = "/".join([revision, *path[:2]]), path[2:]
    return RemoteURL("hf", f"{repo_type}/{names[0]}/{name}", "/".join(path), revision or None)


def has_glob(key: str) -> bool:
    """Whether a key is a glob pattern (holds `*`, `?` or `[`)."""
    return any(char in key for char in GLOB_CHARS)


def glob_pattern(key: str) -> tuple[str, re.Pattern[str]]:
    """A glob key -> (the prefix to list under, a regex that matches whole keys).

    `*` and `?` stay within one path segment, `**` spans any number of them (`a/**/b` also
    matches `a/b`), `[...]` is a character class: the rules local globs follow.

    Args:
        key: a key holding glob characters, e.g. `data/**/part-*.parquet`.

    Returns:
        The directory part before the first segment with a glob character (`data/`), and the
        compiled pattern.
    """
    segments = key.split("/")
    first = next(index for index, segment in enumerate(segments) if has_glob(segment))
    prefix = "".join(segment + "/" for segment in segments[:first])
    regex, index = "", 0
    while index < len(key):
        char = key[index]
        if key.startswith("**/", index):
            regex, index = regex + "(?:.*/)?", index + 3
            continue
        if key.startswith("**", index):
            regex, index = regex + ".*", index + 2
            continue
        if char == "*":
            regex += "[^/]*"
        elif char == "?":
            regex += "[^/]"
        elif char == "[" and (end := key.find("]", index + 2)) != -1:
            body = key[index + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            regex, index = regex + "[" + body.replace("\\", "\\\\") + "]", end + 1
            continue
        else:
            regex += re.escape(char)
        index += 1
    return prefix, re.compile(regex + r"\Z", re.DOTALL)
