"""Reading a prepared directory: `load_prepared` and the lazily opened `PoolMap`.

`load_prepared` checks the manifest, counts.json and templates.json against their schema
(`schema`), that every file is there with its recorded size, that each pool holds as many ids as
its count, and that the templates fit `max_seq_len` and use every length exactly as often as
counts.json says (O(templates), always); with `verify=True` it also checks every sha256.

Pools are memory-mapped without holding a file descriptor each, so datasets with tens of
thousands of distinct lengths load under the common 1024 open-files limit; and at most
`max_mapped_pools` of them (default `MAX_MAPPED_POOLS`) are mapped, the largest, so they also stay
under the kernel's limit on mappings per process (see `PoolMap`).

Part of the training-time runtime: imports neither duckdb nor rich.
"""

from __future__ import annotations

import ctypes
import errno
import heapq
import logging
import mmap
import os
import sys
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.errors import PreparedFormatError
from seqpack_cli.npy_files import npy_header
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepared.consistency import (
    check_figures,
    check_templates,
    read_counts,
    read_templates,
)
from seqpack_cli.prepared.format import COUNTS_NAME, MANIFEST_NAME, TEMPLATES_NAME, Prepared
from seqpack_cli.prepared.integrity import (
    EDGES_KEY,
    check_manifest_digest,
    edge_digest,
    file_digest,
    manifest_digest,
)
from seqpack_cli.prepared.multiples import check_length_multiple, slot_counts
from seqpack_cli.prepared.pool_files import POOL_DTYPE as _POOL_DTYPE
from seqpack_cli.prepared.pool_files import POOLS_DIR, pool_file_name
from seqpack_cli.prepared.schema import check_manifest, unusable
from seqpack_cli.prepared.slot_pools import SlotPools
from seqpack_cli.prepared.snapshot import open_directory, read_text_at, reopen, was_replaced
from seqpack_cli.prepared.store import check_stored_lengths, open_store
from seqpack_cli.prepared.strict_json import parse_json
from seqpack_cli.token_sources import (
    NPY_HEADER_ERRORS,
    npy_header_problem,
    opener_at,
    read_npy_header,
)

__all__ = ["MAX_MAPPED_POOLS", "PoolMap", "load_prepared"]

logger = logging.getLogger(__name__)

MAX_MAPPED_POOLS = 4096
"""The most pools one `PoolMap` memory-maps by default (`max_mapped_pools`): the largest ones;
the others are read into memory.

Each mapping is one entry of the kernel's per-process table (`vm.max_map_count`, 65530 by
default, shared with every library in the process), so mapping one pool per distinct length
fails past ~65,000 lengths."""

_LOAD_ATTEMPTS = 3
"""Loads tried when the directory is replaced while loading (each on the newer copy)."""


def _read_json(path: Path, dir_fd: int, name: str) -> Any:
    try:
        return parse_json(read_text_at(dir_fd, name))
    except (OSError, ValueError) as error:
        raise unusable(path, f"{name} cannot be read ({error})") from None


def _read_manifest(path: Path, dir_fd: int) -> dict[str, Any]:
    try:
        os.stat(MANIFEST_NAME, dir_fd=dir_fd)
    except OSError:
        raise unusable(
            path, "manifest.json is missing (an interrupted prepare leaves none)"
        ) from None
    return check_manifest(path, _read_json(path, dir_fd, MANIFEST_NAME))


def _check_files(path: Path, dir_fd: int, files: Mapping[str, Any], *, verify: bool) -> None:
    """Every file has its recorded size, and with `verify` its sha256; without, the token
    store's files their edges' digest (2 MiB read per file)."""
    for name, entry in files.items():
        try:
            size = os.stat(name, dir_fd=dir_fd).st_size
        except OSError:
            raise unusable(path, f"{name} is missing") from None
        if size != entry["bytes"]:
            raise unusable(path, f"{name} has {size} bytes, the manifest says {entry['bytes']}")
        if (
            not verify
            and EDGES_KEY in entry
            and edge_digest(name, dir_fd=dir_fd) != entry[EDGES_KEY]
        ):
            raise unusable(
                path,
                f"{name} is not the file prepare wrote: its first or last MiB differs from the "
                f"manifest's {EDGES_KEY} (corrupted, or copied from another prepare)",
            )
        if verify and file_digest(name, dir_fd=dir_fd)[1] != entry["sha256"]:
            raise unusable(path, f"{name} does not match its sha256 in the manifest (corrupted)")


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


