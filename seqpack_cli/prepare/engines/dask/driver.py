"""`ClusterEngine`: prepare's passes as Dask tasks, gathered and checked as the local job does.

The phases, each a set of tasks over file groups (`groups`) whose small results come back here:

1. footers (`tasks.read_footers`), checked in the inputs' order (`footers.check_footers`);
2. the histogram of each file group (`tasks.group_histogram`), added up and checked
   (`scan.checked_histogram`): the same messages for bad lengths as the local engine, counted
   over every file;
3. each group's pools into runs (`pool_tasks.group_pools`); NULL ids counted over every group;
4. with an id column, the duplicate checks over ranges of id values (`merge_tasks.check_range`),
   beside the merges of the pool files (`merge_tasks.merge_pools`); a repeated id is located by
   the groups that hold it (`tasks.locate_id`) and reported as the local engine does.

Errors from a task reach the caller as the task raised them (seqpack's own one-line errors), or
worded by `client.task_error`. Leaving the engine with an error cancels the run's tasks and waits
until none runs, before the job removes its temporary directory.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepare.engines.dask.client import (
    Cluster,
    no_workers_error,
    open_cluster,
    stop_tasks,
)
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint, fingerprints
from seqpack_cli.prepare.engines.dask.groups import (
    FileGroup,
    GroupCounts,
    GroupHistogram,
    HistogramTotal,
    balanced_groups,
    check_ranges,
    footer_chunks,
    kept_counts,
    merge_units,
    with_fingerprints,
)
from seqpack_cli.prepare.engines.dask.merge import RunEncoding
from seqpack_cli.prepare.engines.dask.merge_tasks import (
    DuplicatePart,
    MergeJob,
    WrittenPool,
    check_range,
    merge_pools,
)
from seqpack_cli.prepare.engines.dask.pool_tasks import GroupPools, PoolsJob, group_pools
from seqpack_cli.prepare.engines.dask.task_runner import Call, TaskRunner
from seqpack_cli.prepare.engines.dask.tasks import (
    TaskSettings,
    group_histogram,
    locate_id,
    read_footers,
)
from seqpack_cli.prepare.footers import InputFile, check_footers
from seqpack_cli.prepare.one_pass import write_error
from seqpack_cli.prepare.pools.id_checks import duplicate_ids_error
from seqpack_cli.prepare.pools.scan import PoolScan, null_ids_error
from seqpack_cli.prepare.scan import checked_histogram
from seqpack_cli.prepared import PreparedWriter, pool_file_name
from seqpack_cli.prepared.pool_creation import BackgroundPoolFiles
from seqpack_cli.progress import ProgressCallback

if TYPE_CHECKING:
    from seqpack_cli.prepare.engines.dask.store_driver import StoreHooks
    from seqpack_cli.prepare.engines.protocol import StoreSection
    from seqpack_cli.prepare.input_batches import ColumnOptions
    from seqpack_cli.prepare.remote_inputs import RemoteCopy

__all__ = ["PAUSE_VARIABLE", "ClusterEngine"]

logger = logging.getLogger(__name__)

PAUSE_VARIABLE = "SEQPACK_DASK_TASK_PAUSE_S"
"""Tests only: seconds each pools task pauses halfway, so that a worker can be killed then."""

_MIN_TASK_IDS = 1 << 16
"""Merge and check tasks hold at least this many ids (unless the tuning says fewer)."""


def _apart(results: Iterable[GroupPools]) -> bool:
    """Whether no group repeats an id and the groups' [id_min, id_max] ranges are disjoint."""
    bounds = []
    for result in results:
        if result.repeats or result.id_min is None or result.id_max is None:
            return False
        bounds.append((result.id_min, result.id_max))
    bounds.sort()
    return all(high < low for (_, high), (low, _) in itertools.pairwise(bounds))


