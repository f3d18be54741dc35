"""The low-level `.npy` file code of the package: the one header builder and the two write loops.

Every `.npy` file seqpack writes (the pools, the token store, the Dask engine's merged files) gets
its header from `npy_header` and its bytes from `write_all` (appends) or `pwrite_at` (positional
writes), so the header format and the handling of partial writes live in one place. The header is
built as text because numpy has no header of a fixed size (the store writes its headers before
the counts are known) and no header without a file object; for the `np.save` form it is cheaper
too (1.7 us against 6.8 us for `np.save` of an empty array, numpy 2.4), and a prepared directory
may hold thousands of pools.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["npy_header", "pwrite_at", "write_all"]

_MAGIC = b"\x93NUMPY\x01\x00"  # format version 1.0
# What numpy puts in front of the header text: the magic string, then a 2-byte text length.
_PREFIX_BYTES = len(_MAGIC) + 2
# numpy aligns the data on 64 bytes, and leaves room in the header for the first axis to grow to
# this many digits (so a file can be extended in place): np.lib.format's GROWTH_AXIS_MAX_DIGITS.
_ALIGN = 64
_GROWTH_AXIS_DIGITS = 21


def npy_header(
    dtype: np.dtype[Any], count: int | tuple[int, ...], *, padded_to: int | None = None
) -> bytes:
    """The version 1.0 `.npy` header of a C-ordered array of `dtype`.

    Args:
        dtype: the array's dtype (a plain, non-structured one).
        count: its length (a 1-d array), or its whole shape as a tuple.
        padded_to: None for `np.save`'s header, byte for byte; otherwise the header's total size
            in bytes, fixed whatever the count (so a header written before the count was known
            can be rewritten in place).

    Returns:
        The header's bytes; the array's values follow them in the file.

    Raises:
        ValueError: when the header does not fit in `padded_to` bytes.
    """
    shape = (int(count),) if isinstance(count, int | np.integer) else tuple(map(int, count))
    text = (
        f"{{'descr': {np.lib.format.dtype_to_descr(np.dtype(dtype))!r}, "
        f"'fortran_order': False, 'shape': {shape!r}, }}"
    )
    if padded_to is None:
        if shape:
            text += " " * (_GROWTH_AXIS_DIGITS - len(repr(shape[0])))
        # Like numpy: 1 to 64 spaces, then a newline, end the header on a 64-byte boundary.
        text += " " * (_ALIGN - (_PREFIX_BYTES + len(text) + 1) % _ALIGN)
    elif _PREFIX_BYTES + len(text) + 1 > padded_to:
        raise ValueError(
            f"an .npy header of shape {shape} needs {_PREFIX_BYTES + len(text) + 1} bytes, "
            f"more than padded_to={padded_to}"
        )
    else:
        text = text.ljust(padded_to - _PREFIX_BYTES - 1)
    body = (text + "\n").encode("latin1")
    return _MAGIC + len(body).to_bytes(2, "little") + body


def write_all(fd: int, buffers: list[Any]) -> None:
    """Write every byte of `buffers`, in order, at `fd`'s position: the package's one `os.writev`
    loop (a write may be partial).

    Args:
        fd: a file descriptor open for writing.
        buffers: contiguous buffers (C-contiguous arrays, bytes, memoryviews).
    """
    views = [memoryview(buffer).cast("B") for buffer in buffers]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def pwrite_at(fd: int, buffer: Any, offset: int) -> None:
    """Write all of `buffer` at byte `offset` of the open file `fd`: the package's one `os.pwrite`
    loop (a pwrite may be partial).

    Args:
        fd: a file descriptor open for writing.
        buffer: a contiguous buffer (a C-contiguous array, bytes, a memoryview).
        offset: the byte position of its first byte.
    """
    view = memoryview(buffer).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
