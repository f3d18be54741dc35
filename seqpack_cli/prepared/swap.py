"""Putting a finished prepared directory in place of the output in one step: `move_into_place`.

Where the output does not exist, the new directory is renamed onto it without replacing anything
(`renameat2(RENAME_NOREPLACE)`, or a plain rename where that is missing). Where it exists and
may be replaced (`output_checks.check_output`, checked again here: another run may have created
it meanwhile), `renameat2(RENAME_EXCHANGE)` swaps the two directories atomically, so the output
always holds a complete old or new copy. Systems without renameat2 get two renames: the old copy
is moved aside (`.{name}.seqpack-old-...`, locked meanwhile) and the new one into place; a run
that finds the old copy without an output puts it back (`siblings.recover_siblings`).

`siblings.rename2` is looked up at each call, so tests can stand in for the kernel.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from seqpack_cli.errors import ConfigError, option
from seqpack_cli.prepared import siblings
from seqpack_cli.prepared.output_checks import check_output
from seqpack_cli.prepared.siblings import FlockUnsupported, lock_directory

__all__ = ["move_into_place"]


def move_into_place(
    new: Path, output: Path, *, old_path: Path, overwrite: bool, locks: list[int]
) -> Path | None:
    """Make the directory `new` the one at `output`; return where the replaced copy now is
    (for the caller to delete), or None when nothing was replaced.

    `old_path` is where the two-renames fallback moves the old copy; the descriptor of the lock
    it holds on it meanwhile is appended to `locks`, for the caller to close. Raises
    `ConfigError` when the move fails; nothing was changed then.
    """
    try:
        if not os.path.lexists(output) and _rename_without_replacing(new, output):
            return None
        # Another run may have created it since the writer checked: replace it only when asked
        # to, and only if it is a prepared (or empty) directory.
        check_output(output, overwrite=overwrite)
        if siblings.rename2(new, output, siblings.RENAME_EXCHANGE):
            return new  # the old copy now has the new one's former name
        _swap_by_two_renames(new, output, old_path, locks)
        return old_path
    except OSError as error:
        hint = ""
        if error.errno in (errno.EBUSY, errno.EXDEV):
            hint = f" (is it a mount point? choose a directory inside it as {option('output')})"
        raise ConfigError(
            f"cannot move the new prepared directory into place at {output}: "
            f"{error.strerror or error}{hint}; nothing was changed"
        ) from None


def _rename_without_replacing(new: Path, output: Path) -> bool:
    """Rename `new` to the absent `output`; False if `output` was created meanwhile."""
    try:
        done = siblings.rename2(new, output, siblings.RENAME_NOREPLACE)
    except OSError as error:
        if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        return False  # created meanwhile: the caller replaces it, if allowed
    if not done and not os.path.lexists(output):  # no renameat2 here
        os.rename(new, output)
        return True
    return done


def _swap_by_two_renames(new: Path, output: Path, old_path: Path, locks: list[int]) -> None:
    # The old copy is locked while aside, so no other run takes it for a leftover.
    with contextlib.suppress(FlockUnsupported, OSError):
        fd = lock_directory(output, wait=True)
        if fd is not None:
            locks.append(fd)
    os.rename(output, old_path)
    try:
        os.rename(new, output)
    except BaseException:
        os.rename(old_path, output)
        raise
