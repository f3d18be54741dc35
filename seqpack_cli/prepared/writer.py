"""Writing a prepared directory atomically: `PreparedWriter`, `write_prepared`, `check_output`.

`PreparedWriter` builds the directory in a hidden temporary sibling of the output,
`.{name}.seqpack-tmp-{pid}-{random}`, writes the manifest last, and moves it into place in one
step: `renameat2(RENAME_EXCHANGE)` swaps it with the directory it replaces where the system has
it (Linux 3.15+ on ext4, xfs, btrfs, tmpfs...), so `--output` always holds a complete old or new
copy whatever kills the job. Elsewhere the old copy is renamed aside (`.{name}.seqpack-old-...`)
first, and a run that finds it without an output puts it back.

Each temporary sibling is flock()ed by the run writing it for as long as that run lives, so a
later run knows for sure which siblings of its output were left by killed runs (whatever pid
the system reuses) and removes them. Names longer than the system allows for the sibling's name
are shortened with a hash.

`Interrupts` turns SIGINT and SIGTERM into exceptions so the temporary directory is removed,
and from the commit on only records them: a signal that comes once the output is in place does
not turn a finished job into an interrupted one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import numpy as np

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.pool_files import POOL_DTYPE as _POOL_DTYPE
from seqpack_cli.pool_files import POOLS_DIR, PoolFiles
from seqpack_cli.prepared.layout import (
    COUNTS_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    TEMPLATES_NAME,
    counts_to_json,
    templates_to_json,
)

try:
    import fcntl
except ImportError:  # not on Windows: liveness then falls back to the pid
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "Interrupts",
    "PreparedWriter",
    "Terminated",
    "check_output",
    "recover_siblings",
    "write_prepared",
]

logger = logging.getLogger(__name__)

_OVERWRITE = option("overwrite", python="overwrite=True")

# ---- sibling names ----------------------------------------------------------------------------

_TMP, _OLD = "tmp", "old"  # .{stem}.seqpack-tmp-{pid}-{random}: the directory being written
_TOKEN_WIDTH = 10 + 1 + 8  # pid (at most 10 digits), "-", 8 hex digits
_HASH_WIDTH = 12


def _name_max(path: Path) -> int:
    """The longest file name (bytes) the filesystem holding `path` (or its nearest existing
    ancestor) allows."""
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return int(os.pathconf(path, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _stem(name: str, name_max: int) -> str:
    """`name`, or its start plus a hash of the whole, short enough that `.{stem}.seqpack-tmp-
    {pid}-{random}` fits in `name_max` bytes; the same name always gives the same stem."""
    budget = name_max - len(f"..seqpack-{_TMP}-") - _TOKEN_WIDTH
    if len(os.fsencode(name)) <= budget:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:_HASH_WIDTH]
    cut = name
    while len(os.fsencode(cut)) > budget - 1 - _HASH_WIDTH:
        cut = cut[:-1]
    return f"{cut}~{digest}"


def _sibling_pattern(output: Path) -> re.Pattern[str]:
    stem = _stem(output.name, _name_max(output.parent))
    return re.compile(rf"\.{re.escape(stem)}\.seqpack-({_TMP}|{_OLD})-(\d+)-([0-9a-f]{{8}})")


def _sibling(output: Path, kind: str, token: str) -> Path:
    return output.parent / f".{_stem(output.name, _name_max(output.parent))}.seqpack-{kind}-{token}"


# ---- renameat2 --------------------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_SYSCALL_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}  # for a libc without the wrapper
_renameat2: list[Callable[[bytes, bytes, int], int] | None] = []  # resolved on first use


def _load_renameat2() -> Callable[[bytes, bytes, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        function.argtypes += [ctypes.c_uint]
        function.restype = ctypes.c_int
        return lambda source, target, flags: function(_AT_FDCWD, source, _AT_FDCWD, target, flags)
    number = _SYSCALL_RENAMEAT2.get(platform.machine())
    if number is None:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return lambda source, target, flags: syscall(
        ctypes.c_long(number),
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(source),
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(target),
        ctypes.c_uint(flags),
    )


def _rename2(source: Path, target: Path, flags: int) -> bool:
    """renameat2(2) with `flags`: True once done, False where the system or the filesystem does
    not have it (the caller then renames the portable way); other failures raise OSError."""
    if not _renameat2:
        _renameat2.append(_load_renameat2())
    function = _renameat2[0]
    if function is None:
        return False
    if function(os.fsencode(source), os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(source), None, os.fspath(target))


# ---- liveness: a flock held for the writer's lifetime -----------------------------------------


def _lock_directory(path: Path, *, wait: bool) -> int | None:
    """An open descriptor of directory `path` holding an exclusive flock, or None if another
    process holds it. Raises OSError if the directory cannot be opened; `NotImplementedError`
    where the filesystem has no flock (e.g. some network filesystems)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    if fcntl is None:
        os.close(fd)
        raise NotImplementedError("no flock on this system")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as error:
        os.close(fd)
        raise NotImplementedError(f"no flock on {path}: {error.strerror}") from None
    return fd


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _claimed(sibling: Path, pid: int) -> Iterator[bool]:
    """Whether `sibling` was left by a run that is gone, holding its lock meanwhile.

    The run that writes a sibling flocks it until it ends, so a free lock means its run ended
    (even if the system gave its pid to another process since). Where flock is missing, a sibling
    counts as left over when no process has its pid."""
    try:
        fd = _lock_directory(sibling, wait=False)
    except NotImplementedError:
        yield not _is_alive(pid)
        return
    except OSError:  # vanished meanwhile, or not ours to open: leave it
        yield False
        return
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)


