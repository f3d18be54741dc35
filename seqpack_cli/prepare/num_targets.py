"""`num_targets.npy` written beside a loss mask or labels: the one post-pass of every store.

`seqpack prepare --tokens-column` (whichever engine wrote the store) and `write_token_source`
(with `role="labels"` or `"loss_mask"`) call `write_num_targets` on the finished token source
directory, before anything is committed: it counts each row's targets from the values on disk
(`seqpack_cli.target_counts.count_chunks`, a slice of rows at a time, memory-mapped), writes
the counts into the memory-mapped output as they come, and records the file in the
directory's `token_source.json`. The layout and the definition of a target are in
`seqpack_cli.target_counts`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.progress import ProgressCallback
from seqpack_cli.target_counts import (
    LABEL_PAD_ID,
    NUM_TARGETS_KEY,
    NUM_TARGETS_NAME,
    count_chunks,
    num_targets_entry,
)
from seqpack_cli.token_sources import INFO_NAME, OFFSETS_NAME, TOKENS_NAME, write_info

__all__ = ["write_num_targets"]

logger = logging.getLogger(__name__)

_INT32_MAX = int(np.iinfo(np.int32).max)
_ROWS_CHUNK = 1 << 20


def _counts_dtype(offsets: np.ndarray) -> np.dtype[Any]:
    """int32 unless some sequence is longer than int32 can count (then int64)."""
    if int(offsets[-1]) <= _INT32_MAX:  # fewer values in all than that
        return np.dtype("<i4")
    for first in range(0, offsets.shape[0] - 1, _ROWS_CHUNK):
        bounds = np.asarray(offsets[first : first + _ROWS_CHUNK + 1], np.int64)
        if int(np.diff(bounds).max()) > _INT32_MAX:
            return np.dtype("<i8")
    return np.dtype("<i4")


def write_num_targets(
    directory: Path,
    role: str,
    *,
    truncated_to: int | None,
    progress: ProgressCallback | None = None,
) -> str:
    """Count the targets of the token source directory `directory` (a loss mask or labels, as
    `role` says; cut at `truncated_to` tokens if given), write `NUM_TARGETS_NAME` there and
    describe it in its `token_source.json`; return the file's name. `progress` gets
    ("target counts", rows done, rows)."""
    started = time.perf_counter()
    offsets = np.load(directory / OFFSETS_NAME, mmap_mode="r")
    values = np.load(directory / TOKENS_NAME, mmap_mode="r")
    num_rows = int(offsets.shape[0]) - 1
    dtype = _counts_dtype(offsets)
    path = directory / NUM_TARGETS_NAME
    if num_rows == 0 or values.shape[0] == 0:
        np.save(path, np.zeros(num_rows, dtype=dtype))
    else:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(num_rows,))
        for first, chunk in count_chunks(values, offsets, role, truncated_to, LABEL_PAD_ID):
            out[first : first + chunk.shape[0]] = chunk
            if progress is not None:
                progress("target counts", first + chunk.shape[0], num_rows)
        out.flush()
        del out
    info_path = directory / INFO_NAME
    info = json.loads(info_path.read_text("utf-8"))
    info[NUM_TARGETS_KEY] = num_targets_entry(role, dtype, truncated_to)
    write_info(directory, info)
    logger.info(
        "%s/%s: the targets of %d sequences (%.2fs)",
        directory.name,
        NUM_TARGETS_NAME,
        num_rows,
        time.perf_counter() - started,
    )
    return NUM_TARGETS_NAME
