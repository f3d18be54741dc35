"""Parquet inputs -> length histogram, through DuckDB; the SQL and the connection prepare uses.

The first of prepare's two passes (DESIGN.md decision 6): `length_histogram` is one cheap GROUP BY
over the length column, and bad lengths (NULL, <= 0) are refused here, before any heavy work. The
second pass, over (length, id), lives in `seqpack_cli.pools` (`scan_pools`, re-exported here).

Inputs are resolved (`resolve_inputs`: files, globs, directories; nothing left out or counted
twice without a word) and their footers checked (`inspect_inputs`: row counts, schema, column
types, names DuckDB could confuse) before DuckDB reads a row. SQL lives in `sql/*.sql` (values
passed as named parameters); `load_sql` finds it both in an installed wheel and in a checkout.

How DuckDB is made to read exactly what was named (`read_params` builds the two parameters):

- `$paths`: a path DuckDB would take for a glob (`*`, `?`, `[`) or cannot be handed as UTF-8 is
  read through a plain-named symlink to it in a private temporary folder (`duckdb_path`);
- `$columns`: read_parquet's `bound_schema` binds only the columns read ({name: DuckDB type},
  matched by DuckDB ignoring ASCII case, hence the ambiguity checks), and `AS input(length, ...)`
  renames them: no other column is bound, so a user column named like one of DuckDB's virtual
  columns (`filename`, `file_index`, `file_row_number`) never hides them, nor is read instead.
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import importlib.resources
import itertools
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import ConfigError, InputError, SeqpackError, option
from seqpack_cli.progress import ProgressCallback

if TYPE_CHECKING:
    from seqpack_cli.pools import PoolScan, scan_pools

__all__ = [
    "PARQUET_SUFFIXES",
    "InputFile",
    "PoolScan",
    "check_memory_limit",
    "check_temp_dir",
    "close_connection",
    "connect",
    "duckdb_path",
    "inspect_inputs",
    "length_histogram",
    "load_sql",
    "read_error",
    "read_params",
    "resolve_inputs",
    "scan_length_histogram",
    "scan_pools",
]

logger = logging.getLogger(__name__)

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
"""Extensions (any case) that make a file found in a directory or by a glob an input."""

_GLOB_CHARS = "*?["
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_VIRTUAL_COLUMNS = ("filename", "file_index", "file_row_number")


# ---- SQL --------------------------------------------------------------------------------------


@cache
def load_sql(name: str) -> str:
    """The text of `sql/{name}.sql`: packaged inside the wheel, or the checkout's `sql/`."""
    packaged = importlib.resources.files("seqpack_cli").joinpath("sql", f"{name}.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    # An editable install maps only the package directory; the SQL then sits next to it.
    checkout = Path(__file__).resolve().parent.parent / "sql" / f"{name}.sql"
    return checkout.read_text(encoding="utf-8")


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


# ---- inputs: files, globs, directories --------------------------------------------------------


class _Skipped:
    """What expansion left out, by reason: logged once, with a count and an example."""

    NOT_PARQUET = "file(s) not parquet by their extension (.parquet, .parq, .pq, any case)"
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
            siblings = os.path.join(parent, f".{os.path.basename(absolute)}.seqpack-")
            roots = tuple({absolute, os.path.realpath(absolute)})
            self.entries.append((Path(absolute), roots, siblings))

    def container(self, path: str | os.PathLike[str]) -> Path | None:
        """The excluded directory `path` lies in (or is, or is a temporary sibling of)."""
        if not self.entries:
            return None
        candidates = {os.path.abspath(path), os.path.realpath(path)}
        for shown, roots, siblings in self.entries:
            for candidate in candidates:
                if candidate.startswith(siblings) or any(
                    candidate == root or candidate.startswith(root.rstrip(os.sep) + os.sep)
                    for root in roots
                ):
                    return shown
        return None


def _is_parquet_name(path: Path) -> bool:
    return path.suffix.lower() in PARQUET_SUFFIXES


def _not_regular(path: str | os.PathLike[str]) -> str | None:
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
    """Parquet files under `root`, following symlinked directories (each loop cut once).

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
                elif excluded.container(path) is None:
                    stack.append((path, above | {identity}))
            elif entry.is_file():
                if _is_parquet_name(path):
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
    fixed = list(itertools.takewhile(lambda part: not any(c in part for c in _GLOB_CHARS), parts))
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
    elif any(c in head for c in _GLOB_CHARS):
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
    for match in _matches(base, parts):
        if excluded.container(match) is not None:
            num_excluded += 1
            continue
        if any(part.startswith((".", "_")) for part in match.relative_to(base).parts):
            continue  # not data (see _walk), unless the pattern's fixed part names it
        if match.is_dir():
            files.extend(_walk(match, excluded, skipped))
        elif _not_regular(match) is not None:
            broken = os.path.islink(match) and not os.path.exists(match)
            skipped.add(_Skipped.BROKEN if broken else _Skipped.NOT_REGULAR, str(match))
        elif _is_parquet_name(match) or (match.suffix and spelled.endswith(match.suffix)):
            files.append(match)
        else:
            not_parquet.append(match)
    if not files and not_parquet:
        raise InputError(
            f"input pattern {pattern!r} matches {len(not_parquet)} files, none parquet by its "
            f"extension ({', '.join(PARQUET_SUFFIXES)}), e.g. {not_parquet[0]}; end the pattern "
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
                f"input directory {text} holds no parquet files (*.parquet, *.parq, *.pq, any "
                "case; hidden and _-prefixed entries left out); pass the directory that holds "
                "the dataset's parquet files"
            )
        return files
    why = _not_regular(path)
    if why is not None:
        raise InputError(
            f"input {text} is {why}; inputs are parquet files (or symlinks to them), globs or "
            "directories: copy the data to a file, or leave it out"
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
    """Expand files, globs (`**` too) and directories into parquet files, sorted by path.

    A path that exists is taken literally (even with `*`, `?` or `[` in its name); an argument
    that does not exist and holds those characters is a glob. Directories (named, or matched by
    a glob) are searched recursively for `*.parquet`, `*.parq` and `*.pq` (any case), following
    symlinked directories; hidden and `_`-prefixed entries are not data. Each file is read once,
    however many names reach it; files left out are logged (a warning with a count and an
    example). Directories in `exclude` (the output, with its hidden `.NAME.seqpack-*` siblings)
    are never searched, and a named input inside one is refused. The sorted order defines the
    row-index ids, so it does not depend on the order inputs were named in.
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
        elif any(char in text for char in _GLOB_CHARS):
            found.extend(_glob(text, excluded, skipped))
        else:
            raise InputError(f"input {text} does not exist; check the path")
    files = _read_once(found, skipped)
    skipped.log()
    return files


# ---- inputs: the footers ----------------------------------------------------------------------


@dataclass(frozen=True)
class InputFile:
    """One parquet input, as its footer describes it.

    `column_types` are the DuckDB types of the columns `inspect_inputs` checked (the length
    column, and the id column if any), as `read_params` binds them.
    """

    path: Path
    num_bytes: int
    num_rows: int
    column_types: tuple[tuple[str, str], ...] = ()


_DUCKDB_INTEGERS = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
}


