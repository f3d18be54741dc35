"""Parquet inputs -> length histogram and per-length id pools, through DuckDB.

Two passes, as DESIGN.md decision 6 says:

1. `length_histogram`: one cheap GROUP BY over the length column. Bad lengths (NULL, <= 0) are
   refused here, before any heavy work.
2. `scan_pools`: one streaming pass over (length, id). Every id is scattered straight to its final
   place in one flat int64 work file laid out as the pools back to back (offsets from the known
   counts), batch by batch; then the file is split into `pools/{length}.npy`, each pool sorted on
   the way. Memory holds a batch, never the rows, and only one file is open at a time whatever
   the number of distinct lengths.

SQL lives in `sql/*.sql` (values passed as named parameters); `load_sql` finds it both in an
installed wheel and in a source checkout.
"""

from __future__ import annotations

import glob
import importlib.resources
import itertools
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.progress import ProgressCallback

__all__ = [
    "InputFile",
    "PoolScan",
    "close_connection",
    "connect",
    "inspect_inputs",
    "length_histogram",
    "load_sql",
    "resolve_inputs",
    "scan_length_histogram",
    "scan_pools",
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
    checkout = Path(__file__).resolve().parent.parent / "sql" / f"{name}.sql"
    return checkout.read_text(encoding="utf-8")


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _read_error(error: duckdb.Error) -> InputError:
    return InputError(
        f"DuckDB could not read the inputs: {_first_line(error)}; check that the file it names "
        "is an intact parquet file, or leave it out"
    )


# ---- inputs -----------------------------------------------------------------------------------


def _is_data(path: Path, base: Path) -> bool:
    # Hive-partitioned trees nest files in key=value/ folders; hidden and `_`-prefixed entries
    # below the folder named (_SUCCESS, .crc, _temporary/ of a running writer) are not data.
    return path.is_file() and not any(
        part.startswith((".", "_")) for part in path.relative_to(base).parts
    )


def _parquet_under(directory: Path) -> list[Path]:
    return [path for path in directory.rglob("*.parquet") if _is_data(path, directory)]


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob pattern before its first wildcard."""
    parts = Path(pattern).parts
    fixed = list(itertools.takewhile(lambda part: not any(c in part for c in "*?["), parts))
    return Path(*fixed) if fixed else Path(".")


def resolve_inputs(inputs: Sequence[str | os.PathLike[str]] | str) -> list[Path]:
    """Expand files, globs (`**` too) and directories into parquet files, sorted by path.

    Directories are searched recursively for `*.parquet`. Duplicates are dropped; the sorted
    order defines the row-index ids, so it does not depend on the order inputs were named in.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    found: dict[str, Path] = {}
    for item in inputs:
        text = os.fspath(item)
        if os.path.isdir(text):
            files = _parquet_under(Path(text))
            if not files:
                raise InputError(
                    f"input directory {text} holds no *.parquet files; pass the directory that "
                    "holds the dataset's parquet files"
                )
        elif os.path.exists(text):
            files = [Path(text)]
        elif any(char in text for char in "*?["):
            files = []
            base = _glob_base(text)
            for match in sorted(glob.glob(text, recursive=True)):
                path = Path(match)
                if path.is_dir():
                    files.extend(_parquet_under(path))
                elif _is_data(path, base):
                    files.append(path)
            if not files:
                raise InputError(
                    f"input pattern {text!r} matches no files; check it (quote it so the shell "
                    "does not expand it; ** matches subdirectories)"
                )
        else:
            raise InputError(f"input {text} does not exist; check the path")
        for path in files:
            absolute = Path(os.path.abspath(path))
            found[absolute.as_posix()] = absolute
    return [found[key] for key in sorted(found)]


@dataclass(frozen=True)
class InputFile:
    """One parquet input, as its footer describes it."""

    path: Path
    num_bytes: int
    num_rows: int


def _check_column(path: Path, types: Mapping[str, pa.DataType], column: str, role: str) -> None:
    option = "--length-column" if role == "length" else "--id-column"
    if column not in types:
        raise InputError(
            f"{role} column {column!r} ({option}) is not in {path}; its columns are: "
            f"{', '.join(types)}; pass one of them as {option}"
        )
    column_type = types[column]
    if not pa.types.is_integer(column_type):
        expected = "integer token counts" if role == "length" else "unique integer ids"
        raise InputError(
            f"{role} column {column!r} ({option}) in {path} holds {column_type} values; expected "
            f"{expected}; cast the column to an integer type when writing the parquet, or name "
            f"the right column with {option}"
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

    Raises `InputError` for a file that is not parquet (or is truncated), a missing or
    non-integer length/id column, and files whose schemas (names and types) disagree.
    """
    files: list[InputFile] = []
    reference: tuple[Path, dict[str, pa.DataType]] | None = None
    for path in paths:
        try:
            metadata = pq.read_metadata(path)
            types = {field.name: field.type for field in metadata.schema.to_arrow_schema()}
        except (pa.ArrowException, OSError) as error:
            raise InputError(
                f"input file {path} is not a readable parquet file ({_first_line(error)}); "
                "leave it out of the inputs or rewrite it as parquet"
            ) from None
        if reference is None:
            _check_column(path, types, length_column, "length")
            if id_column is not None:
                _check_column(path, types, id_column, "id")
            reference = (path, types)
        elif types != reference[1]:
            difference = _schema_difference(types, reference[1], reference[0])
            raise InputError(
                f"input file {path} has a different schema from the other inputs: {difference}; "
                "all inputs need the same columns and types (in any order): rewrite it or leave "
                "it out"
            )
        files.append(InputFile(path, path.stat().st_size, metadata.num_rows))
    return files


# ---- DuckDB -----------------------------------------------------------------------------------


def connect(
    *,
    threads: int | None = None,
    memory_limit: str | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with prepare's settings (threads, memory, spill folder)."""
    config: dict[str, Any] = {}
    if threads is not None:
        config["threads"] = threads
    if memory_limit is not None:
        config["memory_limit"] = memory_limit
    if temp_dir is not None:
        config["temp_directory"] = os.fspath(temp_dir)
    try:
        con = duckdb.connect(config=config)
        # query_progress() needs the progress bar on; DuckDB must not draw its own.
        con.execute("SET enable_progress_bar = true")
        con.execute("SET enable_progress_bar_print = false")
    except duckdb.Error as error:
        raise ConfigError(
            f"DuckDB rejected the settings threads={threads}, memory_limit={memory_limit!r}, "
            f"temp_dir={temp_dir!r}: {_first_line(error)}; fix the option it names"
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


def _one_row(con: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, Any]) -> Any:
    """The single row `sql/{name}.sql` returns."""
    rows = con.sql(load_sql(name), params=dict(params)).fetchall()
    return rows[0]


def _location(files: Sequence[InputFile], file_index: int, row: int) -> str:
    return f"{files[file_index].path} at row {row} (0-based)"


def length_histogram(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    *,
    progress: ProgressCallback | None = None,
) -> dict[int, int]:
    """`{length: count}` over all rows, ascending; `InputError` for NULL or non-positive lengths."""
    params = {"paths": [file.path.as_posix() for file in files], "length_column": length_column}
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
            file_index, row, value = _one_row(con, "first_bad_length", params)
    except duckdb.Error as error:
        raise _read_error(error) from None
    if bad:
        shown = "NULL" if value is None else str(value)
        raise InputError(
            f"length column {length_column!r} has {bad} NULL, zero or negative lengths, the first "
            f"({shown}) in {_location(files, file_index, row)}; every sequence needs a length "
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


# ---- the pools pass ---------------------------------------------------------------------------

PoolSink = Callable[[int, int, Iterable[np.ndarray]], None]
"""`sink(length, count, ascending_id_chunks)` writes one pool (`PreparedWriter.write_pool`)."""

_BATCH_ROWS = 1 << 19  # rows per Arrow batch streamed from DuckDB
_REMAP_ROWS = 1 << 23  # re-map the work file this often, so written pages leave our RSS
_UNIT_IDS = 1 << 21  # split work unit: consecutive pools holding about this many ids (16 MiB)
_MAX_SORT_IDS = 1 << 22  # a larger pool is sorted in runs of this size, then merged (32 MiB)
_MAX_BYTEMAP_IDS = 1 << 27  # id ranges up to this are checked with one byte per id (128 MiB)
_MAX_WORKERS = 8


def _num_workers(threads: int | None) -> int:
    return max(1, min(threads or os.cpu_count() or 1, _MAX_WORKERS))


class _NullIds(Exception):
    """Raised by the batch producer when the id column holds NULLs (worded by the caller)."""


_DONE = object()


def _stream_batches(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any]
) -> Generator[list[np.ndarray], None, None]:
    """A query's Arrow batches as numpy columns, fetched by a thread one step ahead.

    DuckDB decodes the next batches (without the GIL) while the caller places this one.
    """
    batches: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                batches.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        reader = None
        try:
            reader = con.sql(sql, params=dict(params)).to_arrow_reader(_BATCH_ROWS)
            for batch in reader:
                if any(column.null_count for column in batch.columns):
                    raise _NullIds
                columns = [column.to_numpy(zero_copy_only=False) for column in batch.columns]
                if not put(columns):
                    return
            put(_DONE)
        except BaseException as error:  # handed to the consuming thread
            put(error)
        finally:
            # Release the result now: DuckDB runs no other query on this connection until then
            # (and the error's traceback would otherwise keep it alive).
            if reader is not None:
                reader.close()

    producer = threading.Thread(target=produce, name="seqpack-scan", daemon=True)
    producer.start()
    try:
        while (item := batches.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if producer.is_alive():
            stop.set()
            con.interrupt()
            producer.join()


@dataclass(frozen=True)
class PoolScan:
    """What the pools pass saw besides the pools."""

    num_ids: int
    id_min: int | None
    id_max: int | None


class _Layout:
    """Where each length's pool sits in the flat work file: pools back to back, ascending."""

    def __init__(self, counts: Mapping[int, int]) -> None:
        self.lengths = np.array(sorted(counts), dtype=np.int64)
        self.sizes = np.array([counts[int(x)] for x in self.lengths], dtype=np.int64)
        self.starts = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.sizes, out=self.starts[1:])
        self.num_ids = int(self.starts[-1])
        # Dense index of each length; `num` (one past the last) marks lengths not in the counts.
        num = len(self.lengths)
        index_dtype = np.uint16 if num < np.iinfo(np.uint16).max else np.uint32
        self.index = np.full(int(self.lengths[-1]) + 2, num, dtype=index_dtype)
        self.index[self.lengths] = np.arange(num)

    def units(self) -> list[tuple[int, int]]:
        """The split's units of work: runs of consecutive pools of about `_UNIT_IDS` ids, and
        each pool over `_MAX_SORT_IDS` alone (it is sorted in runs and merged, never whole)."""
        units = []
        first = 0
        for position, size in enumerate(self.sizes.tolist()):
            if size > _MAX_SORT_IDS:
                if first < position:
                    units.append((first, position))
                units.append((position, position + 1))
                first = position + 1
            elif self.starts[position + 1] - self.starts[first] >= _UNIT_IDS:
                units.append((first, position + 1))
                first = position + 1
        if first < len(self.sizes):
            units.append((first, len(self.sizes)))
        return units


def _changed_error() -> InputError:
    return InputError(
        "the inputs changed while prepare was reading them (the second pass saw rows the first "
        "did not); re-run prepare once nothing is writing to the input files"
    )


def _place(
    flat: np.memmap,
    index: np.ndarray,
    ids: np.ndarray,
    batch_counts: np.ndarray,
    base: np.ndarray,
    *,
    track_range: bool,
) -> tuple[int, int] | None:
    """Write one batch's ids to their reserved slots (`base[pool]` onwards for each pool)."""
    # A stable counting order (radix sort on the uint16 index) keeps each pool's ids in stream
    # order, so already-ascending ids need no sort later.
    order = np.argsort(index, kind="stable")
    batch_starts = np.cumsum(batch_counts) - batch_counts
    positions = np.repeat(base - batch_starts, batch_counts)
    positions += np.arange(len(index), dtype=np.int64)
    flat[positions] = ids[order]
    return (int(ids.min()), int(ids.max())) if track_range else None


def _scatter(
    batches: Iterator[list[np.ndarray]],
    layout: _Layout,
    flat_path: Path,
    to_ids: Callable[[list[np.ndarray]], np.ndarray],
    *,
    workers: int,
    track_range: bool,
    progress: ProgressCallback | None,
) -> tuple[int | None, int | None]:
    """Put every streamed id at its pool's next free slot of the flat work file.

    This thread reserves each batch's slots (a bincount per batch moves per-pool cursors);
    worker threads order and write the batches, which touch disjoint slots.
    """
    num = len(layout.lengths)
    cursor = layout.starts[:-1].copy()
    ends = layout.starts[1:]
    low: int | None = None
    high: int | None = None
    pending: deque[Future[tuple[int, int] | None]] = deque()

    def collect(future: Future[tuple[int, int] | None]) -> None:
        nonlocal low, high
        result = future.result()
        if result is not None:
            low = result[0] if low is None else min(low, result[0])
            high = result[1] if high is None else max(high, result[1])

    flat = np.memmap(flat_path, dtype=np.int64, mode="r+", shape=(layout.num_ids,))
    mapped_rows = 0
    done = 0
    with ThreadPoolExecutor(workers, thread_name_prefix="seqpack-scatter") as executor:
        for columns in batches:
            size = len(columns[0])
            if not size:
                continue
            ids = to_ids(columns)
            # mode='clip' maps any length the histogram did not see to the sentinel slot.
            index = np.take(layout.index, columns[0], mode="clip")
            batch_counts = np.bincount(index, minlength=num + 1)
            if batch_counts[num] or np.any(cursor + batch_counts[:num] > ends):
                raise _changed_error()
            batch_counts = batch_counts[:num]
            if mapped_rows >= _REMAP_ROWS:
                # Dropping the mapping drops its written pages from this process's RSS (they
                # stay in the page cache), so resident memory does not grow with the rows.
                while pending:
                    collect(pending.popleft())
                flat = np.memmap(flat_path, dtype=np.int64, mode="r+", shape=(layout.num_ids,))
                mapped_rows = 0
            pending.append(
                executor.submit(
                    _place, flat, index, ids, batch_counts, cursor.copy(), track_range=track_range
                )
            )
            cursor += batch_counts
            mapped_rows += size
            done += size
            while len(pending) > workers:
                collect(pending.popleft())
            if progress is not None:
                progress("pools", done, layout.num_ids)
        while pending:
            collect(pending.popleft())
    del flat
    if not np.array_equal(cursor, ends):
        raise _changed_error()
    return low, high


def _read_ids(handle: Any, start: int, count: int) -> np.ndarray:
    ids = np.empty(count, dtype=np.int64)
    handle.seek(8 * start)
    view = ids.data.cast("B")
    got = 0
    while got < len(view):
        read = handle.readinto(view[got:])
        if not read:
            raise _changed_error()
        got += read
    return ids


def _sort_pools(data: np.ndarray, bounds: np.ndarray) -> None:
    """Sort, in place, each pool `data[bounds[i]:bounds[i+1]]` that is not ascending already."""
    if data.size < 2:
        return
    # drops[j] counts the descents among data[0..j]; a pool is ascending when it holds none
    # (every pool is non-empty, so bounds[i+1] - 1 is its last element).
    drops = np.zeros(data.size, dtype=np.int64)
    np.cumsum(data[1:] < data[:-1], out=drops[1:])
    unsorted = np.flatnonzero(drops[bounds[1:] - 1] != drops[bounds[:-1]]).tolist()
    if not unsorted:
        return
    low, high = int(data.min()), int(data.max())
    if high - low >= 2**32:
        for pool in unsorted:
            data[bounds[pool] : bounds[pool + 1]].sort()
        return
    # Ids spanning less than 2**32 sort as 32-bit offsets: twice the keys per SIMD register,
    # so about twice as fast, conversions included.
    keys = (data - low).astype(np.uint32)
    for pool in unsorted:
        keys[bounds[pool] : bounds[pool + 1]].sort()
    np.add(keys, np.int64(low), out=data)


def _merged_runs(flat_path: Path, start: int, count: int) -> Iterator[np.ndarray]:
    """One big pool in ascending chunks: runs sorted in place in the work file, then merged.

    The merge holds one block per run; everything up to the smallest block end among runs with
    more data left is final, so it is cut off, sorted and emitted.
    """
    stop = start + count
    runs = [(s, min(s + _MAX_SORT_IDS, stop)) for s in range(start, stop, _MAX_SORT_IDS)]
    with open(flat_path, "r+b") as handle:
        for run_start, run_stop in runs:
            run = _read_ids(handle, run_start, run_stop - run_start)
            if not _is_ascending(run):
                run.sort()
                handle.seek(8 * run_start)
                handle.write(run.data.cast("B"))
            del run
        block = max(_MAX_SORT_IDS // len(runs), 1 << 12)
        heads: list[np.ndarray] = []
        next_read: list[int] = []
        for run_start, run_stop in runs:
            take = min(block, run_stop - run_start)
            heads.append(_read_ids(handle, run_start, take))
            next_read.append(run_start + take)
        while any(head.size for head in heads):
            more = [next_read[i] < runs[i][1] for i in range(len(runs))]
            limits = [int(heads[i][-1]) for i in range(len(runs)) if more[i] and heads[i].size]
            cutoff = min(limits) if limits else None
            parts = []
            for i, head in enumerate(heads):
                cut = head.size if cutoff is None else int(np.searchsorted(head, cutoff, "right"))
                parts.append(head[:cut])
                heads[i] = head[cut:]
                if not heads[i].size and more[i]:
                    take = min(block, runs[i][1] - next_read[i])
                    heads[i] = _read_ids(handle, next_read[i], take)
                    next_read[i] += take
            merged = np.concatenate(parts)
            merged.sort()
            yield merged


def _is_ascending(ids: np.ndarray) -> bool:
    return ids.size < 2 or not bool(np.any(ids[1:] < ids[:-1]))


class _DenseIdCheck:
    """Duplicate ids in a range of at most `_MAX_BYTEMAP_IDS`: one byte per possible id.

    Marking is an idempotent byte store, so threads need no lock; duplicates exist exactly when
    fewer bytes are marked than ids were added.
    """

    def __init__(self, id_min: int, id_max: int) -> None:
        self.id_min = id_min
        self.seen = np.zeros(id_max - id_min + 1, dtype=np.uint8)

    def add(self, ids: np.ndarray) -> None:
        self.seen[ids - self.id_min if self.id_min else ids] = 1

    def maybe_duplicates(self, num_ids: int) -> bool:
        return int(np.count_nonzero(self.seen)) != num_ids


class _BitmapIdCheck:
    """Duplicate-id candidates for wide id ranges: one bit per id, 2**30 bits (128 MiB) at most.

    A range up to 2**30 ids maps each id to its own bit, so every flagged id is a duplicate;
    wider (sparse) ranges are hashed into the bitmap, so a flagged id may also be a collision.
    Either way DuckDB confirms the candidates exactly afterwards; past `max_candidates` this
    gives up and DuckDB checks every id.
    """

    max_bits_log2 = 30
    max_candidates = 1 << 23
    _golden = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, id_min: int, id_max: int) -> None:
        span = id_max - id_min + 1
        self.exact = span <= 1 << self.max_bits_log2
        self.id_min = np.uint64(id_min & (2**64 - 1))
        num_bits = span if self.exact else 1 << self.max_bits_log2
        self.bitmap = np.zeros((num_bits + 7) // 8, dtype=np.uint8)
        self.candidates: list[np.ndarray] = []
        self.num_candidates = 0
        self.overflow = False
        self._lock = threading.Lock()

    def add(self, ids: np.ndarray) -> None:
        """Record a chunk of ids (ascending within each pool, not across pools)."""
        shifted = ids.view(np.uint64) - self.id_min
        if not self.exact:
            shifted = (shifted * self._golden) >> np.uint64(64 - self.max_bits_log2)
        order = np.argsort(shifted, kind="stable")
        values, keyed = shifted[order], ids[order]
        byte = values >> np.uint64(3)
        bit = np.left_shift(np.uint8(1), (values & np.uint64(7)).astype(np.uint8))
        # Equal bytes are adjacent after the sort: OR their bits together so one store per byte
        # loses nothing.
        first = np.concatenate(([0], np.flatnonzero(byte[1:] != byte[:-1]) + 1))
        combined = np.bitwise_or.reduceat(bit, first)
        with self._lock:
            flagged = (self.bitmap[byte] & bit) != 0
            flagged[1:] |= values[1:] == values[:-1]
            if flagged.any():
                found = keyed[flagged]
                self.num_candidates += found.size
                if self.num_candidates > self.max_candidates:
                    self.overflow = True
                    self.candidates = []
                elif not self.overflow:
                    self.candidates.append(found)
            self.bitmap[byte[first]] |= combined


def _id_check(id_min: int, id_max: int) -> _DenseIdCheck | _BitmapIdCheck:
    if id_max - id_min < _MAX_BYTEMAP_IDS:
        return _DenseIdCheck(id_min, id_max)
    return _BitmapIdCheck(id_min, id_max)


def _check_duplicates(
    con: duckdb.DuckDBPyConnection,
    check: _DenseIdCheck | _BitmapIdCheck,
    num_ids: int,
    files: Sequence[InputFile],
    id_column: str,
    work_dir: Path,
) -> None:
    params: dict[str, Any] = {"paths": [f.path.as_posix() for f in files], "id_column": id_column}
    try:
        if isinstance(check, _DenseIdCheck):
            if not check.maybe_duplicates(num_ids):
                return
            row = _one_row(con, "duplicate_ids_all", params)
        elif not check.num_candidates:
            return
        elif check.overflow:
            logger.info("many id collisions in the bitmap: checking duplicates with DuckDB")
            row = _one_row(con, "duplicate_ids_all", params)
        else:
            candidates_path = work_dir / "candidate_ids.parquet"
            pq.write_table(pa.table({"id": np.concatenate(check.candidates)}), candidates_path)
            try:
                row = _one_row(
                    con, "duplicate_ids", {**params, "candidates_path": candidates_path.as_posix()}
                )
            finally:
                candidates_path.unlink()
        num_duplicated, num_extra, example = row
        if not num_duplicated:
            return
        where = con.sql(load_sql("id_locations"), params={**params, "id": example}).fetchall()
    except duckdb.Error as error:
        raise _read_error(error) from None
    places = " and ".join(_location(files, file_index, row) for file_index, row in where)
    raise InputError(
        f"id column {id_column!r} (--id-column) has {num_duplicated} duplicated ids "
        f"({num_extra} extra rows), e.g. id {example} in {places}; ids must be unique: fix the "
        "data, or drop --id-column to use row indexes as ids"
    )


def _split_pools(
    layout: _Layout,
    flat_path: Path,
    check: _DenseIdCheck | _BitmapIdCheck | None,
    write_pool: PoolSink,
    *,
    workers: int,
    progress: ProgressCallback | None,
) -> None:
    """Cut the flat work file into one ascending pool per length, `workers` units at a time."""
    lengths = layout.lengths.tolist()
    starts = layout.starts
    done = 0
    lock = threading.Lock()

    def split(first: int, stop: int) -> None:
        nonlocal done
        count = int(starts[stop] - starts[first])
        if stop - first == 1 and count > _MAX_SORT_IDS:
            chunks: Iterable[np.ndarray] = _merged_runs(flat_path, int(starts[first]), count)
            if check is not None:
                chunks = _checked(chunks, check)
            write_pool(lengths[first], count, chunks)
        else:
            with open(flat_path, "rb") as handle:
                data = _read_ids(handle, int(starts[first]), count)
            bounds = starts[first : stop + 1] - starts[first]
            _sort_pools(data, bounds)
            if check is not None:
                check.add(data)
            cuts = bounds.tolist()
            for pool in range(first, stop):
                pool_ids = data[cuts[pool - first] : cuts[pool - first + 1]]
                write_pool(lengths[pool], pool_ids.size, [pool_ids])
        with lock:
            done += count

    units = layout.units()
    with ThreadPoolExecutor(workers, thread_name_prefix="seqpack-split") as executor:
        pending: deque[Future[None]] = deque()
        for first, stop in units:
            pending.append(executor.submit(split, first, stop))
            while len(pending) > workers:
                pending.popleft().result()
                if progress is not None:
                    progress("write pools", done, layout.num_ids)
        while pending:
            pending.popleft().result()
    if progress is not None:
        progress("write pools", layout.num_ids, layout.num_ids)


def _checked(
    chunks: Iterable[np.ndarray], check: _DenseIdCheck | _BitmapIdCheck
) -> Iterator[np.ndarray]:
    for chunk in chunks:
        check.add(chunk)
        yield chunk


def scan_pools(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[InputFile],
    length_column: str,
    counts: Mapping[int, int],
    *,
    id_column: str | None,
    max_seq_len: int,
    work_dir: Path,
    write_pool: PoolSink,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
) -> PoolScan:
    """Stream (length, id) once and write every length's ascending pool through `write_pool`.

    `counts` is the histogram of the lengths kept (all <= max_seq_len). Ids are the id column
    (checked: non-null, unique) or, without one, global row indexes over `files` in their order.
    The flat work file (8 bytes per id) lives in `work_dir` and is deleted at the end.
    """
    started = time.perf_counter()
    layout = _Layout(counts)
    num_workers = _num_workers(workers)
    paths = [file.path.as_posix() for file in files]
    params: dict[str, Any] = {
        "paths": paths,
        "length_column": length_column,
        "max_seq_len": max_seq_len,
    }
    to_ids: Callable[[list[np.ndarray]], np.ndarray]
    if id_column is None:
        sql = load_sql("pool_rows_by_position")
        row_offsets = np.zeros(len(files), dtype=np.int64)
        np.cumsum([file.num_rows for file in files[:-1]], out=row_offsets[1:])

        def to_ids(columns: list[np.ndarray]) -> np.ndarray:
            return row_offsets[columns[1]] + columns[2]
    else:
        sql = load_sql("pool_rows_by_id")
        params["id_column"] = id_column

        def to_ids(columns: list[np.ndarray]) -> np.ndarray:
            return columns[1]

    flat_path = work_dir / "ids.bin"
    with open(flat_path, "wb") as handle:
        handle.truncate(8 * layout.num_ids)
    batches = _stream_batches(con, sql, params)
    try:
        id_min, id_max = _scatter(
            batches,
            layout,
            flat_path,
            to_ids,
            workers=num_workers,
            track_range=id_column is not None,
            progress=progress,
        )
    except _NullIds:
        null_params = {"paths": paths, "id_column": id_column}
        file_index, row, num_null = _one_row(con, "first_null_id", null_params)
        raise InputError(
            f"id column {id_column!r} (--id-column) has {num_null} NULL ids, the first in "
            f"{_location(files, file_index, row)}; ids must be non-null: fill them, or drop "
            "--id-column to use row indexes as ids"
        ) from None
    except duckdb.ConversionException as error:
        # DuckDB's message names the column and the value.
        raise InputError(
            f"{_first_line(error)}; lengths and ids must fit in a signed 64-bit integer: renumber "
            "the ids, or drop --id-column to use row indexes as ids"
        ) from None
    except duckdb.Error as error:
        raise _read_error(error) from None
    finally:
        batches.close()  # stops the producer thread now, not when the generator is collected
    placed = time.perf_counter()
    logger.info("pools pass: %d ids placed in %.2fs", layout.num_ids, placed - started)
    check = None
    if id_column is not None and id_min is not None and id_max is not None:
        check = _id_check(id_min, id_max)
    _split_pools(layout, flat_path, check, write_pool, workers=num_workers, progress=progress)
    os.unlink(flat_path)
    logger.info("split into %d pools in %.2fs", len(layout.lengths), time.perf_counter() - placed)
    if check is not None:
        assert id_column is not None
        _check_duplicates(con, check, layout.num_ids, files, id_column, work_dir)
    return PoolScan(layout.num_ids, id_min, id_max)
