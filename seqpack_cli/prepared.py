"""The `prepared/` directory: the on-disk index that `seqpack prepare` writes once.

```
prepared/
  manifest.json     format_version, seqpack version, config, inputs, summary, every file's
                    size and sha256; written last, so its presence means the rest is complete
  counts.json       {length: number of sequences}, lengths ascending
  templates.json    [[template_lengths, multiplicity], ...], templates descending
  pools/{length}.npy  int64 ids of that length, ascending
```

`PreparedWriter` builds the directory in a hidden temporary sibling and renames it into place
only after the manifest is written, so an interrupted job never leaves a directory that
`load_prepared` accepts. `load_prepared` checks the version, that every file is there with its
recorded size and that each pool holds as many ids as its count; with `verify=True` it also checks
every sha256. Pools are memory-mapped without holding a file descriptor each, so datasets with
tens of thousands of distinct lengths load under the common 1024 open-files limit.

This module is part of the training-time runtime: it imports neither duckdb nor rich.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import signal
import sys
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import numpy as np

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError
from seqpack_cli.pool_files import POOL_DTYPE as _POOL_DTYPE
from seqpack_cli.pool_files import POOLS_DIR, PoolFiles, npy_header, pool_file_name

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT_VERSION",
    "PoolMap",
    "Prepared",
    "PreparedWriter",
    "check_output",
    "counts_to_json",
    "load_prepared",
    "pool_file_name",
    "templates_to_json",
    "write_prepared",
]

FORMAT_VERSION = 1
"""Version of the `prepared/` layout; `load_prepared` refuses any other."""

MANIFEST_NAME = "manifest.json"
COUNTS_NAME = "counts.json"
TEMPLATES_NAME = "templates.json"
_TMP_MARKER = ".seqpack-tmp-"  # hidden sibling: .{name}.seqpack-tmp-{pid}-{random}
_OLD_MARKER = ".seqpack-old-"  # the replaced directory while --overwrite swaps it out
_HASH_CHUNK = 1 << 22


@dataclass(frozen=True, eq=False)
class Prepared:
    """A loaded `prepared/` directory.

    Unpacks like the reference's tuple: `manifest, counts, templates, pools = load_prepared(p)`.
    """

    path: Path
    manifest: dict[str, Any]
    counts: dict[int, int]
    templates: Counter[tuple[int, ...]]
    pools: Mapping[int, np.ndarray] = field(repr=False)

    @property
    def max_seq_len(self) -> int:
        """The bin capacity the templates were packed for."""
        return int(self.manifest["config"]["max_seq_len"])

    @property
    def summary(self) -> dict[str, Any]:
        """Sequences, tokens, bins, efficiency, lower bound and drops, as recorded by prepare."""
        return dict(self.manifest.get("summary", {}))

    def __iter__(self) -> Iterator[Any]:
        return iter((self.manifest, self.counts, self.templates, self.pools))


# ---- writing ----------------------------------------------------------------------------------


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value) + "\n").encode()


def counts_to_json(counts: Mapping[int, int]) -> bytes:
    """counts.json's bytes: `{"length": count}` with lengths ascending."""
    return _json_bytes({str(length): int(counts[length]) for length in sorted(counts)})


def templates_to_json(templates: Mapping[tuple[int, ...], int]) -> bytes:
    """templates.json's bytes: `[[template_lengths, multiplicity], ...]`."""
    # The reference's [[template_lengths, multiplicity], ...]; descending templates give one
    # canonical order whatever order the packer produced them in.
    items = sorted(((tuple(int(x) for x in t), int(m)) for t, m in templates.items()), reverse=True)
    return _json_bytes([[list(template), multiplicity] for template, multiplicity in items])


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


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_siblings(output: Path) -> list[Path]:
    """Leftovers of killed runs writing `output`: temporary or swapped-out siblings of dead pids."""
    stale = []
    prefixes = (f".{output.name}{_TMP_MARKER}", f".{output.name}{_OLD_MARKER}")
    try:
        siblings = list(output.parent.iterdir())
    except OSError:
        return []
    for sibling in siblings:
        for prefix in prefixes:
            if sibling.name.startswith(prefix):
                pid_text = sibling.name[len(prefix) :].split("-", 1)[0]
                if not pid_text.isdigit() or not _is_alive(int(pid_text)):
                    stale.append(sibling)
    return stale