def _open_pool(
    path: Path, dir_fd: int, name: str, expected: int, *, mmap_pools: bool
) -> tuple[np.ndarray, bool]:
    """(the pool's ids, whether they are memory-mapped), opened through the directory
    descriptor `dir_fd`. A pool that cannot be mapped for want of mappings (ENOMEM) is read into
    memory instead."""
    try:
        with open(name, "rb", opener=opener_at(dir_fd)) as handle:
            try:
                dtype, shape, offset = read_npy_header(handle)
            except NPY_HEADER_ERRORS as error:
                detail = npy_header_problem(error)
                raise unusable(path, f"{name} is not a valid .npy file ({detail})") from None
            if dtype.str != _POOL_DTYPE.str or len(shape) != 1:
                raise unusable(
                    path, f"{name} holds {dtype.str} {shape}; expected a 1-d <i8 (int64) array"
                )
            if shape[0] != expected:
                raise unusable(
                    path,
                    f"{name} holds {shape[0]} ids but counts.json says {expected} sequences have "
                    "that length",
                )
            if expected == 0:
                return np.empty(0, dtype=_POOL_DTYPE), False
            size = os.fstat(handle.fileno()).st_size
            if size != offset + 8 * expected:  # a header of another length reads other bytes
                raise unusable(
                    path, f"{name} has {size} bytes; its header says {offset + 8 * expected}"
                )
            buffer = None
            if mmap_pools:
                try:
                    buffer = _map_readonly(handle.fileno(), size)
                except OSError as error:
                    if error.errno != errno.ENOMEM:
                        raise
                    logger.warning(
                        "cannot memory-map %s (%s: the process may have used up its mappings, "
                        "vm.max_map_count); reading it into memory instead",
                        path / name,
                        error.strerror,
                    )
            if buffer is None:
                handle.seek(offset)
                array = np.fromfile(handle, dtype=_POOL_DTYPE, count=expected)
                if array.size != expected:
                    raise unusable(path, f"{name} is truncated")
                array.flags.writeable = False
                return array, False
    except OSError as error:
        if error.errno == errno.ENOENT and was_replaced(path, dir_fd):
            raise unusable(
                path,
                f"{name} of the copy loaded is gone: the directory was replaced (e.g. by "
                "`seqpack prepare --overwrite`) since it was loaded; load it again and restart "
                "the run",
            ) from None
        raise unusable(path, f"{name} cannot be read as a .npy pool ({error})") from None
    array = np.frombuffer(buffer, dtype=_POOL_DTYPE, count=expected, offset=offset)
    array.flags.writeable = False
    return array, True


