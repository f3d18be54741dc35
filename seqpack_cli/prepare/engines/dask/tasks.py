"""The Dask engine's small tasks, run on the workers: footers, histograms, where an id is.

Each is a pure function of its arguments (what it reads is named in them), so Dask may run it
again after a worker dies, anywhere, with the same result. Each runs the project's own SQL
through `prepare.db`, `prepare.footers` and `prepare.scan`, as the local engine does, on its
group of files. A worker that cannot see an input or the output's temporary directory fails the
task with one line saying so (`check_visible`), and so does one that sees another file at an
input's path than the driver did (`check_inputs`, against the driver's `fingerprints`): inputs
and output must live on a filesystem every worker sees at the same path. The pools' tasks are
in `pool_tasks` and `merge_tasks`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqpack_cli import __version__
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.prepare.config import engine_option
from seqpack_cli.prepare.db import close_connection, connect, load_sql, read_error, read_params
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint, difference, fingerprint
from seqpack_cli.prepare.engines.dask.groups import FileGroup, GroupHistogram
from seqpack_cli.prepare.footers import Footer, read_footer
from seqpack_cli.prepare.scan import histogram_part

__all__ = [
    "TaskSettings",
    "check_inputs",
    "check_visible",
    "group_histogram",
    "locate_id",
    "read_footers",
    "worker_info",
    "worker_name",
]

_SHARED = (
    "inputs and the output must be on a filesystem every worker sees at the same path (NFS, "
    "Lustre, a shared disk)"
)


@dataclass(frozen=True)
class TaskSettings:
    """What every task needs besides its own inputs: DuckDB's settings, and a pause for tests."""

    threads: int | None = None
    """DuckDB threads per task; None: the worker's cores over its task threads."""
    memory_limit: str | None = None
    temp_dir: str | None = None
    pause_s: float = 0.0
    """Seconds a pools task sleeps halfway (tests kill its worker meanwhile)."""

    def duckdb_threads(self) -> int:
        if self.threads is not None:
            return self.threads
        return max(1, _usable_cores() // _task_threads())

    def connect(self) -> Any:
        return connect(
            threads=self.duckdb_threads(), memory_limit=self.memory_limit, temp_dir=self.temp_dir
        )

    def pause(self) -> None:
        if self.pause_s > 0:
            time.sleep(self.pause_s)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _task_threads() -> int:
    """How many tasks this worker runs at once (1 outside a worker)."""
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):
        return 1


def worker_name() -> str:
    """This worker's address and host, for messages."""
    try:
        from distributed import get_worker

        return f"{get_worker().address} (host {socket.gethostname()})"
    except (ImportError, ValueError):
        return f"host {socket.gethostname()}"


def worker_info() -> dict[str, Any]:
    """What the driver checks of every worker before the run (`Client.run`)."""
    return {"seqpack": __version__, "cores": _usable_cores(), "host": socket.gethostname()}


def check_visible(paths: Iterable[Path], directories: Iterable[Path] = ()) -> None:
    """One line when this worker does not see an input file or the output's directory."""
    for path in paths:
        if not os.path.exists(path):
            raise InputError(
                f"input file {path} is not visible on Dask worker {worker_name()}, though the "
                f"driver found it; {_SHARED}: mount it there, or use {engine_option('local')}"
            )
    for directory in directories:
        if not os.path.isdir(directory):
            raise ConfigError(
                f"the output's temporary directory {directory} is not visible on Dask worker "
                f"{worker_name()}; {_SHARED}: write the output there, or use "
                f"{engine_option('local')}"
            )


def check_inputs(expected: Iterable[Fingerprint]) -> None:
    """One line when this worker does not see an input, or sees another file at its path than
    the driver did (`expected`, the driver's fingerprints): a stale copy would be read silently."""
    for print_ in expected:
        check_visible([print_.path])
        found = difference(fingerprint(print_.path), print_)
        if found is not None:
            raise InputError(
                f"input file {print_.path} on Dask worker {worker_name()} is not the file the "
                f"driver read: {found}; {_SHARED}, with the same contents (a stale local copy?): "
                f"give every worker the same files, or use {engine_option('local')}"
            )


def read_footers(
    paths: Sequence[Path], expected: Sequence[Fingerprint | None]
) -> list[Footer | InputError]:
    """The footers of consecutive inputs, each checked against the driver's fingerprint of it
    (None: the driver could not read it, so neither should this worker); a file's problem is
    returned in its place, and ends the list (`footers.check_footers` raises it when its turn
    comes)."""
    check_visible(paths)
    footers: list[Footer | InputError] = []
    for path, print_ in zip(paths, expected, strict=True):
        try:
            footer = read_footer(path)
        except InputError as error:
            footers.append(error)
            break
        if print_ is None:
            raise InputError(
                f"input file {path} is readable on Dask worker {worker_name()} but not on the "
                f"driver; {_SHARED}: give the driver the same files, or use "
                f"{engine_option('local')}"
            )
        check_inputs([print_])
        footers.append(footer)
    return footers


def group_histogram(group: FileGroup, length_column: str, settings: TaskSettings) -> GroupHistogram:
    """The histogram query over one file group (`scan.histogram_part`), unchecked and compact:
    the driver adds the groups up and words any problem as the local engine does."""
    check_inputs(group.fingerprints)
    con = settings.connect()
    try:
        part = histogram_part(con, group.files, length_column, first_file=group.first_file)
    finally:
        close_connection(con)
    return GroupHistogram.of_part(part)


def locate_id(
    group: FileGroup, id_column: str, id_value: int, settings: TaskSettings
) -> list[tuple[int, int]]:
    """The first rows of the group that hold `id_value` (sql/id_locations.sql), as (file index
    in the inputs' list, row) pairs."""
    import duckdb

    check_inputs(group.fingerprints)
    con = settings.connect()
    try:
        params = {**read_params(group.files, id_column), "id": id_value}
        rows = con.sql(load_sql("id_locations"), params=params).fetchall()
    except duckdb.Error as error:
        raise read_error(error) from None
    finally:
        close_connection(con)
    return [(group.first_file + int(file_index), int(row)) for file_index, row in rows]
