"""bench_dask's part 3: the Dask engine's time for 1e10 rows, projected from its measured costs.

Each phase takes whole waves of tasks (the measured compute per row times the rows of a task,
plus the overhead per task) or the shared filesystem's time for its bytes, whichever is longer;
the driver's own work between phases is measured at the size of 1e10 rows (`driver_seconds`).
"""

from __future__ import annotations

import math
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from bench_prepare import MAX_SEQ_LEN

from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning

__all__ = ["column_bytes_per_row", "driver_seconds", "print_projection", "project"]


def driver_seconds(num_groups: int, num_lengths: int) -> tuple[float, float]:
    """The driver's own work between phases at that many file groups and distinct lengths:
    each group's histogram added up and kept as it arrives, the sum checked, the merge units;
    (seconds, peak MiB that work allocates, by tracemalloc)."""
    from seqpack_cli.over_cap import OverCap
    from seqpack_cli.prepare.engines.dask.groups import (
        GroupHistogram,
        HistogramTotal,
        kept_counts,
        merge_units,
    )
    from seqpack_cli.prepare.footers import InputFile
    from seqpack_cli.prepare.scan import checked_histogram

    rng = np.random.default_rng(0)
    lengths = np.arange(1, num_lengths + 1, dtype=np.int64)

    def arriving() -> Iterator[GroupHistogram]:  # as the tasks' results come, one at a time
        for _ in range(num_groups):
            yield GroupHistogram(lengths, rng.integers(1, 2000, num_lengths))

    tracemalloc.start()
    started = time.perf_counter()
    total = HistogramTotal()
    counts = []
    for part in arriving():
        total.add(part)
        counts.append(kept_counts(part, OverCap("drop", MAX_SEQ_LEN)))
    num_rows = sum(count.num_ids for count in counts)
    files = [InputFile(Path("/x.parquet"), 1, num_rows, (("num_tokens", "INTEGER"),))]
    kept = checked_histogram(files, "num_tokens", [total.part()])
    merge_units(sorted(kept), counts, 1 << 22)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak


def column_bytes_per_row(folder: Path, columns: list[str]) -> float:
    """Compressed parquet bytes per row of `columns` (what the passes read)."""
    total_bytes, total_rows = 0, 0
    for path in sorted(folder.glob("*.parquet")):
        metadata = pq.read_metadata(path)
        total_rows += metadata.num_rows
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for i in range(row_group.num_columns):
                if row_group.column(i).path_in_schema in columns:
                    total_bytes += row_group.column(i).total_compressed_size
    return total_bytes / max(total_rows, 1)


def project(
    costs: dict[str, Any],
    bytes_read: dict[str, float],
    rows: float,
    workers: int,
    bandwidth: float,
    overhead: float,
    driver: float,
    tuning: ClusterTuning,
) -> tuple[float, dict[str, float]]:
    """Seconds for `rows` rows on `workers` workers of 2 task threads (see the docstring)."""
    threads = 2 * workers
    tasks = {
        "footers": math.ceil(rows / 1.5625e6 / tuning.footer_files),
        "histogram": math.ceil(rows / tuning.max_group_rows),
        "pools": math.ceil(rows / tuning.max_group_rows),
        "check ids": math.ceil(rows / tuning.check_ids),
        "write pools": math.ceil(rows / tuning.merge_ids),
    }
    seconds = {}
    for phase, count in tasks.items():
        measured = costs["phases"].get(phase)
        per_row = measured[1] / costs["rows"] if measured else 0.0
        waves = math.ceil(count / threads)
        compute = waves * (per_row * rows / count + overhead)
        transfer = bytes_read.get(phase, 0.0) * rows / bandwidth
        seconds[phase] = max(compute, transfer)
    return sum(seconds.values()) + driver, seconds


def print_projection(costs: dict[str, Any], folder: Path, id_column: str | None) -> None:
    tuning = ClusterTuning()
    length_bytes = column_bytes_per_row(folder, ["num_tokens"])
    id_bytes = column_bytes_per_row(folder, [id_column]) if id_column else 0.0
    # Runs store uint32 offsets where a group's ids span less than 2**32 (row indexes always;
    # an id column shuffled over 1e10 values never), int64 otherwise: the run by length, and
    # the run by id.
    run_bytes = 16.0 if id_column else 4.0
    bytes_read = {
        "histogram": length_bytes,
        "pools": length_bytes + id_bytes + run_bytes,
        "check ids": 8.0 if id_column else 0.0,
        "write pools": run_bytes / 2 + 8.0 if id_column else 12.0,  # runs read, pools written
    }
    rows = 1e10
    groups = math.ceil(rows / tuning.max_group_rows)
    driver, driver_mib = driver_seconds(groups, 8192)
    overhead = costs["dask_overhead"] + costs["fixed"]
    print(
        f"\nprojection: 1e10 rows, files of 1.56M rows (6,400 files), 8,192 distinct lengths; "
        f"{groups:,} file groups of {tuning.max_group_rows:,} rows; each phase takes whole "
        f"waves of tasks at the measured compute per row plus {overhead * 1e3:.0f} ms per task, "
        f"or moves its bytes through the shared filesystem (parquet: {length_bytes:.2f} B/row "
        f"for lengths, {id_bytes:.2f} B/row for ids; runs 8 B/id with an id column spread over "
        f"1e10 values, 4 B/id for row indexes; pools 8 B/id), whichever is "
        f"longer; the driver's own work {driver:.1f} s, {driver_mib:.0f} MiB at its peak "
        f"(measured at {groups:,} groups of 8,192 lengths); an "
        f"existing cluster (no start-up); DuckDB reads from the page cache or a filesystem "
        f"as fast as from local disk"
    )
    header = f"{'workers':>7} {'cores':>5} | {'2 GB/s (NFS)':>12} {'20 GB/s (Lustre)':>16}"
    print(header)
    print("-" * len(header))
    for workers in (8, 32, 128):
        slow, _ = project(costs, bytes_read, rows, workers, 2e9, overhead, driver, tuning)
        fast, parts = project(costs, bytes_read, rows, workers, 2e10, overhead, driver, tuning)
        print(f"{workers:>7} {2 * workers:>5} | {slow / 60:>10.1f} m {fast / 60:>14.1f} m")
    shares = ", ".join(f"{phase} {seconds:.0f} s" for phase, seconds in parts.items())
    print(f"(128 workers at 20 GB/s, by phase: {shares})")
