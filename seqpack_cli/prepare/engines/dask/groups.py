"""How the Dask engine cuts the work: file groups, their histograms kept, merge units, ranges.

All of it is decided on the driver from the footers and the small results of earlier tasks
(histograms, sample ids); no row passes through it. The cuts never change the output: row-index
ids are global (each group knows its first row), pools are merged in id order, and duplicate ids
are counted over every range.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning
from seqpack_cli.prepare.footers import InputFile
from seqpack_cli.prepare.length_counter import LengthCounter
from seqpack_cli.prepare.scan import HistogramPart

__all__ = [
    "FileGroup",
    "GroupCounts",
    "GroupHistogram",
    "HistogramTotal",
    "MergeUnit",
    "balanced_groups",
    "check_ranges",
    "footer_chunks",
    "group_rows",
    "kept_counts",
    "merge_units",
    "plan_groups",
    "with_fingerprints",
]


@dataclass(frozen=True)
class FileGroup:
    """Consecutive input files (in the inputs' order) read by one task of each pass."""

    index: int
    files: tuple[InputFile, ...]
    first_file: int
    """The index of its first file in the inputs' list."""
    first_row: int
    """The global row index of its first row (ids without an id column start there)."""
    fingerprints: tuple[Fingerprint, ...] = ()
    """The driver's fingerprint of each file, which every task checks before reading them
    (`with_fingerprints`)."""

    @property
    def num_rows(self) -> int:
        return sum(file.num_rows for file in self.files)


def footer_chunks(num_files: int, num_threads: int, tuning: ClusterTuning) -> list[range]:
    """The inputs cut into consecutive chunks, one footer task each."""
    size = max(1, min(tuning.footer_files, math.ceil(num_files / max(1, 2 * num_threads))))
    return [range(start, min(start + size, num_files)) for start in range(0, num_files, size)]


def group_rows(total_rows: int, num_threads: int, tuning: ClusterTuning) -> int:
    """The rows a file group aims at."""
    if tuning.group_rows is not None:
        return tuning.group_rows
    share = math.ceil(total_rows / max(1, tuning.tasks_per_thread * num_threads))
    return max(1, min(share, tuning.max_group_rows))


def plan_groups(files: Sequence[InputFile], target_rows: int) -> list[FileGroup]:
    """Consecutive files, as many in each group as fit `target_rows` rows (a larger file is a
    group of its own)."""
    groups: list[FileGroup] = []
    first, first_row, rows = 0, 0, 0
    for index, file in enumerate(files):
        if index > first and rows + file.num_rows > target_rows:
            groups.append(FileGroup(len(groups), tuple(files[first:index]), first, first_row))
            first, first_row, rows = index, first_row + rows, 0
        rows += file.num_rows
    if files:
        groups.append(FileGroup(len(groups), tuple(files[first:]), first, first_row))
    return groups


def _cut(files: Sequence[InputFile], num_groups: int) -> list[FileGroup]:
    """Consecutive files in about `num_groups` groups of about equal rows: each file goes to the
    group its middle row falls in (groups left empty are dropped)."""
    total = max(1, sum(file.num_rows for file in files))
    groups: list[FileGroup] = []
    first, first_row, row, current = 0, 0, 0, 0
    for index, file in enumerate(files):
        target = min(num_groups - 1, (2 * row + file.num_rows) * num_groups // (2 * total))
        if index > first and target != current:
            groups.append(FileGroup(len(groups), tuple(files[first:index]), first, first_row))
            first, first_row = index, row
        current = target
        row += file.num_rows
    if files:
        groups.append(FileGroup(len(groups), tuple(files[first:]), first, first_row))
    return groups


def balanced_groups(
    files: Sequence[InputFile], num_threads: int, tuning: ClusterTuning
) -> list[FileGroup]:
    """The file groups of a run: with `tuning.group_rows`, as many files in each as fit it
    (`plan_groups`); otherwise a multiple of `num_threads` groups of about equal rows, each at
    most `max_group_rows` (unless a file alone is larger), so that every wave of tasks keeps
    every thread busy: 13 groups on 2 threads would leave one idle for the last task."""
    if tuning.group_rows is not None:
        return plan_groups(files, tuning.group_rows)
    total = sum(file.num_rows for file in files)
    threads = max(1, num_threads)
    wanted = math.ceil(total / group_rows(total, threads, tuning)) if total else 1
    count = math.ceil(wanted / threads) * threads
    while True:
        groups = _cut(files, count)
        if all(g.num_rows <= tuning.max_group_rows or len(g.files) == 1 for g in groups):
            return groups
        if count >= len(files):
            return plan_groups(files, tuning.max_group_rows)  # files too uneven to cut evenly
        count = math.ceil(count * 5 / 4 / threads) * threads  # a few tries even for 1e5 files


def with_fingerprints(
    groups: Sequence[FileGroup], prints: Mapping[Path, Fingerprint]
) -> list[FileGroup]:
    """The groups, each with the driver's fingerprints of its files (`prints`, by path)."""
    return [
        dataclasses.replace(group, fingerprints=tuple(prints[file.path] for file in group.files))
        for group in groups
    ]


@dataclass(frozen=True)
class GroupHistogram:
    """What a group's histogram task returns: `counts[i]` rows of `lengths[i]` (the positive
    lengths, ascending), and the group's bad lengths (NULL or not positive): how many, and the
    first (file index in the whole inputs' list, row, value). Arrays, not rows of Python
    tuples: the driver receives one per group."""

    lengths: np.ndarray
    counts: np.ndarray
    num_bad: int = 0
    first_bad: tuple[int, int, int | None] | None = None

    @classmethod
    def of_part(cls, part: HistogramPart) -> GroupHistogram:
        good = [(length, count) for length, count in part.rows if length is not None and length > 0]
        lengths = np.array([length for length, _ in good], dtype=np.int64)
        counts = np.array([count for _, count in good], dtype=np.int64)
        order = np.argsort(lengths, kind="stable")
        return cls(lengths[order], counts[order], part.num_bad, part.first_bad)


class HistogramTotal:
    """The groups' histograms added up as they arrive, in memory that follows the number of
    distinct lengths, never the number of groups; `part()` gives the sum for
    `scan.checked_histogram`, which words any problem as the local engine does."""

    def __init__(self) -> None:
        self.counts = LengthCounter()
        self.num_bad = 0
        self.first_bad: tuple[int, int, int | None] | None = None

    def add(self, part: GroupHistogram) -> None:
        self.counts.add_counts(part.lengths, part.counts)  # a group's lengths are distinct
        self.num_bad += part.num_bad
        firsts = [first for first in (self.first_bad, part.first_bad) if first is not None]
        if firsts:  # the first in the inputs' order: (file index, row) decide
            self.first_bad = min(firsts, key=lambda first: first[:2])

    def part(self) -> HistogramPart:
        rows: list[tuple[int | None, int]] = list(self.counts.histogram().items())
        if self.num_bad:
            rows.append((None, self.num_bad))
        return HistogramPart(rows, self.num_bad, self.first_bad)


@dataclass(frozen=True)
class GroupCounts:
    """A group's histogram as the pools pass keeps it: `counts[i]` ids of `lengths[i]`
    (ascending, every count > 0). Compact arrays: the driver holds one per group."""

    lengths: np.ndarray
    counts: np.ndarray

    @property
    def num_ids(self) -> int:
        return int(self.counts.sum(dtype=np.int64))

    def as_dict(self) -> dict[int, int]:
        return dict(zip(self.lengths.tolist(), self.counts.tolist(), strict=True))


def kept_counts(histogram: GroupHistogram, over_cap: OverCap) -> GroupCounts:
    """A group's histogram as the pools pass keeps it (`OverCap.kept_arrays`)."""
    kept_lengths, kept = over_cap.kept_arrays(histogram.lengths, histogram.counts)
    nonzero = kept > 0
    # int32 where they fit (lengths always do, counts unless a file holds 2**31 rows): the
    # driver holds one of these per group, and at 1e10 rows there are thousands of groups.
    count_type = np.int32 if kept.size == 0 or int(kept.max()) < 1 << 31 else np.int64
    return GroupCounts(kept_lengths[nonzero].astype(np.int32), kept[nonzero].astype(count_type))


@dataclass(frozen=True)
class MergeUnit:
    """Consecutive lengths merged by one task from the groups' runs.

    `counts[i, j]` is how many ids of `lengths[j]` group `groups[i]` holds, and `starts[i]` where
    the first of them sits in that group's run (ids, not bytes): each group's part of the unit is
    one contiguous stretch of its run.
    """

    lengths: np.ndarray
    groups: np.ndarray
    starts: np.ndarray
    counts: np.ndarray

    @property
    def num_ids(self) -> int:
        return int(self.counts.sum())


def merge_units(
    lengths: Sequence[int], group_counts: Sequence[GroupCounts], unit_ids: int
) -> list[MergeUnit]:
    """The kept `lengths` (ascending) cut into units of about `unit_ids` ids (a larger pool is a
    unit of its own), with each group's counts and run offsets for them."""
    ordered = np.asarray(lengths, dtype=np.int64)
    # A group's counts and offsets fit its counts' type (int32 unless a file holds 2**31 rows).
    wide = any(counts.counts.dtype == np.int64 for counts in group_counts)
    count_type = np.int64 if wide else np.int32
    matrix = np.zeros((len(group_counts), len(lengths)), dtype=count_type)
    for g, counts in enumerate(group_counts):
        matrix[g, np.searchsorted(ordered, counts.lengths)] = counts.counts
    starts = np.zeros((len(group_counts), len(lengths) + 1), dtype=count_type)
    np.cumsum(matrix, axis=1, out=starts[:, 1:])
    totals = matrix.sum(axis=0).tolist()
    units: list[MergeUnit] = []
    first, held = 0, 0
    for j in range(len(lengths)):
        held += totals[j]
        if j == len(lengths) - 1 or held + totals[j + 1] > unit_ids:
            block = matrix[:, first : j + 1]
            holders = np.flatnonzero(block.sum(axis=1))
            units.append(
                MergeUnit(
                    np.asarray(lengths[first : j + 1], dtype=np.int64),
                    holders,
                    starts[holders, first],
                    block[holders],
                )
            )
            first, held = j + 1, 0
    return units


def check_ranges(
    samples: Sequence[tuple[np.ndarray, int]], total_ids: int, range_ids: int
) -> list[tuple[int | None, int | None]]:
    """Id ranges [low, high) (None: unbounded) of about `range_ids` ids each, from each group's
    evenly spaced sample ids and its number of ids."""
    num_ranges = max(1, math.ceil(total_ids / range_ids))
    values = [sample for sample, count in samples if sample.size and count]
    if num_ranges == 1 or not values:
        return [(None, None)]
    weights = np.concatenate(
        [np.full(sample.size, count / sample.size) for sample, count in samples if sample.size]
    )
    merged = np.concatenate(values)
    order = np.argsort(merged, kind="stable")
    merged, cumulative = merged[order], np.cumsum(weights[order])
    targets = cumulative[-1] * np.arange(1, num_ranges) / num_ranges
    cuts = np.unique(merged[np.minimum(np.searchsorted(cumulative, targets), merged.size - 1)])
    bounds: list[int | None] = [None, *(int(cut) for cut in cuts), None]
    return list(itertools.pairwise(bounds))
