"""`prepare/store_files.py` is the one writer of store file bytes (issue 25, 1): an AST guard
over `seqpack_cli/`, and the module's writers against numpy and hashlib."""

from __future__ import annotations

import ast
import hashlib
import itertools
import os
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.prepare.store_files import (
    HEADER_BYTES,
    StoreFile,
    Writes,
    create_sized,
    npy_header,
    pieces_header,
    pwrite_at,
)

PACKAGE = Path(__file__).resolve().parents[1] / "seqpack_cli"
WRITER = Path("prepare/store_files.py")
POOL_HEADER = Path("prepared/pool_files.py")  # pools/{length}.npy's own (numpy-padded) header
POSITIONAL_WRITES = {"pwrite", "pwritev"}
WRITE_CALLS = {"write", "writev", "pwrite", "pwritev"}


def _names(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def store_writes_outside_the_writer(package: Path) -> list[str]:
    """Each `os.pwrite`/`os.pwritev` call, `npy_header` definition and write of `HEADER_BYTES`
    outside store_files.py, as `path:line what`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative == WRITER:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            defines = isinstance(node, ast.FunctionDef) and node.name == "npy_header"
            if defines and relative != POOL_HEADER:
                found.append(f"{relative}:{node.lineno} defines npy_header")
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            called = node.func
            if (
                called.attr in POSITIONAL_WRITES
                and isinstance(called.value, ast.Name)
                and called.value.id == "os"
            ):
                found.append(f"{relative}:{node.lineno} calls os.{called.attr}")
            if called.attr in WRITE_CALLS and any("HEADER_BYTES" in _names(a) for a in node.args):
                found.append(f"{relative}:{node.lineno} writes HEADER_BYTES")
    return found


def test_only_store_files_writes_store_file_bytes() -> None:
    assert store_writes_outside_the_writer(PACKAGE) == []


def test_the_guard_finds_each_kind_of_write(tmp_path: Path) -> None:
    (tmp_path / "prepare").mkdir()
    (tmp_path / "prepare" / "rogue.py").write_text(
        "import os\n"
        "def npy_header(dtype, count):\n    return b''\n"
        "def f(fd, out, view):\n"
        "    os.pwritev(fd, [view], 0)\n"
        "    os.pwrite(fd, view, 0)\n"
        "    out.write(bytes(HEADER_BYTES))\n"
    )
    (tmp_path / "prepare" / "store_files.py").write_text("import os\nos.pwrite(0, b'', 0)\n")
    assert store_writes_outside_the_writer(tmp_path) == [
        "prepare/rogue.py:2 defines npy_header",
        "prepare/rogue.py:5 calls os.pwritev",
        "prepare/rogue.py:6 calls os.pwrite",
        "prepare/rogue.py:7 writes HEADER_BYTES",
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
    create_sized(path, npy_header(dtype, array.size), array.nbytes)
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
        header = npy_header(np.dtype("<u4"), count)
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
    assert written[:HEADER_BYTES] == npy_header(np.dtype("<u4"), array.size)
    if predicted == array.size:
        assert digest == hashlib.sha256(written).hexdigest()
    else:
        assert digest is None  # the header was rewritten: the caller hashes the file
