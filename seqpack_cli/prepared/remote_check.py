"""`load_prepared(verify=True)` on a directory prepared from remote inputs: are they unchanged?

The manifest lists each remote object (`s3://`, `gs://`, `https://`, `hf://`) with its size and
version (ETag, VersionId or blob id). Verifying asks the store for each again
(`seqpack_cli.remote.changed`) and refuses the directory, in one line, when an object changed
or is gone: the pools index rows that may no longer be there. Local inputs are not checked (a
prepared directory does not depend on them being kept).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack_cli.errors import InputError

__all__ = ["check_remote_inputs"]


def check_remote_inputs(
    root: Path, manifest: Mapping[str, Any], storage_options: Mapping[str, str] | None
) -> None:
    """`InputError` for the first remote input of `manifest` that changed since `prepare`."""
    files = manifest.get("inputs", {}).get("files", [])
    recorded = [entry for entry in files if "version" in entry and "://" in str(entry["path"])]
    if not recorded:
        return
    from seqpack_cli.remote import changed

    for entry in recorded:
        identity = {"url": entry["path"], "bytes": entry.get("bytes"), "version": entry["version"]}
        reason = changed(identity, storage_options)
        if reason is not None:
            raise InputError(
                f"prepared directory {root} was made from {entry['path']}, which changed since "
                f"({reason}); prepare it again from the data as it is now"
            )
