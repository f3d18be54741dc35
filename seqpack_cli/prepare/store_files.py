"""The token store's `.npy` files: their fixed-size headers (`HEADER_BYTES`, `store_header`,
`pieces_header`, built by `seqpack_cli.npy_files.npy_header`), and files written front to back
and hashed as they are written (`StoreFile`, `Writes`).

The one-pass store writes gigabytes; hashing them (sha256) and copying them into the page cache
(the write system calls) each take a core's time, so they run side by side: the caller hashes
each buffer and queues it, and one `Writes` thread writes the queue, in order, to the files
(hashlib and os.write both release the GIL). A buffer stays referenced by the queue until it is
written; the queue holds at most `max_bytes`. A failed write (a full disk) is raised by the next
`write` or by `drain`, as `OSError`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from seqpack_cli.interrupts import signals_held
from seqpack_cli.npy_files import npy_header, write_all

__all__ = [
    "HEADER_BYTES",
    "StoreFile",
    "Writes",
    "append_values",
    "create_sized",
    "pieces_header",
    "store_header",
]

HEADER_BYTES = 128
"""The .npy headers' size, so tokens.npy's is rewritten in place once its count is known."""

_MAX_QUEUED_BYTES = 1 << 26
_POLL_SECONDS = 0.1  # waits wake up this often, so signals reach the main thread


def store_header(dtype: np.dtype[Any], count: int) -> bytes:
    """The header of a 1-d store file (tokens, labels, offsets, ids, rows): `HEADER_BYTES` long
    whatever the count, so it can be written before the count is known and rewritten in place."""
    return npy_header(dtype, count, padded_to=HEADER_BYTES)


def pieces_header(count: int) -> bytes:
    """The header of `pieces.npy`, a (count, 3) int64 table, `HEADER_BYTES` long like every
    store file's (so its values start at `HEADER_BYTES` too)."""
    return npy_header(np.dtype("<i8"), (count, 3), padded_to=HEADER_BYTES)


def append_values(out: BinaryIO, values: np.ndarray) -> None:
    """Write `values`' bytes at `out`'s position (a file written front to back, unhashed: the
    two-pass store's `stream_token_lists`)."""
    out.write(np.ascontiguousarray(values).data.cast("B"))


def create_sized(path: Path, header: bytes, num_bytes: int) -> None:
    """Create `path` with `header`, then `num_bytes` of zeros (sparse), so tasks can write their
    values at known positions in any order.

    Args:
        path: the file, created or truncated.
        header: its `.npy` header (`store_header`, `pieces_header`).
        num_bytes: the size of its values.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, header)
        os.ftruncate(fd, len(header) + num_bytes)
    finally:
        os.close(fd)


class Writes:
    """A thread that writes queued buffers to their file descriptors, in the order queued."""

    def __init__(self, max_bytes: int = _MAX_QUEUED_BYTES) -> None:
        self._max_bytes = max_bytes
        self._cond = threading.Condition()
        self._items: deque[tuple[int, memoryview]] = deque()
        self._queued = 0  # bytes queued and not written yet
        self._error: OSError | None = None
        self._stop = False
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seqpack-write", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._items and not self._stop:
                        self._cond.wait()
                    if not self._items:
                        return
                    fd, view = self._items[0]
                    failed = self._error is not None
                try:
                    if not failed:  # after a failure the rest is dropped
                        write_all(fd, [view])
                except OSError as error:
                    self._error = error
                with self._cond:
                    self._items.popleft()
                    self._queued -= len(view)
                    self._cond.notify_all()
        finally:
            self._finished.set()

    def write(self, fd: int, view: memoryview) -> None:
        """Queue `view` for `fd` (keep it unchanged until written); waits while the queue is
        full (a buffer larger than the queue goes in alone)."""
        with self._cond:
            while self._queued and self._queued + len(view) > self._max_bytes:
                self._cond.wait(_POLL_SECONDS)
            if self._error is not None:
                raise self._error
            self._items.append((fd, view))
            self._queued += len(view)
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until everything queued is written; raise the first failed write."""
        with self._cond:
            while self._items:
                self._cond.wait(_POLL_SECONDS)
            if self._error is not None:
                raise self._error

    def close(self) -> None:
        """Let the thread end once the queue is written (or dropped, after a failure), and wait
        for it: no file may be closed under it."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        with signals_held():
            self._finished.wait()


class StoreFile:
    """A `.npy` file written front to back through `writes`: the header for `predicted` values
    first, then the values, hashed (sha256) as they are queued."""

    def __init__(self, path: Path, dtype: np.dtype[Any], predicted: int, writes: Writes) -> None:
        self.path, self.dtype, self.predicted = path, dtype, predicted
        self._writes = writes
        header = store_header(dtype, predicted)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._digest = hashlib.sha256(header)
        writes.write(self._fd, memoryview(header))
        self.count = 0
        self.num_bytes = len(header)

    def write(self, values: np.ndarray) -> None:
        if not values.size:
            return
        view = np.ascontiguousarray(values, dtype=self.dtype).data.cast("B")
        self._digest.update(view)
        assert self._fd is not None
        self._writes.write(self._fd, view)
        self.count += values.size
        self.num_bytes += len(view)

    def close(self) -> str | None:
        """Close the file (after `Writes.drain`); its sha256, or None when the count was not the
        predicted one (the header is then rewritten, and the file must be hashed by reading
        it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.count == self.predicted:
            return self._digest.hexdigest()
        with open(self.path, "r+b") as handle:
            handle.write(store_header(self.dtype, self.count))
        return None

    def abort(self) -> None:
        """Close the file whatever was written (after `Writes.close`)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
