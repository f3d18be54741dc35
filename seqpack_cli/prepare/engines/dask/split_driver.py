"""`--engine dask --over-cap split`: the store and pools of the local one pass, by tasks.

The job checks the inputs as the local engine does under split (the two passes as `truncate`:
the same faults, the same messages); the store is then written as truncate writes it
(`store_driver`), and once every check has passed, `ClusterSplit` cuts it (`split_tasks`):

1. the counts, one task per chunk of input rows (rows each adds) and per chunk of the id order
   (split rows, pieces, pool entries by length): numbers only;
2. here, from them: each chunk's first store row, each chunk's first piece (pieces numbered in
   ascending order of (source id, position), past the largest input id, as `StreamedStore` numbers
   them), each chunk's place in every pool (the kept ids, then the pieces'); the kept lengths
   checked against the job's; the new files created at their full size;
3. the row chunks' tasks (new offsets; each row's first store row), then the id chunks' (new id
   index, `pieces.npy`, the pools); the new files renamed into place, the pool files hashed.

The driver reads only the counts; `store_driver` then hashes the store's files and writes each
role's token_source.json with the split's figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from seqpack_cli.npy_files import npy_header
from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepare.engines.dask.split_tasks import (
    IdChunk,
    IdPlan,
    SplitJob,
    count_ids,
    count_rows,
    hash_files,
    new_name,
    write_ids,
    write_rows,
)
from seqpack_cli.prepare.engines.dask.store_driver import StoreHooks
from seqpack_cli.prepare.pieces import first_piece_id, piece_ids_error, split_figures
from seqpack_cli.prepare.pools.offsets import changed_error
from seqpack_cli.prepare.pools.scan import PoolScan
from seqpack_cli.prepare.store_files import create_sized, pieces_header, store_header
from seqpack_cli.prepared import PreparedWriter, pool_file_name
from seqpack_cli.prepared.pool_files import POOL_DTYPE
from seqpack_cli.token_sources import IDS_NAME, OFFSETS_NAME, PIECES_NAME, ROWS_NAME

__all__ = ["ClusterSplit"]

_POOLS_PER_HASH_TASK = 64

Call = tuple[Callable[..., Any], tuple[Any, ...], int]


class ClusterSplit:
    """The split step `store_driver.write_cluster_store` runs after its checks: called with the
    store's roles and input rows, it cuts the store and writes the pools; returns the split's
    figures (token_source.json's `split`). `scan` is then the pools' `PoolScan`."""

    def __init__(
        self,
        hooks: StoreHooks,
        config: PrepareConfig,
        writer: PreparedWriter,
        kept: Mapping[int, int],
    ) -> None:
        self.hooks, self.config, self.writer = hooks, config, writer
        self.kept = dict(kept)
        self.scan: PoolScan | None = None

    def __call__(self, roles: Sequence[str], num_rows: int) -> dict[str, int]:
        config, root = self.config, self.writer.tmp_path
        folders = tuple(root / role for role in roles)
        tuning = config.cluster_tuning
        job = SplitJob(root, folders, self.writer.work_dir / "split-store-rows",
                       config.max_seq_len, config.id_column is not None, tuning.block_ids,
                       self.hooks.settings)  # fmt: skip
        size = self.hooks.task_ids(num_rows, tuning.check_ids)
        chunks = [(start, min(start + size, num_rows)) for start in range(0, num_rows, size)]
        extras, parts = self._count(job, chunks)
        largest = [part.largest_id for part in parts if part.largest_id is not None]
        first_piece = first_piece_id(config.id_column, max(largest, default=None), num_rows)
        num_pieces = sum(part.num_pieces for part in parts)
        error = piece_ids_error(config.id_column, first_piece, num_pieces)
        if error is not None:
            raise error
        plans = self._plans(parts, first_piece)
        self._create(job, num_rows, num_rows + sum(extras), num_pieces)
        bases = np.concatenate([[0], np.cumsum(extras)]).tolist()
        self.hooks.run("split rows", [
            (write_rows, (job, a, b, a + bases[k]), b - a) for k, (a, b) in enumerate(chunks)
        ])  # fmt: skip
        self.hooks.run("split ids", [
            (write_ids, (job, a, b, plans[k]), b - a) for k, (a, b) in enumerate(chunks)
        ])  # fmt: skip
        for folder in folders:  # the new files into place, now that every task is done
            names = [OFFSETS_NAME, IDS_NAME, ROWS_NAME] + [PIECES_NAME] * (folder == folders[0])
            for name in names:
                os.replace(folder / new_name(name), folder / name)
        self._record_pools()
        self.scan = self._scan(parts, first_piece, num_pieces)
        num_split = sum(part.num_split for part in parts)
        return split_figures(config.max_seq_len, num_split, num_pieces, first_piece)

    def _count(
        self, job: SplitJob, chunks: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[IdChunk]]:
        """Each row chunk's extra rows and each id chunk's counts, from one set of tasks."""
        calls: list[Call] = [(count_rows, (job, a, b), b - a) for a, b in chunks]
        calls += [(count_ids, (job, a, b), b - a) for a, b in chunks]
        counted = self.hooks.run("split counts", calls)
        return counted[: len(chunks)], counted[len(chunks) :]

    def _plans(self, parts: Sequence[IdChunk], first_piece: int) -> list[IdPlan]:
        """Each id chunk's places; the kept lengths checked against the job's."""
        kept_total: dict[int, int] = {}
        piece_total: dict[int, int] = {}
        for part in parts:
            for totals, (lengths, counts) in ((kept_total, part.kept), (piece_total, part.pieces)):
                for length, count in zip(lengths.tolist(), counts.tolist(), strict=True):
                    totals[length] = totals.get(length, 0) + count
        found = {length: kept_total.get(length, 0) + piece_total.get(length, 0)
                 for length in set(kept_total) | set(piece_total)}  # fmt: skip
        if found != self.kept:
            raise changed_error()
        # Each pool: its header, its kept ids, then its pieces' ids.
        kept_next = {
            length: len(npy_header(POOL_DTYPE, count)) for length, count in self.kept.items()
        }
        piece_next = {length: kept_next[length] + 8 * kept_total.get(length, 0)
                      for length in self.kept}  # fmt: skip
        plans = []
        num_kept = sum(kept_total.values())
        kept_at = pieces_at = 0
        for part in parts:
            places = []
            for nexts, (lengths, counts) in ((kept_next, part.kept), (piece_next, part.pieces)):
                at = np.array([nexts[length] for length in lengths.tolist()], dtype=np.int64)
                for length, count in zip(lengths.tolist(), counts.tolist(), strict=True):
                    nexts[length] += 8 * count
                places.append((lengths, at))
            plans.append(IdPlan(kept_at, pieces_at, num_kept, first_piece, places[0], places[1]))
            kept_at += int(part.kept[1].sum())
            pieces_at += part.num_pieces
        return plans

    def _create(self, job: SplitJob, num_rows: int, num_store_rows: int, num_pieces: int) -> None:
        """The new files at their full size: each role's offsets and id index, the piece table,
        the scratch file, every pool (the truncate pools' files replaced)."""
        int64 = np.dtype("<i8")
        for folder in job.folders:
            create_sized(folder / new_name(OFFSETS_NAME), store_header(int64, num_store_rows + 1),
                    8 * (num_store_rows + 1))  # fmt: skip
            for name in (IDS_NAME, ROWS_NAME):
                create_sized(folder / new_name(name), store_header(int64, num_store_rows),
                        8 * num_store_rows)  # fmt: skip
        create_sized(job.folders[0] / new_name(PIECES_NAME), pieces_header(num_pieces),
                24 * num_pieces)  # fmt: skip
        create_sized(job.store_rows, b"", 8 * num_rows)
        for length, count in self.kept.items():
            create_sized(
                self.writer.tmp_path / pool_file_name(length),
                npy_header(POOL_DTYPE, count),
                8 * count,
            )

    def _record_pools(self) -> None:
        """Every pool file hashed by tasks, several to a task, and recorded."""
        lengths = sorted(self.kept)
        batches = [lengths[k : k + _POOLS_PER_HASH_TASK]
                   for k in range(0, len(lengths), _POOLS_PER_HASH_TASK)]  # fmt: skip
        root = self.writer.tmp_path
        calls = [(hash_files, ([root / pool_file_name(n) for n in batch],), len(batch))
                 for batch in batches]  # fmt: skip
        for batch, hashed in zip(batches, self.hooks.run("split hash pools", calls), strict=True):
            for length, (size, digest) in zip(batch, hashed, strict=True):
                self.writer.record_written(pool_file_name(length), size, digest)

    def _scan(self, parts: Sequence[IdChunk], first_piece: int, num_pieces: int) -> PoolScan:
        """The pools' id count and (with an id column) their smallest and largest id."""
        num_ids = sum(self.kept.values())
        if self.config.id_column is None:
            return PoolScan(num_ids, None, None)
        kept = [part.kept_ids for part in parts if part.kept_ids is not None]
        low = min(pair[0] for pair in kept) if kept else first_piece
        high = first_piece + num_pieces - 1 if num_pieces else max(pair[1] for pair in kept)
        return PoolScan(num_ids, low, high)
