"""The hidden temporary sibling a `PreparedWriter` builds its output in: made, locked, discarded.

`Staging` names the sibling (`.{name}.seqpack-tmp-{pid}-{random}`, see `siblings`), creates the
output's missing parent directories and the sibling itself, and holds a lock on it so that no
other run cleaning up after killed runs takes it for a leftover (`siblings.recover_siblings`).
If the job fails, `discard()` removes the sibling and the parents it created; `release()` closes
the locks once the writer is done, whatever happened.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import uuid
from pathlib import Path

from seqpack_cli.prepared.mounts import remove_tree
from seqpack_cli.prepared.siblings import OLD, TMP, FlockUnsupported, lock_directory, sibling_path

__all__ = ["Staging"]

logger = logging.getLogger(__name__)

# Another run cleaning up could take the lock of a directory this one has just made but not
# locked yet, and remove it: then try again under a new name, this many times in all.
_CREATE_TRIES = 5


class Staging:
    """The temporary sibling `path` of `output`, and `old_path`, where the two-renames swap puts
    the copy it replaces (`seqpack_cli.prepared.swap`)."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.locks: list[int] = []
        """Descriptors of the flocks this run holds until `release()` (the swap adds its own)."""
        self._created_parents: list[Path] = []
        self._rename()

    def _rename(self) -> None:
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = sibling_path(self.output, TMP, token)
        self.old_path = sibling_path(self.output, OLD, token)

    def create(self) -> None:
        """Create the output's missing parents and the locked temporary directory."""
        self._create_parents()
        self._create_locked()

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

    def _create_locked(self) -> None:
        for _ in range(_CREATE_TRIES):
            self.path.mkdir()
            try:
                fd = lock_directory(self.path, wait=True)
            except FlockUnsupported:
                return  # no flock here: the pid in the name tells others this run is alive
            except FileNotFoundError:
                fd = None
            if fd is not None:
                self.locks.append(fd)
                with contextlib.suppress(OSError):
                    if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                        return
            self._rename()
        raise OSError(errno.EAGAIN, "another process keeps removing its temporary directory")

    def discard(self) -> None:
        """Remove the temporary directory, then the parents `create()` made (if still empty)."""
        self._remove_tree()
        for directory in reversed(self._created_parents):
            try:
                directory.rmdir()  # only if still empty
            except OSError:
                break

    def _remove_tree(self) -> None:
        # No thread of the writer writes here any more (the pool creation is stopped first;
        # appends run in the caller's threads): what remove_tree still fails to remove gets one more
        # try, then a warning that names it (the next run writing this output removes it once
        # this process is gone).
        left: list[str] = []
        for _ in range(2):
            remove_tree(self.path)
            if not os.path.lexists(self.path):
                return
            left = sorted(
                os.path.join(root, name)
                for root, directories, files in os.walk(self.path)
                for name in directories + files
            )
            logger.debug("removing %s left %d entries: %s", self.path, len(left), left[:5])
        logger.warning(
            "cannot remove the temporary directory %s (%d entries left, e.g. %s); the next run "
            "writing %s removes it",
            self.path,
            len(left),
            left[0] if left else self.path,
            self.output,
        )

    def release(self) -> None:
        """Close every lock and forget the parents created: a later `discard()` keeps them."""
        for fd in self.locks:
            os.close(fd)
        self.locks.clear()
        self._created_parents.clear()
