"""User arguments -> a sorted list of input files: files, globs (`**` too) and directories.

`resolve_inputs` walks directories (following symlinked ones, each loop cut once), matches globs,
takes files by their extension (parquet: `PARQUET_SUFFIXES`; JSON Lines: `JSONL_SUFFIXES`; both
kinds in one directory are both inputs; a `*.json` file is an input when named, or matched by a
glob that spells `.json`, but not when a directory is searched: metadata such as
`dataset_info.json` sits beside datasets), refuses remote URLs, keeps the output
directory out, and reads each file once however many names reach it. What it leaves out is
logged, with a count and an example, except the prepared directories seqpack wrote (those with
seqpack's manifest): an output kept beside its data is skipped silently. No DuckDB here: the
files are only named and stat-ed (and a found `manifest.json` parsed).

The order is one sort of all the files' absolute paths, whatever their kind (`a.jsonl` comes
before `b.parquet`, which comes before `c.json`): row-index ids count rows over the files in that
order, so they do not depend on which kind a file is, nor on the order the inputs were named in.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import logging
import os
import re
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.input_names import JSONL_SUFFIXES, PARQUET_SUFFIXES, SEARCHED_JSONL_SUFFIXES
from seqpack_cli.prepared.format import FORMAT_NAME, MANIFEST_NAME
from seqpack_cli.prepared.siblings import is_sibling_of

__all__ = [
    "GLOB_CHARS",
    "check_outside",
    "not_regular",
    "resolve_inputs",
]

logger = logging.getLogger(__name__)


GLOB_CHARS = "*?["
"""Characters that make an argument that does not exist a glob (DuckDB expands them too)."""

_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class _Skipped:
    """What expansion left out, by reason: logged once, with a count and an example."""

    NOT_PARQUET = (
        "file(s) not parquet by their extension (.parquet, .parq, .pq) nor JSON Lines (.jsonl, "
        ".jsonl.gz; .json when named or globbed as *.json), any case"
    )
    NOT_REGULAR = "entries neither regular files nor directories (FIFOs, sockets, devices)"
    BROKEN = "symlink(s) that point nowhere"
    LOOP = "symlinked director(ies) looping back to a directory above them"
    SAME_FILE = "path(s) to a file already read (a symlink or hard link to it; read once)"

    def __init__(self) -> None:
        self.found: dict[str, list[str]] = {}

    def add(self, reason: str, example: str) -> None:
        self.found.setdefault(reason, []).append(example)

    def log(self) -> None:
        for reason, examples in self.found.items():
            logger.warning("inputs: left out %d %s, e.g. %s", len(examples), reason, examples[0])


class _Excluded:
    """Directories whose contents are never inputs (the output), with their hidden siblings."""

    def __init__(self, directories: Sequence[str | os.PathLike[str]]) -> None:
        self.entries: list[tuple[Path, tuple[str, ...], str]] = []
        for directory in directories:
            absolute = os.path.abspath(directory)
            parent = os.path.realpath(os.path.dirname(absolute))
            roots = tuple({absolute, os.path.realpath(absolute)})
            self.entries.append((Path(absolute), roots, parent.rstrip(os.sep) + os.sep))

    def container(self, path: str | os.PathLike[str]) -> Path | None:
        """The excluded directory `path` lies in (or is, or is a temporary sibling of)."""
        if not self.entries:
            return None
        candidates = {os.path.abspath(path), os.path.realpath(path)}
        for shown, roots, parent in self.entries:
            for candidate in candidates:
                if any(
                    candidate == root or candidate.startswith(root.rstrip(os.sep) + os.sep)
                    for root in roots
                ):
                    return shown
                if candidate.startswith(parent):  # in a sibling (long names are shortened)?
                    first = candidate[len(parent) :].split(os.sep, 1)[0]
                    if first.startswith(".") and is_sibling_of(shown, first):
                        return shown
        return None


def _is_input_name(path: Path) -> bool:
    """Whether the name makes `path` found by a search an input: parquet, or JSON Lines by an
    extension no metadata file has (`_SEARCHED_JSONL`)."""
    name = path.name.lower()
    return path.suffix.lower() in PARQUET_SUFFIXES or name.endswith(SEARCHED_JSONL_SUFFIXES)


def _is_prepared(directory: Path) -> bool:
    """Whether `directory` is a prepared directory seqpack wrote: its `manifest.json` is
    seqpack's (a `format_version`, and the `format` seqpack writes, or none in older ones).

    Such a directory is never data (its files are .json and .npy), so scanning skips it without
    a warning; another tool's `manifest.json` does not count.
    """
    manifest = directory / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        document = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return False
    return (
        isinstance(document, dict)
        and "format_version" in document
        and document.get("format", FORMAT_NAME) == FORMAT_NAME
    )


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why `path` (followed if a symlink) is no input file, or None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a symlink that points nowhere" if os.path.islink(path) else "missing"
    except OSError as error:
        return f"unreadable ({error.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _identity(path: str | os.PathLike[str]) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _walk(root: Path, excluded: _Excluded, skipped: _Skipped) -> list[Path]:
    """Input files under `root`, following symlinked directories (each loop cut once).

    Hive-partitioned trees nest files in key=value/ folders; hidden and `_`-prefixed entries
    (_SUCCESS, .crc, _temporary/ of a running writer, seqpack's own temporaries) are not data.
    """
    found: list[Path] = []
    stack = [(root, frozenset({_identity(root)}))]
    while stack:
        directory, above = stack.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as error:
            raise InputError(
                f"cannot list {directory} ({error.strerror}) in input directory {root}; make it "
                "readable, or name the files to read"
            ) from None
        for entry in entries:
            if entry.name.startswith((".", "_")):
                continue
            path = Path(entry.path)
            if entry.is_dir():
                identity = _identity(path)
                if identity in above:
                    skipped.add(_Skipped.LOOP, str(path))
                elif excluded.container(path) is None and not _is_prepared(path):
                    stack.append((path, above | {identity}))
            elif entry.is_file():
                if _is_input_name(path):
                    found.append(path)
                else:
                    skipped.add(_Skipped.NOT_PARQUET, str(path))
            elif entry.is_symlink() and not os.path.exists(path):
                skipped.add(_Skipped.BROKEN, str(path))
            else:
                skipped.add(_Skipped.NOT_REGULAR, str(path))
    return found


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob pattern before its first wildcard."""
    parts = Path(pattern).parts
    fixed = list(itertools.takewhile(lambda part: not any(c in part for c in GLOB_CHARS), parts))
    return Path(*fixed) if fixed else Path(".")


def _matches(
    directory: Path, parts: Sequence[str], above: frozenset[tuple[int, int]] = frozenset()
) -> Iterator[Path]:
    """Python-glob matches of `parts` below `directory` (`**`: any depth, symlink loops cut)."""
    if not parts:
        yield directory
        return
    head, rest = parts[0], parts[1:]
    if head == "**":
        if not rest:  # everything below: the directory itself, expanded as one
            yield directory
            return
        yield from _matches(directory, rest, above)
        try:
            here = above | {_identity(directory)}
            with os.scandir(directory) as listing:
                subdirs = sorted(
                    e.path for e in listing if not e.name.startswith(".") and e.is_dir()
                )
        except OSError:
            return
        for sub in subdirs:
            if _identity(sub) not in here:
                yield from _matches(Path(sub), parts, here)
    elif any(c in head for c in GLOB_CHARS):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        for name in names:
            if (head.startswith(".") or not name.startswith(".")) and fnmatch.fnmatchcase(
                name, head
            ):
                yield from _matches(directory / name, rest, above)
    elif os.path.lexists(directory / head):
        yield from _matches(directory / head, rest, above)


def _glob(pattern: str, excluded: _Excluded, skipped: _Skipped) -> list[Path]:
    """A glob's files: directories matched are expanded like named ones; matched files whose
    extension is not parquet are taken only when the pattern spells that extension itself."""
    base = _glob_base(pattern)
    parts = Path(pattern).parts[len(base.parts) :]
    spelled = parts[-1] if parts else ""
    files: list[Path] = []
    not_parquet: list[Path] = []
    num_excluded = 0
    prepared: dict[Path, bool] = {}  # directories below `base` checked for seqpack's manifest

    def in_prepared(match: Path) -> bool:
        """Whether `match` is, or lies in, a prepared directory below the pattern's fixed part."""
        relative = match.relative_to(base).parts
        for depth in range(1, len(relative) + 1):
            directory = base.joinpath(*relative[:depth])
            if directory not in prepared:
                prepared[directory] = directory.is_dir() and _is_prepared(directory)
            if prepared[directory]:
                return True
        return False

    for match in _matches(base, parts):
        if excluded.container(match) is not None:
            num_excluded += 1
            continue
        if any(part.startswith((".", "_")) for part in match.relative_to(base).parts):
            continue  # not data (see _walk), unless the pattern's fixed part names it
        if in_prepared(match):
            continue  # seqpack's own output (see _walk), unless the fixed part names it
        if match.is_dir():
            files.extend(_walk(match, excluded, skipped))
        elif not_regular(match) is not None:
            broken = os.path.islink(match) and not os.path.exists(match)
            skipped.add(_Skipped.BROKEN if broken else _Skipped.NOT_REGULAR, str(match))
        elif _is_input_name(match) or (match.suffix and spelled.endswith(match.suffix)):
            files.append(match)
        else:
            not_parquet.append(match)
    if not files and not_parquet:
        raise InputError(
            f"input pattern {pattern!r} matches {len(not_parquet)} files, none parquet nor JSON "
            f"Lines by its extension ({', '.join(PARQUET_SUFFIXES + JSONL_SUFFIXES)}), e.g. "
            f"{not_parquet[0]}; end the pattern "
            "with the files' own extension (e.g. '*.dat') to read them, or name them one by one"
        )
    if not files and num_excluded:
        raise InputError(
            f"input pattern {pattern!r} matches only the output directory or files inside it, "
            "which are never inputs; point it at the dataset's parquet files"
        )
    if not files:
        raise InputError(
            f"input pattern {pattern!r} matches no files; check it (quote it so the shell does "
            "not expand it; ** matches subdirectories)"
        )
    for path in not_parquet:
        skipped.add(_Skipped.NOT_PARQUET, str(path))
    return files


def _named(text: str, excluded: _Excluded, skipped: _Skipped) -> list[Path]:
    """The files of an input that exists: taken literally, whatever characters it holds."""
    inside = excluded.container(text)
    if inside is not None:
        raise InputError(
            f"input {text} lies inside the output directory {inside}, whose files are never "
            "inputs; move the inputs out of it, or write the output elsewhere"
        )
    path = Path(text)
    if path.is_dir():
        files = _walk(path, excluded, skipped)
        if not files:
            raise InputError(
                f"input directory {text} holds no parquet files (*.parquet, *.parq, *.pq) nor "
                "JSON Lines files (*.jsonl, *.jsonl.gz), any case (hidden and _-prefixed entries "
                "left out); pass the directory that holds the dataset's files, or name *.json "
                "files (or a glob such as DIR/*.json)"
            )
        return files
    why = not_regular(path)
    if why is not None:
        raise InputError(
            f"input {text} is {why}; inputs are parquet or JSON Lines files (or symlinks to "
            "them), globs or directories: copy the data to a file, or leave it out"
        )
    return [path]


def _read_once(paths: Sequence[Path], skipped: _Skipped) -> list[Path]:
    """Absolute paths, sorted, each file once (by device and inode: symlinks, hard links)."""
    by_text = {path.as_posix(): path for path in (Path(os.path.abspath(p)) for p in paths)}
    seen: dict[tuple[int, int], Path] = {}
    files: list[Path] = []
    for text in sorted(by_text):
        path = by_text[text]
        try:
            identity = _identity(path)
        except OSError as error:
            raise InputError(
                f"input {path} cannot be read any more ({error.strerror}); run again once the "
                "inputs stay put"
            ) from None
        if identity in seen:
            skipped.add(_Skipped.SAME_FILE, f"{path} is {seen[identity]}")
            continue
        seen[identity] = path
        files.append(path)
    return files


def resolve_inputs(
    inputs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    exclude: Sequence[str | os.PathLike[str]] = (),
) -> list[Path]:
    """Expand files, globs (`**` too) and directories into input files, sorted by path.

    A path that exists is taken literally (even with `*`, `?` or `[` in its name); an argument
    that does not exist and holds those characters is a glob. Directories (named, or matched by
    a glob) are searched recursively for `*.parquet`, `*.parq`, `*.pq`, `*.jsonl` and
    `*.jsonl.gz` (any case; `*.json` only when named or globbed; see the module docstring for
    the order of both kinds), following
    symlinked directories; hidden and `_`-prefixed entries are not data. Each file is read once,
    however many names reach it; files left out are logged (a warning with a count and an
    example). Directories in `exclude` (the output, with its hidden `.NAME.seqpack-*` siblings)
    are never searched, and a named input inside one is refused; prepared directories seqpack
    wrote (seqpack's `manifest.json`) found while searching are skipped without a warning. The
    sorted order defines the row-index ids, so it does not depend on the order inputs were named
    in.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    excluded = _Excluded(exclude)
    skipped = _Skipped()
    found: list[Path] = []
    for item in inputs:
        text = os.fspath(item)
        if not text:
            raise InputError("an input is an empty path; pass parquet files, globs or directories")
        if os.path.lexists(text):
            found.extend(_named(text, excluded, skipped))
        elif text.lower().startswith("file://"):
            raise InputError(f"input {text} is a file:// URL; pass the local path it names")
        elif _REMOTE.match(text):
            raise InputError(
                f"input {text} is a remote URL, and remote inputs are not supported yet; "
                "download the files (or mount the bucket) and pass the local path"
            )
        elif any(char in text for char in GLOB_CHARS):
            found.extend(_glob(text, excluded, skipped))
        else:
            raise InputError(f"input {text} does not exist; check the path")
    files = _read_once(found, skipped)
    skipped.log()
    return files


def _literal_part(path: str) -> str:
    """A path, or the folder part of a glob pattern before its first wildcard."""
    if os.path.exists(path):
        return path
    parts = Path(path).parts
    fixed = itertools.takewhile(lambda part: not any(c in part for c in "*?["), parts)
    return os.path.join(".", *fixed)


def check_outside(output: Path, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse inputs inside the output directory (real paths compared): replacing the output
    would delete them."""
    inside = os.path.realpath(output)
    for item in inputs:
        real = os.path.realpath(_literal_part(os.fspath(item)))
        if real == inside or real.startswith(inside.rstrip(os.sep) + os.sep):
            raise ConfigError(
                f"input {os.fspath(item)} lies inside the output directory {output}, which "
                f"prepare replaces as a whole; move the inputs out of it, or choose another "
                f"{option('output')}"
            )
