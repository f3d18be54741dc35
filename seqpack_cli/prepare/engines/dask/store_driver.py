"""The token store of `--engine dask --tokens-column`, built by tasks: `write_cluster_store`.

The files are byte for byte those of the local store (`token_store`), and a bad input gets the
local store's message, for the fault it reports first. The phases, run on the driver from the
footers and the tasks' small results (no row passes through it):

1. each input's footer for every role's column (`store_footers.inspect_store_inputs`): the
   dtypes (`StoreColumns.of`, by the local rule `token_reading.store_dtype`) and where each
   file's values go;
2. every file created here with its header, at its full size (sparse);
3. each file group streamed into place (`store_tasks.write_group_store`), its faults returned;
4. with an id column, the id index written over ranges of ids (`store_index.write_index_range`);
5. the first fault, in the local store's order (a role's values and lists, the repeated ids,
   the next role's footers and values, labels or mask lengths, the pools' lengths), worded by
   the local code (`store_faults`); with none, each file hashed by a task
   (`store_index.hash_store_file`) and recorded in the writer's files table.

Where a footer's count of values was not a file's count of tokens (an empty list in a dropped
row), phase 3 runs again with the counts it found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint
from seqpack_cli.prepare.engines.dask.groups import FileGroup, check_ranges
from seqpack_cli.prepare.engines.dask.store_faults import (
    duplicate_error,
    mismatch_error,
    pool_error,
    stream_error,
)
from seqpack_cli.prepare.engines.dask.store_footers import store_inputs
from seqpack_cli.prepare.engines.dask.store_index import (
    IndexPart,
    IndexRange,
    hash_store_file,
    write_index_range,
)
from seqpack_cli.prepare.engines.dask.store_tasks import (
    GroupStore,
    StoreJob,
    write_group_store,
)
from seqpack_cli.prepare.engines.dask.tasks import TaskSettings
from seqpack_cli.prepare.one_pass import write_error
from seqpack_cli.prepare.pools.offsets import changed_error
from seqpack_cli.prepare.store_files import create_sized, store_header
from seqpack_cli.prepare.token_batches import StoreColumns
from seqpack_cli.prepare.token_files import row_locator, source_info, store_entry
from seqpack_cli.prepare.token_reading import TokenInput
from seqpack_cli.prepared import PreparedWriter
from seqpack_cli.token_sources import (
    IDS_NAME,
    INFO_NAME,
    OFFSETS_NAME,
    PIECES_NAME,
    ROWS_NAME,
    TOKENS_NAME,
    write_info,
)

__all__ = ["Split", "StoreHooks", "write_cluster_store"]

Run = Callable[[str, Sequence[tuple[Callable[..., Any], tuple[Any, ...], int]]], list[Any]]
Split = Callable[[Sequence[str], int], dict[str, int]]
"""`--over-cap split`: cuts the checked store (its roles, its input rows); the split's figures."""


@dataclass(frozen=True)
class StoreHooks:
    """What the store takes from `ClusterEngine`: its task runner and its cuts."""

    run: Run
    groups: Sequence[FileGroup]
    num_threads: int
    settings: TaskSettings
    task_ids: Callable[[int, int], int]
    fingerprints: Mapping[Path, Fingerprint]
    """The driver's view of each input, which every task checks the files it reads against."""


def _create(path: Path, dtype: np.dtype[Any], count: int) -> None:
    """`path` with its .npy header for `count` values, at its full size (zeros, sparse)."""
    create_sized(path, store_header(dtype, count), dtype.itemsize * count)