def _ascii_lower(name: str) -> str:
    # DuckDB matches column names ignoring ASCII case only ("Ä" and "ä" stay apart).
    return "".join(char.lower() if char.isascii() else char for char in name)


def _check_column(
    path: Path, names: Sequence[str], types: Mapping[str, pa.DataType], column: str, role: str
) -> None:
    flag = option(f"{role}_column")
    if column not in types:
        variants = [name for name in names if _ascii_lower(name) == _ascii_lower(column)]
        hint = f" (names are matched exactly: did you mean {variants[0]!r}?)" if variants else ""
        raise InputError(
            f"{role} column {column!r} ({flag}) is not in {path}; its columns are: "
            f"{', '.join(names)}; pass one of them as {flag}{hint}"
        )
    same = [name for name in names if _ascii_lower(name) == _ascii_lower(column)]
    if len(same) > 1:
        shown = " and ".join(repr(name) for name in same)
        reason = "the same name" if len(set(same)) == 1 else "names that differ only in case"
        raise InputError(
            f"input file {path} has {len(same)} columns with {reason} ({shown}), and {flag} "
            f"names {column!r}; DuckDB cannot tell them apart: rename all but one of them when "
            "writing the parquet"
        )
    column_type = types[column]
    if column_type not in _DUCKDB_INTEGERS:
        expected = "integer token counts" if role == "length" else "unique integer ids"
        raise InputError(
            f"{role} column {column!r} ({flag}) in {path} holds {column_type} values; expected "
            f"{expected}; cast the column to an integer type when writing the parquet, or name "
            f"the right column with {flag}"
        )


