"""The `pools/{length}.npy` files of a prepared directory while it is written.

Every pool's size is known from the histogram before a single id is placed, so each file is
created up front with its final `.npy` header, then filled by appends of ascending id chunks,
hashed (sha256) as the bytes go out. No pool is ever held whole in memory or written twice.

With thousands of distinct lengths the per-file costs dominate small datasets: creating a file
costs 20 us to 1 ms (up to 0.5 ms on ext4 without a journal, right after many files were deleted),
and opening one again for every chunk would cost as much again. So the files are created once (in a
background thread, while the scan runs) and kept open when the open-files limit allows: the soft
limit is raised towards the hard one for as long as the writer lives, keeping `reserved_fds`
(default `RESERVED_FDS`) free for everything else. Where even the hard limit is too low, each
append opens and closes its file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.npy_files import npy_header, write_all

__all__ = ["POOL_DTYPE", "RESERVED_FDS", "PoolFiles", "pool_file_name"]

logger = logging.getLogger(__name__)

POOLS_DIR = "pools"
POOL_DTYPE = np.dtype("<i8")
RESERVED_FDS = 256
"""Descriptors `PoolFiles` leaves free by default for everything else (DuckDB's input files,
logging, the interpreter) when it decides whether every pool file can stay open."""

try:
    import resource
except ImportError:  # not on Windows: files are then opened per append
    resource = None  # type: ignore[assignment]


def pool_file_name(length: int) -> str:
    """The path of a length's pool inside a prepared directory (`pools/{length}.npy`)."""
    return f"{POOLS_DIR}/{int(length)}.npy"


def _open_files_now() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


class _FdLimit:
    """Raises the soft open-files limit enough to keep `count` more files open with `reserved`
    descriptors to spare, if the hard limit allows; `restore()` puts the old soft limit back."""

    def __init__(self, count: int, reserved: int) -> None:
        self.previous: tuple[int, int] | None = None
        self.enough = False
        if resource is None:
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        needed = _open_files_now() + count + reserved
        if soft == resource.RLIM_INFINITY or needed <= soft:
            self.enough = True
        elif hard == resource.RLIM_INFINITY or needed <= hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
            except (OSError, ValueError) as error:
                logger.debug("cannot raise the open-files limit to %d: %s", needed, error)
                return
            self.previous = (soft, hard)
            self.enough = True
        else:
            logger.info(
                "open-files hard limit %d is below the %d pools: each write reopens its file",
                hard,
                count,
            )

    def restore(self) -> None:
        if self.previous is not None and resource is not None:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, self.previous)
            except (OSError, ValueError) as error:
                logger.debug("cannot restore the open-files limit: %s", error)
            self.previous = None


class PoolFiles:
    """The pool files of `counts` inside `root`, created with their headers, filled by appends.

    `create()` makes every file (run it in a background thread: `stop` ends it early); then
    `append(length, ids)` adds the next ascending ids of one pool: appends to one pool come from
    one thread at a time, in order, while different pools may be written from different threads.
    `finish()` checks that every pool got exactly its count and returns each file's size and
    sha256; `abort()` just closes everything.

    The files stay open between appends only if the open-files limit leaves `reserved_fds`
    descriptors free besides them; otherwise each append reopens its file.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        counts: Mapping[int, int],
        *,
        reserved_fds: int = RESERVED_FDS,
    ) -> None:
        self._root = os.fspath(root)
        self._reserved_fds = check_int("reserved_fds", reserved_fds, minimum=0)
        self.lengths = sorted(int(length) for length in counts)
        self._position = {length: index for index, length in enumerate(self.lengths)}
        self._expected = [int(counts[length]) for length in self.lengths]
        self._written = [0] * len(self.lengths)
        self._digests: list[Any] = [None] * len(self.lengths)
        self._fds: list[int | None] = [None] * len(self.lengths)
        self._limit: _FdLimit | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _path(self, index: int) -> str:
        return os.path.join(self._root, pool_file_name(self.lengths[index]))

    def create(self, stop: threading.Event | None = None) -> None:
        """Create every pool file with its header; stops early (and quietly) once `stop` is set."""
        started = time.perf_counter()
        limit = _FdLimit(len(self.lengths), self._reserved_fds)
        with self._lock:
            self._limit = limit
        for index, count in enumerate(self._expected):
            if stop is not None and stop.is_set():
                return
            header = npy_header(POOL_DTYPE, count)
            fd = os.open(self._path(index), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                write_all(fd, [header])
            except BaseException:
                os.close(fd)
                raise
            self._digests[index] = hashlib.sha256(header)
            with self._lock:
                if limit.enough and not self._closed:
                    self._fds[index] = fd
                else:
                    os.close(fd)
        logger.info(
            "created %d pool files in %.2fs", len(self.lengths), time.perf_counter() - started
        )

    def append(self, length: int, ids: np.ndarray) -> None:
        """Write the next ascending int64 ids of `length`'s pool."""
        index = self._position[length]
        data = np.ascontiguousarray(ids, dtype=POOL_DTYPE)
        if self._written[index] + data.size > self._expected[index]:
            raise ValueError(
                f"pool {length}: {self._written[index] + data.size} ids written, its count is "
                f"{self._expected[index]}"
            )
        if not data.size:
            return
        view = data.data.cast("B")
        self._digests[index].update(view)
        fd = self._fds[index]
        if fd is not None:
            write_all(fd, [view])
        else:
            fd = os.open(self._path(index), os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, [view])
            finally:
                os.close(fd)
        self._written[index] += data.size

    def finish(self) -> dict[str, dict[str, Any]]:
        """Close every file; `{name: {"bytes", "sha256"}}`. Raises unless each pool is full."""
        self.abort()
        short = [
            (length, written, expected)
            for length, written, expected in zip(
                self.lengths, self._written, self._expected, strict=True
            )
            if written != expected
        ]
        if short:
            length, written, expected = short[0]
            raise RuntimeError(
                f"{len(short)} pools were not filled, e.g. pool {length}: {written} of "
                f"{expected} ids written"
            )
        return {
            pool_file_name(length): {
                "bytes": len(npy_header(POOL_DTYPE, expected)) + 8 * expected,
                "sha256": digest.hexdigest(),
            }
            for length, expected, digest in zip(
                self.lengths, self._expected, self._digests, strict=True
            )
        }

    def abort(self) -> None:
        """Close every open file and restore the open-files limit; safe to call twice."""
        with self._lock:
            self._closed = True
            fds = [fd for fd in self._fds if fd is not None]
            self._fds = [None] * len(self.lengths)
            limit, self._limit = self._limit, None
        for fd in fds:
            os.close(fd)
        if limit is not None:
            limit.restore()
