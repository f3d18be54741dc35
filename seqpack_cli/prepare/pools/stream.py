"""DuckDB's result streamed as numpy batches, decoded by a thread one step ahead: `stream_batches`.

The pools passes (`scan.scan_pools`, and the Dask engine's group tasks) consume (length, id)
this way. A batch with a NULL id stops the stream with `NullIds` (the caller locates and words
it); an error DuckDB raises while a later batch is fetched, which pyarrow's reader hands on as an
OSError, is raised as DuckDB's own class again, so it is worded like the same error on the first.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Mapping
from typing import Any

import duckdb
import numpy as np

from seqpack_cli.interrupts import signals_held

__all__ = ["NullIds", "stream_batches"]


class NullIds(Exception):
    """Raised by the batch producer when the id column holds NULLs (worded by the caller)."""


_DONE = object()

_DUCKDB_ERRORS: dict[str, type[duckdb.Error]] = {
    "Conversion Error": duckdb.ConversionException,
    "IO Error": duckdb.IOException,
    "Invalid Input Error": duckdb.InvalidInputException,
    "Out of Memory Error": duckdb.OutOfMemoryException,
}


def _duckdb_error(error: OSError) -> BaseException:
    """An error DuckDB raised while a batch after the first was fetched: pyarrow's reader hands
    it on as an OSError ("Conversion Error: ..."); as DuckDB's own class again, so that it is
    worded like the same error raised by the first batch."""
    kind = str(error).split(":", 1)[0]
    return _DUCKDB_ERRORS[kind](str(error)) if kind in _DUCKDB_ERRORS else error


def stream_batches(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any], batch_rows: int
) -> Generator[list[np.ndarray], None, None]:
    """A query's Arrow batches as numpy columns, fetched by a thread one step ahead.

    DuckDB decodes the next batches (without the GIL) while the caller places this one.
    """
    batches: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()
    finished = threading.Event()  # set once the thread is out of DuckDB for good

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
            reader = con.sql(sql, params=dict(params)).to_arrow_reader(batch_rows)
            for batch in reader:
                if any(column.null_count for column in batch.columns):
                    raise NullIds
                columns = [column.to_numpy(zero_copy_only=False) for column in batch.columns]
                if not put(columns):
                    return
            put(_DONE)
        except OSError as error:  # DuckDB's error, as pyarrow's reader hands it on
            put(_duckdb_error(error))
        except BaseException as error:  # handed to the consuming thread
            put(error)
        finally:
            # Release the result now: DuckDB runs no other query on this connection until then
            # (and the error's traceback would otherwise keep it alive).
            if reader is not None:
                reader.close()
            finished.set()

    producer = threading.Thread(target=produce, name="seqpack-scan", daemon=True)
    producer.start()
    try:
        while (item := batches.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        # Wait on an Event with signals held, never on join(): a signal that cuts a join short
        # makes Python 3.11 take the thread for finished, and a thread still inside DuckDB when
        # the interpreter exits aborts the process (SIGABRT, "exception not rethrown").
        if not finished.is_set():
            stop.set()
            con.interrupt()
        with signals_held():
            finished.wait()
