"""Merging ascending runs of ids from files, and counting the ids that occur more than once.

What the merge and duplicate-check tasks are made of. The groups' runs are files of ids,
ascending within each `Segment`, each stored as its group's `RunEncoding` says;
`merged_segments` yields their union (every copy kept) in ascending chunks while holding one
block per segment, so a task's memory is bounded whatever the sizes; `DuplicateCounter` counts,
over such chunks, what `sql/duplicate_ids_all.sql` counts: the ids that occur more than once,
the rows beyond the first of each, and the smallest such id.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from seqpack_cli.npy_files import pwrite_at
from seqpack_cli.prepare.pools.offsets import changed_error

__all__ = [
    "MIN_BLOCK",
    "DuplicateCounter",
    "RunEncoding",
    "Segment",
    "concatenated_segments",
    "merged_segments",
    "pwrite_all",
    "pwrite_encoded",
    "read_block",
]

MIN_BLOCK = 1 << 12


_NARROW_SPAN = 1 << 32
_ENCODE_CHUNK = 1 << 20  # ids encoded at a time when writing


@dataclass(frozen=True)
class RunEncoding:
    """How a group's runs store its ids: `id - base` as uint32 (`narrow`) where the group's ids
    span less than 2**32 (row indexes, dense ids: half the bytes written, read back, and sent
    through the shared filesystem), plain int64 otherwise. Decided from the footers' bounds, so
    a task run again writes the same bytes."""

    base: int = 0
    narrow: bool = False

    @classmethod
    def for_bounds(cls, bounds: tuple[int, int] | None) -> RunEncoding:
        if bounds is None or bounds[1] - bounds[0] >= _NARROW_SPAN:
            return cls()
        return cls(bounds[0], True)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype("<u4") if self.narrow else np.dtype("<i8")

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def encode(self, ids: np.ndarray) -> np.ndarray:
        """int64 ids as stored; the changed-inputs error for an id outside the bounds the
        encoding was made for."""
        if not self.narrow:
            return np.ascontiguousarray(ids, dtype="<i8")
        offsets = ids - self.base
        if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) >= _NARROW_SPAN):
            raise changed_error()  # outside the footers' bounds: the inputs changed
        return offsets.astype("<u4")

    def decode(self, stored: np.ndarray) -> np.ndarray:
        """Stored values as int64 ids."""
        ids = np.asarray(stored).astype(np.int64)
        if self.narrow and self.base:
            ids += self.base
        return ids

    def position(self, stored: np.ndarray, value: int) -> int:
        """Where `value` would go among ascending `stored` values (the first at or above it)."""
        if self.narrow:
            value -= self.base
            if value <= 0:
                return 0
            if value >= _NARROW_SPAN:
                return int(stored.shape[0])
        # The value in the run's own dtype: a Python int would make numpy cast the whole run.
        return int(np.searchsorted(stored, self.dtype.type(value), "left"))


@dataclass(frozen=True)
class Segment:
    """`count` ascending ids of the file `path`, from id position `start`, stored as
    `encoding` says."""

    path: str
    start: int
    count: int
    encoding: RunEncoding = field(default_factory=RunEncoding)


def read_block(
    fd: int, start: int, count: int, encoding: RunEncoding = RunEncoding()
) -> np.ndarray:
    """`count` ids (int64) of an open run from id position `start`."""
    stored = np.empty(count, dtype=encoding.dtype)
    view = stored.data.cast("B")
    done = 0
    while done < len(view):
        read = os.preadv(fd, [view[done:]], encoding.itemsize * start + done)
        if not read:
            raise changed_error()  # a run shorter than its group said: rewritten meanwhile
        done += read
    return stored if not encoding.narrow else encoding.decode(stored)


def pwrite_encoded(fd: int, ids: np.ndarray, start: int, encoding: RunEncoding) -> None:
    """Write int64 `ids` as `encoding` stores them, at id position `start` of an open run
    (encoded a chunk at a time: no second copy of a large array)."""
    if not encoding.narrow:
        pwrite_all(fd, ids, start)
        return
    for at in range(0, ids.size, _ENCODE_CHUNK):
        pwrite_at(fd, encoding.encode(ids[at : at + _ENCODE_CHUNK]), 4 * (start + at))


def pwrite_all(fd: int, data: np.ndarray, start: int) -> None:
    """Write int64 `data` at id position `start` of an open file (a write may be partial)."""
    pwrite_at(fd, np.ascontiguousarray(data, dtype=np.int64), 8 * start)


class _Reader:
    """Reads the segments block by block, each file opened once."""

    def __init__(self, segments: Sequence[Segment], block: int) -> None:
        self.segments = list(segments)
        self.block = block
        self.fds: dict[str, int] = {}
        self.next = [segment.start for segment in self.segments]

    def more(self, i: int) -> bool:
        segment = self.segments[i]
        return self.next[i] < segment.start + segment.count

    def read(self, i: int) -> np.ndarray:
        segment = self.segments[i]
        fd = self.fds.get(segment.path)
        if fd is None:
            fd = self.fds[segment.path] = os.open(segment.path, os.O_RDONLY)
        take = min(self.block, segment.start + segment.count - self.next[i])
        ids = read_block(fd, self.next[i], take, segment.encoding)
        self.next[i] += take
        return ids

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def concatenated_segments(segments: Iterable[Segment], block_ids: int) -> Iterator[np.ndarray]:
    """The segments one after the other, in blocks (for runs known to follow each other)."""
    reader = _Reader([segment for segment in segments if segment.count], block_ids)
    try:
        for i in range(len(reader.segments)):
            while reader.more(i):
                yield reader.read(i)
    finally:
        reader.close()


def merged_segments(
    segments: Iterable[Segment], block_ids: int, *, min_block: int = MIN_BLOCK
) -> Iterator[np.ndarray]:
    """The union of ascending segments (every copy kept), in ascending chunks.

    One block per segment is held (`block_ids` over all of them, but at least `min_block` ids
    each: smaller reads would cost more in system calls than they save). Everything up to the
    smallest last id among the blocks of segments with more to read is final: it is cut off,
    sorted and yielded, and the block that ended there is read again.
    """
    kept = [segment for segment in segments if segment.count]
    if not kept:
        return
    reader = _Reader(kept, max(block_ids // len(kept), min_block))
    try:
        heads = [reader.read(i) for i in range(len(kept))]
        while any(head.size for head in heads):
            limits = [int(head[-1]) for i, head in enumerate(heads) if head.size and reader.more(i)]
            cutoff = min(limits) if limits else None
            parts = []
            for i, head in enumerate(heads):
                cut = head.size if cutoff is None else int(np.searchsorted(head, cutoff, "right"))
                if cut:
                    parts.append(head[:cut])
                heads[i] = head[cut:]
                if not heads[i].size and reader.more(i):
                    heads[i] = reader.read(i)
            if len(parts) == 1:
                yield parts[0]
            elif parts:
                merged = np.concatenate(parts)
                merged.sort()
                yield merged
    finally:
        reader.close()


class DuplicateCounter:
    """Ids that occur more than once, over ascending chunks fed in order (`add`).

    `num_ids`: how many distinct ids occur more than once; `num_extra`: the rows beyond the
    first of each; `example`: the smallest of them (None when there is none). A run of equal ids
    may cross chunks: the last id seen, and whether it repeated, carry over.
    """

    def __init__(self) -> None:
        self.num_ids = 0
        self.num_extra = 0
        self.example: int | None = None
        self._last: int | None = None
        self._last_repeated = False

    def add(self, chunk: np.ndarray) -> None:
        if not chunk.size:
            return
        same = chunk[1:] == chunk[:-1]
        joined = self._last is not None and int(chunk[0]) == self._last
        if joined:
            self.num_extra += 1
            if not self._last_repeated:
                self._found(1, self._last)
        # A run of equal ids starts where an id equals the next but not the one before.
        starts = same.copy()
        starts[1:] &= ~same[:-1]
        if joined and starts.size:
            starts[0] = False  # the run began in an earlier chunk: counted there
        self.num_extra += int(np.count_nonzero(same))
        num_starts = int(np.count_nonzero(starts))
        if num_starts:
            self._found(num_starts, int(chunk[int(np.argmax(starts))]))
        self._last_repeated = bool(same[-1]) if same.size else joined
        self._last = int(chunk[-1])

    def _found(self, count: int, smallest: int | None) -> None:
        self.num_ids += count
        if self.example is None:
            self.example = smallest