def recover_siblings(output: str | os.PathLike[str]) -> None:
    """Clean up after runs writing `output` that were killed: remove their temporary siblings,
    and put back a replaced copy (`-old`) found without an output rather than deleting it.

    Only hidden siblings named exactly like this writer's (`.{name}.seqpack-tmp-{pid}-{8 hex}`
    or `-old-`) of this very output, whose run no longer holds them, are touched.
    """
    output = Path(os.path.abspath(output))
    pattern = _sibling_pattern(output)
    try:
        siblings = sorted(output.parent.iterdir())
    except OSError:
        return
    for sibling in siblings:
        match = pattern.fullmatch(sibling.name)
        if match is None or sibling.is_symlink() or not sibling.is_dir():
            continue
        kind, pid = match.group(1), int(match.group(2))
        with _claimed(sibling, pid) as left_over:
            if not left_over:
                continue
            if kind == _OLD and not os.path.lexists(output):
                try:
                    os.rename(sibling, output)
                except OSError as error:
                    logger.warning("cannot put back %s as %s: %s", sibling, output, error)
                else:
                    logger.warning(
                        "put back %s as %s: a run (pid %d) was killed while replacing it",
                        sibling.name,
                        output,
                        pid,
                    )
                continue
            shutil.rmtree(sibling, ignore_errors=True)
            logger.info("removed %s, left by a run (pid %d) that was killed", sibling, pid)


# ---- checks -----------------------------------------------------------------------------------


def _manifest_problem(manifest_path: Path) -> str | None:
    """Why `manifest_path` is not a seqpack manifest (None if it is one, including those
    written before manifests carried `format`)."""
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"its manifest.json cannot be read as JSON ({error})"
    if not isinstance(manifest, dict):
        return "its manifest.json is not a JSON object"

    def is_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if "format" in manifest:
        if manifest["format"] != FORMAT_NAME:
            return f"its manifest.json has format {manifest['format']!r}, not {FORMAT_NAME!r}"
        if not is_int(manifest.get("format_version")):
            return "its manifest.json has no integer format_version"
        return None
    legacy = (
        is_int(manifest.get("format_version"))
        and isinstance(manifest.get("seqpack_version"), str)
        and isinstance(manifest.get("files"), dict)
    )
    return None if legacy else f"its manifest.json has no format {FORMAT_NAME!r}"


_POOL_NAME = re.compile(r"-?\d+\.npy")


def _foreign_entries(output: Path) -> list[str]:
    """Entries of prepared directory `output` that a prepared directory does not hold (files the
    user put there), sorted: `--overwrite` must not delete them."""
    foreign = []
    for entry in os.scandir(output):
        if entry.name in (MANIFEST_NAME, COUNTS_NAME, TEMPLATES_NAME) and entry.is_file(
            follow_symlinks=False
        ):
            continue
        if entry.name == POOLS_DIR and entry.is_dir(follow_symlinks=False):
            for pool in os.scandir(entry.path):
                if not (_POOL_NAME.fullmatch(pool.name) and pool.is_file(follow_symlinks=False)):
                    foreign.append(f"{POOLS_DIR}/{pool.name}")
            continue
        foreign.append(entry.name)
    return sorted(foreign)


