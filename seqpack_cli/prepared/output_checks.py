"""Whether `prepare` may write its output there: `check_output`, run before any work.

An output may be created where nothing is, or replace (with `overwrite`) an empty directory or a
seqpack prepared directory that holds nothing else: never a file, a directory with another
program's `manifest.json`, files the user put in a prepared directory, or a mount point. A name
too long for the filesystem, or a parent that cannot be written, is refused up front too.
`PreparedWriter` checks again right before it swaps its output in
(`seqpack_cli.prepared.swap.move_into_place`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from seqpack_cli.errors import ConfigError, option
from seqpack_cli.prepared.format import (
    COUNTS_NAME,
    FORMAT_NAME,
    MANIFEST_NAME,
    STORE_ROLES,
    TEMPLATES_NAME,
)
from seqpack_cli.prepared.mounts import check_no_mounts_inside
from seqpack_cli.prepared.pool_files import POOLS_DIR
from seqpack_cli.prepared.siblings import name_max

__all__ = ["check_output"]

_OVERWRITE = option("overwrite", python="overwrite=True")
"""`--overwrite` on the command line, `overwrite=True` in library messages."""


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
_STORE_FILES = {"tokens.npy", "offsets.npy", "ids.npy", "rows.npy", "token_source.json"}
_STORE_FILES_OF = {
    "tokens": _STORE_FILES | {"pieces.npy"},  # a split store's piece table
    "labels": _STORE_FILES | {"num_targets.npy"},  # each sequence's number of targets
    "loss_mask": _STORE_FILES | {"num_targets.npy"},
}


def _foreign_entries(output: Path) -> list[str]:
    """Entries of prepared directory `output` that a prepared directory does not hold (files the
    user put there), sorted: `--overwrite` must not delete them."""
    foreign = []
    for entry in os.scandir(output):
        if entry.name in (MANIFEST_NAME, COUNTS_NAME, TEMPLATES_NAME) and entry.is_file(
            follow_symlinks=False
        ):
            continue
        if entry.name in STORE_ROLES and entry.is_dir(follow_symlinks=False):
            foreign += [
                f"{entry.name}/{item.name}"
                for item in os.scandir(entry.path)
                if item.name not in _STORE_FILES_OF.get(entry.name, _STORE_FILES)
                or not item.is_file(follow_symlinks=False)
            ]
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
    check_no_mounts_inside(output)  # whose files the removal of the replaced copy would delete
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
    max_bytes = name_max(output.parent)
    if len(os.fsencode(output.name)) > max_bytes:
        raise ConfigError(
            f"output name {output.name[:40]}... is {len(os.fsencode(output.name))} bytes long, "
            f"but this filesystem allows at most {max_bytes}; choose a shorter {option('output')}"
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
