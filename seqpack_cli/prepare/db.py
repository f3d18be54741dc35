"""The DuckDB side of prepare: connections, their settings, the SQL, and DuckDB's errors worded.

`connect` opens an in-memory connection with prepare's settings, checked first
(`check_memory_limit`, `check_temp_dir`); `close_connection` interrupts and closes one.
`read_error` turns a failed query into one line naming its cause and the fix. SQL lives in
`sql/*.sql` (values passed as named parameters); `load_sql` finds it both in an installed wheel
and in a checkout; `one_row` and `fetch_with_progress` run it.

How DuckDB is made to read exactly what was named (`read_params` builds the two parameters):

- `$paths`: a path DuckDB would take for a glob (`*`, `?`, `[`) or cannot be handed as UTF-8 is
  read through a plain-named symlink to it in a private temporary folder (`duckdb_path`); a JSON
  Lines input is read as a parquet copy of the columns read (`jsonl_staging.staged_parquet`);
- `$columns`: read_parquet's `bound_schema` binds only the columns read ({name: DuckDB type},
  matched by DuckDB ignoring ASCII case, hence the ambiguity checks of `inspect_inputs`), and
  `AS input(length, ...)` renames them: no other column is bound, so a user column named like one
  of DuckDB's virtual columns (`filename`, `file_index`, `file_row_number`) never hides them, nor
  is read instead.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import duckdb

from seqpack_cli.errors import ConfigError, InputError, SeqpackError, first_line, option
from seqpack_cli.interrupts import signals_held
from seqpack_cli.prepare.inputs import GLOB_CHARS
from seqpack_cli.prepare.jsonl_staging import original_names, staged_parquet
from seqpack_cli.prepare.process_folders import process_folder
from seqpack_cli.progress import ProgressCallback

__all__ = [
    "MIN_DUCKDB",
    "MIN_MEMORY_LIMIT",
    "ReadFile",
    "check_memory_limit",
    "check_temp_dir",
    "close_connection",
    "connect",
    "duckdb_path",
    "fetch_with_progress",
    "load_sql",
    "one_row",
    "read_error",
    "read_params",
]

logger = logging.getLogger(__name__)


# ---- SQL --------------------------------------------------------------------------------------


@cache
def load_sql(name: str) -> str:
    """The text of `sql/{name}.sql`: packaged inside the wheel, or the checkout's `sql/`."""
    packaged = importlib.resources.files("seqpack_cli").joinpath("sql", f"{name}.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    # An editable install maps only the package directory; the SQL then sits next to it.
    checkout = Path(__file__).resolve().parents[2] / "sql" / f"{name}.sql"
    return checkout.read_text(encoding="utf-8")


# ---- how DuckDB is handed the inputs ----------------------------------------------------------


_links_lock = threading.Lock()
_links: dict[str, str] = {}


def duckdb_path(path: str | os.PathLike[str]) -> str:
    """`path` as DuckDB's read_parquet reads it literally.

    DuckDB expands `*`, `?` and `[` in every path it is handed (there is no escape for a name
    with a backslash too), and takes only UTF-8: such a file is read through a symlink with a
    plain name in a private temporary folder, made once per path and removed at exit.
    """
    text = os.path.abspath(path)
    if not any(char in text for char in GLOB_CHARS):
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    with _links_lock:
        link = _links.get(text)
        if link is None:
            try:
                digest = hashlib.sha256(os.fsencode(text)).hexdigest()[:32]
                link = os.path.join(process_folder("seqpack-links-"), f"{digest}.parquet")
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
    return original_names(text)


class ReadFile(Protocol):
    """What `read_params` needs of an input (`seqpack_cli.prepare.footers.InputFile` has it)."""

    @property
    def path(self) -> Path: ...

    @property
    def column_types(self) -> tuple[tuple[str, str], ...]: ...


def read_params(files: Sequence[ReadFile], *columns: str) -> dict[str, Any]:
    """`$paths` and `$columns` for the `read_parquet(...) AS input(...)` of `sql/*.sql`.

    `columns` are the columns the query reads, in the order of its `input(...)` list (e.g. the
    length column, then the id column); each must be one `inspect_inputs` checked. A JSON
    Lines input is copied to parquet here, once per process (`jsonl_staging.staged_parquet`:
    `InputError` for a value its column cannot hold, by line).
    """
    types = dict(files[0].column_types) if files else {}
    missing = [column for column in columns if column not in types]
    if missing:
        raise ValueError(f"columns {missing} were not checked by inspect_inputs")
    return {
        "paths": [duckdb_path(staged_parquet(file.path, file.column_types)) for file in files],
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


# ---- running queries --------------------------------------------------------------------------


def fetch_with_progress(
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

    finished = threading.Event()  # waited on, not join()ed: see pools.stream.stream_batches

    def work() -> None:
        try:
            outcome.append(con.sql(sql, params=dict(params)).fetchall())
        except BaseException as error:  # handed to the calling thread
            outcome.append(error)
        finally:
            finished.set()

    progress(phase, 0, total_rows)
    worker = threading.Thread(target=work, name="seqpack-query", daemon=True)
    worker.start()
    try:
        while not finished.wait(0.1):
            percent = con.query_progress()
            if percent > 0:
                progress(phase, int(total_rows * min(percent, 100.0) / 100.0), total_rows)
    except BaseException:
        con.interrupt()
        with signals_held():
            finished.wait()
        raise
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    progress(phase, total_rows, total_rows)
    return outcome[0]


def one_row(con: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, Any]) -> Any:
    """The single row `sql/{name}.sql` returns."""
    rows = con.sql(load_sql(name), params=dict(params)).fetchall()
    return rows[0]