def _schema_difference(
    types: Mapping[str, pa.DataType], reference: Mapping[str, pa.DataType], reference_path: Path
) -> str:
    for name, column_type in reference.items():
        if name not in types:
            return f"it has no column {name!r}, which {reference_path} has"
        if types[name] != column_type:
            return f"column {name!r} is {types[name]} there but {column_type} in {reference_path}"
    extra = next(name for name in types if name not in reference)
    return f"it has a column {extra!r} that {reference_path} lacks"


def inspect_inputs(
    paths: Sequence[Path], length_column: str, id_column: str | None = None
) -> list[InputFile]:
    """Read every footer: row counts and sizes, and the checks that need no data.

    Raises `InputError` for a path that is not a regular file, a file that is not parquet (or is
    truncated), a missing or non-integer length/id column (names match exactly), a column read
    that another column's name equals ignoring case (DuckDB could read either), and files whose
    schemas (names and types) disagree.
    """
    for role, column in (("length", length_column), ("id", id_column)):
        if column is not None and (not isinstance(column, str) or not column):
            raise InputError(
                f"{role} column is {column!r} ({option(f'{role}_column')}); expected a column name"
            )
    if id_column is not None and id_column == length_column:
        raise InputError(
            f"id column {id_column!r} ({option('id_column')}) is also the length column; ids "
            f"must be unique per sequence: name another column, or leave {option('id_column')} "
            "unset to use row indexes as ids"
        )
    read = [length_column] if id_column is None else [length_column, id_column]
    files: list[InputFile] = []
    reference: tuple[Path, dict[str, pa.DataType]] | None = None
    column_types: tuple[tuple[str, str], ...] = ()
    for path in paths:
        why = _not_regular(path)
        if why == "missing":
            raise InputError(f"input file {path} does not exist; check the path")
        if why is not None:
            raise InputError(f"input {path} is {why}; inputs are parquet files: leave it out")
        try:
            with open(path, "rb") as handle:  # pyarrow takes only UTF-8 path names
                metadata = pq.read_metadata(handle)
            names = metadata.schema.to_arrow_schema().names
            types = {field.name: field.type for field in metadata.schema.to_arrow_schema()}
        except (pa.ArrowException, OSError) as error:
            raise InputError(
                f"input file {path} is not a readable parquet file ({first_line(error)}); "
                "leave it out of the inputs or rewrite it as parquet"
            ) from None
        if reference is None:
            for column, role in zip(read, ("length", "id"), strict=False):
                _check_column(path, names, types, column, role)
            reference = (path, types)
            column_types = tuple((name, _DUCKDB_INTEGERS[types[name]]) for name in read)
        elif types != reference[1]:
            difference = _schema_difference(types, reference[1], reference[0])
            raise InputError(
                f"input file {path} has a different schema from the other inputs: {difference}; "
                "all inputs need the same columns and types (in any order): rewrite it or leave "
                "it out"
            )
        elif len(names) != len(types):  # the same names, one of them maybe twice
            for column, role in zip(read, ("length", "id"), strict=False):
                _check_column(path, names, types, column, role)
        files.append(InputFile(path, path.stat().st_size, metadata.num_rows, column_types))
    return files


