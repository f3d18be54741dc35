"""One prepared directory, one consistent copy: every file opened through a descriptor of the
directory itself.

`prepare --overwrite` swaps a new copy in by renaming (`swap.move_into_place`), then deletes
the old one. Files opened by path could come from both copies (counts of the old, pools of the
new: ids served twice or never). Opened relative to a directory descriptor, they all come from
the copy that descriptor was opened on, or, once that copy is deleted, fail: `load_prepared`
then starts again on the new copy, and a pool first used after that is refused in one line.

A reopen by path in another process (a DataLoader worker started with `spawn`) compares the
manifest's digest with the one loaded (`reopen`), and refuses another prepare in one line.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from seqpack_cli.errors import PreparedFormatError
from seqpack_cli.prepared.format import MANIFEST_NAME
from seqpack_cli.prepared.integrity import manifest_digest
from seqpack_cli.prepared.schema import unusable
from seqpack_cli.prepared.strict_json import parse_json
from seqpack_cli.token_sources import opener_at

__all__ = ["open_directory", "read_text_at", "reopen", "was_replaced"]

_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def open_directory(path: Path) -> int:
    """A descriptor of the directory `path` (the caller closes it)."""
    try:
        return os.open(path, _DIRECTORY_FLAGS)
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise PreparedFormatError(
                f"prepared directory {path} does not exist; create it with `seqpack prepare "
                f"INPUT... --length-column NAME --max-seq-len N --output {path}`"
            ) from None
        if error.errno == errno.ENOTDIR:
            raise PreparedFormatError(f"{path} is a file; expected a prepared directory") from None
        raise unusable(path, f"it cannot be opened ({error.strerror or error})") from None


def read_text_at(dir_fd: int, name: str) -> str:
    """The text of the file `name` inside the directory `dir_fd`."""
    with open(name, encoding="utf-8", opener=opener_at(dir_fd)) as file:
        return file.read()


def was_replaced(path: Path, dir_fd: int) -> bool:
    """Whether `path` no longer names the directory `dir_fd` was opened on."""
    try:
        now = os.stat(path)
    except OSError:
        return True
    then = os.fstat(dir_fd)
    return (now.st_dev, now.st_ino) != (then.st_dev, then.st_ino)


def reopen(path: Path, loaded_digest: str) -> int:
    """A descriptor of the directory `path`, whose manifest has the digest `loaded_digest` (that
    of the copy loaded before); refuses, in one line, a path that now holds another prepare."""
    dir_fd = open_directory(path)
    try:
        try:
            digest = manifest_digest(parse_json(read_text_at(dir_fd, MANIFEST_NAME)))
        except (OSError, ValueError, AttributeError):
            digest = "none (no readable manifest.json)"
        if digest != loaded_digest:
            raise PreparedFormatError(
                f"{path} now holds another prepare (manifest digest {digest[:16]}..., opened "
                f"{loaded_digest[:16]}...): it was replaced, e.g. by `seqpack prepare "
                "--overwrite`, since it was loaded; restart the run to use the new data, or "
                "prepare into another directory while a run reads this one"
            )
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd
