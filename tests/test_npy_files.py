"""`seqpack_cli/npy_files.py`: the one `.npy` header builder against numpy's own writer, and the
two write loops against writes that stop part way (a pipe, a signal, a full buffer)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli import npy_files
from seqpack_cli.npy_files import npy_header, pwrite_at, write_all

# The plain dtypes seqpack writes (ids, offsets, tokens, masks), and a few it does not, in both
# byte orders: the header must be numpy's whatever the descr looks like.
DTYPES = ["<i8", "<u4", "<u2", "|u1", "|b1", "<i4", ">i8", ">u4", "<f4", "<f8", "<c16"]
COUNTS = st.one_of(
    st.integers(0, 300),
    st.integers(0, 2**63 - 1),
    st.sampled_from([9, 10, 99, 100, 10**6, 10**12, 10**15, 2**62]),
)


def _numpy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer,
        {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape},
    )
    return buffer.getvalue()


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(DTYPES), count=COUNTS, columns=st.sampled_from([None, 1, 3, 17]))
def test_the_header_is_np_saves_byte_for_byte(dtype: str, count: int, columns: int | None) -> None:
    shape = (count,) if columns is None else (count, columns)
    header = npy_header(np.dtype(dtype), count if columns is None else shape)
    assert header == _numpy_header(np.dtype(dtype), shape)
    assert len(header) % 64 == 0  # numpy aligns the values on 64 bytes


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    values=st.lists(st.integers(0, 120), max_size=40),
    columns=st.sampled_from([None, 3]),
)
def test_a_file_with_the_unpadded_header_is_the_file_np_save_writes(
    tmp_path_factory: pytest.TempPathFactory, dtype: str, values: list[int], columns: int | None
) -> None:
    array = np.array(values, dtype=dtype)
    if columns is not None:
        array = np.repeat(array, columns).reshape(-1, columns)
    folder = tmp_path_factory.mktemp("saved")
    np.save(folder / "numpy.npy", array)
    (folder / "ours.npy").write_bytes(npy_header(array.dtype, array.shape) + array.tobytes())
    assert (folder / "ours.npy").read_bytes() == (folder / "numpy.npy").read_bytes()


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    values=st.lists(st.integers(0, 120), max_size=40),
    padded_to=st.sampled_from([128, 192, 256, 4096]),
)
def test_a_padded_header_has_its_size_and_loads_with_np_load(
    tmp_path_factory: pytest.TempPathFactory, dtype: str, values: list[int], padded_to: int
) -> None:
    array = np.array(values, dtype=dtype)
    header = npy_header(array.dtype, array.size, padded_to=padded_to)
    assert len(header) == padded_to
    # Any count up to 2**63 - 1 fits in the store's 128 bytes, so a header written for one count
    # can be overwritten in place by the header of another.
    assert len(npy_header(array.dtype, 2**63 - 1, padded_to=padded_to)) == padded_to
    path = tmp_path_factory.mktemp("padded") / "values.npy"
    path.write_bytes(header + array.tobytes())
    loaded = np.load(path)
    assert loaded.dtype == array.dtype and np.array_equal(loaded, array)
    mapped = np.load(path, mmap_mode="r")
    assert mapped.offset == padded_to and np.array_equal(mapped, array)


def test_a_padded_header_too_small_for_its_text_is_refused() -> None:
    with pytest.raises(ValueError, match=r"needs \d+ bytes, more than padded_to=64"):
        npy_header(np.dtype("<i8"), 7, padded_to=64)


class _ShortWrites:
    """os.writev/os.pwrite stand-ins that write at most `limit` bytes per call into `data` (a
    partial write, as a pipe or a signal gives), recording each call's size."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.position = limit, bytearray(), 0
        self.calls: list[int] = []

    def _put(self, chunk: bytes, at: int) -> int:
        chunk = chunk[: self.limit]
        self.data[len(self.data) :] = bytes(max(0, at + len(chunk) - len(self.data)))
        self.data[at : at + len(chunk)] = chunk
        self.calls.append(len(chunk))
        return len(chunk)

    def writev(self, fd: int, views: list[memoryview]) -> int:
        written = self._put(b"".join(bytes(view) for view in views), self.position)
        self.position += written
        return written

    def pwrite(self, fd: int, view: memoryview, offset: int) -> int:
        return self._put(bytes(view), offset)


@settings(max_examples=80, deadline=None)
@given(
    parts=st.lists(st.binary(max_size=40), max_size=8),
    limit=st.integers(1, 50),
)
def test_write_all_finishes_every_partial_writev(parts: list[bytes], limit: int) -> None:
    fake = _ShortWrites(limit)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(npy_files.os, "writev", fake.writev)
        write_all(-1, [np.frombuffer(part, np.uint8) for part in parts])
    assert bytes(fake.data) == b"".join(parts)
    assert all(size <= limit for size in fake.calls)


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=200), offset=st.integers(0, 64), limit=st.integers(1, 50))
def test_pwrite_at_finishes_every_partial_pwrite(data: bytes, offset: int, limit: int) -> None:
    fake = _ShortWrites(limit)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(npy_files.os, "pwrite", fake.pwrite)
        pwrite_at(-1, data, offset)
    assert bytes(fake.data[offset:]) == data
    assert len(fake.calls) == -(-len(data) // limit)  # each call but the last wrote `limit`


def test_the_loops_write_real_files(tmp_path: Path) -> None:
    values = np.arange(1000, dtype="<i8")
    fd = os.open(tmp_path / "values.npy", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, [npy_header(values.dtype, values.size), values[:500]])
        pwrite_at(fd, values[500:], len(npy_header(values.dtype, values.size)) + 8 * 500)
    finally:
        os.close(fd)
    np.save(tmp_path / "expected.npy", values)
    assert (tmp_path / "values.npy").read_bytes() == (tmp_path / "expected.npy").read_bytes()