# ---- how DuckDB is handed the inputs ----------------------------------------------------------


_links_lock = threading.Lock()
_links: dict[str, str] = {}
_link_dir: list[str] = []


def _remove_links(owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that exits normally
        for directory in _link_dir:
            shutil.rmtree(directory, ignore_errors=True)


def duckdb_path(path: str | os.PathLike[str]) -> str:
    """`path` as DuckDB's read_parquet reads it literally.

    DuckDB expands `*`, `?` and `[` in every path it is handed (there is no escape for a name
    with a backslash too), and takes only UTF-8: such a file is read through a symlink with a
    plain name in a private temporary folder, made once per path and removed at exit.
    """
    text = os.path.abspath(path)
    if not any(char in text for char in _GLOB_CHARS):
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    with _links_lock:
        link = _links.get(text)
        if link is None:
            try:
                if not _link_dir:
                    _link_dir.append(tempfile.mkdtemp(prefix="seqpack-links-"))
                    atexit.register(_remove_links, os.getpid())
                digest = hashlib.sha256(os.fsencode(text)).hexdigest()[:32]
                link = os.path.join(_link_dir[0], f"{digest}.parquet")
                if not os.path.lexists(link):
                    os.symlink(text, link)
            except OSError as error:
                raise InputError(
                    f"cannot make a temporary link to {text}, whose name DuckDB would misread "
                    f"({error.strerror}); rename it without *, ? and [, or set TMPDIR to a "
                    "writable folder"
                ) from None
            _links[text] = link
    return link


def _real_names(text: str) -> str:
    """A DuckDB message with the temporary links it names replaced by the files they stand for."""
    for real, link in list(_links.items()):
        text = text.replace(link, real)
    return text


def read_params(files: Sequence[InputFile], *columns: str) -> dict[str, Any]:
    """`$paths` and `$columns` for the `read_parquet(...) AS input(...)` of `sql/*.sql`.

    `columns` are the columns the query reads, in the order of its `input(...)` list (e.g. the
    length column, then the id column); each must be one `inspect_inputs` checked.
    """
    types = dict(files[0].column_types) if files else {}
    missing = [column for column in columns if column not in types]
    if missing:
        raise ValueError(f"columns {missing} were not checked by inspect_inputs")
    return {
        "paths": [duckdb_path(file.path) for file in files],
        "columns": {column: types[column] for column in columns},
    }


# ---- DuckDB settings and errors ---------------------------------------------------------------


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB|%)\s*$", re.IGNORECASE)
_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
MIN_MEMORY_LIMIT = 16 * 2**20
"""The smallest `memory_limit` accepted: below a few MiB per thread DuckDB fails before it reads
a row, and prepare's passes need a few batches besides."""


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def check_memory_limit(value: Any) -> str:
    """`value` if it is a DuckDB memory limit seqpack can run under (e.g. 4GB, 512MiB, 50%);
    `ConfigError` naming the option otherwise."""
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(
            f"{option('memory_limit')} is {value!r}; expected a size such as 4GB, 512MB or "
            "2GiB, or a share of RAM such as 50%"
        )
    number, unit = float(match.group(1)), match.group(2).upper()
    if unit == "%":
        if not 0 < number <= 100:
            raise ConfigError(
                f"{option('memory_limit')} is {value!r}; a share of RAM is above 0% and at most "
                "100%"
            )
        num_bytes = int(number / 100 * _total_memory()) or MIN_MEMORY_LIMIT
    else:
        num_bytes = int(number * _UNITS[unit])
    if num_bytes < MIN_MEMORY_LIMIT:
        raise ConfigError(
            f"{option('memory_limit')} is {value!r}, too little for DuckDB to run prepare's "
            f"queries (at least {MIN_MEMORY_LIMIT // 2**20}MiB); raise it, or leave it unset "
            "(DuckDB's default: 80% of RAM)"
        )
    return value.strip()