def check_output(output: Path, *, overwrite: bool) -> None:
    """Refuse, before any work, an output that exists (without overwrite), is a file, or is not
    a writable place."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise ConfigError(
            f"output path {output} exists and is not a directory; --output names the prepared "
            "directory to create: choose another path or remove that file"
        )
    if output.is_dir():
        if not overwrite:
            raise ConfigError(
                f"output directory {output} already exists; pass --overwrite (overwrite=True) to "
                "replace it, or choose another --output"
            )
        if any(output.iterdir()) and not (output / MANIFEST_NAME).is_file():
            raise ConfigError(
                f"output directory {output} is not empty and is not a seqpack prepared directory "
                "(no manifest.json), so --overwrite will not delete it; remove it yourself or "
                "choose another --output"
            )
    parent = output.parent
    existing = parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"cannot create output directory {output}: {existing} is a file, not a directory; "
            "choose another --output"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot create output directory {output}: {existing} is not writable; choose a "
            "writable --output"
        )


def _signal_exception(signum: int) -> BaseException:
    """What a signal becomes while a writer is open: Ctrl-C stays KeyboardInterrupt, SIGTERM
    exits with the shell's code for it (143)."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return SystemExit(128 + signum)


class PreparedWriter:
    """Writes a prepared directory atomically: a hidden temporary sibling, manifest last, rename.

    Use as a context manager. Leaving the block with an exception deletes the temporary
    directory; so do Ctrl-C and SIGTERM (while the block runs in the main thread, SIGTERM becomes
    `SystemExit(143)`). `append_pool` may be called from several threads at once.
    """

    def __init__(self, output: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        self.output = Path(os.path.abspath(output))
        self.overwrite = overwrite
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp_path = self.output.parent / f".{self.output.name}{_TMP_MARKER}{token}"
        self._old_path = self.output.parent / f".{self.output.name}{_OLD_MARKER}{token}"
        self._files: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._pools: PoolFiles | None = None
        self._creator: threading.Thread | None = None
        self._create_error: BaseException | None = None
        self._stop = threading.Event()
        self._previous_handlers: dict[int, Any] = {}
        self._signal: int | None = None
        self._committed = False

    @property
    def work_dir(self) -> Path:
        """Scratch space inside the temporary directory, deleted before the manifest is written."""
        return self.tmp_path / ".work"

    def __enter__(self) -> PreparedWriter:
        check_output(self.output, overwrite=self.overwrite)
        for stale in _stale_siblings(self.output):
            shutil.rmtree(stale, ignore_errors=True)
        self._install_signals()
        try:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            (self.tmp_path / POOLS_DIR).mkdir(parents=True)
            self.work_dir.mkdir()
        except OSError as error:
            self._cleanup()
            raise ConfigError(
                f"cannot create output directory {self.output}: {error.strerror or error}; "
                "choose a writable --output"
            ) from None
        except BaseException:  # e.g. SIGTERM while creating it: __exit__ will not run
            self._cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._cleanup()
        # A library may turn the signal into its own error (DuckDB raises "Query interrupted"):
        # report the signal instead.
        interrupted = exc is not None and self._signal is not None
        if interrupted and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise _signal_exception(self._signal) from None  # type: ignore[arg-type]

    def _cleanup(self) -> None:
        try:
            self._stop_creating()
            if self._pools is not None:
                self._pools.abort()
            if not self._committed:
                shutil.rmtree(self.tmp_path, ignore_errors=True)
        finally:
            self._restore_signals()

    def _install_signals(self) -> None:
        # Only take over the default handlers, and only in the main thread (where signals land):
        # the default SIGTERM action would kill the process without running the cleanup.
        if threading.current_thread() is not threading.main_thread():
            return
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
        for signum, default in defaults.items():
            if signal.getsignal(signum) is default:
                self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signal = signum
        raise _signal_exception(signum)

    def _restore_signals(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers.clear()

    def _record(self, name: str, num_bytes: int, digest: str) -> None:
        with self._lock:
            self._files[name] = {"bytes": num_bytes, "sha256": digest}

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write one small file (e.g. counts.json) and record its size and sha256."""
        (self.tmp_path / name).write_bytes(data)
        self._record(name, len(data), hashlib.sha256(data).hexdigest())

    def create_pool_files(self, counts: Mapping[int, int]) -> None:
        """Create every `pools/{length}.npy` (header included) in a background thread while the
        caller scans; `append_pool` then fills them.

        Creating a file costs 20 us to 1 ms on local and network filesystems: with thousands of
        distinct lengths, doing it ahead hides that behind the scan.
        """
        if self._pools is not None:
            raise RuntimeError("create_pool_files was called twice")
        pools = PoolFiles(self.tmp_path, counts)
        self._pools = pools

        def create() -> None:
            try:
                pools.create(self._stop)
            except BaseException as error:  # handed to the first append
                self._create_error = error

        self._creator = threading.Thread(target=create, name="seqpack-create", daemon=True)
        self._creator.start()

    def _stop_creating(self) -> None:
        self._stop.set()
        if self._creator is not None:
            self._creator.join()
            self._creator = None

    def _ready_pools(self) -> PoolFiles:
        creator = self._creator
        if creator is not None:
            creator.join()  # once done, joining again (from any thread) returns at once
        if self._create_error is not None:
            raise self._write_error(self._create_error)
        if self._pools is None:
            raise RuntimeError("append_pool before create_pool_files")
        return self._pools

    def _write_error(self, error: BaseException) -> BaseException:
        if isinstance(error, OSError):
            return ConfigError(
                f"cannot write the pools of {self.output}: {error.strerror or error}; free some "
                "space or choose another --output"
            )
        return error

    def append_pool(self, length: int, ids: np.ndarray) -> None:
        """Append the next ascending int64 ids of `pools/{length}.npy`. Different pools may be
        written from different threads at once; one pool's appends come in order."""
        pools = self._ready_pools()
        try:
            pools.append(length, ids)
        except OSError as error:
            raise self._write_error(error) from None

    def commit(self, manifest: Mapping[str, Any]) -> Path:
        """Write the manifest (with every file's size and sha256) last, then rename into place."""
        if self._pools is not None:
            self._files.update(self._ready_pools().finish())
        shutil.rmtree(self.work_dir, ignore_errors=True)
        # Indented for people, except the (long) files table: one compact line.
        head = json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=1)
        files = json.dumps(dict(sorted(self._files.items())), separators=(",", ":"))
        text = f'{head[:-1].rstrip()},\n "files": {files}\n}}\n'
        (self.tmp_path / MANIFEST_NAME).write_text(text, encoding="utf-8")
        if self.output.exists():
            # Another run may have created it since __enter__ checked: replace it only when
            # asked to, and only if it is a prepared (or empty) directory.
            check_output(self.output, overwrite=self.overwrite)
            os.rename(self.output, self._old_path)
        os.rename(self.tmp_path, self.output)
        self._committed = True
        shutil.rmtree(self._old_path, ignore_errors=True)
        return self.output


def write_prepared(
    output: str | os.PathLike[str],
    *,
    counts: Mapping[int, int],
    templates: Mapping[tuple[int, ...], int],
    pools: Mapping[int, Any],
    manifest: Mapping[str, Any],
    overwrite: bool = False,
) -> Path:
    """Write in-memory counts, templates and pools as a prepared directory (atomically).

    `manifest` must hold at least `config.max_seq_len`; `format_version` and `seqpack_version`
    are filled in. Pools are sorted on the way out, so the bytes are canonical.
    """
    config = manifest.get("config")
    if not isinstance(config, Mapping) or "max_seq_len" not in config:
        raise ConfigError("manifest has no config.max_seq_len; pass manifest={'config': {...}}")
    for length, count in counts.items():
        size = len(pools[length]) if length in pools else None
        if size != count:
            raise InputError(
                f"the pool for length {length} holds {size} ids but counts says {count}; pass "
                "counts and pools from one histogram (e.g. length_histogram_from_lengths)"
            )
    with PreparedWriter(output, overwrite=overwrite) as writer:
        writer.create_pool_files(counts)
        for length in sorted(counts):
            writer.append_pool(length, np.sort(np.asarray(pools[length], dtype=_POOL_DTYPE)))
        writer.write_bytes(COUNTS_NAME, counts_to_json(counts))
        writer.write_bytes(TEMPLATES_NAME, templates_to_json(templates))
        document = {"format_version": FORMAT_VERSION, "seqpack_version": __version__, **manifest}
        return writer.commit(document)


# ---- reading ----------------------------------------------------------------------------------


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