class PoolMap(Mapping[int, np.ndarray]):
    """The pools of a prepared directory, `{length: read-only int64 ids}`.

    Each pool is opened on first access and cached, so loading costs nothing per pool until a
    pool is used. Pickles as its location: DataLoader workers open the files themselves instead
    of receiving copies.

    With `mmap=True` (the default), the `max_mapped_pools` (default `MAX_MAPPED_POOLS`, 4096)
    largest pools (by count; ties by length) are memory-mapped: their ids stay in the page
    cache, shared by every process that maps them and paged out under memory pressure. The
    other pools are read into memory: a mapping costs an entry of the kernel's per-process table
    (`vm.max_map_count`, 65530 by default) whatever the pool's size, so mapping one pool per
    length fails past ~65,000 distinct lengths. This keeps the mappings of a `PoolMap` at
    `max_mapped_pools` whatever the number of distinct lengths; the memory read is that of the
    smallest pools only (each at most as large as the smallest mapped pool; with long-tailed
    lengths, a small fraction of the ids), and nothing at all with `max_mapped_pools` distinct
    lengths or fewer. A pool whose mapping fails for want of mappings (ENOMEM: other libraries
    hold them) is read into memory, with a warning.
    `mmap=False` reads every pool into memory.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        counts: Mapping[int, int],
        mmap: bool = True,
        *,
        max_mapped_pools: int = MAX_MAPPED_POOLS,
        dir_fd: int | None = None,
        manifest_sha256: str | None = None,
    ):
        self._root = Path(root)
        # Pools are opened through a descriptor of the directory, so all come from one copy
        # (`seqpack_cli.prepared.snapshot`): a copy of `dir_fd` if given, else opened (and
        # checked to hold the prepare of `manifest_sha256`, if given) on first use.
        self._dir_fd: int | None = None
        if dir_fd is not None:
            self._keep_directory(os.dup(dir_fd))
        self.manifest_sha256 = manifest_sha256
        """The manifest digest of the copy loaded: an unpickled map refuses another one."""
        self._counts = {int(length): int(count) for length, count in counts.items()}
        self._mmap = mmap
        self.max_mapped_pools = check_int("max_mapped_pools", max_mapped_pools, minimum=0)
        """The most pools this map memory-maps (the largest)."""
        self._arrays: dict[int, np.ndarray] = {}
        self._to_map = frozenset(self._largest_pools() if mmap else ())
        self.num_mapped = 0
        """Pools memory-mapped so far (at most `max_mapped_pools`)."""

    def _keep_directory(self, dir_fd: int) -> int:
        self._dir_fd = dir_fd
        weakref.finalize(self, os.close, dir_fd)
        return dir_fd

    def _directory(self) -> int:
        """The descriptor pools are opened through; opened on first use (by a map unpickled in
        a DataLoader worker: inside its loop, which reports a refusal to the main process)."""
        if self._dir_fd is not None:
            return self._dir_fd
        if self.manifest_sha256 is None:
            return self._keep_directory(open_directory(self._root))
        return self._keep_directory(reopen(self._root, self.manifest_sha256))

    def _largest_pools(self) -> list[int]:
        """The lengths of the `max_mapped_pools` largest pools (by count; ties by length)."""
        if len(self._counts) <= self.max_mapped_pools:
            return list(self._counts)
        by_size = ((count, -length) for length, count in self._counts.items())
        return [-key for _, key in heapq.nlargest(self.max_mapped_pools, by_size)]

    def __getitem__(self, length: int) -> np.ndarray:
        array = self._arrays.get(length)
        if array is None:
            count = self._counts[length]
            array, mapped = _open_pool(
                self._root,
                self._directory(),
                pool_file_name(length),
                count,
                mmap_pools=length in self._to_map,
            )
            self.num_mapped += mapped
            self._arrays[int(length)] = array
        return array

    def __contains__(self, length: object) -> bool:
        return length in self._counts

    def __iter__(self) -> Iterator[int]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _reopen_pool_map,
            (self._root, self._counts, self._mmap, self.max_mapped_pools, self.manifest_sha256),
        )

    def __repr__(self) -> str:
        return f"PoolMap({os.fspath(self._root)!r}, {len(self)} pools, mmap={self._mmap})"


def _reopen_pool_map(
    root: Path,
    counts: Mapping[int, int],
    mmap: bool,
    max_mapped_pools: int,
    manifest_sha256: str | None = None,
) -> PoolMap:
    """A `PoolMap` unpickled: the same files, opened again on the other side when first used,
    if the directory still holds the same prepare (refused in one line otherwise)."""
    return PoolMap(
        root, counts, mmap, max_mapped_pools=max_mapped_pools, manifest_sha256=manifest_sha256
    )


def _read_contents(
    root: Path, dir_fd: int, manifest: Mapping[str, Any]
) -> tuple[dict[int, int], list[tuple[tuple[int, ...], int]]]:
    """counts.json and templates.json, typed; the pools the manifest lists match the counts."""
    files = manifest["files"]
    max_seq_len = manifest["config"]["max_seq_len"]
    counts = read_counts(root, _read_json(root, dir_fd, COUNTS_NAME), max_seq_len)
    pairs = read_templates(root, _read_json(root, dir_fd, TEMPLATES_NAME))
    listed_pools = {name for name in files if name.startswith(f"{POOLS_DIR}/")}
    expected_pools = {pool_file_name(length) for length in counts}
    if listed_pools != expected_pools:
        odd = sorted(listed_pools ^ expected_pools)[0]
        raise unusable(root, f"the pools listed in the manifest and counts.json disagree ({odd})")
    for length, count in counts.items():
        # A pool's size follows from its count (canonical header + 8 bytes per id), so the size
        # check of _check_files catches a pool that disagrees with the counts without opening it.
        name = pool_file_name(length)
        recorded = files[name]["bytes"]
        if recorded != len(npy_header(_POOL_DTYPE, count)) + 8 * count:
            raise unusable(
                root,
                f"{name} has {recorded} bytes in the manifest, but counts.json says {count} "
                "sequences have that length",
            )
    return counts, pairs


def load_prepared(
    path: str | os.PathLike[str],
    *,
    mmap: bool = True,
    verify: bool = False,
    max_mapped_pools: int = MAX_MAPPED_POOLS,
    storage_options: Mapping[str, str] | None = None,
) -> Prepared:
    """Load a prepared directory written by `seqpack prepare`.

    Pools are read-only int64 arrays, opened on first use: the largest (up to
    `max_mapped_pools`) memory-mapped by default, with no file descriptor held per pool, so
    any number of distinct lengths loads (see `PoolMap`). The manifest, counts.json and
    templates.json are checked against their schema (`seqpack_cli.prepared.schema`) and against
    each other on every load, in O(templates); the sha256 of every file only with
    `verify=True`. A directory replaced while it loads (`prepare --overwrite`) is loaded again.

    Args:
        path: the prepared directory (`seqpack prepare --output`).
        mmap: memory-map the pools (the default); False reads them all into memory now.
        verify: also check every file's sha256 against the manifest's (reads every byte), and
            that the remote inputs it was prepared from (s3://, gs://, https://, hf://) still
            have the size and version the manifest records (a request to their store each).
        storage_options: with `verify` and remote inputs: their store's options, as
            `prepare --storage-option` took them (endpoint, region, ...); credentials come from
            the environment.
        max_mapped_pools: at most this many pools, the largest, are memory-mapped (default
            `MAX_MAPPED_POOLS`); the others are read into memory on first use. An integer >= 0;
            a smaller value leaves more of the kernel's mappings to the rest of the process.

    Returns:
        A `Prepared` that unpacks as `manifest, counts, templates, pools`. With a token store,
        `prepared.tokens` (and `prepared.labels` or `prepared.loss_mask`) are memory-mapped
        `FlatTokenSource`s indexed by sequence id; None without one.

    Raises:
        ConfigError: `max_mapped_pools` is not an integer >= 0.
        PreparedFormatError: naming the file, the field and the value, for a missing or
            incomplete directory, an unknown `format_version`, a manifest, counts.json or
            templates.json that does not follow its schema, a pool whose size disagrees with the
            counts, templates that do not fit `config.max_seq_len` (or
            `config.max_seqs_per_bin`) or do not use every length exactly as often as
            counts.json says, recorded totals (`n_sequences`, `n_bins`, ...) that disagree with
            the files, a token store (`prepare --tokens-column`) whose files are missing or
            disagree with the manifest, and (with `verify=True`) any file whose sha256 differs
            from the manifest's.
        InputError: with `verify=True`, a remote input that changed or is gone since prepare
            (`remote_check`).
    """
    root = Path(path)
    max_mapped_pools = check_int("max_mapped_pools", max_mapped_pools, minimum=0)
    for attempt in range(_LOAD_ATTEMPTS):
        dir_fd = open_directory(root)
        try:
            prepared = _load(
                root, dir_fd, mmap=mmap, verify=verify, max_mapped_pools=max_mapped_pools
            )
            if verify:
                from seqpack_cli.prepared.remote_check import check_remote_inputs

                check_remote_inputs(root, prepared.manifest, storage_options)
            return prepared
        except PreparedFormatError:
            # Replaced while loading (`prepare --overwrite`): load the new copy instead.
            if attempt + 1 == _LOAD_ATTEMPTS or not was_replaced(root, dir_fd):
                raise
            logger.info("%s was replaced while it was loaded; loading it again", root)
        finally:
            os.close(dir_fd)
    raise AssertionError("unreachable")


def _load(root: Path, dir_fd: int, *, mmap: bool, verify: bool, max_mapped_pools: int) -> Prepared:
    """`load_prepared` on the copy of `root` that `dir_fd` was opened on."""
    manifest = _read_manifest(root, dir_fd)
    counts, pairs = _read_contents(root, dir_fd, manifest)
    _check_files(root, dir_fd, manifest["files"], verify=verify)
    config = manifest["config"]
    # Under a length multiple the templates hold slot lengths; the pools stay per exact length.
    multiple = check_length_multiple(
        config.get("length_multiple"),
        config["max_seq_len"],
        error=PreparedFormatError,
        where=f"{root}: manifest.json config.",
    )
    templates = check_templates(
        root,
        pairs,
        counts if multiple == 1 else slot_counts(counts, multiple),
        config["max_seq_len"],
        config.get("max_seqs_per_bin"),
    )
    check_figures(root, manifest, counts, templates)
    digest = manifest_digest(manifest)
    store = open_store(root, manifest, dir_fd=dir_fd, digest=digest)
    pools = PoolMap(
        root,
        counts,
        mmap,
        max_mapped_pools=max_mapped_pools,
        dir_fd=dir_fd,
        manifest_sha256=digest,
    )
    if store:
        cut_to = OverCap.from_config(config).cut_to
        check_stored_lengths(root, store["tokens"], pools, truncated_at=cut_to)
    # Last, so that a field of the manifest that breaks a rule is named as such.
    check_manifest_digest(root, manifest, actual=digest)
    if not mmap:
        for length in counts:
            pools[length]
    slots: Mapping[int, Any] = pools
    if multiple > 1:
        slots = SlotPools(pools, counts, config["max_seq_len"], multiple, truncate=False)
    return Prepared(root, manifest, counts, templates, slots, **store, manifest_sha256=digest)