class _Store:
    """One run's store: the plan, the phases, the faults."""

    def __init__(
        self, hooks: StoreHooks, config: PrepareConfig, writer: PreparedWriter, paths: Any
    ) -> None:
        self.hooks, self.config, self.writer, self.paths = hooks, config, writer, paths
        self.columns = config.store_columns
        self.root = writer.tmp_path
        self.runs_dir = writer.work_dir / "store-runs"
        self.scratch = writer.work_dir / "store-scratch"
        self.inputs: dict[str, list[TokenInput]] = {}
        self.footer_errors: dict[str, InputError] = {}
        self.num_rows = 0
        self.locate: Callable[[int], str] = str

    def prepare(self) -> None:
        hooks = self.hooks
        expected = [hooks.fingerprints[path] for path in self.paths]
        self.inputs, self.footer_errors = store_inputs(
            hooks.run, hooks.num_threads, self.config, expected, self.columns
        )
        if self.footer_errors:  # stream the tokens alone: their faults come first
            self.columns = {"tokens": self.columns["tokens"]}
        self.spec = StoreColumns.of(
            self.columns,
            self.inputs,
            length_column=self.config.length_column,
            id_column=self.config.id_column,
        )
        files = self.inputs["tokens"]
        self.num_rows = sum(file.num_rows for file in files)
        self.locate = row_locator(
            [{"path": file.path.as_posix(), "num_rows": file.num_rows} for file in files]
        )
        self.runs_dir.mkdir()
        self.scratch.mkdir()

    def create_files(self, counts: Mapping[str, Sequence[int]]) -> None:
        try:
            self._create_files(counts)
        except OSError as error:
            raise write_error(self.config, error) from None

    def _create_files(self, counts: Mapping[str, Sequence[int]]) -> None:
        offsets = np.dtype("<i8")
        for role in self.columns:
            folder = self.root / role
            folder.mkdir(exist_ok=True)
            _create(folder / TOKENS_NAME, self.spec.dtypes[role], int(sum(counts[role])))
            _create(folder / OFFSETS_NAME, offsets, self.num_rows + 1)
            if self.config.id_column is not None:
                _create(folder / IDS_NAME, offsets, self.num_rows)
                _create(folder / ROWS_NAME, offsets, self.num_rows)

    def job(self) -> StoreJob:
        config = self.config
        return StoreJob(
            self.root, self.runs_dir, self.spec, config.over_cap_rule,
            config.cluster_tuning.samples, self.hooks.settings,
        )  # fmt: skip

    def stream(self, counts: Mapping[str, Sequence[int]], phase: str) -> list[GroupStore]:
        """Every group's files streamed into place, each file's values at `counts`' sums
        (`phase`: each run of it another, so that no Dask key is used twice)."""
        self.create_files(counts)
        starts = {role: np.concatenate([[0], np.cumsum(counts[role])]) for role in self.columns}
        job = self.job()
        calls = []
        for group in self.hooks.groups:
            first, stop = group.first_file, group.first_file + len(group.files)
            files = [(i, self.inputs["tokens"][i]) for i in range(first, stop)]
            ours = {role: starts[role][first : stop + 1].tolist() for role in self.columns}
            calls.append(
                (write_group_store,
                 (job, group.index, files, group.first_row, ours, group.fingerprints),
                 group.num_rows)
            )  # fmt: skip
        return self.hooks.run(phase, calls)

    def stream_fault(self, results: Sequence[GroupStore], role: str) -> InputError | None:
        """The local store's error for the first file whose `role` values it refuses."""
        faulty = [result.stream_faults[role] for result in results if role in result.stream_faults]
        if not faulty:
            return None
        index = min(faulty)
        file = self.inputs[role][index] if role in self.inputs else self.inputs["tokens"][index]
        ids = self.config.id_column if role == "tokens" else None
        expected = self.hooks.fingerprints[file.path]
        args = (file, role, self.columns[role], ids, self.spec.dtypes[role], self.scratch, expected)
        (error,) = self.hooks.run(f"word {role}", [(stream_error, args, 1)])
        return error if error is not None else changed_error()

    def index(self, results: Sequence[GroupStore]) -> InputError | None:
        """The id index over ranges of ids; the local error for the smallest repeated id."""
        held = [(group.index, result.num_ids)
                for group, result in zip(self.hooks.groups, results, strict=True)
                if result.num_ids]  # fmt: skip
        total = sum(count for _, count in held)
        samples = [(result.samples, result.num_ids) for result in results
                   if result.samples is not None]  # fmt: skip
        most = self.config.cluster_tuning.check_ids
        ranges = check_ranges(samples, total, self.hooks.task_ids(total, most))
        job = IndexRange(self.runs_dir, tuple(held),
                         tuple(self.root / role for role in self.columns))  # fmt: skip
        calls = [(write_index_range, (job, low, high), 1) for low, high in ranges]
        parts: list[IndexPart] = self.hooks.run("id index", calls)
        repeated = [part.repeated for part in parts if part.repeated is not None]
        if sum(part.num_ids for part in parts) != self.num_rows and not repeated:
            return changed_error()
        if not repeated:
            return None
        value, first, second = min(repeated)
        assert self.config.id_column is not None
        return duplicate_error(self.config.id_column, value, (first, second), self.locate)

    def first_fault(self, results: Sequence[GroupStore]) -> InputError | None:
        """The fault the local store reports first, after the tokens' and the ids'."""
        if self.footer_errors:  # the first role's (labels or mask: the only other one)
            return next(iter(self.footer_errors.values()))
        others = [role for role in self.columns if role != "tokens"]
        for role in others:
            error = self.stream_fault(results, role)
            if error is not None:
                return error
        mismatches = [result.mismatch for result in results if result.mismatch is not None]
        if mismatches and others:
            row, values, tokens = min(mismatches)
            return mismatch_error(others[0], self.columns, row, (values, tokens), self.locate)
        faults = [result.pool_fault for result in results if result.pool_fault is not None]
        if faults:
            config = self.config
            return pool_error(
                min(faults),
                config.over_cap_rule.cut_to,
                self.columns,
                config.length_column,
                self.locate,
            )
        return None

    def finish(
        self, counts: Mapping[str, Sequence[int]], split: dict[str, int] | None = None
    ) -> dict[str, Any]:
        """Each role's token_source.json (with `split`'s figures: the store was cut); every file
        hashed and recorded; the manifest's `token_store` section."""
        config, section = self.config, {}
        names = [TOKENS_NAME, OFFSETS_NAME]
        if config.id_column is not None or split is not None:
            names += [IDS_NAME, ROWS_NAME]
        shared = {name for name in names if name != TOKENS_NAME}
        pieces = [("tokens", PIECES_NAME)] if split is not None else []
        hashed = (
            [("tokens", name) for name in names]
            + pieces
            + [(role, TOKENS_NAME) for role in self.columns if role != "tokens"]
        )
        calls = [(hash_store_file, (self.root / role / name,), 1) for role, name in hashed]
        digests = dict(zip(hashed, self.hooks.run("hash store", calls), strict=True))
        for role, column in self.columns.items():
            num_values = int(sum(counts[role]))
            files = self.inputs[role]
            info = source_info(
                column, config.id_column, self.spec.dtypes[role], files, num_values, split=split
            )
            write_info(self.root / role, info)
            own = [PIECES_NAME] if pieces and role == "tokens" else []
            for name in sorted([*names, *own, INFO_NAME]):
                if name == INFO_NAME:
                    self.writer.record_file(f"{role}/{name}")
                    continue
                size, digest = digests["tokens" if name in shared else role, name]
                self.writer.record_written(f"{role}/{name}", size, digest)
            section[role] = store_entry(info)
        return section


