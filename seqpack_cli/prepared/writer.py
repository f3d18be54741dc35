"""Writing a prepared directory atomically: `PreparedWriter`, `write_prepared`, `check_output`.

`PreparedWriter` builds the directory in a hidden temporary sibling of the output (named and
cleaned up after killed runs by `siblings`), writes the manifest last, and moves it into place
in one step: `renameat2(RENAME_EXCHANGE)` swaps it with the directory it replaces where the
system has it (Linux 3.15+ on ext4, xfs, btrfs, tmpfs...), so `--output` always holds a complete
old or new copy whatever kills the job. Elsewhere the old copy is renamed aside
(`.{name}.seqpack-old-...`) first, and a run that finds it without an output puts it back.

What may be replaced is decided by `output_checks.check_output`, before any work and again
right before the swap. SIGINT and SIGTERM (`seqpack_cli.interrupts`) remove the temporary
directory, and from the commit on are only recorded: a signal that comes once the output is in
place does not turn a finished job into an interrupted one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError, option
from seqpack_cli.interrupts import Interrupts, signal_exception, signal_name, signals_blocked
from seqpack_cli.prepared import siblings  # siblings.rename2 looked up at each call (tests stub it)
from seqpack_cli.prepared.consistency import check_figures, check_templates, read_templates
from seqpack_cli.prepared.layout import (
    COUNTS_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    TEMPLATES_NAME,
    counts_to_json,
    templates_to_json,
)
from seqpack_cli.prepared.output_checks import check_output
from seqpack_cli.prepared.pool_files import POOL_DTYPE as _POOL_DTYPE
from seqpack_cli.prepared.pool_files import POOLS_DIR, PoolFiles
from seqpack_cli.prepared.schema import check_manifest
from seqpack_cli.prepared.siblings import (
    OLD,
    TMP,
    FlockUnsupported,
    lock_directory,
    recover_siblings,
    sibling_path,
)

__all__ = ["PreparedWriter", "check_output", "write_prepared"]

logger = logging.getLogger(__name__)


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
        self._created = threading.Event()  # set once the creator thread touches no file again
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
        self.tmp_path = sibling_path(self.output, TMP, token)
        self._old_path = sibling_path(self.output, OLD, token)

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
                fd = lock_directory(self.tmp_path, wait=True)
            except FlockUnsupported:
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
            raise signal_exception(raised) from None

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
                self._remove_tmp()
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

    def _remove_tmp(self) -> None:
        # No thread of this writer writes here any more (`_stop_creating`; appends run in the
        # caller's threads): what rmtree still fails to remove gets one more try, then a warning
        # that names it (the next run writing this output removes it once this process is gone).
        left: list[str] = []
        for _ in range(2):
            shutil.rmtree(self.tmp_path, ignore_errors=True)
            if not os.path.lexists(self.tmp_path):
                return
            left = sorted(
                os.path.join(root, name)
                for root, directories, files in os.walk(self.tmp_path)
                for name in directories + files
            )
            logger.debug("removing %s left %d entries: %s", self.tmp_path, len(left), left[:5])
        logger.warning(
            "cannot remove the temporary directory %s (%d entries left, e.g. %s); the next run "
            "writing %s removes it",
            self.tmp_path,
            len(left),
            left[0] if left else self.tmp_path,
            self.output,
        )

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
                    signal_name(late),
                    self.output,
                )
            return
        interrupts.late, interrupts.raised = None, late
        raise signal_exception(late)

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
            finally:
                self._created.set()

        self._creator = threading.Thread(target=create, name="seqpack-create", daemon=True)
        self._creator.start()

    # The creator thread is waited for through `_created`, never Thread.join: on CPython 3.11 a
    # join that a signal handler's exception cuts short (SIGTERM or Ctrl-C while the first
    # append waits) marks the thread as ended while it runs on, and every later join returns at
    # once: the cleanup then deleted the directory while the thread still created pool files in
    # it, and one created meanwhile was left behind. An Event keeps no such state.

    def _stop_creating(self) -> None:
        self._stop.set()  # a creator that starts only now creates nothing
        creator, self._creator = self._creator, None
        while creator is not None and not self._created.wait(0.05):
            if not creator.is_alive():  # a signal came inside start(): it never ran
                break

    def _ready_pools(self) -> PoolFiles:
        if self._creator is not None:
            self._created.wait()  # once set, waiting again (from any thread) returns at once
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
            with contextlib.nullcontext() if interrupts is not None else signals_blocked():
                self._move_into_place()
        finally:
            if interrupts is not None and not self._committed:
                interrupts.deferring = False
                if interrupts.late is not None:  # it came while trying: honour it now
                    signum, interrupts.late = interrupts.late, None
                    interrupts.raised = signum
                    raise signal_exception(signum)
        self.manifest = json.loads(text)
        return self.output

    def _move_into_place(self) -> None:
        """tmp_path becomes output; whatever `output` held ends up in `self._replaced`."""
        tmp, output = self.tmp_path, self.output
        try:
            if not os.path.lexists(output):
                try:
                    done = siblings.rename2(tmp, output, siblings.RENAME_NOREPLACE)
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
            if siblings.rename2(tmp, output, siblings.RENAME_EXCHANGE):
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
        with contextlib.suppress(FlockUnsupported, OSError):
            fd = lock_directory(output, wait=True)
            if fd is not None:
                self._fds.append(fd)
        os.rename(output, old)
        try:
            os.rename(self.tmp_path, output)
        except BaseException:
            os.rename(old, output)
            raise
        self._committed, self._replaced = True, old


def _check_loadable(
    output: str | os.PathLike[str],
    document: Mapping[str, Any],
    counts: Mapping[int, int],
    templates: Mapping[tuple[int, ...], int],
) -> None:
    """Refuse, before writing anything, what `load_prepared` would refuse to read back."""
    path = Path(output)
    try:
        # The files table is the writer's own (filled at commit): a placeholder stands in.
        placeholder = {"bytes": 0, "sha256": "0" * 64}
        files = {COUNTS_NAME: placeholder, TEMPLATES_NAME: placeholder}
        checked = check_manifest(path, {**document, "files": files})
        max_seq_len = checked["config"]["max_seq_len"]
        pairs = read_templates(path, json.loads(templates_to_json(templates)))
        counts_checked = {int(length): int(count) for length, count in counts.items()}
        max_seqs_per_bin = checked["config"].get("max_seqs_per_bin")
        canonical = check_templates(path, pairs, counts_checked, max_seq_len, max_seqs_per_bin)
        check_figures(path, checked, counts_checked, canonical)
    except PreparedFormatError as error:
        problem = error.problem or str(error)
        raise ConfigError(
            f"write_prepared would write a directory that load_prepared refuses: {problem}; pass "
            "a manifest, counts and templates that agree"
        ) from None


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
    document = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "seqpack_version": __version__,
        **manifest,
    }
    _check_loadable(output, document, counts, templates)
    with PreparedWriter(output, overwrite=overwrite) as writer:
        writer.create_pool_files(counts)
        for length in sorted(counts):
            writer.append_pool(length, np.sort(np.asarray(pools[length], dtype=_POOL_DTYPE)))
        writer.write_bytes(COUNTS_NAME, counts_to_json(counts))
        writer.write_bytes(TEMPLATES_NAME, templates_to_json(templates))
        return writer.commit(document)
