"""What the driver saw of each input, checked by every task before it reads the file.

A Dask worker reads the inputs at the paths the driver names, but what it finds there is its own
view: a stale local copy (same rows, other tokens) would be read without a word, and the output
would mix the two. So the driver fingerprints each input before any task runs (`fingerprint`:
its size and a hash of its parquet footer, which holds every column chunk's offsets, sizes and
statistics: a few KiB read from the file's end; a JSON Lines input has no footer, so its first
and last MiB are hashed instead), and each task that opens an input checks the
file it sees against that (`tasks.check_inputs`), failing the job in one line that names the
file and the worker.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from seqpack_cli.prepare.input_batches import input_kind

__all__ = ["Fingerprint", "difference", "fingerprint", "fingerprints"]

_MAGIC = b"PAR1"
_TAIL_BYTES = 8  # a parquet file ends with its footer's length (4 bytes) and the magic
_DRIVER_THREADS = 16  # footers read at once on the driver: small reads, often on a network FS
_ENDS_BYTES = 1 << 20  # of a file without a parquet footer (JSON Lines): its head and tail


@dataclass(frozen=True)
class Fingerprint:
    """One input as the driver saw it: its size, and the sha256 of its footer (its first and last
    MiB if it has no parquet footer: JSON Lines, or a file the footer task says is not parquet)."""

    path: Path
    num_bytes: int
    footer_sha256: str


def _digest(handle: int, ranges: Sequence[tuple[int, int]]) -> str:
    """The sha256 of the bytes in `ranges` ([start, end) pairs) of an open file."""
    digest = hashlib.sha256()
    for start, end in ranges:
        while start < end:  # pread may return less than asked
            block = os.pread(handle, min(end - start, 1 << 22), start)
            if not block:
                break
            digest.update(block)
            start += len(block)
    return digest.hexdigest()


def _footer_digest(handle: int, size: int) -> str:
    tail = os.pread(handle, _TAIL_BYTES, max(0, size - _TAIL_BYTES))
    if len(tail) == _TAIL_BYTES and tail[4:] == _MAGIC:
        footer_bytes = int.from_bytes(tail[:4], "little")
        if footer_bytes + _TAIL_BYTES <= size:
            return _digest(handle, [(size - _TAIL_BYTES - footer_bytes, size)])
    # No parquet footer: the head and the tail (a whole small file, read once).
    head_end = min(size, _ENDS_BYTES)
    return _digest(handle, [(0, head_end), (max(head_end, size - _ENDS_BYTES), size)])


def fingerprint(path: Path) -> Fingerprint | None:
    """`path`'s fingerprint; None where it is not a regular file that can be read (the footer
    task words that as the local engine does)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # never open a FIFO: it would block
            return None
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(handle).st_size
        return Fingerprint(path, size, _footer_digest(handle, size))
    except OSError:
        return None
    finally:
        os.close(handle)


def fingerprints(paths: Sequence[Path]) -> list[Fingerprint | None]:
    """Every input's fingerprint (the driver's view), read a few at a time."""
    if len(paths) <= 1:
        return [fingerprint(path) for path in paths]
    with ThreadPoolExecutor(min(_DRIVER_THREADS, len(paths))) as pool:
        return list(pool.map(fingerprint, paths))


def difference(seen: Fingerprint | None, expected: Fingerprint) -> str | None:
    """How the file a worker sees (`seen`) differs from the driver's (`expected`); None: not."""
    if seen is None:
        return "it cannot be read there"
    if seen.num_bytes != expected.num_bytes:
        return f"it holds {seen.num_bytes} bytes there, {expected.num_bytes} on the driver"
    if seen.footer_sha256 != expected.footer_sha256:
        jsonl = input_kind(expected.path) == "jsonl"
        part = "first or last MiB" if jsonl else "parquet footer"
        return f"its {part} differs from the driver's (both {seen.num_bytes} bytes)"
    return None