def check_temp_dir(value: Any) -> str:
    """`value` as an absolute path if DuckDB can spill there: an existing writable directory, or
    a missing one whose parent is (DuckDB creates it); `ConfigError` naming the option otherwise."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(f"{option('temp_dir')} is {value!r}; expected a directory path")
    path = os.path.abspath(value)
    flag = option("temp_dir")
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(
                f"{flag} {path} is not writable; DuckDB spills there: name a directory you can "
                "write to"
            )
        return path
    if os.path.lexists(path):
        raise ConfigError(
            f"{flag} {path} is a file, not a directory; name a directory (it is created if its "
            "parent exists)"
        )
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ConfigError(
            f"{flag} {path} does not exist, nor does its parent {parent}; create it, or name an "
            "existing directory"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag} {path} does not exist and its parent {parent} is not writable; create it, "
            "or name a directory you can write to"
        )
    return path


MIN_DUCKDB = (2, 0)
"""The first DuckDB whose read_parquet takes `bound_schema` (see the module docstring)."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def read_error(error: duckdb.Error) -> SeqpackError:
    """A failed DuckDB query as one line that names its cause and the fix."""
    text = _real_names(first_line(error))
    low = text.lower()
    if isinstance(error, duckdb.OutOfMemoryException):
        return ConfigError(
            f"DuckDB ran out of memory ({text}); raise {option('memory_limit')} (or leave it "
            f"unset), use fewer {option('threads')}, or set {option('temp_dir')} to a folder "
            "with free space so DuckDB can spill to disk"
        )
    if "no space left on device" in low or "disk quota exceeded" in low:
        return ConfigError(
            f"DuckDB ran out of disk space while spilling to its temporary folder ({text}); free "
            f"space there, or point {option('temp_dir')} at a disk with room"
        )
    if "failed to create directory" in low or "duckdb_temp" in low:
        return ConfigError(
            f"DuckDB could not use its temporary folder ({text}); point {option('temp_dir')} at "
            "an existing, writable directory"
        )
    if isinstance(error, duckdb.InterruptException):
        return InputError("DuckDB's query was interrupted before it finished; run it again")
    if isinstance(error, (duckdb.IOException, duckdb.InvalidInputException)):
        return InputError(
            f"DuckDB could not read the inputs: {text}; check that the file it names is an "
            "intact parquet file, or leave it out"
        )
    return InputError(f"DuckDB failed while reading the inputs: {text}")


