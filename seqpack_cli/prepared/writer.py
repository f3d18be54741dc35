"""Writing a prepared directory atomically: `PreparedWriter`, `write_prepared`.

`PreparedWriter` builds the directory in a hidden temporary sibling of the output
(`seqpack_cli.prepared.staging`; named, and cleaned up after killed runs, by `siblings`), creates
the pool files in the background (`pool_creation`) while the caller scans, writes the manifest
last, and moves the result into place in one step (`swap.move_into_place`): `--output` always
holds a complete old or new copy whatever kills the job.

What may be replaced is decided by `output_checks.check_output`, before any work and again
right before the swap. SIGINT and SIGTERM (`seqpack_cli.interrupts`) remove the temporary
directory, and from the commit on are only recorded: a signal that comes once the output is in
place does not turn a finished job into an interrupted one.

`write_prepared` writes in-memory counts, templates and pools through a `PreparedWriter`, after
checking that `load_prepared` would read them back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError, option
from seqpack_cli.interrupts import Interrupts, signal_exception, signal_name, signals_blocked
from seqpack_cli.prepared.consistency import check_figures, check_templates, read_templates
from seqpack_cli.prepared.format import (
    COUNTS_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    TEMPLATES_NAME,
    counts_to_json,
    templates_to_json,
)
from seqpack_cli.prepared.integrity import file_digest, seal_manifest, with_edge_digests
from seqpack_cli.prepared.mounts import remove_tree
from seqpack_cli.prepared.output_checks import check_output
from seqpack_cli.prepared.pool_creation import BackgroundPoolFiles
from seqpack_cli.prepared.pool_files import POOL_DTYPE as _POOL_DTYPE
from seqpack_cli.prepared.pool_files import POOLS_DIR, PoolFiles
from seqpack_cli.prepared.schema import check_manifest
from seqpack_cli.prepared.siblings import recover_siblings
from seqpack_cli.prepared.staging import Staging
from seqpack_cli.prepared.swap import move_into_place

__all__ = ["PreparedWriter", "write_prepared"]

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
        self._staging = Staging(self.output)
        self.manifest: dict[str, Any] = {}
        """The manifest as written (what `load_prepared` reads); empty until committed."""
        self._files: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._pool_files: BackgroundPoolFiles | None = None
        self._pools_finished = False
        self._interrupts: Interrupts | None = None
        self._owns_interrupts = False
        self._replaced: Path | None = None
        self._committed = False

    @property
    def tmp_path(self) -> Path:
        """The hidden temporary directory the output is built in."""
        return self._staging.path

    @property
    def work_dir(self) -> Path:
        """Scratch space inside the temporary directory, deleted before the manifest is written."""
        return self.tmp_path / ".work"

    # ---- the block: enter, leave, clean up -------------------------------------------------

    def __enter__(self) -> PreparedWriter:
        recover_siblings(self.output)
        check_output(self.output, overwrite=self.overwrite)
        self._take_signals()
        try:
            self._staging.create()
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
            if self._pool_files is not None:
                self._pool_files.stop()
                self._pool_files.pools.abort()
            if not self._committed:
                self._staging.discard()
            elif self._replaced is not None:
                remove_tree(self._replaced)
        finally:
            self._staging.release()
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
                    signal_name(late),
                    self.output,
                )
            return
        interrupts.late, interrupts.raised = None, late
        raise signal_exception(late)

    # ---- the files -------------------------------------------------------------------------

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

    def record_file(self, name: str) -> None:
        """Record the size and sha256 of a file already written into `tmp_path` (relative
        `name`, e.g. `tokens/tokens.npy`), read back in chunks."""
        try:
            size, digest = file_digest(self.tmp_path / name)
        except OSError as error:
            raise self._write_error(error, name) from None
        self._record(name, size, digest)

    def record_written(self, name: str, num_bytes: int, sha256: str) -> None:
        """Record a file written into `tmp_path` and hashed on the way (a pool written by a
        cluster task, a token store file hashed while streamed), without reading it back; its
        size is checked."""
        try:
            size = (self.tmp_path / name).stat().st_size
        except OSError as error:
            raise self._write_error(error, name) from None
        if size != num_bytes:
            raise ConfigError(
                f"{name} in {self.tmp_path} holds {size} bytes, but the task that wrote it wrote "
                f"{num_bytes}; is {self.output} on a filesystem every worker sees at this path?"
            )
        self._record(name, num_bytes, sha256)

    def finish_pools(self) -> None:
        """Close the pool files and record them, before `commit` (which then does not again):
        the pools can then be read from `tmp_path` (e.g. to check a token store against them)."""
        if self._pool_files is not None and not self._pools_finished:
            self._files.update(self._ready_pools().finish())
            self._pools_finished = True

    def create_pool_files(self, counts: Mapping[int, int]) -> None:
        """Create every `pools/{length}.npy` (header included) in a background thread while the
        caller scans (`seqpack_cli.prepared.pool_creation`); `append_pool` then fills them."""
        if self._pool_files is not None:
            raise RuntimeError("create_pool_files was called twice")
        self._pool_files = BackgroundPoolFiles(self.tmp_path, counts)
        self._pool_files.start()

    def _ready_pools(self) -> PoolFiles:
        if self._pool_files is None:
            raise RuntimeError("append_pool before create_pool_files")
        try:
            return self._pool_files.ready()
        except OSError as error:
            raise self._write_error(error) from None

    def append_pool(self, length: int, ids: np.ndarray) -> None:
        """Append the next ascending int64 ids of `pools/{length}.npy`. Different pools may be
        written from different threads at once; one pool's appends come in order."""
        pools = self._ready_pools()
        try:
            pools.append(length, ids)
        except OSError as error:
            raise self._write_error(error) from None

    # ---- the commit ------------------------------------------------------------------------

    def commit(self, manifest: Mapping[str, Any]) -> Path:
        """Write the manifest (with every file's size and sha256) last, then swap the directory
        into place in one step. The replaced copy, if any, is deleted when the block ends."""
        self.finish_pools()
        shutil.rmtree(self.work_dir, ignore_errors=True)
        text = self._write_manifest(manifest)
        self._swap_in()
        self.manifest = json.loads(text)
        return self.output

    def _write_manifest(self, manifest: Mapping[str, Any]) -> str:
        """Write manifest.json with the files table and its own digest; return its text."""
        try:
            table = with_edge_digests(self.tmp_path, dict(sorted(self._files.items())))
        except OSError as error:
            raise self._write_error(error, MANIFEST_NAME) from None
        sealed = seal_manifest({**manifest, "files": table})
        # Indented for people, except the (long) files table: one compact line.
        head = json.dumps({k: v for k, v in sealed.items() if k != "files"}, indent=1)
        files = json.dumps(table, separators=(",", ":"))
        text = f'{head[:-1].rstrip()},\n "files": {files}\n}}\n'
        try:
            (self.tmp_path / MANIFEST_NAME).write_text(text, encoding="utf-8")
        except OSError as error:
            raise self._write_error(error, MANIFEST_NAME) from None
        return text

    def _swap_in(self) -> None:
        """Move the temporary directory into place, signals held back meanwhile."""
        # From here on a signal is only recorded (by `Interrupts`; other handlers: held back in
        # this thread): one step puts the output in place, and the run then finishes.
        interrupts = self._interrupts
        if interrupts is not None:
            interrupts.defer()
        try:
            with contextlib.nullcontext() if interrupts is not None else signals_blocked():
                self._replaced = move_into_place(
                    self.tmp_path,
                    self.output,
                    old_path=self._staging.old_path,
                    overwrite=self.overwrite,
                    locks=self._staging.locks,
                )
                self._committed = True
        finally:
            if interrupts is not None and not self._committed:
                interrupts.deferring = False
                if interrupts.late is not None:  # it came while trying: honour it now
                    signum, interrupts.late = interrupts.late, None
                    interrupts.raised = signum
                    raise signal_exception(signum)


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


def _check_pool_sizes(counts: Mapping[int, int], pools: Mapping[int, Any]) -> None:
    """Every length of `counts` has a pool of exactly its count."""
    for length, count in counts.items():
        size = len(pools[length]) if length in pools else None
        if size != count:
            raise InputError(
                f"the pool for length {length} holds {size} ids but counts says {count}; pass "
                "counts and pools from one histogram (e.g. length_histogram_from_lengths)"
            )


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
    _check_pool_sizes(counts, pools)
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
