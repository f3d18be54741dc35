"""The hidden siblings a `PreparedWriter` writes beside its output, and what killed runs left.

A run builds its output in `.{name}.seqpack-tmp-{pid}-{random}` and, where the system cannot swap
two directories in one step, moves the copy it replaces aside as `.{name}.seqpack-old-{...}`.
Names too long for the filesystem with that decoration are shortened to their start plus `~` and
a hash of the whole name. This module names those siblings (`sibling_path`, `is_sibling_of`),
swaps and moves directories with Linux's renameat2 (`rename2`: RENAME_EXCHANGE,
RENAME_NOREPLACE) through ctypes, and cleans up after killed runs (`recover_siblings`). The
writer's side lives in `staging` (creating and locking the temporary sibling) and `swap` (the
move into place).

Each temporary sibling is flock()ed by the run writing it for as long as that run lives, so a
later run knows for sure which siblings of its output were left by killed runs (whatever pid
the system reuses): it removes their temporaries and puts back an old copy found without an
output rather than deleting it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import logging
import os
import platform
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from seqpack_cli.prepared.mounts import remove_tree

try:
    import fcntl
except ImportError:  # not on Windows: liveness then falls back to the pid
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "OLD",
    "RENAME_EXCHANGE",
    "RENAME_NOREPLACE",
    "TMP",
    "FlockUnsupported",
    "is_sibling_of",
    "lock_directory",
    "name_max",
    "recover_siblings",
    "rename2",
    "sibling_path",
]

logger = logging.getLogger(__name__)

# ---- names ------------------------------------------------------------------------------------

TMP, OLD = "tmp", "old"  # .{stem}.seqpack-tmp-{pid}-{random}: the directory being written
_TOKEN_WIDTH = 10 + 1 + 8  # pid (at most 10 digits), "-", 8 hex digits
_HASH_WIDTH = 12


def name_max(path: Path) -> int:
    """The longest file name (bytes) the filesystem holding `path` (or its nearest existing
    ancestor) allows."""
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return int(os.pathconf(path, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _stem(name: str, max_bytes: int) -> str:
    """`name`, or its start plus a hash of the whole, short enough that `.{stem}.seqpack-tmp-
    {pid}-{random}` fits in `max_bytes` bytes; the same name always gives the same stem."""
    budget = max_bytes - len(f"..seqpack-{TMP}-") - _TOKEN_WIDTH
    if len(os.fsencode(name)) <= budget:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:_HASH_WIDTH]
    cut = name
    while len(os.fsencode(cut)) > budget - 1 - _HASH_WIDTH:
        cut = cut[:-1]
    return f"{cut}~{digest}"


@functools.lru_cache(maxsize=64)
def _pattern(stem: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(stem)}\.seqpack-({TMP}|{OLD})-(\d+)-([0-9a-f]{{8}})")


def _sibling_pattern(output: Path) -> re.Pattern[str]:
    return _pattern(_stem(output.name, name_max(output.parent)))


def sibling_path(output: Path, kind: str, token: str) -> Path:
    """The `kind` (`TMP` or `OLD`) sibling of `output` for the run with `token` ("{pid}-{hex}")."""
    return output.parent / f".{_stem(output.name, name_max(output.parent))}.seqpack-{kind}-{token}"


def is_sibling_of(output: str | os.PathLike[str], name: str) -> bool:
    """Whether `name`, an entry of `output`'s parent directory, lies in the hidden namespace
    `.{name}.seqpack-*` that seqpack keeps for `output`'s temporary and set-aside copies (with
    the shortened name where the full one is too long): never an input, never the user's.

    Only siblings named exactly as a writer names them are ever removed (`recover_siblings`).
    """
    output = Path(os.path.abspath(output))
    return name.startswith(f".{_stem(output.name, name_max(output.parent))}.seqpack-")


# ---- renameat2 --------------------------------------------------------------------------------

_AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_SYSCALL_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}  # for a libc without the wrapper
_renameat2: list[Callable[[bytes, bytes, int], int] | None] = []  # resolved on first use


def _load_renameat2() -> Callable[[bytes, bytes, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        function.argtypes += [ctypes.c_uint]
        function.restype = ctypes.c_int
        return lambda source, target, flags: function(_AT_FDCWD, source, _AT_FDCWD, target, flags)
    number = _SYSCALL_RENAMEAT2.get(platform.machine())
    if number is None:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return lambda source, target, flags: syscall(
        ctypes.c_long(number),
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(source),
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(target),
        ctypes.c_uint(flags),
    )


def rename2(source: Path, target: Path, flags: int) -> bool:
    """renameat2(2) with `flags`: True once done, False where the system or the filesystem does
    not have it (the caller then renames the portable way); other failures raise OSError."""
    if not _renameat2:
        _renameat2.append(_load_renameat2())
    function = _renameat2[0]
    if function is None:
        return False
    if function(os.fsencode(source), os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(source), None, os.fspath(target))


# ---- liveness: a flock held for the writer's lifetime -----------------------------------------


class FlockUnsupported(Exception):
    """The filesystem (or system) has no flock: liveness then falls back to the pid."""


def lock_directory(path: Path, *, wait: bool) -> int | None:
    """An open descriptor of directory `path` holding an exclusive flock, or None if another
    process holds it. Raises OSError if the directory cannot be opened; `FlockUnsupported`
    where the filesystem has no flock (e.g. some network filesystems)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    if fcntl is None:
        os.close(fd)
        raise FlockUnsupported("no flock on this system")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as error:
        os.close(fd)
        raise FlockUnsupported(f"no flock on {path}: {error.strerror}") from None
    return fd


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _claimed(sibling: Path, pid: int) -> Iterator[bool]:
    """Whether `sibling` was left by a run that is gone, holding its lock meanwhile.

    The run that writes a sibling flocks it until it ends, so a free lock means its run ended
    (even if the system gave its pid to another process since). Where flock is missing, a sibling
    counts as left over when no process has its pid."""
    try:
        fd = lock_directory(sibling, wait=False)
    except FlockUnsupported:
        yield not _is_alive(pid)
        return
    except OSError:  # vanished meanwhile, or not ours to open: leave it
        yield False
        return
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)


def recover_siblings(output: str | os.PathLike[str]) -> None:
    """Clean up after runs writing `output` that were killed: remove their temporary siblings,
    and put back a replaced copy (`-old`) found without an output rather than deleting it.

    Only hidden siblings named exactly like this writer's (`.{name}.seqpack-tmp-{pid}-{8 hex}`
    or `-old-`) of this very output, whose run no longer holds them, are touched.
    """
    output = Path(os.path.abspath(output))
    pattern = _sibling_pattern(output)
    try:
        siblings = sorted(output.parent.iterdir())
    except OSError:
        return
    for sibling in siblings:
        match = pattern.fullmatch(sibling.name)
        if match is None or sibling.is_symlink() or not sibling.is_dir():
            continue
        kind, pid = match.group(1), int(match.group(2))
        with _claimed(sibling, pid) as left_over:
            if not left_over:
                continue
            if kind == OLD and not os.path.lexists(output):
                try:
                    os.rename(sibling, output)
                except OSError as error:
                    logger.warning("cannot put back %s as %s: %s", sibling, output, error)
                else:
                    logger.warning(
                        "put back %s as %s: a run (pid %d) was killed while replacing it",
                        sibling.name,
                        output,
                        pid,
                    )
                continue
            remove_tree(sibling)  # never into a filesystem mounted inside it
            logger.info("removed %s, left by a run (pid %d) that was killed", sibling, pid)