def _replaceable(output: Path) -> None:
    """Raise unless existing directory `output` may be replaced: it is empty, or a seqpack
    prepared directory holding nothing else."""
    if os.path.ismount(output):
        raise ConfigError(
            f"output directory {output} is a mount point, which cannot be replaced as a whole; "
            f"choose a directory inside it as {option('output')} (e.g. {output / 'prepared'})"
        )
    if not any(output.iterdir()):
        return
    if not (output / MANIFEST_NAME).is_file():
        problem: str | None = "no manifest.json"
    else:
        problem = _manifest_problem(output / MANIFEST_NAME)
    if problem is not None:
        raise ConfigError(
            f"output directory {output} is not empty and is not a seqpack prepared directory "
            f"({problem}), so {_OVERWRITE} will not replace it; remove it yourself or choose "
            f"another {option('output')}"
        )
    foreign = _foreign_entries(output)
    if foreign:
        raise ConfigError(
            f"output directory {output} holds {len(foreign)} entries that are not part of its "
            f"prepared directory (e.g. {foreign[0]}), so {_OVERWRITE} will not delete it; move "
            f"them out, or choose another {option('output')}"
        )


def check_output(output: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Refuse, before any work, an output that exists (without overwrite), is a file, is not a
    seqpack prepared directory, is a mount point, has too long a name, or is not writable."""
    output = Path(os.path.abspath(output))
    name_max = _name_max(output.parent)
    if len(os.fsencode(output.name)) > name_max:
        raise ConfigError(
            f"output name {output.name[:40]}... is {len(os.fsencode(output.name))} bytes long, "
            f"but this filesystem allows at most {name_max}; choose a shorter {option('output')}"
        )
    try:
        _check_output(output, overwrite=overwrite)
    except OSError as error:  # e.g. a path longer than PATH_MAX, a parent we may not search
        raise ConfigError(
            f"cannot use output directory {output}: {error.strerror or error}; choose another "
            f"{option('output')}"
        ) from None


def _check_output(output: Path, *, overwrite: bool) -> None:
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise ConfigError(
            f"output path {output} exists and is not a directory; {option('output')} names the "
            "prepared directory to create: choose another path or remove that file"
        )
    if output.is_dir():
        if not overwrite:
            raise ConfigError(
                f"output directory {output} already exists; pass {_OVERWRITE} to replace it, or "
                f"choose another {option('output')}"
            )
        _replaceable(output)
    existing = output.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"cannot create output directory {output}: {existing} is a file, not a directory; "
            f"choose another {option('output')}"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot create output directory {output}: {existing} is not writable; choose a "
            f"writable {option('output')}"
        )


# ---- signals ----------------------------------------------------------------------------------


class Terminated(SystemExit):
    """SIGTERM as an exception, so cleanups run; exits with the shell's code for it (143) when
    nothing catches it."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _signal_exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _signal_name(signum: int) -> str:
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


class Interrupts:
    """SIGINT and SIGTERM as exceptions (`KeyboardInterrupt`, `Terminated`) that `defer()`
    turns into a note.

    As a context manager it takes over the default handlers (only those, only in the main
    thread) and puts them back on exit. Once `defer()` was called a signal is only recorded in
    `late`: the work it would have interrupted is done. `raised` is the signal it last raised
    (a library may have turned the exception into its own error). The CLI holds one for a whole
    command; a `PreparedWriter` uses the one installed, or installs its own, and defers it from
    its commit on.
    """

    def __init__(self) -> None:
        self.raised: int | None = None
        self.late: int | None = None
        self.deferring = False
        self._previous: dict[int, Any] = {}

    @classmethod
    def installed(cls) -> Interrupts | None:
        """The `Interrupts` whose handler is installed now, if any."""
        owner = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
        if owner is None:
            owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        return owner if isinstance(owner, cls) else None

    def install(self) -> bool:
        """Take over the default SIGINT and SIGTERM handlers; False if none was taken over."""
        if threading.current_thread() is not threading.main_thread():
            return False
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
        for signum, default in defaults.items():
            if signal.getsignal(signum) is default:
                self._previous[signum] = signal.signal(signum, self._handle)
        return bool(self._previous)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def defer(self) -> None:
        """From now on only record signals (`late`): the work they would interrupt is done."""
        self.deferring = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.deferring:
            self.late = signum
            return
        self.raised = signum
        raise _signal_exception(signum)

    def __enter__(self) -> Interrupts:
        self.install()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back in this thread (for handlers that are not `Interrupts`)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    blocked = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# ---- the writer -------------------------------------------------------------------------------


class PreparedWriter:
    """Writes a prepared directory atomically: a hidden temporary sibling, manifest last, and
    one atomic swap into place.

    Use as a context manager. Leaving the block with an exception deletes the temporary
    directory (and the parent directories it created); so do Ctrl-C and SIGTERM (while the block
    runs in the main thread, SIGTERM becomes `Terminated`, exit code 143). From `commit` on these
    signals are only recorded and logged. `append_pool` may be called from several threads.
    """

    def __init__(self, output: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        self.output = Path(os.path.abspath(output))
        self.overwrite = overwrite
        self._new_token()
        self.manifest: dict[str, Any] = {}
        """The manifest as written (what `load_prepared` reads); empty until committed."""
        self._files: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._pools: PoolFiles | None = None
        self._creator: threading.Thread | None = None
        self._create_error: BaseException | None = None
        self._stop = threading.Event()
        self._interrupts: Interrupts | None = None
        self._owns_interrupts = False
        self._created_parents: list[Path] = []
        self._fds: list[int] = []  # flocks held until the end
        self._replaced: Path | None = None
        self._committed = False

    def _new_token(self) -> None:
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp_path = _sibling(self.output, _TMP, token)
        self._old_path = _sibling(self.output, _OLD, token)

    @property
    def work_dir(self) -> Path:
        """Scratch space inside the temporary directory, deleted before the manifest is written."""
        return self.tmp_path / ".work"

    def __enter__(self) -> PreparedWriter:
        recover_siblings(self.output)
        check_output(self.output, overwrite=self.overwrite)
        self._take_signals()
        try:
            self._create_parents()
            self._create_tmp()
            (self.tmp_path / POOLS_DIR).mkdir()
            self.work_dir.mkdir()
        except OSError as error:
            self._cleanup()
            raise ConfigError(
                f"cannot create output directory {self.output}: {error.strerror or error}; "
                f"choose a writable {option('output')}"
            ) from None
        except BaseException:  # e.g. SIGTERM while creating it: __exit__ will not run
            self._cleanup()
            raise
        return self

    def _create_parents(self) -> None:
        missing = []
        parent = self.output.parent
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for directory in reversed(missing):
            try:
                directory.mkdir()
            except FileExistsError:  # made by someone else meanwhile: not ours to remove
                continue
            self._created_parents.append(directory)

    def _create_tmp(self) -> None:
        # Another run cleaning up could take the lock of a directory this one has just made but
        # not locked yet, and remove it: then try again under a new name.
        for _ in range(5):
            self.tmp_path.mkdir()
            try:
                fd = _lock_directory(self.tmp_path, wait=True)
            except NotImplementedError:
                return  # no flock here: the pid in the name tells others this run is alive
            except FileNotFoundError:
                fd = None
            if fd is not None:
                self._fds.append(fd)
                with contextlib.suppress(OSError):
                    if os.fstat(fd).st_ino == os.stat(self.tmp_path).st_ino:
                        return
            self._new_token()
        raise OSError(errno.EAGAIN, "another process keeps removing its temporary directory")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        raised = self._interrupts.raised if self._interrupts is not None else None
        self._cleanup()
        # A library may turn the signal into its own error (DuckDB raises "Query interrupted"):
        # report the signal instead.
        converted = not isinstance(exc, (KeyboardInterrupt, SystemExit))
        if exc is not None and raised is not None and not self._committed and converted:
            raise _signal_exception(raised) from None

    def _take_signals(self) -> None:
        interrupts = Interrupts.installed()
        if interrupts is None:
            own = Interrupts()
            if own.install():
                interrupts, self._owns_interrupts = own, True
        if interrupts is not None:
            interrupts.raised = None
        self._interrupts = interrupts

    def _cleanup(self) -> None:
        # Not to be cut short: a signal that comes meanwhile is recorded, then acted on below.
        interrupts = self._interrupts
        deferring = interrupts is not None and interrupts.deferring
        if interrupts is not None:
            interrupts.defer()
        try:
            self._stop_creating()
            if self._pools is not None:
                self._pools.abort()
            if not self._committed:
                shutil.rmtree(self.tmp_path, ignore_errors=True)
                for directory in reversed(self._created_parents):
                    try:
                        directory.rmdir()  # only if still empty
                    except OSError:
                        break
            elif self._replaced is not None:
                shutil.rmtree(self._replaced, ignore_errors=True)
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
            self._created_parents.clear()
            self._replaced = None
            self._interrupts = None
            if interrupts is not None:
                self._release(interrupts, deferring)

    def _release(self, interrupts: Interrupts, deferring: bool) -> None:
        """Give the signal handling back; a signal recorded while nothing was committed yet now
        ends the run after all."""
        if not self._committed:
            interrupts.deferring = deferring
        late = interrupts.late
        if self._owns_interrupts:
            interrupts.restore()
        if late is None:
            return
        if self._committed:
            if self._owns_interrupts:  # else the owner (the CLI) reports it
                logger.warning(
                    "%s arrived after %s was written; the run completed",
                    _signal_name(late),
                    self.output,
                )
            return
        interrupts.late, interrupts.raised = None, late
        raise _signal_exception(late)

    def _write_error(self, error: BaseException, what: str = "the pools") -> BaseException:
        if isinstance(error, OSError):
            return ConfigError(
                f"cannot write {what} of {self.output}: {error.strerror or error}; free some "
                f"space or choose another {option('output')}"
            )
        return error

    def _record(self, name: str, num_bytes: int, digest: str) -> None:
        with self._lock:
            self._files[name] = {"bytes": num_bytes, "sha256": digest}

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write one small file (e.g. counts.json) and record its size and sha256."""
        try:
            (self.tmp_path / name).write_bytes(data)
        except OSError as error:
            raise self._write_error(error, name) from None
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

    def append_pool(self, length: int, ids: np.ndarray) -> None:
        """Append the next ascending int64 ids of `pools/{length}.npy`. Different pools may be
        written from different threads at once; one pool's appends come in order."""
        pools = self._ready_pools()
        try:
            pools.append(length, ids)
        except OSError as error:
            raise self._write_error(error) from None

    def commit(self, manifest: Mapping[str, Any]) -> Path:
        """Write the manifest (with every file's size and sha256) last, then swap the directory
        into place in one step. The replaced copy, if any, is deleted when the block ends."""
        if self._pools is not None:
            self._files.update(self._ready_pools().finish())
        shutil.rmtree(self.work_dir, ignore_errors=True)
        # Indented for people, except the (long) files table: one compact line.
        head = json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=1)
        files = json.dumps(dict(sorted(self._files.items())), separators=(",", ":"))
        text = f'{head[:-1].rstrip()},\n "files": {files}\n}}\n'
        try:
            (self.tmp_path / MANIFEST_NAME).write_text(text, encoding="utf-8")
        except OSError as error:
            raise self._write_error(error, MANIFEST_NAME) from None
        # From here on a signal is only recorded (by `Interrupts`; other handlers: held back in
        # this thread): one step puts the output in place, and the run then finishes.
        interrupts = self._interrupts
        if interrupts is not None:
            interrupts.defer()
        try:
            with contextlib.nullcontext() if interrupts is not None else _signals_blocked():
                self._move_into_place()
        finally:
            if interrupts is not None and not self._committed:
                interrupts.deferring = False
                if interrupts.late is not None:  # it came while trying: honour it now
                    signum, interrupts.late = interrupts.late, None
                    interrupts.raised = signum
                    raise _signal_exception(signum)
        self.manifest = json.loads(text)
        return self.output

    def _move_into_place(self) -> None:
        """tmp_path becomes output; whatever `output` held ends up in `self._replaced`."""
        tmp, output = self.tmp_path, self.output
        try:
            if not os.path.lexists(output):
                try:
                    done = _rename2(tmp, output, _RENAME_NOREPLACE)
                except OSError as error:
                    if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    done = False  # created meanwhile: replace it below, if allowed
                else:
                    if not done and not os.path.lexists(output):
                        os.rename(tmp, output)
                        done = True
                if done:
                    self._committed = True
                    return
            # Another run may have created it since __enter__ checked: replace it only when
            # asked to, and only if it is a prepared (or empty) directory.
            check_output(output, overwrite=self.overwrite)
            if _rename2(tmp, output, _RENAME_EXCHANGE):
                self._committed, self._replaced = True, tmp
                return
            self._swap_by_two_renames()
        except OSError as error:
            hint = ""
            if error.errno in (errno.EBUSY, errno.EXDEV):
                hint = f" (is it a mount point? choose a directory inside it as {option('output')})"
            raise ConfigError(
                f"cannot move the new prepared directory into place at {output}: "
                f"{error.strerror or error}{hint}; nothing was changed"
            ) from None

    def _swap_by_two_renames(self) -> None:
        # The old copy is locked while aside, so no other run takes it for a leftover.
        old, output = self._old_path, self.output
        with contextlib.suppress(NotImplementedError, OSError):
            fd = _lock_directory(output, wait=True)
            if fd is not None:
                self._fds.append(fd)
        os.rename(output, old)
        try:
            os.rename(self.tmp_path, output)
        except BaseException:
            os.rename(old, output)
            raise
        self._committed, self._replaced = True, old


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

    `manifest` must hold at least `config.max_seq_len`; `format`, `format_version` and
    `seqpack_version` are filled in. Pools are sorted on the way out, so the bytes are canonical.
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
        document = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "seqpack_version": __version__,
            **manifest,
        }
        return writer.commit(document)