def write_cluster_store(
    hooks: StoreHooks,
    config: PrepareConfig,
    writer: PreparedWriter,
    paths: Sequence[Path],
    split: Split | None = None,
) -> dict[str, Any]:
    """Write the store of `config`'s columns for the inputs `paths` into `writer`'s temporary
    directory, by tasks; record its files; return the manifest's `token_store` section.
    `InputError` as the local store raises it. With `split` (`config` is then truncate's, which
    checks the inputs as the local split does) the checked store is cut by `split`, and a length
    column that is not the lists' lengths is refused as the local one pass refuses it."""
    store = _Store(hooks, config, writer, paths)
    store.prepare()
    planned = {role: [file.num_values for file in store.inputs[role]] for role in store.columns}
    results = store.stream(planned, "tokens")
    error = store.stream_fault(results, "tokens")
    if error is None and config.id_column is not None:
        error = store.index(results)
    error = error or store.first_fault(results)
    if error is not None:
        raise error
    if split is not None and any(result.lengths_differ for result in results):
        raise changed_error()
    found = {
        role: [count for result in results for count in result.counts[role]]
        for role in store.columns
    }
    if found != planned:  # a footer counted other values than the lists hold: place them anew
        results = store.stream(found, "tokens placed")
        if not all(result.wrote for result in results):
            raise changed_error()
    elif not all(result.wrote for result in results):
        raise changed_error()
    figures = None if split is None else split(list(store.columns), store.num_rows)
    return store.finish(found, figures)
