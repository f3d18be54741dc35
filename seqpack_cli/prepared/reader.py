"""Reading a prepared directory: `load_prepared` and the lazily mapped `PoolMap`.

`load_prepared` checks the version, that every file is there with its recorded size and that each
pool holds as many ids as its count; with `verify=True` it also checks every sha256. Pools are
memory-mapped without holding a file descriptor each, so datasets with tens of thousands of
distinct lengths load under the common 1024 open-files limit.

Part of the training-time runtime: imports neither duckdb nor rich.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import re
import sys
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli import __version__
from seqpack_cli.errors import PreparedFormatError
from seqpack_cli.pool_files import POOL_DTYPE as _POOL_DTYPE
from seqpack_cli.pool_files import POOLS_DIR, npy_header, pool_file_name
from seqpack_cli.prepared.layout import (
    COUNTS_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    TEMPLATES_NAME,
    Prepared,
)

__all__ = ["PoolMap", "load_prepared"]

_HASH_CHUNK = 1 << 22


_HEADER = re.compile(rb"\{'descr': '<i8', 'fortran_order': False, 'shape': \((\d+),\), \} *\n")


def _read_npy_header(handle: Any) -> tuple[np.dtype[Any], tuple[int, ...], int]:
    """(dtype, shape, data offset) of an open .npy file; fast for the headers prepare writes."""
    start = handle.read(10)
    if start[:8] == b"\x93NUMPY\x01\x00":
        body = handle.read(int.from_bytes(start[8:10], "little"))
        match = _HEADER.fullmatch(body)
        if match:
            return _POOL_DTYPE, (int(match.group(1)),), 10 + len(body)
    handle.seek(0)
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    else:
        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    return dtype, shape, handle.tell()


def _fail(path: Path, problem: str) -> PreparedFormatError:
    return PreparedFormatError(
        f"{path} is not a usable prepared directory: {problem}; re-run `seqpack prepare ... "
        f"--output {path} --overwrite` to rebuild it"
    )


def _read_json(path: Path, name: str) -> Any:
    try:
        return json.loads((path / name).read_text())
    except (OSError, ValueError) as error:
        raise _fail(path, f"{name} cannot be read ({error})") from None


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise PreparedFormatError(
            f"prepared directory {path} does not exist; create it with `seqpack prepare INPUT... "
            f"--length-column NAME --max-seq-len N --output {path}`"
        )
    if not path.is_dir():
        raise PreparedFormatError(f"{path} is a file; expected a prepared directory")
    if not (path / MANIFEST_NAME).is_file():
        raise _fail(path, "manifest.json is missing (an interrupted prepare leaves none)")
    manifest = _read_json(path, MANIFEST_NAME)
    if not isinstance(manifest, dict) or "format_version" not in manifest:
        raise _fail(path, "manifest.json has no format_version")
    version = manifest["format_version"]
    if version != FORMAT_VERSION:
        raise PreparedFormatError(
            f"{path} has format_version {version!r}, but seqpack {__version__} reads only "
            f"format_version {FORMAT_VERSION}; rebuild it with this seqpack (`seqpack prepare "
            f"... --output {path} --overwrite`) or load it with the seqpack that wrote it "
            f"({manifest.get('seqpack_version', 'unknown version')})"
        )
    files = manifest.get("files")
    config = manifest.get("config")
    if not isinstance(files, dict) or not isinstance(config, dict) or "max_seq_len" not in config:
        raise _fail(path, "manifest.json lacks its files table or config.max_seq_len")
    return manifest


def _check_files(path: Path, files: Mapping[str, Any], *, verify: bool) -> None:
    root = os.fspath(path)
    for name, entry in files.items():
        file_path = os.path.join(root, name)
        try:
            size = os.stat(file_path).st_size
        except OSError:
            raise _fail(path, f"{name} is missing") from None
        if size != entry.get("bytes"):
            raise _fail(path, f"{name} has {size} bytes, the manifest says {entry.get('bytes')}")
        if verify:
            digest = hashlib.sha256()
            with open(file_path, "rb") as handle:
                while block := handle.read(_HASH_CHUNK):
                    digest.update(block)
            if digest.hexdigest() != entry.get("sha256"):
                raise _fail(path, f"{name} does not match its sha256 in the manifest (corrupted)")


# Mapping a file without keeping a file descriptor: Python's mmap keeps a dup()ed descriptor per
# mapping until 3.13 (`trackfd=False`), so one np.memmap per pool would exhaust a 1024 open-files
# limit; below 3.13 the mapping is made through libc directly.
_libc: Any = None


def _map_readonly(fd: int, size: int) -> Any:
    """A read-only shared mapping of a whole file, as a buffer that unmaps when collected."""
    if sys.version_info >= (3, 13):
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ, trackfd=False)  # type: ignore[call-arg]
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = libc
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == ctypes.c_void_p(-1).value:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    buffer = (ctypes.c_char * size).from_address(address)
    weakref.finalize(buffer, _libc.munmap, address, size)
    return buffer


def _open_pool(path: Path, name: str, expected: int, *, mmap_pools: bool) -> np.ndarray:
    file_path = os.path.join(os.fspath(path), name)
    try:
        with open(file_path, "rb") as handle:
            dtype, shape, offset = _read_npy_header(handle)
            if dtype != _POOL_DTYPE or len(shape) != 1:
                raise _fail(path, f"{name} holds {dtype} {shape}; expected a 1-d int64 array")
            if shape[0] != expected:
                raise _fail(
                    path,
                    f"{name} holds {shape[0]} ids but counts.json says {expected} sequences have "
                    "that length",
                )
            if expected == 0:
                return np.empty(0, dtype=_POOL_DTYPE)
            if not mmap_pools:
                array = np.fromfile(handle, dtype=_POOL_DTYPE, count=expected)
                if array.size != expected:
                    raise _fail(path, f"{name} is truncated")
                return array
            size = os.fstat(handle.fileno()).st_size
            if size < offset + 8 * expected:
                raise _fail(path, f"{name} is truncated")
            buffer = _map_readonly(handle.fileno(), size)
    except (OSError, ValueError) as error:
        if isinstance(error, PreparedFormatError):
            raise
        raise _fail(path, f"{name} cannot be read as a .npy pool ({error})") from None
    array = np.frombuffer(buffer, dtype=_POOL_DTYPE, count=expected, offset=offset)
    array.flags.writeable = False
    return array


class PoolMap(Mapping[int, np.ndarray]):
    """The pools of a prepared directory, `{length: read-only int64 ids}`.

    Each pool is opened (memory-mapped, or read with `mmap=False`) on first access and cached,
    so loading costs nothing per pool until a pool is used. Pickles as its location: DataLoader
    workers map the files themselves instead of receiving copies.
    """

    def __init__(self, root: str | os.PathLike[str], counts: Mapping[int, int], mmap: bool = True):
        self._root = Path(root)
        self._counts = {int(length): int(count) for length, count in counts.items()}
        self._mmap = mmap
        self._arrays: dict[int, np.ndarray] = {}

    def __getitem__(self, length: int) -> np.ndarray:
        array = self._arrays.get(length)
        if array is None:
            count = self._counts[length]
            array = _open_pool(self._root, pool_file_name(length), count, mmap_pools=self._mmap)
            self._arrays[int(length)] = array
        return array

    def __contains__(self, length: object) -> bool:
        return length in self._counts

    def __iter__(self) -> Iterator[int]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PoolMap, (self._root, self._counts, self._mmap))

    def __repr__(self) -> str:
        return f"PoolMap({os.fspath(self._root)!r}, {len(self)} pools, mmap={self._mmap})"


def load_prepared(
    path: str | os.PathLike[str], *, mmap: bool = True, verify: bool = False
) -> Prepared:
    """Load a prepared directory written by `seqpack prepare`.

    Returns a `Prepared` that unpacks as `manifest, counts, templates, pools`. Pools are
    read-only int64 arrays, memory-mapped by default (no file descriptor is held per pool, so
    any number of distinct lengths loads); `mmap=False` reads them all into memory now.
    Raises `PreparedFormatError` for a missing or incomplete directory, an unknown
    `format_version`, a pool whose size disagrees with the counts, and (with `verify=True`) any
    file whose sha256 differs from the manifest's.
    """
    root = Path(path)
    manifest = _read_manifest(root)
    files = manifest["files"]
    for required in (COUNTS_NAME, TEMPLATES_NAME):
        if required not in files:
            raise _fail(root, f"the manifest does not list {required}")
    try:
        counts = {int(k): int(v) for k, v in _read_json(root, COUNTS_NAME).items()}
        templates: Counter[tuple[int, ...]] = Counter()
        for template, multiplicity in _read_json(root, TEMPLATES_NAME):
            templates[tuple(int(x) for x in template)] += int(multiplicity)
    except (AttributeError, TypeError, ValueError):
        raise _fail(root, "counts.json or templates.json is malformed") from None
    listed_pools = {name for name in files if name.startswith(f"{POOLS_DIR}/")}
    expected_pools = {pool_file_name(length) for length in counts}
    if listed_pools != expected_pools:
        odd = sorted(listed_pools ^ expected_pools)[0]
        raise _fail(root, f"the pools listed in the manifest and counts.json disagree ({odd})")
    for length, count in counts.items():
        # A pool's size follows from its count (canonical header + 8 bytes per id), so the size
        # check below catches a pool that disagrees with the counts without opening it.
        name = pool_file_name(length)
        recorded = files[name].get("bytes")
        if recorded != len(npy_header(count)) + 8 * count:
            raise _fail(
                root,
                f"{name} has {recorded} bytes in the manifest, but counts.json says {count} "
                "sequences have that length",
            )
    _check_files(root, files, verify=verify)
    pools = PoolMap(root, counts, mmap)
    if not mmap:
        for length in counts:
            pools[length]
    return Prepared(root, manifest, counts, templates, pools)
