"""Other filesystems mounted inside a directory seqpack replaces: found up front, never entered.

A run replaces its output by swapping a new copy in, then deletes the copy it replaced. A volume
mounted inside the old copy (a token store kept on its own disk at `OUT/tokens`) moves along with
it, so a plain `shutil.rmtree` of the replaced copy would delete the files on that volume.
`check_no_mounts_inside` refuses such an output before anything is written, and `remove_tree`
(used wherever seqpack deletes a directory it replaced or left behind) stops at every mount point
it meets, leaving it and its contents in place.

A mount point is a directory whose `st_dev` differs from its parent's, or one that
/proc/self/mountinfo lists (where there is one): a bind mount of a directory of the same
filesystem keeps its `st_dev`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from seqpack_cli.errors import ConfigError, option

__all__ = ["check_no_mounts_inside", "mounts_inside", "remove_tree"]

logger = logging.getLogger(__name__)

_MOUNTINFO = "/proc/self/mountinfo"
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _listed_mount_points() -> frozenset[str]:
    """The mount points /proc/self/mountinfo lists (an empty set where it cannot be read)."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return frozenset()
    points = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:  # the fifth field; spaces and the like come octal-escaped (\040)
            points.add(_OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), fields[4]))
    return frozenset(points)


def _is_mount(path: str, info: os.stat_result, device: int, listed: frozenset[str]) -> bool:
    return info.st_dev != device or path in listed


def _entries(directory: str) -> Iterator[tuple[str, os.stat_result]]:
    """(path, `os.lstat`) of each entry of `directory`; none where it cannot be listed, and an
    entry that cannot be stat-ed (gone meanwhile) is skipped."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        child = os.path.join(directory, name)
        try:
            info = os.lstat(child)
        except OSError:
            continue
        yield child, info


def mounts_inside(directory: str | os.PathLike[str]) -> list[Path]:
    """The mount points below `directory` (not `directory` itself), shallowest first; the walk
    does not descend into them, nor follow symbolic links."""
    top = os.path.abspath(directory)
    try:
        device = os.lstat(top).st_dev
    except OSError:
        return []
    listed = _listed_mount_points()
    found: list[Path] = []
    pending = [top]
    while pending:
        for child, info in _entries(pending.pop()):
            if not stat.S_ISDIR(info.st_mode):
                continue
            if _is_mount(child, info, device, listed):
                found.append(Path(child))
            else:
                pending.append(child)
    return sorted(found, key=lambda path: (len(path.parts), path))


def check_no_mounts_inside(output: str | os.PathLike[str]) -> None:
    """Refuse to replace existing directory `output` when another filesystem is mounted inside
    it: replacing it would move the mount aside with the old copy, whose removal must not
    empty it."""
    found = mounts_inside(output)
    if found:
        raise ConfigError(
            f"output directory {output} has another filesystem mounted at {found[0]}, which "
            f"{option('overwrite', python='overwrite=True')} would move aside with the copy it "
            f"replaces; unmount it (keep a token store outside the output directory), or choose "
            f"another {option('output')}"
        )


def remove_tree(path: str | os.PathLike[str]) -> list[Path]:
    """Delete directory `path` and what it holds, like `shutil.rmtree(path,
    ignore_errors=True)`, but never descend into a filesystem mounted inside it: each mount point
    stays, with its contents and the directories above it (a warning names it). Returns the mount
    points kept; the caller checks what else is left (`os.path.lexists`)."""
    top = os.path.abspath(path)
    try:
        info = os.lstat(top)
    except OSError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(top)
        return []
    listed = _listed_mount_points()
    try:
        parent_device = os.lstat(os.path.dirname(top)).st_dev
    except OSError:
        parent_device = info.st_dev
    kept: list[Path] = []
    if _is_mount(top, info, parent_device, listed):
        kept.append(Path(top))
    else:
        _remove_contents(top, info.st_dev, listed, kept)
        with contextlib.suppress(OSError):
            os.rmdir(top)
    for mount in kept:
        logger.warning(
            "left %s in place: another filesystem is mounted there; unmount it, then remove %s",
            mount,
            top,
        )
    return kept


def _remove_contents(directory: str, device: int, listed: frozenset[str], kept: list[Path]) -> None:
    for child, info in _entries(directory):
        if not stat.S_ISDIR(info.st_mode):  # files and symbolic links (never followed)
            with contextlib.suppress(OSError):
                os.unlink(child)
        elif _is_mount(child, info, device, listed):
            kept.append(Path(child))
        else:
            _remove_contents(child, device, listed, kept)
            with contextlib.suppress(OSError):
                os.rmdir(child)