class ClusterEngine:
    """The engine behind `--engine dask` (see the module docstring and `prepare.engines`)."""

    def __init__(self, config: PrepareConfig, progress: ProgressCallback | None = None) -> None:
        self.config = dataclasses.replace(config, over_cap=config.over_cap_rule.checked_policy)
        """The options the tasks run under: `--over-cap split` checked as truncate."""
        self.progress = progress
        self.splits = config.over_cap_rule.splits
        """`--over-cap split`: `pools` runs the checks only, then the split's tasks write the
        pools from the cut store (merging the truncated pools first would be thrown away)."""
        self.tuning = config.cluster_tuning
        self.run_id = uuid.uuid4().hex[:12]
        self._cluster: Cluster | None = None
        self._tasks = TaskRunner(self.run_id, progress)
        self._groups: list[FileGroup] = []
        self._counts: list[GroupCounts] = []
        self._pools_tasks: dict[int, tuple[Any, Call]] = {}
        """Each group's pools task (its future and call), submitted as its histogram came."""
        self._pool_files: BackgroundPoolFiles | None = None
        self._fingerprints: dict[Path, Fingerprint] = {}
        """The driver's view of each input (`inspect`), which every task checks its own against."""
        self._paths: Sequence[Path] = ()
        self._histogram: dict[int, int] = {}
        self._store: StoreSection = {}

    # ---- the cluster -----------------------------------------------------------------------

    def __enter__(self) -> ClusterEngine:
        cluster = self._cluster = open_cluster(self.config, self.tuning)
        patience = self.tuning.wait_workers_s
        self._tasks.watch(
            cluster.client, patience, lambda what: no_workers_error(cluster, what, patience)
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        try:
            if exc is not None:
                stop_tasks(cluster, self._tasks.futures, self._tasks.prefix(""))
        finally:
            self._tasks.futures.clear()
            self._close_pool_files()
            cluster.close()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise RuntimeError("ClusterEngine used outside its with block")
        return self._cluster

    def _settings(self) -> TaskSettings:
        config = self.config
        pause = float(os.environ.get(PAUSE_VARIABLE) or 0)
        return TaskSettings(
            self.cluster.duckdb_threads,
            config.memory_limit,
            None if config.temp_dir is None else os.fspath(config.temp_dir),
            pause,
        )

    # ---- submitting and gathering (`TaskRunner`) ------------------------------------------

    def _submit(self, phase: str, calls: Sequence[Call], first: int = 0) -> list[Any]:
        return self._tasks.submit(self.cluster.client, phase, calls, first)

    def _run(
        self, phase: str, calls: Sequence[Call], keep: Callable[[int, Any], Any] | None = None
    ) -> list[Any]:
        return self._tasks.gather(phase, self._submit(phase, calls), calls, keep)

    # ---- the passes ------------------------------------------------------------------------

    def fetch(
        self, copies: Sequence[RemoteCopy], columns: ColumnOptions, options: Mapping[str, str]
    ) -> None:
        """A task per remote object: the workers read the objects themselves and write the
        copies into the work directory (which they see as they see the output)."""
        from seqpack_cli.prepare.remote_inputs import fetch_object

        calls: list[Call] = [
            (fetch_object, (copy.file, dict(columns), copy.path, dict(options)), copy.file.size)
            for copy in copies
        ]
        self._run("fetch", calls)

    def inspect(self, paths: Sequence[Path]) -> list[InputFile]:
        """The footers read by tasks, each task checking the files it reads against the
        driver's fingerprints of them, taken here first."""
        self._paths = paths
        expected = fingerprints(paths)
        chunks = footer_chunks(len(paths), self.cluster.num_threads, self.tuning)
        calls: list[Call] = [
            (read_footers, ([paths[i] for i in chunk], [expected[i] for i in chunk]), len(chunk))
            for chunk in chunks
        ]
        footers = itertools.chain.from_iterable(self._run("footers", calls))
        files = check_footers(footers, self.config.length_column, self.config.id_column)
        self._fingerprints = {p: f for p, f in zip(paths, expected, strict=True) if f is not None}
        return files

    def _disk_error(self, writer: PreparedWriter, error: OSError) -> BaseException:
        """A write into the output that failed for lack of room, here or in a task: the local
        engine's line for it, which names the token store where there is one (the local engine
        writes it first) and the pools otherwise."""
        if self.config.tokens_column is not None:
            return write_error(self.config, error)
        return writer._write_error(error)  # the writer's own wording, not a copy of it

    def histogram(self, files: Sequence[InputFile], writer: PreparedWriter) -> dict[int, int]:
        """The histogram tasks; as each group's histogram arrives, the group's pools task is
        submitted (it needs only that group's counts), so the workers go on with the pools while
        the driver adds the histograms up, checks them and packs the templates."""
        self._tasks.write_error = lambda error: self._disk_error(writer, error)
        groups = balanced_groups(files, self.cluster.num_threads, self.tuning)
        self._groups = with_fingerprints(groups, self._fingerprints)
        settings = self._settings()
        column = self.config.length_column
        calls = [(group_histogram, (g, column, settings), g.num_rows) for g in self._groups]
        runs_dir = writer.work_dir / "runs"
        runs_dir.mkdir()
        job = self._pools_job(runs_dir)
        total = HistogramTotal()
        config = self.config

        def keep(i: int, part: GroupHistogram) -> GroupCounts:
            """Each group's histogram added up and kept compact as it arrives; its pools task
            submitted if it keeps any row (an error found later cancels it)."""
            total.add(part)
            counts = kept_counts(part, config.over_cap_rule)
            group = self._groups[i]
            if counts.num_ids:
                call: Call = (group_pools, (job, group, counts), group.num_rows)
                self._pools_tasks[i] = (self._submit("pools", [call], first=i)[0], call)
            return counts

        self._counts = self._run("histogram", calls, keep)
        self._histogram = checked_histogram(files, column, [total.part()])
        return self._histogram

    def _task_ids(self, total: int, most: int) -> int:
        share = math.ceil(total / max(1, self.tuning.tasks_per_thread * self.cluster.num_threads))
        return max(1, min(most, max(share, _MIN_TASK_IDS)))

    def pools(
        self, files: Sequence[InputFile], kept: Mapping[int, int], writer: PreparedWriter
    ) -> PoolScan:
        """The groups' runs merged into the pool files of `kept`; under split, the checks of
        the truncated lengths, then the store written, cut, and the pools of the pieces
        (`kept`) written from it (`split_driver`)."""
        if self.splits:
            self._check_pools(files, writer)
            writer.finish_pools()
            self._store, scan = self._write_split_store(writer, kept)
            return scan
        return self._merge_pools(files, kept, writer)

    def _check_pools(self, files: Sequence[InputFile], writer: PreparedWriter) -> None:
        """The pools pass's checks (NULL and repeated ids), with no pool written."""
        kept = self.config.over_cap_rule.kept_histogram(self._histogram)
        results = self._group_pools(files)
        checks = self._submit_checks(results, writer.work_dir / "runs", sum(kept.values()))
        if checks is not None:
            self._check_duplicates(files, *checks)

    def _merge_pools(
        self, files: Sequence[InputFile], kept: Mapping[int, int], writer: PreparedWriter
    ) -> PoolScan:
        config = self.config
        counts = self._counts
        runs_dir = writer.work_dir / "runs"
        num_ids = sum(kept.values())
        # Every pool file with its header, created here while the groups' tasks run.
        self._pool_files = BackgroundPoolFiles(writer.tmp_path, kept)
        self._pool_files.start()
        results = self._group_pools(files)
        self._wait_pool_files(writer)
        units = merge_units(sorted(kept), counts, self._task_ids(num_ids, self.tuning.merge_ids))
        encodings = tuple(
            results[g.index].encoding if g.index in results else RunEncoding() for g in self._groups
        )
        job = MergeJob(
            writer.tmp_path, runs_dir, config.id_column is None, self.tuning.merge_ids,
            self.tuning.block_ids, encodings,
        )  # fmt: skip
        merge_calls = [(merge_pools, (job, unit), unit.num_ids) for unit in units]
        checks = self._submit_checks(results, runs_dir, num_ids)
        merges = self._submit("write pools", merge_calls)
        if checks is not None:
            self._check_duplicates(files, *checks)
        merged = self._tasks.gather("write pools", merges, merge_calls)
        written: list[WrittenPool] = [pool for pools in merged for pool in pools]
        for pool in written:
            writer.record_written(pool_file_name(pool.length), pool.num_bytes, pool.sha256)
        if config.id_column is None:
            return PoolScan(num_ids, None, None)
        return PoolScan(
            num_ids, min(pool.first_id for pool in written), max(pool.last_id for pool in written)
        )

    def _wait_pool_files(self, writer: PreparedWriter) -> None:
        assert self._pool_files is not None
        try:
            self._pool_files.ready()
        except OSError as error:
            raise self._disk_error(writer, error) from None
        finally:
            self._close_pool_files()

    def _close_pool_files(self) -> None:
        """Stop creating pool files and close them (the tasks write them)."""
        if self._pool_files is not None:
            self._pool_files.stop()
            self._pool_files.pools.abort()

    def _pools_job(self, runs_dir: Path) -> PoolsJob:
        config = self.config
        return PoolsJob(
            config.length_column, config.id_column, config.over_cap_rule,
            runs_dir, config.tuning, self._settings(),
            self.tuning.samples, self.tuning.map_span_ratio, self.tuning.memory_ids,
        )  # fmt: skip

    def _group_pools(self, files: Sequence[InputFile]) -> dict[int, GroupPools]:
        """Every group's runs written (the tasks `histogram` submitted; groups that keep no row
        have none); NULL ids refused."""
        config = self.config
        holding = sorted(self._pools_tasks)
        futures = [self._pools_tasks[g][0] for g in holding]
        calls = [self._pools_tasks[g][1] for g in holding]
        self._pools_tasks = {}
        results = dict(zip(holding, self._tasks.gather("pools", futures, calls), strict=True))
        nulls = [result.nulls for result in results.values() if result.nulls is not None]
        if nulls:
            assert config.id_column is not None
            file_index, row, _ = min(nulls)
            total = sum(count for _, _, count in nulls)
            raise null_ids_error(files, config.id_column, file_index, row, total)
        return results

    def _submit_checks(
        self, results: Mapping[int, GroupPools], runs_dir: Path, num_ids: int
    ) -> tuple[list[Any], list[Call]] | None:
        """The duplicate checks over ranges of id values (an id column only); none where no
        group repeats an id and no two groups' id ranges overlap (e.g. ids numbered file after
        file): no id can then occur twice."""
        if self.config.id_column is None or _apart(results.values()):
            return None
        samples = [
            (result.samples, result.num_ids)
            for result in results.values()
            if result.samples is not None
        ]
        ranges = check_ranges(samples, num_ids, self._task_ids(num_ids, self.tuning.check_ids))
        groups = [
            (group, result.num_ids, result.encoding) for group, result in sorted(results.items())
        ]
        calls: list[Call] = [
            (check_range, (runs_dir, groups, low, high, self.tuning.block_ids), 1)
            for low, high in ranges
        ]
        return self._submit("check ids", calls), calls

    def _check_duplicates(
        self, files: Sequence[InputFile], futures: list[Any], calls: list[Call]
    ) -> None:
        """Raise the local engine's error for repeated ids, counted over every range."""
        parts: list[DuplicatePart] = self._tasks.gather("check ids", futures, calls)
        found = [part for part in parts if part.example is not None]
        if not found:
            return
        first = min(found, key=lambda part: part.example or 0)
        assert self.config.id_column is not None and first.example is not None
        holders = sorted(first.holders)[:2]
        settings = self._settings()
        locate: list[Call] = [
            (locate_id, (self._groups[g], self.config.id_column, first.example, settings), 1)
            for g in holders
        ]
        where = sorted(place for places in self._run("locate", locate) for place in places)[:2]
        raise duplicate_ids_error(
            files,
            self.config.id_column,
            sum(part.num_ids for part in parts),
            sum(part.num_extra for part in parts),
            first.example,
            where,
        )

    def _store_hooks(self) -> StoreHooks:
        from seqpack_cli.prepare.engines.dask.store_driver import StoreHooks

        return StoreHooks(
            self._run, self._groups, self.cluster.num_threads, self._settings(), self._task_ids,
            self._fingerprints,
        )  # fmt: skip

    def store(self, writer: PreparedWriter) -> StoreSection:
        """The token store (`--tokens-column`) written by tasks into `writer`'s temporary
        directory and recorded (`store_driver`); the manifest's `token_store` section (under
        split, written by `pools` already)."""
        if self.splits or self.config.tokens_column is None:
            return self._store
        from seqpack_cli.prepare.engines.dask.store_driver import write_cluster_store

        writer.finish_pools()
        return write_cluster_store(self._store_hooks(), self.config, writer, self._paths)

    def _write_split_store(
        self, writer: PreparedWriter, kept: Mapping[int, int]
    ) -> tuple[StoreSection, PoolScan]:
        """`--over-cap split` (this engine checking as truncate): the store written as `store`
        writes it, then cut and the pools of the `kept` lengths rewritten (`split_driver`); the
        manifest's `token_store` section and the pools' scan."""
        from seqpack_cli.prepare.engines.dask.split_driver import ClusterSplit
        from seqpack_cli.prepare.engines.dask.store_driver import write_cluster_store

        hooks = self._store_hooks()
        split = ClusterSplit(hooks, self.config, writer, kept)
        section = write_cluster_store(hooks, self.config, writer, self._paths, split)
        assert split.scan is not None
        return section, split.scan

    def describe(self) -> dict[str, object]:
        cluster = self.cluster
        return {
            "name": "dask",
            "scheduler": self.config.scheduler,
            "workers": cluster.num_workers,
            "threads": cluster.num_threads,
            "file_groups": len(self._groups),
            "tasks": self._tasks.submitted,
        }
