"""Remote inputs (`s3://`, `gs://`, `https://`, `hf://`): the columns the job reads, fetched once.

`seqpack_cli.remote` resolves the URLs to objects (sorted by URL: the ids' order) and reads them
in place. Here (`plan_copies`, then the engine runs `fetch_object` for each: the local one in
threads, `fetch_all`; the Dask one as a task per object, so the workers read the objects) each
object's columns that the job reads (the length and id columns, the token
store's, or the tokenizer's text) are copied once into the job's work directory: from a parquet
object only those column chunks are fetched (range requests, row group by row group, so memory
is one row group); a JSON Lines object, which has no columns to pick, is copied whole. The job
then runs on the copies as on local files, with either engine, and its manifest lists each
object by its URL, its size and its version (ETag, VersionId or blob id), checked again once
the copy is made: an object that changed while it was read stops the job.

The outputs are byte for byte those of the same files read from a local disk. The output itself
stays on a local or shared filesystem.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.input_batches import (
    ColumnOptions,
    check_columns,
    input_kind,
    not_parquet_error,
)

__all__ = ["RemoteCopy", "fetch_all", "fetch_object", "plan_copies"]

logger = logging.getLogger(__name__)

_DOWNLOADS = 8
"""Objects fetched at once: the wait is the network's, and pyarrow releases the GIL."""
_COPY_BYTES = 1 << 23


class RemoteCopy:
    """One object and where its copy lies: `identity` is what the manifest records."""

    def __init__(self, file: Any, path: Path) -> None:
        self.file = file
        self.path = path

    @property
    def identity(self) -> dict[str, Any]:
        from seqpack_cli.remote import identity

        return identity(self.file)


def _suffix(url: str) -> str:
    """The copy's name ending: the object's kind as `input_kind` tells it from the URL (the
    job reads the copy by the same rule), gzip kept."""
    if input_kind(url) == "parquet":
        return ".parquet"
    return ".jsonl.gz" if url.lower().endswith(".gz") else ".jsonl"


def _copy_columns(
    file: Any, columns: ColumnOptions, path: Path, options: Mapping[str, str]
) -> None:
    """The object's `columns`, row group by row group, into a local parquet file."""
    from seqpack_cli.remote import open_input

    with open_input(file, options) as handle:
        parquet = pq.ParquetFile(handle)
        names = parquet.schema_arrow.names
        check_columns(file.url, names, columns)
        schema = pa.schema([parquet.schema_arrow.field(column) for column in columns])
        with pq.ParquetWriter(path, schema) as writer:
            for group in range(parquet.num_row_groups):
                writer.write_table(parquet.read_row_group(group, columns=list(columns)))


def _copy_whole(file: Any, path: Path, options: Mapping[str, str]) -> None:
    from seqpack_cli.remote import open_input

    with open_input(file, options) as source, open(path, "wb") as target:
        shutil.copyfileobj(source, target, _COPY_BYTES)


def fetch_object(file: Any, columns: ColumnOptions, path: Path, options: Mapping[str, str]) -> None:
    """Copy what the job reads of one object to `path` (see the module docstring): the one
    kernel each engine runs, here in threads, on a cluster as a task per object.

    Raises:
        InputError: the object is gone, denied or unreachable, lacks a column, is not
            parquet, or changed while it was read.
    """
    from seqpack_cli.remote import changed, identity
    from seqpack_cli.remote.faults import remote_error
    from seqpack_cli.remote.options import settings_for
    from seqpack_cli.remote.urls import parse_url

    try:
        if input_kind(path) == "jsonl":
            _copy_whole(file, path, options)
        else:
            _copy_columns(file, columns, path, options)
    except InputError:
        raise
    except (OSError, pa.ArrowException) as error:
        if isinstance(error, pa.ArrowInvalid) and "Parquet" in str(error):
            raise not_parquet_error(file.url, error) from None
        settings = settings_for(parse_url(file.url).scheme, options)
        raise remote_error(file.url, error, settings) from None
    reason = changed(identity(file), options)
    if reason is not None:
        raise InputError(
            f"{file.url} changed while prepare read it ({reason}); re-run once nothing writes to it"
        )


def plan_copies(
    inputs: Sequence[str], folder: Path, options: Mapping[str, str]
) -> list[RemoteCopy]:
    """Resolve the remote `inputs` (objects, prefixes, globs) and give each object, in URL order,
    the path of its copy in `folder` (created).

    Raises:
        InputError: no such bucket or object, nothing matched, access denied, an unreachable
            endpoint.
    """
    from seqpack_cli.remote import resolve_remote

    files = resolve_remote(inputs, options)
    folder.mkdir(parents=True, exist_ok=True)
    return [
        RemoteCopy(file, folder / f"{index:05d}{_suffix(file.url)}")
        for index, file in enumerate(files)
    ]


def fetch_all(
    copies: Sequence[RemoteCopy], columns: ColumnOptions, options: Mapping[str, str]
) -> None:
    """`fetch_object` for every copy, `_DOWNLOADS` at a time in threads; the first failure in
    URL order is raised once the others have stopped (those not started never start)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=_DOWNLOADS, thread_name_prefix="seqpack-fetch") as pool:
        fetches = [pool.submit(fetch_object, c.file, columns, c.path, options) for c in copies]
        try:
            for fetch in fetches:
                fetch.result()
        except BaseException:
            for fetch in fetches:
                fetch.cancel()
            raise
    logger.info(
        "remote: %d object(s), %d bytes of them copied (%.2fs)",
        len(copies),
        sum(copy.path.stat().st_size for copy in copies),
        time.perf_counter() - started,
    )
