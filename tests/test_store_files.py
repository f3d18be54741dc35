"""The low-level write code has one home (issue 25, 1): an AST guard over `seqpack_cli/` that
allows the `os.pwrite`/`os.pwritev`/`os.writev` loops and the `npy_header` builder only in
`npy_files.py` and writes of `HEADER_BYTES` only in `prepare/store_files.py`; and the store's
writers against numpy and hashlib."""

from __future__ import annotations

import ast
import hashlib
import itertools
import os
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.npy_files import pwrite_at
from seqpack_cli.prepare.store_files import (
    HEADER_BYTES,
    StoreFile,
    Writes,
    create_sized,
    pieces_header,
    store_header,
)

PACKAGE = Path(__file__).resolve().parents[1] / "seqpack_cli"
LOW_LEVEL = Path("npy_files.py")  # the one home of the write loops and of npy_header
STORE_WRITER = Path("prepare/store_files.py")  # the one writer of the store's fixed-size headers
WRITE_LOOP_CALLS = {"pwrite", "pwritev", "writev"}
WRITE_CALLS = {"write", "writev", "pwrite", "pwritev"}


def _names(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def low_level_writes_out_of_place(package: Path) -> list[str]:
    """Each `os.pwrite`/`os.pwritev`/`os.writev` call and `npy_header` definition outside
    npy_files.py, and each write of `HEADER_BYTES` outside store_files.py, in every module of
    `package`, as `path:line what`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            defines = isinstance(node, ast.FunctionDef) and node.name == "npy_header"
            if defines and relative != LOW_LEVEL:
                found.append(f"{relative}:{node.lineno} defines npy_header")
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            called = node.func
            if (
                called.attr in WRITE_LOOP_CALLS
                and isinstance(called.value, ast.Name)
                and called.value.id == "os"
                and relative != LOW_LEVEL
            ):
                found.append(f"{relative}:{node.lineno} calls os.{called.attr}")
            if (
                called.attr in WRITE_CALLS
                and any("HEADER_BYTES" in _names(a) for a in node.args)
                and relative != STORE_WRITER
            ):
                found.append(f"{relative}:{node.lineno} writes HEADER_BYTES")
    return found


def test_the_write_loops_and_npy_header_live_only_in_npy_files() -> None:
    assert low_level_writes_out_of_place(PACKAGE) == []


def test_the_guard_finds_each_kind_of_write_anywhere_in_the_package(tmp_path: Path) -> None:
    (tmp_path / "prepare").mkdir()
    (tmp_path / "prepared").mkdir()
    (tmp_path / "prepare" / "rogue.py").write_text(
        "import os\n"
        "def npy_header(dtype, count):\n    return b''\n"
        "def f(fd, out, view):\n"
        "    os.pwritev(fd, [view], 0)\n"
        "    os.pwrite(fd, view, 0)\n"
        "    out.write(bytes(HEADER_BYTES))\n"
    )
    (tmp_path / "prepared" / "rogue_pools.py").write_text(
        "import os\ndef write(fd, views):\n    os.writev(fd, views)\n"
    )
    (tmp_path / "top_level.py").write_text("def npy_header(count):\n    return b''\n")
    # The homes may do what they are there for, and nothing else.
    (tmp_path / "npy_files.py").write_text(
        "import os\n"
        "def npy_header(dtype, count):\n    return b''\n"
        "os.pwrite(0, b'', 0)\nos.pwritev(0, [], 0)\nos.writev(0, [])\n"
        "out.write(bytes(HEADER_BYTES))\n"
    )
    (tmp_path / "prepare" / "store_files.py").write_text(
        "import os\nout.write(bytes(HEADER_BYTES))\nos.pwrite(0, b'', 0)\n"
    )
    assert low_level_writes_out_of_place(tmp_path) == [
        "npy_files.py:7 writes HEADER_BYTES",
        "prepare/rogue.py:2 defines npy_header",
        "prepare/rogue.py:5 calls os.pwritev",
        "prepare/rogue.py:6 calls os.pwrite",
        "prepare/rogue.py:7 writes HEADER_BYTES",
        "prepare/store_files.py:3 calls os.pwrite",
        "prepared/rogue_pools.py:3 calls os.writev",
        "top_level.py:1 defines npy_header",
    ]


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.integers(0, 2**31 - 1), max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=8),
    seed=st.integers(0, 2**32 - 1),
    itemsize=st.sampled_from(["<u2", "<u4", "<i8"]),
)
def test_a_file_written_positionally_in_shuffled_chunks_equals_np_save(
    tmp_path_factory: object, values: list[int], cuts: list[int], seed: int, itemsize: str
) -> None:
    dtype = np.dtype(itemsize)
    array = np.array([v % (1 << (8 * dtype.itemsize - 1)) for v in values], dtype=dtype)
    folder = Path(tmp_path_factory.mktemp("positional"))  # type: ignore[attr-defined]
    path = folder / "tokens.npy"
    create_sized(path, store_header(dtype, array.size), array.nbytes)
    bounds = sorted({0, array.size, *(min(cut, array.size) for cut in cuts)})
    chunks = list(itertools.pairwise(bounds))
    np.random.default_rng(seed).shuffle(chunks)
    fd = os.open(path, os.O_WRONLY)
    try:
        for begin, end in chunks:
            pwrite_at(fd, array[begin:end], HEADER_BYTES + dtype.itemsize * begin)
    finally:
        os.close(fd)
    np.save(folder / "expected.npy", array)
    expected = np.load(folder / "expected.npy")
    assert path.read_bytes()[HEADER_BYTES:] == expected.tobytes()
    assert np.array_equal(np.load(path), expected) and np.load(path).dtype == dtype


def test_headers_are_numpys_of_their_size(tmp_path: Path) -> None:
    for count in (0, 1, 7, 10**12):
        header = store_header(np.dtype("<u4"), count)
        assert len(header) == HEADER_BYTES and len(pieces_header(count)) == HEADER_BYTES
    table = np.arange(21, dtype=np.int64).reshape(7, 3)
    create_sized(tmp_path / "pieces.npy", pieces_header(7), table.nbytes)
    fd = os.open(tmp_path / "pieces.npy", os.O_WRONLY)
    try:
        pwrite_at(fd, table, HEADER_BYTES)
    finally:
        os.close(fd)
    assert np.array_equal(np.load(tmp_path / "pieces.npy"), table)


def _stream(path: Path, chunks: list[np.ndarray], predicted: int) -> str | None:
    writes = Writes(max_bytes=64)  # a small queue: the writer thread waits and wakes
    store = StoreFile(path, np.dtype("<u4"), predicted, writes)
    for chunk in chunks:
        store.write(chunk)
    writes.drain()
    writes.close()
    return store.close()


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), max_size=10), off_by=st.integers(-3, 3))
def test_the_hashed_writer_hashes_what_it_wrote_and_fixes_a_wrong_prediction(
    tmp_path_factory: object, sizes: list[int], off_by: int
) -> None:
    folder = Path(tmp_path_factory.mktemp("hashed"))  # type: ignore[attr-defined]
    chunks = [np.arange(size, dtype=np.uint32) * 7 for size in sizes]
    array = np.concatenate([np.zeros(0, np.uint32), *chunks])
    predicted = max(0, array.size + off_by)
    digest = _stream(folder / "tokens.npy", chunks, predicted)
    written = (folder / "tokens.npy").read_bytes()
    assert np.array_equal(np.load(folder / "tokens.npy"), array)
    assert written[:HEADER_BYTES] == store_header(np.dtype("<u4"), array.size)
    if predicted == array.size:
        assert digest == hashlib.sha256(written).hexdigest()
    else:
        assert digest is None  # the header was rewritten: the caller hashes the file