def connect(
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with prepare's settings (threads, memory, spill folder),
    checked first (`check_memory_limit`, `check_temp_dir`)."""
    if _version(duckdb.__version__) < MIN_DUCKDB:
        raise ConfigError(
            f"seqpack needs duckdb >= {'.'.join(map(str, MIN_DUCKDB))} (its read_parquet "
            f"bound_schema), but duckdb {duckdb.__version__} is installed; upgrade it: pip "
            "install -U duckdb"
        )
    config: dict[str, Any] = {}
    if threads is not None:
        config["threads"] = threads
    if memory_limit is not None:
        config["memory_limit"] = check_memory_limit(memory_limit)
    if temp_dir is not None:
        config["temp_directory"] = check_temp_dir(temp_dir)
    try:
        con = duckdb.connect(config=config)
        # query_progress() needs the progress bar on; DuckDB must not draw its own.
        con.execute("SET enable_progress_bar = true")
        con.execute("SET enable_progress_bar_print = false")
    except duckdb.Error as error:
        raise ConfigError(
            f"DuckDB rejected the settings {option('threads')}={threads}, "
            f"{option('memory_limit')}={memory_limit!r}, {option('temp_dir')}={temp_dir!r}: "
            f"{first_line(error)}; fix the option it names"
        ) from None
    return con


def close_connection(con: duckdb.DuckDBPyConnection) -> None:
    """Close a connection, first interrupting whatever it still runs; never raises (it is called
    while another error, or an interrupt, is on its way out)."""
    try:
        con.interrupt()
        con.close()
    except duckdb.Error as error:
        logger.debug("closing DuckDB: %s", error)


# ---- the histogram pass -----------------------------------------------------------------------


def _fetch_with_progress(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Mapping[str, Any],
    *,
    phase: str,
    total_rows: int,
    progress: ProgressCallback | None,
) -> list[tuple[Any, ...]]:
    """Run a query to completion, reporting DuckDB's own progress estimate as rows done."""
    if progress is None:
        return con.sql(sql, params=dict(params)).fetchall()
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append(con.sql(sql, params=dict(params)).fetchall())
        except BaseException as error:  # handed to the calling thread
            outcome.append(error)

    progress(phase, 0, total_rows)
    worker = threading.Thread(target=work, name="seqpack-query", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
            percent = con.query_progress()
            if percent > 0:
                progress(phase, int(total_rows * min(percent, 100.0) / 100.0), total_rows)
    except BaseException:
        con.interrupt()
        worker.join()
        raise
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    progress(phase, total_rows, total_rows)
    return outcome[0]


def one_row(con: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, Any]) -> Any:
    """The single row `sql/{name}.sql` returns."""
    rows = con.sql(load_sql(name), params=dict(params)).fetchall()
    return rows[0]


def location(files: Sequence[InputFile], file_index: int, row: int) -> str:
    return f"{files[file_index].path} at row {row} (0-based)"


def length_histogram(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    *,
    progress: ProgressCallback | None = None,
) -> dict[int, int]:
    """`{length: count}` over all rows, ascending; `InputError` for NULL or non-positive lengths,
    and for a row count that is not the footers' (inputs changed, or misread)."""
    params = read_params(files, length_column)
    total_rows = sum(file.num_rows for file in files)
    try:
        rows = _fetch_with_progress(
            con,
            load_sql("length_histogram"),
            params,
            phase="histogram",
            total_rows=total_rows,
            progress=progress,
        )
        bad = sum(count for length, count in rows if length is None or length <= 0)
        if bad:
            file_index, row, value = one_row(con, "first_bad_length", params)
    except duckdb.Error as error:
        raise read_error(error) from None
    num_read = sum(count for _, count in rows)
    if num_read != total_rows:
        raise InputError(
            f"DuckDB read {num_read} rows from the {len(files)} input files, whose footers count "
            f"{total_rows}; the inputs changed while they were read: run again once they are "
            "complete"
        )
    if bad:
        shown = "NULL" if value is None else str(value)
        raise InputError(
            f"length column {length_column!r} has {bad} NULL, zero or negative lengths, the first "
            f"({shown}) in {location(files, file_index, row)}; every sequence needs a length "
            "> 0: fix or drop those rows before prepare"
        )
    return {int(length): int(count) for length, count in sorted(rows)}


def scan_length_histogram(
    paths: Sequence[Path],
    length_column: str,
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
    progress: ProgressCallback | None = None,
) -> dict[int, int]:
    """The length histogram `{length: count}` of parquet files (see `resolve_inputs`).

    Validates the column (exists in every file, integer type, no NULL / <= 0 values): an
    `InputError` names the file, the column, the count and the first bad row.
    """
    files = inspect_inputs(paths, length_column)
    con = connect(threads=threads, memory_limit=memory_limit, temp_dir=temp_dir)
    try:
        return length_histogram(con, files, length_column, progress=progress)
    finally:
        close_connection(con)


def __getattr__(name: str) -> Any:
    # The pools pass lives in seqpack_cli.pools, which imports this module: re-export lazily.
    if name in ("PoolScan", "scan_pools"):
        from seqpack_cli import pools

        return getattr(pools, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
