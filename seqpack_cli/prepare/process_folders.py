"""Scratch folders that live as long as this process: `process_folder(prefix)` creates one on
first use and removes it when the process exits (not when a forked child exits: the folder is
its parent's). DuckDB's links to inputs with awkward names (`db`) and the parquet copies of JSON
Lines columns (`jsonl_staging`) live there, for every job the process runs."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

__all__ = ["process_folder"]

_lock = threading.Lock()
_folders: dict[str, str] = {}


def _remove(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that exits normally
        shutil.rmtree(folder, ignore_errors=True)


def process_folder(prefix: str) -> Path:
    """This process's folder for `prefix` (e.g. "seqpack-links-"), created on first use in the
    system's temporary directory; `OSError` if it cannot be."""
    with _lock:
        folder = _folders.get(prefix)
        if folder is None:
            folder = _folders[prefix] = tempfile.mkdtemp(prefix=prefix)
            atexit.register(_remove, folder, os.getpid())
    return Path(folder)
