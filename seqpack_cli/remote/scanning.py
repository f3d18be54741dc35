"""Remote parquet objects as one `pyarrow.dataset.Dataset`: what DuckDB or pyarrow scans.

DuckDB's `httpfs` extension cannot be installed offline for the pinned DuckDB, so DuckDB reads
remote parquet through Arrow: a dataset over pyarrow's filesystems, which DuckDB scans with its
projection (only the columns a query names are fetched, by range requests). The fragments keep
the order of the files given (`resolve_remote` sorts them by URL), so a row's index over the
dataset is its row-index id, as for local files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow.dataset as arrow_dataset_module
from pyarrow import fs as arrow_fs

from seqpack_cli.errors import InputError
from seqpack_cli.remote.faults import remote_error
from seqpack_cli.remote.filesystems import filesystem_for, path_in_filesystem
from seqpack_cli.remote.objects import RemoteFile
from seqpack_cli.remote.options import Settings, settings_for
from seqpack_cli.remote.urls import parse_url

__all__ = ["arrow_dataset"]


def arrow_dataset(
    files: Sequence[RemoteFile], options: Mapping[str, str] | None = None
) -> arrow_dataset_module.Dataset:
    """One dataset over remote parquet objects, in the order given.

    Args:
        files: parquet objects from `resolve_remote` (JSON Lines ones are read by other means).
        options: storage options from `parse_storage_options`.

    Returns:
        A `pyarrow.dataset.Dataset`: one `FileSystemDataset` per run of files on the same
        filesystem (an s3 bucket, the gs service, the http client, the hub), joined in order.

    Raises:
        InputError: no files, a file that is not parquet by its name, or one that cannot be
            opened (no such object, access denied, unreachable).
    """
    if not files:
        raise InputError("no remote parquet file to read; resolve_remote found none")
    runs: list[_Run] = []
    for file in files:
        if not file.url.lower().endswith((".parquet", ".parq", ".pq")):
            raise InputError(f"{file.url} is not parquet by its name; read it with open_stream")
        parsed = parse_url(file.url)
        settings = settings_for(parsed.scheme, options or {})
        filesystem = filesystem_for(parsed, settings)
        if not runs or runs[-1].filesystem is not filesystem:
            runs.append(_Run(filesystem, settings, file.url))
        runs[-1].paths.append(path_in_filesystem(parsed))
    children = []
    for run in runs:
        try:
            children.append(
                arrow_dataset_module.dataset(run.paths, filesystem=run.filesystem, format="parquet")
            )
        except Exception as error:  # the stores raise many classes: faults sorts them
            raise remote_error(run.first_url, error, run.settings) from None
    return children[0] if len(children) == 1 else arrow_dataset_module.dataset(children)


@dataclass
class _Run:
    """Consecutive files on one filesystem: one child dataset."""

    filesystem: arrow_fs.FileSystem
    settings: Settings
    first_url: str
    paths: list[str] = field(default_factory=list)
